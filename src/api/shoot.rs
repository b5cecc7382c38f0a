//! Gardener types `kim` reads and writes in the Gardener cluster: the `Shoot`
//! (`core.gardener.cloud/v1beta1`, namespaced, `status` subresource) and the
//! `AdminKubeconfigRequest` (`authentication.gardener.cloud/v1alpha1`) posted to a Shoot's
//! `adminkubeconfig` subresource.
//!
//! Sources: Gardener `pkg/apis/core/v1beta1/types_shoot.go` (spec and status),
//! `types_common.go` (`LastOperation`, `LastError`) and
//! `pkg/apis/authentication/v1alpha1/types_adminkubeconfigrequest.go`.
//!
//! Only the subset of the Shoot that `kim` writes is typed. Every typed object that Gardener
//! extends over time carries a `#[serde(flatten)] extra` map, so reading a Shoot and writing it
//! back keeps fields `kim` does not know (addons, hibernation, status conditions, …). The
//! exceptions are the worker pools, which reuse [`Worker`] from the Runtime (Gardener's
//! `Worker` as KIM embeds it): a worker field outside that type is not preserved.
//!
//! The `Shoot` resource is derived with `kube::CustomResource` only to get `Api<Shoot>` and
//! `Resource` metadata; `kim` never installs a CRD for it (Gardener serves it from its own API
//! server), so no schema is generated (`schema = "disabled"`).

use crate::api::{ControlPlane, LastError, LastOperation, OidcConfig, OpenObject, Worker};
use base64::Engine as _;
use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Shoot annotation with the Kyma runtime ID (from the Runtime's `kyma-project.io/runtime-id`
/// label); the reconciler maps Shoot events back to their Runtime with it.
pub const ANNOTATION_RUNTIME_ID: &str = "infrastructuremanager.kyma-project.io/runtime-id";
/// Shoot annotation with the Runtime's `metadata.generation` the Shoot was last written from
/// (decimal string); a Runtime whose generation is greater needs an update.
pub const ANNOTATION_RUNTIME_GENERATION: &str =
    "infrastructuremanager.kyma-project.io/runtime-generation";
/// Shoot annotation with the Runtime's licence type (set only when the Runtime has one).
pub const ANNOTATION_LICENCE_TYPE: &str = "infrastructuremanager.kyma-project.io/licence-type";
/// Annotation Gardener requires (value `"true"`) before it accepts a Shoot deletion.
pub const ANNOTATION_CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Annotation asking Gardener for an operation on the Shoot; value [`OPERATION_RETRY`] retries
/// a Shoot whose last operation `Failed`, [`OPERATION_RECONCILE`] forces a reconcile.
pub const ANNOTATION_OPERATION: &str = "gardener.cloud/operation";
/// Value of [`ANNOTATION_OPERATION`] that retries a failed operation.
pub const OPERATION_RETRY: &str = "retry";
/// Value of [`ANNOTATION_OPERATION`] that triggers a reconcile.
pub const OPERATION_RECONCILE: &str = "reconcile";
/// Shoot label with the BTP global account ID (from `kyma-project.io/global-account-id`).
pub const LABEL_ACCOUNT: &str = "account";
/// Shoot label with the BTP subaccount ID (from `kyma-project.io/subaccount-id`).
pub const LABEL_SUBACCOUNT: &str = "subaccount";
/// Name of the Shoot subresource that issues admin kubeconfigs.
pub const ADMIN_KUBECONFIG_SUBRESOURCE: &str = "adminkubeconfig";

/// Desired state of a Gardener Shoot cluster (Gardener `ShootSpec`, the subset `kim` writes;
/// everything else is kept in [`ShootSpec::extra`]).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "Shoot",
    plural = "shoots",
    singular = "shoot",
    namespaced,
    status = "ShootStatus",
    derive = "PartialEq",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ShootSpec {
    /// Reference to the CloudProfile (`kind` `CloudProfile` or `NamespacedCloudProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_profile: Option<CloudProfileReference>,
    /// Deprecated name of the CloudProfile; forbidden for new Shoots from Kubernetes 1.34 on
    /// (Gardener fills it from `cloudProfile` on its own). `kim` does not write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_profile_name: Option<String>,
    /// Hyperscaler region (e.g. `eu-central-1`).
    #[serde(default)]
    pub region: String,
    /// `evaluation`, `testing`, `development`, `production` or `infrastructure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Deprecated: name of the SecretBinding with the hyperscaler credentials (read only;
    /// `kim` writes [`ShootSpec::credentials_binding_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_binding_name: Option<String>,
    /// Name of the CredentialsBinding with the hyperscaler credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_binding_name: Option<String>,
    /// Network ranges and plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<ShootNetworking>,
    /// Infrastructure provider, its configs and the worker pools.
    #[serde(default)]
    pub provider: ShootProvider,
    /// Kubernetes version and kube-apiserver settings.
    #[serde(default)]
    pub kubernetes: ShootKubernetes,
    /// Control-plane settings (high availability).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
    /// Maintenance time window and auto-update switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// External DNS domain and providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Gardener extensions (e.g. `shoot-networking-filter`, `shoot-dns-service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<Extension>>,
    /// Resources in the project namespace the Shoot references (e.g. DNS provider secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<NamedResourceReference>>,
    /// Constraint on the seeds the Shoot may be scheduled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_selector: Option<SeedSelector>,
    /// Access restrictions the Shoot's seed must support (e.g. `eu-access-only`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_restrictions: Option<Vec<AccessRestrictionWithOptions>>,
    /// Name of the Gardener `ExposureClass` through which the API server is exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposure_class_name: Option<String>,
    /// Seed taints the Shoot tolerates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Every other spec field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// A seed taint the Shoot tolerates (Gardener `Toleration`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Toleration {
    /// Taint key.
    pub key: String,
    /// Taint value; any value when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Reference to a (namespaced) CloudProfile (Gardener `CloudProfileReference`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct CloudProfileReference {
    /// `CloudProfile` or `NamespacedCloudProfile`.
    #[serde(default)]
    pub kind: String,
    /// Name of the profile (e.g. `aws`, `az`).
    pub name: String,
}

/// Networking of the Shoot (Gardener `Networking`). Ranges are CIDR strings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootNetworking {
    /// Network plugin (`calico`, `cilium`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Pod CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<String>,
    /// Node CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// Service CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<String>,
    /// IP families (`IPv4`, `IPv6`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_families: Option<Vec<String>>,
    /// Every other field (e.g. `providerConfig`), kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// Infrastructure provider of the Shoot (Gardener `Provider`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootProvider {
    /// `aws`, `azure`, `gcp`, `openstack`, …
    #[serde(rename = "type", default)]
    pub type_: String,
    /// Provider extension's `ControlPlaneConfig` (object with `apiVersion`/`kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_config: Option<OpenObject>,
    /// Provider extension's `InfrastructureConfig` (object with `apiVersion`/`kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_config: Option<OpenObject>,
    /// Worker pools.
    #[serde(default)]
    pub workers: Vec<Worker>,
    /// Settings for all worker pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_settings: Option<WorkersSettings>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// Settings for all worker pools (Gardener `WorkersSettings`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkersSettings {
    /// SSH access to the worker nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_access: Option<SshAccess>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// SSH access to worker nodes (Gardener `SSHAccess`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct SshAccess {
    /// Whether SSH access (and its infrastructure) is enabled.
    pub enabled: bool,
}

/// Kubernetes settings of the Shoot (Gardener `Kubernetes`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootKubernetes {
    /// Kubernetes version `MAJOR.MINOR.PATCH` (e.g. `1.31.4`).
    #[serde(default)]
    pub version: String,
    /// kube-apiserver settings.
    #[serde(
        rename = "kubeAPIServer",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kube_api_server: Option<KubeApiServerConfig>,
    /// Every other field (kubelet, kube-proxy, …), kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// kube-apiserver settings (Gardener `KubeAPIServerConfig`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeApiServerConfig {
    /// Legacy OIDC flags; Gardener forbids them for Kubernetes ≥ 1.32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_config: Option<OidcConfig>,
    /// Structured authentication: a ConfigMap in the project namespace with an
    /// `AuthenticationConfiguration` under key `config.yaml` (Kubernetes ≥ 1.30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_authentication: Option<StructuredAuthentication>,
    /// Service-account token settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_config: Option<ServiceAccountConfig>,
    /// Audit policy of the kube-apiserver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_config: Option<AuditConfig>,
    /// Feature gates of the kube-apiserver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// API groups/versions switched on or off (`--runtime-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<BTreeMap<String, bool>>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// Reference to a structured-authentication ConfigMap (Gardener `StructuredAuthentication`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StructuredAuthentication {
    /// Name of the ConfigMap in the Shoot's namespace.
    pub config_map_name: String,
}

/// Service-account token settings of the kube-apiserver (Gardener `ServiceAccountConfig`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountConfig {
    /// Whether projected tokens get extended lifetimes (legacy token compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extend_token_expiration: Option<bool>,
    /// Longest lifetime a projected token may be issued for, as a Go duration
    /// (e.g. `720h0m0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_token_expiration: Option<String>,
    /// Every other field (issuer, signing key, …), kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// Audit settings of the kube-apiserver (Gardener `AuditConfig`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditConfig {
    /// The audit policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_policy: Option<AuditPolicy>,
}

/// Audit policy reference (Gardener `AuditPolicy`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditPolicy {
    /// ConfigMap in the project namespace holding the policy under key `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapName>,
}

/// A reference by name to an object in the Shoot's namespace (the `name` of a core
/// `ObjectReference`, the only field Gardener reads there).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct ConfigMapName {
    /// Object name.
    pub name: String,
}

/// An access restriction with its options (Gardener `AccessRestrictionWithOptions`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct AccessRestrictionWithOptions {
    /// Restriction name, e.g. `eu-access-only`.
    pub name: String,
    /// Options of the restriction (`"true"`/`"false"` strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<BTreeMap<String, String>>,
}

/// Maintenance settings (Gardener `Maintenance`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Which versions Gardener may update in the maintenance window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_update: Option<MaintenanceAutoUpdate>,
    /// The daily maintenance window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window: Option<MaintenanceTimeWindow>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// Auto-update switches (Gardener `MaintenanceAutoUpdate`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceAutoUpdate {
    /// Whether the Kubernetes patch version is updated automatically.
    #[serde(default)]
    pub kubernetes_version: bool,
    /// Whether machine image versions are updated automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_image_version: Option<bool>,
}

/// Daily maintenance window (Gardener `MaintenanceTimeWindow`), times as `HHMMSS+ZZZZ`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct MaintenanceTimeWindow {
    /// Start of the window, e.g. `220000+0000`.
    pub begin: String,
    /// End of the window, e.g. `230000+0000`.
    pub end: String,
}

/// External DNS of the Shoot (Gardener `DNS`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Dns {
    /// External domain of the cluster (`<shoot>.<configured domain>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// DNS providers (deprecated by Gardener in favour of the `shoot-dns-service` config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<DnsProvider>>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

/// A DNS provider of the Shoot (Gardener `DNSProvider`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DnsProvider {
    /// Domains this provider manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<DnsIncludeExclude>,
    /// Whether this provider manages the Shoot's own domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    /// Deprecated: Secret with the provider credentials (in the project namespace);
    /// Gardener forbids it from Kubernetes 1.35 on. Read only; `kim` writes
    /// [`DnsProvider::credentials_ref`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The provider credentials: a `v1` `Secret` or a
    /// `security.gardener.cloud/v1alpha1` `WorkloadIdentity` in the project namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<CrossVersionObjectReference>,
    /// Provider type (e.g. `aws-route53`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Hosted zones this provider manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<DnsIncludeExclude>,
}

/// Include/exclude lists of domains or zones (Gardener `DNSIncludeExclude`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct DnsIncludeExclude {
    /// Included entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Excluded entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
}

/// A Gardener extension enabled (or disabled) for the Shoot (Gardener `Extension`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Extension {
    /// Extension type, e.g. `shoot-networking-filter`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Extension-specific configuration (object, usually with `apiVersion`/`kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<OpenObject>,
    /// True to disable a globally enabled extension for this Shoot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

/// A named reference to a resource in the project namespace (Gardener
/// `NamedResourceReference`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NamedResourceReference {
    /// Name under which extensions refer to the resource.
    pub name: String,
    /// The referenced object (`apiVersion`, `kind`, `name`).
    pub resource_ref: CrossVersionObjectReference,
}

/// Seeds the Shoot may be scheduled on (Gardener `SeedSelector`: a label selector plus
/// provider types).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SeedSelector {
    /// Seed labels that must match, e.g. `seed.gardener.cloud/region: eu-central-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label selector requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Allowed seed provider types (`*` for any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_types: Option<Vec<String>>,
}

/// Observed state of a Shoot (Gardener `ShootStatus`, the subset the reconciler reads; all
/// other fields are kept in [`ShootStatus::extra`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootStatus {
    /// The last operation Gardener ran (type, state, progress, description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Errors of the last operation, with error codes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// The `metadata.generation` Gardener last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Name of the seed hosting the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_name: Option<String>,
    /// Technical ID (namespace of the control plane in the seed).
    #[serde(
        rename = "technicalID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub technical_id: Option<String>,
    /// Every other status field (conditions, constraints, hibernated, …), kept verbatim.
    #[serde(flatten)]
    pub extra: OpenObject,
}

impl Shoot {
    /// The runtime ID from the [`ANNOTATION_RUNTIME_ID`] annotation, if any.
    pub fn runtime_id(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RUNTIME_ID))
            .map(String::as_str)
    }

    /// The Runtime generation from the [`ANNOTATION_RUNTIME_GENERATION`] annotation; `None`
    /// when absent or not a decimal integer.
    pub fn runtime_generation(&self) -> Option<i64> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RUNTIME_GENERATION))
            .and_then(|v| v.parse().ok())
    }
}

/// API version of [`AdminKubeconfigRequest`].
pub const ADMIN_KUBECONFIG_REQUEST_API_VERSION: &str = "authentication.gardener.cloud/v1alpha1";
/// Kind of [`AdminKubeconfigRequest`].
pub const ADMIN_KUBECONFIG_REQUEST_KIND: &str = "AdminKubeconfigRequest";
/// The smallest `expirationSeconds` Gardener accepts (10 minutes).
pub const ADMIN_KUBECONFIG_MIN_EXPIRATION_SECONDS: i64 = 600;

/// Request for a short-lived admin kubeconfig of a Shoot, posted to the Shoot's
/// `adminkubeconfig` subresource (`POST .../shoots/<name>/adminkubeconfig`); Gardener answers
/// with the same object, `status` filled. Plain serde type (not a stored resource).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdminKubeconfigRequest {
    /// Always [`ADMIN_KUBECONFIG_REQUEST_API_VERSION`].
    pub api_version: String,
    /// Always [`ADMIN_KUBECONFIG_REQUEST_KIND`].
    pub kind: String,
    /// Object metadata (unused in requests; echoed by Gardener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// What is requested.
    pub spec: AdminKubeconfigRequestSpec,
    /// The issued kubeconfig (responses only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AdminKubeconfigRequestStatus>,
}

/// Spec of an [`AdminKubeconfigRequest`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdminKubeconfigRequestSpec {
    /// Validity of the issued credentials in seconds (≥ 600; Gardener's default is 1 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
}

/// Status of an answered [`AdminKubeconfigRequest`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdminKubeconfigRequestStatus {
    /// The kubeconfig, base64-encoded (Go `[]byte`); see
    /// [`AdminKubeconfigRequest::kubeconfig_bytes`].
    pub kubeconfig: String,
    /// When the credentials expire (RFC 3339).
    pub expiration_timestamp: Time,
}

/// Errors reading the kubeconfig out of an [`AdminKubeconfigRequest`] answer.
#[derive(Debug, thiserror::Error)]
pub enum AdminKubeconfigError {
    /// The answer has no `status`.
    #[error("AdminKubeconfigRequest answer has no status")]
    NoStatus,
    /// `status.kubeconfig` is not valid standard base64.
    #[error("status.kubeconfig is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
}

impl AdminKubeconfigRequest {
    /// A request for a kubeconfig valid `expiration_seconds` seconds.
    pub fn new(expiration_seconds: i64) -> Self {
        AdminKubeconfigRequest {
            api_version: ADMIN_KUBECONFIG_REQUEST_API_VERSION.to_string(),
            kind: ADMIN_KUBECONFIG_REQUEST_KIND.to_string(),
            metadata: None,
            spec: AdminKubeconfigRequestSpec {
                expiration_seconds: Some(expiration_seconds),
            },
            status: None,
        }
    }

    /// The decoded kubeconfig bytes (YAML) of an answered request.
    ///
    /// Errors: [`AdminKubeconfigError::NoStatus`] when unanswered,
    /// [`AdminKubeconfigError::Base64`] when the payload is not base64.
    pub fn kubeconfig_bytes(&self) -> Result<Vec<u8>, AdminKubeconfigError> {
        let status = self.status.as_ref().ok_or(AdminKubeconfigError::NoStatus)?;
        Ok(base64::engine::general_purpose::STANDARD.decode(status.kubeconfig.trim())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shoot_round_trip_keeps_unknown_fields() {
        let value = json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p", "generation": 3},
            "spec": {
                "region": "eu-central-1",
                "hibernation": {"enabled": false},
                "provider": {"type": "aws", "workers": [], "someFuture": 1},
                "kubernetes": {"version": "1.31.1", "kubelet": {"x": 1},
                               "kubeAPIServer": {"enableAnonymousAuthentication": false}},
                "networking": {"type": "calico", "nodes": "10.250.0.0/16", "providerConfig": {"a": 1}},
                "maintenance": {"timeWindow": {"begin": "220000+0000", "end": "230000+0000"},
                                "confineSpecUpdateRollout": true},
                "dns": {"domain": "s.example.com", "x": "y"}
            },
            "status": {
                "hibernated": false,
                "observedGeneration": 3,
                "technicalID": "shoot--p--s",
                "lastOperation": {"type": "Create", "state": "Succeeded", "progress": 100,
                                  "description": "ok", "lastUpdateTime": "2024-01-01T00:00:00Z"},
                "lastErrors": [{"description": "boom", "codes": ["ERR_INFRA_QUOTA_EXCEEDED"]}],
                "conditions": [{"type": "APIServerAvailable"}]
            }
        });
        let shoot: Shoot = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(shoot.spec.provider.type_, "aws");
        assert_eq!(shoot.status.as_ref().unwrap().observed_generation, Some(3));
        assert_eq!(serde_json::to_value(&shoot).unwrap(), value);
    }

    #[test]
    fn shoot_annotations_helpers() {
        let mut shoot = Shoot::new("s", ShootSpec::default());
        assert_eq!(shoot.runtime_id(), None);
        shoot.metadata.annotations = Some(BTreeMap::from([
            (ANNOTATION_RUNTIME_ID.to_string(), "rid".to_string()),
            (ANNOTATION_RUNTIME_GENERATION.to_string(), "7".to_string()),
        ]));
        assert_eq!(shoot.runtime_id(), Some("rid"));
        assert_eq!(shoot.runtime_generation(), Some(7));
    }

    #[test]
    fn admin_kubeconfig_request_wire_format() {
        let req = AdminKubeconfigRequest::new(86400);
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({
                "apiVersion": "authentication.gardener.cloud/v1alpha1",
                "kind": "AdminKubeconfigRequest",
                "spec": {"expirationSeconds": 86400}
            })
        );
        assert!(matches!(
            req.kubeconfig_bytes(),
            Err(AdminKubeconfigError::NoStatus)
        ));
        let answer: AdminKubeconfigRequest = serde_json::from_value(json!({
            "apiVersion": "authentication.gardener.cloud/v1alpha1",
            "kind": "AdminKubeconfigRequest",
            "metadata": {"creationTimestamp": null},
            "spec": {"expirationSeconds": 86400},
            "status": {"kubeconfig": "YXBpVmVyc2lvbjogdjE=",
                       "expirationTimestamp": "2024-01-02T00:00:00Z"}
        }))
        .unwrap();
        assert_eq!(answer.kubeconfig_bytes().unwrap(), b"apiVersion: v1");
    }
}
