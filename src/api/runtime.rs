//! The `Runtime` custom resource: spec (what KEB asks for), status (what the reconciler
//! reports), and the Gardener types they embed.
//!
//! Sources: upstream KIM `api/v1/runtime_types.go` (spec, status, KIM's own types) and Gardener
//! `pkg/apis/core/v1beta1` (`Worker`, `OIDCConfig`, `ControlPlane`, `LastOperation`,
//! `LastError`). The status model (states, conditions) is `docs/status-model.md` §1.
//!
//! Conventions:
//! - A Go field without `omitempty` (required in the upstream CRD) is a plain Rust field; every
//!   other field is an `Option` (or a collection skipped when empty where upstream does so) with
//!   `skip_serializing_if`, so a round trip writes back exactly what it read.
//! - Open-ended upstream objects (`runtime.RawExtension` provider configs, the kubelet
//!   configuration, the registry-cache configuration) are kept as JSON maps and appear in the CRD
//!   as `{type: object, x-kubernetes-preserve-unknown-fields: true}`.
//! - Doc comments on fields become the `description`s of the generated CRD.

use crate::status::State;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// An open-ended JSON object (upstream `runtime.RawExtension` and similar): kept verbatim.
pub type OpenObject = Map<String, Value>;

/// Label with the Gardener Shoot name of a Runtime (printer column `SHOOT-NAME`).
pub const LABEL_SHOOT_NAME: &str = "kyma-project.io/shoot-name";
/// Label with the Kyma runtime ID (normally also the Runtime's `metadata.name`).
pub const LABEL_RUNTIME_ID: &str = "kyma-project.io/runtime-id";
/// Label with the KEB instance ID.
pub const LABEL_INSTANCE_ID: &str = "kyma-project.io/instance-id";
/// Label with the hyperscaler region.
pub const LABEL_REGION: &str = "kyma-project.io/region";
/// Label with the name of the Kyma resource for this runtime.
pub const LABEL_KYMA_NAME: &str = "operator.kyma-project.io/kyma-name";
/// Label with the KEB plan ID.
pub const LABEL_BROKER_PLAN_ID: &str = "kyma-project.io/broker-plan-id";
/// Label with the KEB plan name.
pub const LABEL_BROKER_PLAN_NAME: &str = "kyma-project.io/broker-plan-name";
/// Label with the BTP global account ID.
pub const LABEL_GLOBAL_ACCOUNT_ID: &str = "kyma-project.io/global-account-id";
/// Label with the BTP subaccount ID.
pub const LABEL_SUBACCOUNT_ID: &str = "kyma-project.io/subaccount-id";
/// Label that, when `"false"`, hands the Runtime to KIM instead of the old provisioner.
pub const LABEL_CONTROLLED_BY_PROVISIONER: &str = "kyma-project.io/controlled-by-provisioner";

/// Labels upstream KIM requires on every Runtime (`ValidateRequiredLabels`).
pub const REQUIRED_LABELS: [&str; 8] = [
    LABEL_INSTANCE_ID,
    LABEL_RUNTIME_ID,
    LABEL_REGION,
    LABEL_KYMA_NAME,
    LABEL_BROKER_PLAN_ID,
    LABEL_BROKER_PLAN_NAME,
    LABEL_GLOBAL_ACCOUNT_ID,
    LABEL_SUBACCOUNT_ID,
];

/// Values accepted in `spec.shoot.provider.type` (upstream kubebuilder enum). kim converts
/// `aws`, `azure`, `gcp` and `openstack`; the others are accepted and stored, and their
/// reconcile fails with an unsupported-provider error.
pub const PROVIDER_TYPES: [&str; 6] = ["aws", "azure", "gcp", "openstack", "alicloud", "gdch"];

/// Pattern of a Kubernetes quantity (`resource.Quantity`, e.g. `10Gi`), as controller-gen
/// writes it into CRDs.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Desired state of a Kyma runtime: the Gardener Shoot to run it on, its security settings and
/// optional image-registry caches. Written by KEB; read by the reconciler.
// (This doc comment is the CRD's description of `spec`; how an absent `spec` is read is
// documented on the `Deserialize` impl below.)
#[derive(CustomResource, Serialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[kube(
    group = "infrastructuremanager.kyma-project.io",
    version = "v1",
    kind = "Runtime",
    plural = "runtimes",
    singular = "runtime",
    namespaced,
    status = "RuntimeStatus",
    derive = "PartialEq",
    shortname = "rt",
    doc = "Runtime is a Kyma runtime: a Gardener Shoot cluster provisioned and configured by the Kyma Infrastructure Manager.",
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"SHOOT-NAME","type":"string","jsonPath":".metadata.labels.kyma-project\\.io/shoot-name"}"#,
    printcolumn = r#"{"name":"PROVIDER","type":"string","jsonPath":".spec.shoot.provider.type"}"#,
    printcolumn = r#"{"name":"REGION","type":"string","jsonPath":".spec.shoot.region"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSpec {
    /// The Gardener Shoot that hosts the runtime.
    pub shoot: RuntimeShoot,
    /// Administrators and network filtering of the runtime.
    pub security: Security,
    /// Image-registry caches to configure on the Shoot (upstream field `Caching`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_registry_cache: Option<Vec<ImageRegistryCache>>,
    /// Whether the customer requires access to their audit-log data (upstream
    /// `AuditLogAccessEnabled`). Carried, not interpreted: kim configures the shared audit
    /// log of the configured tenants, not KIM's dedicated ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log_access_enabled: Option<bool>,
}

/// The fields of a present `spec`, read as [`RuntimeSpec`]'s derive would read them (serde's
/// `remote`: a field added to [`RuntimeSpec`] and missing here does not compile).
#[derive(Deserialize)]
#[serde(remote = "RuntimeSpec", rename_all = "camelCase")]
struct RuntimeSpecFields {
    shoot: RuntimeShoot,
    security: Security,
    #[serde(default)]
    image_registry_cache: Option<Vec<ImageRegistryCache>>,
    #[serde(default)]
    audit_log_access_enabled: Option<bool>,
}

/// The CRD, like KIM's, does not require `spec`: a Runtime stored without one (or with
/// `spec: null`) reads as the empty spec ([`RuntimeSpec::default`]; it names no Shoot, see
/// [`RuntimeSpec::names_no_shoot`]). So every Runtime the API server stores can be read: one that
/// could not would fail the list of a watch on all Runtimes, and so stall all of them. A `spec`
/// that is present must be whole, as the CRD requires.
impl<'de> Deserialize<'de> for RuntimeSpec {
    /// A present `spec` field by field; an absent (or `null`) one as [`RuntimeSpec::default`].
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Present(RuntimeSpec);
        impl<'de> Deserialize<'de> for Present {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                RuntimeSpecFields::deserialize(d).map(Present)
            }
        }
        Ok(Option::<Present>::deserialize(deserializer)?
            .map(|p| p.0)
            .unwrap_or_default())
    }
}

impl RuntimeSpec {
    /// Whether the spec names no Shoot: the Runtime has no `spec` (read as the empty spec) or an
    /// empty `spec.shoot.name`. Such a Runtime cannot be converted into a Shoot.
    pub fn names_no_shoot(&self) -> bool {
        self.shoot.name.is_empty()
    }
}

/// The Gardener Shoot of a runtime (upstream `RuntimeShoot`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeShoot {
    /// Name of the Shoot in the Gardener project.
    pub name: String,
    /// Gardener Shoot purpose: `evaluation`, `testing`, `development`, `production` or
    /// `infrastructure`.
    pub purpose: String,
    /// SAP BTP platform region (e.g. `cf-eu11`).
    pub platform_region: String,
    /// Hyperscaler region of the Shoot (e.g. `eu-central-1`).
    pub region: String,
    /// Licence type (e.g. `TestDevelopmentAndDemo`); absent for paid plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licence_type: Option<String>,
    /// Name of the Gardener SecretBinding with the hyperscaler credentials.
    pub secret_binding_name: String,
    /// When true, the Shoot's seed must be in the same region as the Shoot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_seed_location: Option<bool>,
    /// When true, enables the `shoot-nvidia-openshell` Gardener extension (GPU support).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_nvidia_openshell: Option<bool>,
    /// Kubernetes version and API-server settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<Kubernetes>,
    /// Infrastructure provider and worker pools.
    pub provider: Provider,
    /// Network ranges of the Shoot.
    pub networking: Networking,
    /// Control-plane settings (Gardener `ControlPlane`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
}

/// Kubernetes settings of the Shoot (upstream `Kubernetes`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Kubernetes {
    /// Kubernetes version (e.g. `1.28.7`); the Gardener default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// kube-apiserver settings.
    #[serde(
        rename = "kubeAPIServer",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kube_api_server: Option<ApiServer>,
}

/// kube-apiserver settings (upstream `APIServer`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// The default OIDC provider of the cluster (Gardener `OIDCConfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_config: Option<OidcConfig>,
    /// Further OIDC providers (structured authentication configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_oidc_config: Option<Vec<AdditionalOidcConfig>>,
    /// API-server access control list; no restriction when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<Acl>,
}

/// API-server access control list (upstream `ACL`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct Acl {
    /// CIDRs allowed to reach the API server (e.g. `1.1.1.1/32`).
    #[serde(
        rename = "allowedCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_cidrs: Option<Vec<String>>,
}

/// OIDC provider settings (Gardener `OIDCConfig`; descriptions follow the Kubernetes docs).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcConfig {
    /// PEM CA bundle to verify the OpenID server's certificate; the host's roots when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Deprecated client configuration for kubeconfig generation (no implemented use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_authentication: Option<OpenIdConnectClientAuthentication>,
    /// The client ID of the OpenID Connect client.
    #[serde(rename = "clientID", default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Name of the claim that holds the user's groups (string or array of strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_claim: Option<String>,
    /// Prefix added to every group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_prefix: Option<String>,
    /// URL of the OpenID issuer (HTTPS only).
    #[serde(rename = "issuerURL", default, skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    /// `claim: value` pairs that must be present in the ID token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_claims: Option<BTreeMap<String, String>>,
    /// Allowed JOSE signing algorithms (RFC 7518 §3.1, e.g. `RS256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_algs: Option<Vec<String>>,
    /// Claim used as the user name (default `sub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_claim: Option<String>,
    /// Prefix added to user names; `-` disables prefixing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_prefix: Option<String>,
}

/// Deprecated OIDC client settings (Gardener `OpenIDConnectClientAuthentication`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenIdConnectClientAuthentication {
    /// Extra settings for the kubeconfig's auth-provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_config: Option<BTreeMap<String, String>>,
    /// The client secret of the OpenID Connect client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// An additional OIDC provider (upstream KIM `OIDCConfig`: Gardener's plus `jwks`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalOidcConfig {
    /// The Gardener OIDC settings (inlined).
    #[serde(flatten)]
    pub oidc: OidcConfig,
    /// JSON Web Key Set of the issuer, base64-encoded (Go `[]byte`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub jwks: Option<String>,
}

/// Infrastructure provider of the Shoot (upstream `Provider`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    /// Provider type, one of [`PROVIDER_TYPES`].
    #[serde(rename = "type")]
    #[schemars(schema_with = "provider_type_schema")]
    pub type_: String,
    /// Worker pools (Gardener `Worker`).
    pub workers: Vec<Worker>,
    /// Worker pools added by operators on top of the KEB-managed ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_workers: Option<Vec<Worker>>,
    /// Provider-specific control-plane configuration (open object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub control_plane_config: Option<OpenObject>,
    /// Provider-specific infrastructure configuration (open object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub infrastructure_config: Option<OpenObject>,
}

/// A worker pool (Gardener `core.gardener.cloud/v1beta1` `Worker`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    /// Annotations for every Node of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// PEM certificate bundle installed on every machine of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Cluster-autoscaler settings for the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<ClusterAutoscalerOptions>,
    /// Runs the control plane in this pool (autonomous Shoots only; open object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub control_plane: Option<OpenObject>,
    /// Container runtime interface of the machines; `containerd` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri: Option<Cri>,
    /// Additional volumes of every machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volumes: Option<Vec<DataVolume>>,
    /// Name of the data volume that holds the kubelet state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_data_volume_name: Option<String>,
    /// Kubernetes settings of the pool (kubelet configuration, kubelet version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<WorkerKubernetes>,
    /// Labels for every Node of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Machine type and image.
    pub machine: Machine,
    /// machine-controller-manager timeouts for the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_controller_manager: Option<MachineControllerManagerSettings>,
    /// Machines created above `maximum` during a rolling update (number or percentage),
    /// divided across the zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Machines that may be unavailable during a rolling update (number or percentage),
    /// divided across the zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Maximum number of machines, divided across the zones.
    pub maximum: i32,
    /// Minimum number of machines, divided across the zones.
    pub minimum: i32,
    /// Name of the pool.
    pub name: String,
    /// Weight of the pool for cluster-autoscaler expansion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Provider-specific configuration of the pool (open object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub provider_config: Option<OpenObject>,
    /// Kernel settings applied on every machine (`name: value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysctls: Option<BTreeMap<String, String>>,
    /// Whether the pool may host system components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_components: Option<WorkerSystemComponents>,
    /// Taints for every Node of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Machine update strategy (`AutoRollingUpdate`, `AutoInPlaceUpdate`,
    /// `ManualInPlaceUpdate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<String>,
    /// Root volume of every machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<Volume>,
    /// Availability zones the pool is spread over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
}

/// Machine type and image of a worker pool (Gardener `Machine`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Machine type (e.g. `m6i.large`, `Standard_D2s_v5`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Machine image; the CloudProfile's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ShootMachineImage>,
    /// CPU architecture (`amd64`, `arm64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// Machine image of a worker pool (Gardener `ShootMachineImage`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShootMachineImage {
    /// Image name (e.g. `gardenlinux`).
    pub name: String,
    /// Image-specific configuration (open object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub provider_config: Option<OpenObject>,
    /// Image version (e.g. `1443.9.0`); the CloudProfile's latest when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Root volume of a worker pool's machines (Gardener `Volume`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// Volume name, to reference it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Provider volume type (e.g. `gp2`, `Standard_LRS`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Volume size as a Kubernetes quantity string (e.g. `50Gi`).
    pub size: String,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
}

/// An additional volume of a worker pool's machines (Gardener `DataVolume`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolume {
    /// Volume name, to reference it.
    pub name: String,
    /// Provider volume type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Volume size as a Kubernetes quantity string (e.g. `100Gi`).
    pub size: String,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
}

/// Container runtime interface of a worker pool (Gardener `CRI`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cri {
    /// CRI name; `containerd` is the supported value.
    pub name: String,
    /// Additional container runtimes (e.g. gVisor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtimes: Option<Vec<ContainerRuntime>>,
}

/// An additional container runtime (Gardener `ContainerRuntime`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntime {
    /// Runtime type (e.g. `gvisor`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Runtime-specific configuration (open object, e.g. a `GVisorConfiguration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub provider_config: Option<OpenObject>,
}

/// Kubernetes settings of a worker pool (Gardener `WorkerKubernetes`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerKubernetes {
    /// Kubelet configuration (Gardener `KubeletConfig`; open object, replaces the Shoot-wide
    /// one for this pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub kubelet: Option<OpenObject>,
    /// Kubelet version of the pool; the Shoot's version when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Whether a worker pool may host system components (Gardener `WorkerSystemComponents`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
pub struct WorkerSystemComponents {
    /// True if the pool may host system components.
    pub allow: bool,
}

/// Cluster-autoscaler settings of a worker pool (Gardener `ClusterAutoscalerOptions`).
/// Durations are Go duration strings (e.g. `30m`); thresholds are fractions in 0.0–1.0.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAutoscalerOptions {
    /// Fraction (0.0–1.0) of requested resources under which a node is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_utilization_threshold: Option<f64>,
    /// Fraction (0.0–1.0) of requested GPU under which a node is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    /// How long a node must be unneeded before scale-down (duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_unneeded_time: Option<String>,
    /// How long an unready node must be unneeded before scale-down (duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_unready_time: Option<String>,
    /// How long the autoscaler waits for a node to be provisioned (duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_provision_time: Option<String>,
}

/// machine-controller-manager settings of a worker pool (Gardener
/// `MachineControllerManagerSettings`). Durations are Go duration strings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineControllerManagerSettings {
    /// After this duration a draining machine is deleted forcefully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_drain_timeout: Option<String>,
    /// After this duration an unhealthy machine is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_health_timeout: Option<String>,
    /// After this duration a machine being created is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_creation_timeout: Option<String>,
    /// Eviction retries per pod before the drain is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,
    /// Node conditions that, true for `machineHealthTimeout`, fail the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<Vec<String>>,
    /// After this duration an in-place update is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<String>,
    /// If true, the health timeout is ignored (in-place updates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,
}

/// Network ranges of the Shoot (upstream `Networking`). Ranges are CIDR strings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// Network plugin (e.g. `calico`, `cilium`); the Gardener default when absent.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Pod CIDR (e.g. `100.64.0.0/12`).
    pub pods: String,
    /// Node CIDR (e.g. `10.250.0.0/16`).
    pub nodes: String,
    /// Service CIDR (e.g. `100.104.0.0/13`).
    pub services: String,
    /// Whether the Shoot runs IPv4/IPv6 dual-stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dual_stack: Option<bool>,
    /// Name of an existing VPC network to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_network: Option<String>,
}

/// Control-plane settings of the Shoot (Gardener `ControlPlane`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// High-availability settings of the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_availability: Option<HighAvailability>,
}

/// High-availability settings (Gardener `HighAvailability`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HighAvailability {
    /// The failures the control plane tolerates.
    pub failure_tolerance: FailureTolerance,
}

/// Failure-tolerance level (Gardener `FailureTolerance`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
pub struct FailureTolerance {
    /// `node` (tolerates node failures in one zone) or `zone` (tolerates a zone failure).
    #[serde(rename = "type")]
    pub type_: String,
}

/// Security settings of the runtime (upstream `Security`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    /// Users (e-mail addresses / OIDC user names) bound to `cluster-admin`.
    pub administrators: Vec<String>,
    /// Network filtering.
    pub networking: NetworkingSecurity,
}

/// Network security settings (upstream `NetworkingSecurity`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct NetworkingSecurity {
    /// Settings of the `shoot-networking-filter` extension.
    pub filter: Filter,
}

/// Settings of the `shoot-networking-filter` Gardener extension (upstream `Filter`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct Filter {
    /// Ingress filtering (blackholing); off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Ingress>,
    /// Egress filtering, the extension's default mode.
    pub egress: Egress,
}

/// Ingress filtering of the `shoot-networking-filter` extension (upstream `Ingress`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
pub struct Ingress {
    /// True to enable blackholing for this Shoot.
    pub enabled: bool,
}

/// Egress filtering of the `shoot-networking-filter` extension (upstream `Egress`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct Egress {
    /// True to enable egress filtering.
    pub enabled: bool,
}

/// An image-registry cache to configure on the Shoot (upstream `ImageRegistryCache`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
pub struct ImageRegistryCache {
    /// Name of the registry-cache configuration resource.
    pub name: String,
    /// Namespace of the registry-cache configuration resource.
    pub namespace: String,
    /// UID of the registry-cache configuration resource.
    pub uid: String,
    /// The cache configuration (cloud-manager `RegistryCacheConfigSpec`).
    pub config: RegistryCacheConfig,
}

/// Configuration of one registry cache (cloud-manager `RegistryCacheConfigSpec`, the shape of
/// KIM's CRD, with its defaults). Carried, not interpreted: kim configures no registry cache.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheConfig {
    /// The remote registry host to cache (e.g. `docker.io`).
    pub upstream: String,
    /// The remote registry URL, `<scheme><host>[:<port>]` with scheme `https://` or `http://`;
    /// derived from `upstream` when absent.
    #[serde(rename = "remoteURL", default, skip_serializing_if = "Option::is_none")]
    pub remote_url: Option<String>,
    /// The cache's volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<RegistryCacheVolume>,
    /// Garbage collection of cached content; enabled (TTL 168h) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage_collection: Option<RegistryCacheGarbageCollection>,
    /// Name of the Secret reference with the upstream registry's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_reference_name: Option<String>,
    /// Proxy the cache uses to reach the upstream registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<RegistryCacheProxy>,
    /// The cache's HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<RegistryCacheHttp>,
}

/// Volume of a registry cache (cloud-manager `Volume`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheVolume {
    /// Volume size, a Kubernetes quantity (e.g. `10Gi`); the API server writes `10Gi` when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = QUANTITY_PATTERN, "default" = "10Gi"))]
    pub size: Option<IntOrString>,
    /// StorageClass of the volume; the cluster's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Garbage collection of a registry cache (cloud-manager `GarbageCollection`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct RegistryCacheGarbageCollection {
    /// Time to live of a cached blob, a Go duration (`0s` disables garbage collection).
    /// Required; the API server writes `168h` (7 days) when absent, so a Runtime read from the
    /// API server always has it.
    // An `Option` without `serde(default)`: serde still reads a missing field as `None`, and
    // schemars lists it as required.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, extend("default" = "168h"))]
    pub ttl: Option<String>,
}

/// Proxy settings of a registry cache (cloud-manager `Proxy`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheProxy {
    /// Proxy for HTTP connections to the upstream registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    /// Proxy for HTTPS connections to the upstream registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
}

/// HTTP server settings of a registry cache (cloud-manager `HTTP`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
pub struct RegistryCacheHttp {
    /// Whether the cache serves TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
}

/// Observed state of a Runtime (docs/status-model.md §1). Written only through the
/// `runtimes/status` subresource, by the reconciler (or KIM), checked by the admission webhook.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStatus {
    /// Overall phase of the runtime (values from the status table); required once `status`
    /// exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "state_schema")]
    pub state: Option<State>,
    /// One condition per step (`Provisioned`, `KubeconfigReady`, `Configured`,
    /// `Deprovisioned`, …), at most one per `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Set true on the first `Ready`; never goes back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_completed: Option<bool>,
    /// Copy of the Shoot's `status.lastOperation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shoot_last_operation: Option<LastOperation>,
    /// Copy of the Shoot's `status.lastErrors`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shoot_last_errors: Vec<LastError>,
    /// Name of the AuditLog custom resource chosen for this runtime (written by KIM).
    /// Carried, not interpreted: kim's status writes keep it as they found it.
    #[serde(
        rename = "auditLogCR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub audit_log_cr: Option<String>,
}

/// The last operation Gardener ran on the Shoot (Gardener `LastOperation`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Human-readable details of the operation.
    pub description: String,
    /// When the operation's state last changed (RFC 3339).
    pub last_update_time: Time,
    /// Progress of the operation in percent (0–100).
    pub progress: i32,
    /// `Processing`, `Succeeded`, `Error`, `Failed`, `Pending` or `Aborted`.
    pub state: String,
    /// `Create`, `Reconcile`, `Delete`, `Migrate` or `Restore`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// An error of the Shoot's last operation (Gardener `LastError`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Human-readable details of the error.
    pub description: String,
    /// ID of the Gardener flow task that failed.
    #[serde(rename = "taskID", default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Gardener error codes (e.g. `ERR_INFRA_QUOTA_EXCEEDED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codes: Option<Vec<String>>,
    /// When the error was last reported (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

impl Runtime {
    /// The runtime ID ([`LABEL_RUNTIME_ID`]), if set and not empty. The Shoot and the kubeconfig
    /// Secret of the Runtime carry it (`Shoot::runtime_id`, the Secret's name).
    pub fn runtime_id(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_RUNTIME_ID))
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// The Shoot name from the `kyma-project.io/shoot-name` label, else `spec.shoot.name`.
    pub fn shoot_name(&self) -> &str {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SHOOT_NAME))
            .map(String::as_str)
            .unwrap_or(&self.spec.shoot.name)
    }

    /// Required labels (see [`REQUIRED_LABELS`]) that are missing or empty.
    pub fn missing_required_labels(&self) -> Vec<&'static str> {
        let labels = self.metadata.labels.as_ref();
        REQUIRED_LABELS
            .into_iter()
            .filter(|k| labels.and_then(|l| l.get(*k)).is_none_or(|v| v.is_empty()))
            .collect()
    }
}

/// Schema of an open-ended object: `{type: object, x-kubernetes-preserve-unknown-fields: true}`.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of `status.state`: a string enum whose values come from [`State::ALL`].
pub fn state_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<Value> = State::ALL.iter().map(|s| s.as_str().into()).collect();
    json_schema!({
        "description": "Overall phase of the runtime; required once status exists.",
        "type": "string",
        "enum": names,
    })
}

/// Schema of `spec.shoot.provider.type`: a string enum from [`PROVIDER_TYPES`].
pub fn provider_type_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Infrastructure provider of the Shoot.",
        "type": "string",
        "enum": PROVIDER_TYPES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runtime(spec: Option<Value>) -> Value {
        let mut v = json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "metadata": {"name": "rt", "namespace": "kcp-system"},
            "status": {"state": "Pending"},
        });
        if let Some(spec) = spec {
            v["spec"] = spec;
        }
        v
    }

    #[test]
    fn a_runtime_without_spec_reads_as_the_empty_spec() {
        for v in [runtime(None), runtime(Some(Value::Null))] {
            let rt: Runtime = serde_json::from_value(v).expect("reads without spec");
            assert_eq!(rt.spec, RuntimeSpec::default());
            assert!(rt.spec.names_no_shoot());
            assert_eq!(rt.status.and_then(|s| s.state), Some(State::Pending));
        }
    }

    #[test]
    fn a_present_spec_must_be_whole() {
        let security =
            json!({"administrators": [], "networking": {"filter": {"egress": {"enabled": false}}}});
        let err = serde_json::from_value::<Runtime>(runtime(Some(json!({"security": security}))))
            .expect_err("spec without shoot");
        assert!(err.to_string().contains("missing field `shoot`"), "{err}");
        assert!(serde_json::from_value::<Runtime>(runtime(Some(json!({})))).is_err());
        assert!(serde_json::from_value::<Runtime>(runtime(Some(json!("text")))).is_err());
    }
}
