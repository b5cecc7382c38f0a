//! The converter configuration file: defaults and settings the Runtime → Shoot conversion and
//! the reconciler need but a Runtime does not carry (upstream KIM `pkg/config/config.go`,
//! `ConverterConfig`, plus the per-provider cloud profiles of
//! `pkg/gardener/shoot/extender/cloud_profile.go` and the OpenStack constants of
//! `pkg/gardener/shoot/hyperscaler/openstack/config.go`).
//!
//! YAML (serde-saphyr), unknown fields are errors. [`Config::load`] parses and validates
//! everything at start-up and reports every problem at once, each naming its field
//! (`providers.aws.machineImage.version: must not be empty`). Every field, with its default:
//! `docs/config.example.yaml`.

use crate::api::MaintenanceTimeWindow;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole configuration file. See the module documentation for the format.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Gardener project the Shoots belong to.
    pub gardener: GardenerConfig,
    /// Kubernetes defaults.
    pub kubernetes: KubernetesConfig,
    /// Per-provider defaults; a provider that is absent cannot be converted.
    pub providers: ProvidersConfig,
    /// Maintenance window written to every Shoot (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceConfig>,
    /// External DNS of the Shoots (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsConfig>,
    /// Admin kubeconfig lifetime and rotation.
    #[serde(default)]
    pub kubeconfig: KubeconfigConfig,
    /// Shoot region → value of the seed label `seed.gardener.cloud/region` required when a
    /// Runtime sets `enforceSeedLocation`; a region not listed maps to itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub seed_regions: BTreeMap<String, String>,
    /// machine-controller-manager defaults of every worker pool.
    #[serde(default)]
    pub workers: WorkersConfig,
    /// Audit logging of the Shoots' API servers (optional; KIM requires it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<AuditLogConfig>,
    /// Shoot region → the seed taints Shoots of that region tolerate (upstream
    /// `tolerations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tolerations: BTreeMap<String, Vec<crate::api::Toleration>>,
}

/// `workers:` — defaults written into every worker pool's `machineControllerManager`
/// settings where the Runtime sets none (upstream `provider.worker` config,
/// `defaultMachineDrainTimeout` and `defaultMaxEvictRetries`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkersConfig {
    /// `machineDrainTimeout`, a Go duration of whole seconds (default `15m`).
    #[serde(default = "default_machine_drain_timeout")]
    pub machine_drain_timeout: String,
    /// `maxEvictRetries` (default 2, at least 0).
    #[serde(default = "default_max_evict_retries")]
    pub max_evict_retries: i32,
}

/// KIM's default drain timeout of a worker pool's machines.
pub(crate) const DEFAULT_MACHINE_DRAIN_TIMEOUT: &str = "15m";
/// KIM's default eviction retries per pod while draining.
pub(crate) const DEFAULT_MAX_EVICT_RETRIES: i32 = 2;

fn default_machine_drain_timeout() -> String {
    DEFAULT_MACHINE_DRAIN_TIMEOUT.to_string()
}

fn default_max_evict_retries() -> i32 {
    DEFAULT_MAX_EVICT_RETRIES
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            machine_drain_timeout: default_machine_drain_timeout(),
            max_evict_retries: DEFAULT_MAX_EVICT_RETRIES,
        }
    }
}

/// `auditLog:` — the `shoot-auditlog-service` extension, its credentials and the audit
/// policy (upstream `auditLogging` config with its tenant file: provider type → region →
/// tenant).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditLogConfig {
    /// When true (default, as KIM's `--audit-log-mandatory`), a Runtime whose provider and
    /// region have no tenant fails (`AuditLogErr`); when false it gets a Shoot without
    /// audit logging.
    #[serde(default = "default_true")]
    pub mandatory: bool,
    /// ConfigMap in the project namespace with the audit policy
    /// (`kubeAPIServer.auditConfig.auditPolicy.configMapRef.name`).
    pub policy_config_map_name: String,
    /// Provider type (`aws`, `azure`, `gcp`, `openstack`) → Shoot region → tenant.
    #[serde(default)]
    pub tenants: BTreeMap<String, BTreeMap<String, AuditLogTenant>>,
    /// KIM's tenant file (JSON, provider type → region → tenant; relative paths from the
    /// configuration file's directory), read at start-up and added to `tenants`, so an
    /// install can mount KIM's own file. A region in both is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants_file: Option<PathBuf>,
}

/// Provider type → Shoot region → audit log tenant, the shape of `auditLog.tenants` and of
/// KIM's tenant file.
pub type AuditLogTenants = BTreeMap<String, BTreeMap<String, AuditLogTenant>>;

/// One audit log tenant (upstream `AuditLogData`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuditLogTenant {
    /// Tenant ID at the audit log service.
    #[serde(rename = "tenantID")]
    pub tenant_id: String,
    /// URL of the audit log service.
    #[serde(rename = "serviceURL")]
    pub service_url: String,
    /// Secret in the project namespace with the service credentials; referenced by the
    /// Shoot as resource `auditlog-credentials`.
    #[serde(rename = "secretName")]
    pub secret_name: String,
    /// Accepted for KIM's tenant files and unused: the read credentials of KIM's dedicated
    /// audit logs.
    #[serde(
        rename = "readCredsSecretName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub read_creds_secret_name: Option<String>,
}

fn default_true() -> bool {
    true
}

/// `gardener:` — the Gardener project.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GardenerConfig {
    /// Project name; Shoots are created in namespace `garden-<project>`.
    pub project: String,
}

/// `kubernetes:` — Kubernetes defaults.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Version `MAJOR.MINOR.PATCH` used when the Runtime names none.
    pub default_version: String,
    /// `spec.maintenance.autoUpdate.kubernetesVersion` of every Shoot (default false).
    #[serde(default)]
    pub enable_kubernetes_version_auto_update: bool,
    /// `spec.maintenance.autoUpdate.machineImageVersion` of every Shoot (default false).
    #[serde(default)]
    pub enable_machine_image_version_auto_update: bool,
    /// OIDC provider used when the Runtime's `oidcConfig` has neither `clientID` nor
    /// `issuerURL` (upstream `defaultOperatorOidc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_oidc: Option<OidcDefaults>,
    /// `kubeAPIServer.serviceAccountConfig.maxTokenExpiration` of every Shoot: a Go duration
    /// of whole seconds between `720h` and `2160h` (30 to 90 days, upstream's bounds);
    /// `720h` when absent (upstream `kubeApiServer.maxTokenExpiration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_token_expiration: Option<String>,
    /// Feature gates of every Shoot's kube-apiserver and kubelet (upstream
    /// `kubeApiServer.featureGates`, `kubelet.featureGates`).
    #[serde(default)]
    pub feature_gates: FeatureGatesConfig,
    /// `kubeAPIServer.runtimeConfig` of every Shoot (upstream `kubeApiServer.runtimeConfig`),
    /// e.g. `{"resource.k8s.io/v1beta1": true}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runtime_config: BTreeMap<String, bool>,
}

/// `kubernetes.featureGates:` — feature gate name → enabled, per component; empty maps are
/// not written.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureGatesConfig {
    /// `kubeAPIServer.featureGates`.
    #[serde(
        rename = "kubeAPIServer",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub kube_api_server: BTreeMap<String, bool>,
    /// `kubelet.featureGates`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kubelet: BTreeMap<String, bool>,
}

/// Shortest and longest service-account token lifetime KIM allows, in seconds (30 and 90
/// days); the shortest is the default.
pub(crate) const TOKEN_EXPIRATION_BOUNDS: (u64, u64) = (30 * 86_400, 90 * 86_400);

/// `kubernetes.defaultOidc:` — a complete OIDC provider.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcDefaults {
    /// OIDC client ID.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// Issuer URL (`https://…`).
    #[serde(rename = "issuerURL")]
    pub issuer_url: String,
    /// Claim with the groups.
    pub groups_claim: String,
    /// Claim with the user name.
    pub username_claim: String,
    /// Prefix for user names (`-` for none).
    pub username_prefix: String,
    /// Accepted signing algorithms (e.g. `RS256`).
    pub signing_algs: Vec<String>,
}

/// `providers:` — one entry per supported provider; absent providers are not supported.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvidersConfig {
    /// Amazon Web Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsConfig>,
    /// Microsoft Azure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<ProviderConfig>,
    /// Google Cloud.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<ProviderConfig>,
    /// OpenStack (SAP Converged Cloud).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openstack: Option<OpenStackConfig>,
}

/// Defaults common to every provider (`providers.azure`, `providers.gcp`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Name of the Gardener CloudProfile (upstream: `aws`, `az`, `gcp`,
    /// `converged-cloud-kyma`).
    pub cloud_profile: String,
    /// Machine image for workers that name none (and version for workers whose image has
    /// this name but no version).
    pub machine_image: MachineImageConfig,
    /// Root volume for workers without one; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeConfig>,
}

/// `providers.aws:` — the common defaults plus AWS settings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsConfig {
    /// See [`ProviderConfig::cloud_profile`].
    pub cloud_profile: String,
    /// See [`ProviderConfig::machine_image`].
    pub machine_image: MachineImageConfig,
    /// See [`ProviderConfig::volume`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeConfig>,
    /// Require IMDSv2 on worker machines (a `WorkerConfig` with `httpTokens: required`,
    /// hop limit 2, on workers without a `providerConfig`). Default false.
    #[serde(rename = "enableIMDSv2", default)]
    pub enable_imdsv2: bool,
}

/// `providers.openstack:` — the common defaults plus OpenStack settings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenStackConfig {
    /// See [`ProviderConfig::cloud_profile`].
    pub cloud_profile: String,
    /// See [`ProviderConfig::machine_image`].
    pub machine_image: MachineImageConfig,
    /// See [`ProviderConfig::volume`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeConfig>,
    /// `InfrastructureConfig.floatingPoolName` (upstream `FloatingIP-external-kyma-01`).
    pub floating_pool_name: String,
    /// `ControlPlaneConfig.loadBalancerProvider` (upstream `f5`).
    pub load_balancer_provider: String,
}

/// A machine image: name and version.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineImageConfig {
    /// Image name (e.g. `gardenlinux`).
    pub name: String,
    /// Image version (e.g. `1592.1.0`).
    pub version: String,
}

/// A root volume: type and size.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeConfig {
    /// Provider volume type (e.g. `gp3`, `StandardSSD_LRS`); the profile default when absent.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Size as a Kubernetes quantity (e.g. `50Gi`).
    pub size: String,
}

/// `maintenance:` — the maintenance window of production Shoots (others get Gardener's).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceConfig {
    /// Window for every region not in `byRegion`; absent → those regions get Gardener's
    /// (as KIM, whose window map has no default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window: Option<MaintenanceTimeWindow>,
    /// Windows for particular Shoot regions (upstream: the region → window ConfigMap).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_region: BTreeMap<String, MaintenanceTimeWindow>,
}

/// `dns:` — external DNS of the Shoots.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsConfig {
    /// Domain suffix: Shoot `<name>` gets domain `<name>.<domain>`.
    pub domain: String,
    /// DNS provider managing the domain; absent → Gardener's own DNS for that domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<DnsProviderConfig>,
}

/// `dns.provider:` — a DNS provider and its credentials.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsProviderConfig {
    /// Provider type (e.g. `aws-route53`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Secret in the project namespace with the provider credentials.
    pub secret_name: String,
}

/// `kubeconfig:` — lifetime and rotation of the admin kubeconfig.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeconfigConfig {
    /// `expirationSeconds` of the `AdminKubeconfigRequest` (default 86400, at least 600).
    #[serde(default = "default_expiration_seconds")]
    pub expiration_seconds: i64,
    /// Fraction (0 < f < 1) of the lifetime after which the kubeconfig is renewed
    /// (default 0.6).
    #[serde(default = "default_rotation_fraction")]
    pub rotation_fraction: f64,
}

/// Default lifetime of an admin kubeconfig: 24 h.
pub(crate) const DEFAULT_KUBECONFIG_EXPIRATION_SECONDS: i64 = 86_400;
/// Default rotation fraction of the admin kubeconfig lifetime.
pub(crate) const DEFAULT_KUBECONFIG_ROTATION_FRACTION: f64 = 0.6;

fn default_expiration_seconds() -> i64 {
    DEFAULT_KUBECONFIG_EXPIRATION_SECONDS
}

fn default_rotation_fraction() -> f64 {
    DEFAULT_KUBECONFIG_ROTATION_FRACTION
}

impl Default for KubeconfigConfig {
    fn default() -> Self {
        KubeconfigConfig {
            expiration_seconds: DEFAULT_KUBECONFIG_EXPIRATION_SECONDS,
            rotation_fraction: DEFAULT_KUBECONFIG_ROTATION_FRACTION,
        }
    }
}

/// One invalid field of the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `providers.aws.machineImage.version`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a configuration file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not YAML of the expected shape (unknown field, wrong type, missing
    /// required field); the message carries serde-saphyr's position and field name.
    #[error("parsing configuration {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The file parsed but some values are invalid; all of them are listed.
    #[error("invalid configuration {path}: {}", join_errors(.errors))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every invalid field.
        errors: Vec<FieldError>,
    },
}

/// Largest configuration or tenant file read: 1 MiB, the most a ConfigMap (where both are
/// mounted) holds, so a wrong path such as `/dev/zero` is refused instead of filling memory.
pub(crate) const FILE_LIMIT: u64 = 1 << 20;

/// The text of `path`, at most [`FILE_LIMIT`] bytes.
///
/// Errors: [`ConfigError::Read`] when it cannot be read, is not UTF-8 or is larger.
fn read_limited(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read as _;
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(FILE_LIMIT + 1).read_to_string(&mut text))
        .map_err(read)?;
    if text.len() as u64 > FILE_LIMIT {
        return Err(read(std::io::Error::other(
            "larger than 1 MiB, a ConfigMap's limit",
        )));
    }
    Ok(text)
}

fn join_errors(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Provider defaults, whichever provider they come from (borrowed view).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProviderDefaults<'a> {
    /// CloudProfile name.
    pub cloud_profile: &'a str,
    /// Default machine image.
    pub machine_image: &'a MachineImageConfig,
    /// Default root volume.
    pub volume: Option<&'a VolumeConfig>,
}

impl Config {
    /// Reads, parses and validates the configuration file at `path`.
    ///
    /// Errors: [`ConfigError::Read`] (I/O), [`ConfigError::Parse`] (YAML or shape, e.g. an
    /// unknown field), [`ConfigError::Invalid`] (values; every bad field listed).
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = read_limited(path)?;
        Self::parse(&text, path)
    }

    fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut errors = config.read_tenants_file(path)?;
        errors.extend(config.validate());
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                errors,
            })
        }
    }

    /// Adds the tenants of `auditLog.tenantsFile` (relative to the directory of
    /// `config_path`) to `auditLog.tenants`; returns the regions listed in both.
    ///
    /// Errors: the file cannot be read ([`ConfigError::Read`]) or is not a tenant map
    /// ([`ConfigError::Parse`], naming the file).
    fn read_tenants_file(&mut self, config_path: &Path) -> Result<Vec<FieldError>, ConfigError> {
        let Some(audit) = self.audit_log.as_mut() else {
            return Ok(Vec::new());
        };
        let Some(file) = audit.tenants_file.clone() else {
            return Ok(Vec::new());
        };
        let file = config_path
            .parent()
            .map_or_else(|| file.clone(), |dir| dir.join(&file));
        let text = read_limited(&file)?;
        let tenants: AuditLogTenants =
            serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
                path: file.clone(),
                message: e.to_string(),
            })?;
        let mut errors = Vec::new();
        for (provider, regions) in tenants {
            let known = audit.tenants.entry(provider.clone()).or_default();
            for (region, tenant) in regions {
                match known.entry(region) {
                    std::collections::btree_map::Entry::Occupied(e) => errors.push(FieldError {
                        field: format!("auditLog.tenants.{provider}.{}", e.key()),
                        message: format!("also in auditLog.tenantsFile {}", file.display()),
                    }),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(tenant);
                    }
                }
            }
        }
        Ok(errors)
    }

    /// Checks every value; returns all problems found (empty when valid).
    pub(crate) fn validate(&self) -> Vec<FieldError> {
        let mut v = Validator::default();
        self.validate_gardener_and_kubernetes(&mut v);
        self.validate_providers(&mut v);
        self.validate_maintenance_and_dns(&mut v);
        self.validate_kubeconfig_and_seeds(&mut v);
        self.validate_token_and_workers(&mut v);
        self.validate_audit_log(&mut v);
        v.errors
    }

    /// `gardener.project`, `kubernetes.defaultVersion`, `kubernetes.defaultOidc`.
    fn validate_gardener_and_kubernetes(&self, v: &mut Validator) {
        if !is_dns_label(&self.gardener.project) {
            v.err(
                "gardener.project",
                "must be a DNS label (lowercase letters, digits, '-', at most 63 characters)",
            );
        }
        let k = &self.kubernetes;
        if super::version::parse_version(&k.default_version).is_none() {
            v.err(
                "kubernetes.defaultVersion",
                format!(
                    "{:?} is not a version MAJOR.MINOR.PATCH (e.g. \"1.31.4\")",
                    k.default_version
                ),
            );
        }
        if let Some(oidc) = &k.default_oidc {
            let p = "kubernetes.defaultOidc";
            v.non_empty(&format!("{p}.clientID"), &oidc.client_id);
            if !oidc.issuer_url.starts_with("https://") {
                v.err(&format!("{p}.issuerURL"), "must be an https:// URL");
            }
            v.non_empty(&format!("{p}.groupsClaim"), &oidc.groups_claim);
            v.non_empty(&format!("{p}.usernameClaim"), &oidc.username_claim);
            v.non_empty(&format!("{p}.usernamePrefix"), &oidc.username_prefix);
            if oidc.signing_algs.is_empty() || oidc.signing_algs.iter().any(|a| a.is_empty()) {
                v.err(
                    &format!("{p}.signingAlgs"),
                    "must list at least one algorithm, none empty",
                );
            }
        }
    }

    /// At least one provider; each configured provider's defaults; OpenStack's extras.
    fn validate_providers(&self, v: &mut Validator) {
        let p = &self.providers;
        if p.aws.is_none() && p.azure.is_none() && p.gcp.is_none() && p.openstack.is_none() {
            v.err(
                "providers",
                "at least one of aws, azure, gcp, openstack must be configured",
            );
        }
        for name in super::provider::SUPPORTED_PROVIDERS {
            if let Some(d) = self.provider_defaults(name) {
                let base = format!("providers.{name}");
                v.non_empty(&format!("{base}.cloudProfile"), d.cloud_profile);
                v.token(&format!("{base}.machineImage.name"), &d.machine_image.name);
                v.token(
                    &format!("{base}.machineImage.version"),
                    &d.machine_image.version,
                );
                if let Some(vol) = d.volume {
                    if let Some(t) = &vol.type_ {
                        v.token(&format!("{base}.volume.type"), t);
                    }
                    if !is_quantity(&vol.size) {
                        v.err(
                            &format!("{base}.volume.size"),
                            format!(
                                "{:?} is not a Kubernetes quantity (e.g. \"50Gi\")",
                                vol.size
                            ),
                        );
                    }
                }
            }
        }
        if let Some(os) = &p.openstack {
            v.non_empty(
                "providers.openstack.floatingPoolName",
                &os.floating_pool_name,
            );
            v.non_empty(
                "providers.openstack.loadBalancerProvider",
                &os.load_balancer_provider,
            );
        }
    }

    /// `maintenance` windows and `dns`.
    fn validate_maintenance_and_dns(&self, v: &mut Validator) {
        if let Some(m) = &self.maintenance {
            if let Some(w) = &m.time_window {
                v.window("maintenance.timeWindow", w);
            }
            for (region, w) in &m.by_region {
                if region.is_empty() {
                    v.err("maintenance.byRegion", "region keys must not be empty");
                }
                v.window(&format!("maintenance.byRegion.{region}"), w);
            }
        }
        if let Some(dns) = &self.dns {
            if !is_dns_name(&dns.domain) {
                v.err(
                    "dns.domain",
                    format!("{:?} is not a DNS domain name", dns.domain),
                );
            }
            if let Some(pr) = &dns.provider {
                v.token("dns.provider.type", &pr.type_);
                v.token("dns.provider.secretName", &pr.secret_name);
            }
        }
    }

    /// `kubeconfig` lifetime and rotation; `seedRegions`.
    fn validate_kubeconfig_and_seeds(&self, v: &mut Validator) {
        let kc = &self.kubeconfig;
        if kc.expiration_seconds < crate::api::ADMIN_KUBECONFIG_MIN_EXPIRATION_SECONDS {
            v.err(
                "kubeconfig.expirationSeconds",
                format!(
                    "must be at least {} (Gardener's minimum), got {}",
                    crate::api::ADMIN_KUBECONFIG_MIN_EXPIRATION_SECONDS,
                    kc.expiration_seconds
                ),
            );
        }
        if !(kc.rotation_fraction > 0.0 && kc.rotation_fraction < 1.0) {
            v.err(
                "kubeconfig.rotationFraction",
                format!(
                    "must be between 0 and 1 (exclusive), got {}",
                    kc.rotation_fraction
                ),
            );
        }
        for (region, seed) in &self.seed_regions {
            if region.is_empty() || seed.is_empty() {
                v.err(
                    "seedRegions",
                    format!("{region:?} -> {seed:?}: keys and values must not be empty"),
                );
            }
        }
    }

    /// `kubernetes.maxTokenExpiration`, feature gate and runtime config keys, `workers`,
    /// `tolerations`.
    fn validate_token_and_workers(&self, v: &mut Validator) {
        let k = &self.kubernetes;
        for (field, map) in [
            (
                "kubernetes.featureGates.kubeAPIServer",
                &k.feature_gates.kube_api_server,
            ),
            ("kubernetes.featureGates.kubelet", &k.feature_gates.kubelet),
            ("kubernetes.runtimeConfig", &k.runtime_config),
        ] {
            for key in map.keys() {
                v.token(&format!("{field}[{key:?}]"), key);
            }
        }
        for (region, tolerations) in &self.tolerations {
            if region.is_empty() {
                v.err("tolerations", "region keys must not be empty");
            }
            for (i, t) in tolerations.iter().enumerate() {
                v.token(&format!("tolerations.{region}[{i}].key"), &t.key);
            }
        }
        if let Some(t) = &self.kubernetes.max_token_expiration {
            let (min, max) = TOKEN_EXPIRATION_BOUNDS;
            match super::duration::parse_go_duration(t) {
                Some(secs) if (min..=max).contains(&secs) => {}
                Some(_) => v.err(
                    "kubernetes.maxTokenExpiration",
                    format!("{t:?} must be between 720h and 2160h (30 to 90 days)"),
                ),
                None => v.err(
                    "kubernetes.maxTokenExpiration",
                    format!(
                        "{t:?} is not a duration of whole hours/minutes/seconds (e.g. \"720h\")"
                    ),
                ),
            }
        }
        let w = &self.workers;
        if super::duration::parse_go_duration(&w.machine_drain_timeout).is_none() {
            v.err(
                "workers.machineDrainTimeout",
                format!(
                    "{:?} is not a duration of whole hours/minutes/seconds (e.g. \"15m\")",
                    w.machine_drain_timeout
                ),
            );
        }
        if w.max_evict_retries < 0 {
            v.err(
                "workers.maxEvictRetries",
                format!("must be at least 0, got {}", w.max_evict_retries),
            );
        }
    }

    /// `auditLog`: the policy ConfigMap name and every tenant.
    fn validate_audit_log(&self, v: &mut Validator) {
        let Some(a) = &self.audit_log else {
            return;
        };
        v.token("auditLog.policyConfigMapName", &a.policy_config_map_name);
        for (provider, regions) in &a.tenants {
            if !super::provider::SUPPORTED_PROVIDERS.contains(&provider.as_str()) {
                v.err(
                    &format!("auditLog.tenants.{provider}"),
                    "not a supported provider (aws, azure, gcp, openstack)",
                );
            }
            for (region, t) in regions {
                let p = format!("auditLog.tenants.{provider}.{region}");
                if region.is_empty() {
                    v.err(
                        &format!("auditLog.tenants.{provider}"),
                        "region keys must not be empty",
                    );
                }
                v.token(&format!("{p}.tenantID"), &t.tenant_id);
                v.token(&format!("{p}.secretName"), &t.secret_name);
                let url_ok = t.service_url.parse::<http::Uri>().is_ok_and(|u| {
                    matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
                });
                if !url_ok {
                    v.err(
                        &format!("{p}.serviceURL"),
                        format!("{:?} is not an http(s) URL", t.service_url),
                    );
                }
            }
        }
    }

    /// The Gardener project namespace, `garden-<project>`.
    pub(crate) fn namespace(&self) -> String {
        format!("garden-{}", self.gardener.project)
    }

    /// The defaults of provider `name` (`aws`, `azure`, `gcp`, `openstack`), if configured.
    pub(crate) fn provider_defaults(&self, name: &str) -> Option<ProviderDefaults<'_>> {
        let p = &self.providers;
        match name {
            "aws" => p.aws.as_ref().map(|c| ProviderDefaults {
                cloud_profile: &c.cloud_profile,
                machine_image: &c.machine_image,
                volume: c.volume.as_ref(),
            }),
            "azure" => p.azure.as_ref().map(ProviderConfig::defaults),
            "gcp" => p.gcp.as_ref().map(ProviderConfig::defaults),
            "openstack" => p.openstack.as_ref().map(|c| ProviderDefaults {
                cloud_profile: &c.cloud_profile,
                machine_image: &c.machine_image,
                volume: c.volume.as_ref(),
            }),
            _ => None,
        }
    }

    /// The maintenance window for Shoot `region` (`byRegion` entry, else `timeWindow`), if
    /// one is configured.
    pub(crate) fn maintenance_window(&self, region: &str) -> Option<&MaintenanceTimeWindow> {
        let m = self.maintenance.as_ref()?;
        m.by_region.get(region).or(m.time_window.as_ref())
    }

    /// `maxTokenExpiration` in seconds: the configured value, else 30 days.
    pub(crate) fn max_token_expiration_seconds(&self) -> u64 {
        self.kubernetes
            .max_token_expiration
            .as_deref()
            .and_then(super::duration::parse_go_duration)
            .unwrap_or(TOKEN_EXPIRATION_BOUNDS.0)
    }

    /// The workers' `machineDrainTimeout` in seconds (validated at start-up).
    pub(crate) fn machine_drain_timeout_seconds(&self) -> u64 {
        super::duration::parse_go_duration(&self.workers.machine_drain_timeout).unwrap_or(15 * 60)
    }

    /// The audit log tenant of provider `provider` in Shoot region `region`, if configured.
    pub(crate) fn audit_log_tenant(&self, provider: &str, region: &str) -> Option<&AuditLogTenant> {
        self.audit_log.as_ref()?.tenants.get(provider)?.get(region)
    }

    /// The seed region label value for Shoot `region` (`seedRegions` entry, else the region).
    pub(crate) fn seed_region<'a>(&'a self, region: &'a str) -> &'a str {
        self.seed_regions
            .get(region)
            .map(String::as_str)
            .unwrap_or(region)
    }

    /// How long after issuing an admin kubeconfig it should be renewed:
    /// `expirationSeconds × rotationFraction`.
    pub(crate) fn kubeconfig_rotation_after(&self) -> Duration {
        Duration::from_secs_f64(
            self.kubeconfig.expiration_seconds as f64 * self.kubeconfig.rotation_fraction,
        )
    }
}

impl ProviderConfig {
    fn defaults(&self) -> ProviderDefaults<'_> {
        ProviderDefaults {
            cloud_profile: &self.cloud_profile,
            machine_image: &self.machine_image,
            volume: self.volume.as_ref(),
        }
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
}

impl Validator {
    fn err(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.to_string(),
            message: message.into(),
        });
    }

    fn non_empty(&mut self, field: &str, value: &str) {
        if value.trim().is_empty() {
            self.err(field, "must not be empty");
        }
    }

    /// Non-empty and without whitespace (names, versions, types).
    fn token(&mut self, field: &str, value: &str) {
        if value.is_empty() {
            self.err(field, "must not be empty");
        } else if value.chars().any(char::is_whitespace) {
            self.err(field, format!("{value:?} must not contain whitespace"));
        }
    }

    fn window(&mut self, field: &str, w: &MaintenanceTimeWindow) {
        let begin = parse_window_time(&w.begin);
        let end = parse_window_time(&w.end);
        if begin.is_none() {
            self.err(
                &format!("{field}.begin"),
                format!(
                    "{:?} is not a time HHMMSS+ZZZZ (e.g. \"220000+0000\")",
                    w.begin
                ),
            );
        }
        if end.is_none() {
            self.err(
                &format!("{field}.end"),
                format!(
                    "{:?} is not a time HHMMSS+ZZZZ (e.g. \"230000+0000\")",
                    w.end
                ),
            );
        }
        if let (Some(b), Some(e)) = (begin, end) {
            let length = (e - b).rem_euclid(86_400);
            if !(MIN_WINDOW_SECONDS..=MAX_WINDOW_SECONDS).contains(&length) {
                self.err(
                    field,
                    format!(
                        "the window is {}m long; Gardener requires 30m to 6h",
                        length / 60
                    ),
                );
            }
        }
    }
}

/// Gardener's limits on the length of a maintenance window (30 minutes to 6 hours).
const MIN_WINDOW_SECONDS: i64 = 30 * 60;
const MAX_WINDOW_SECONDS: i64 = 6 * 3600;

/// Parses `HHMMSS+ZZZZ` (or `-ZZZZ`) into seconds after midnight UTC (may be negative or
/// ≥ 86400 before normalisation); `None` when malformed.
pub(crate) fn parse_window_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 11 || !(b[6] == b'+' || b[6] == b'-') {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = &s[r];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (h, m, sec) = (digits(0..2)?, digits(2..4)?, digits(4..6)?);
    let (zh, zm) = (digits(7..9)?, digits(9..11)?);
    if h > 23 || m > 59 || sec > 59 || zh > 14 || zm > 59 {
        return None;
    }
    let offset = (zh * 3600 + zm * 60) * if b[6] == b'+' { 1 } else { -1 };
    Some(h * 3600 + m * 60 + sec - offset)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_name(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A Kubernetes quantity as used for volume sizes: digits, optional fraction, optional
/// binary/decimal suffix.
fn is_quantity(s: &str) -> bool {
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    !number.is_empty()
        && number.starts_with(|c: char| c.is_ascii_digit())
        && number.matches('.').count() <= 1
        && [
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
        ]
        .contains(&suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses and validates configuration YAML held in memory (errors name `<string>`).
    fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("<string>"))
    }

    const MINIMAL: &str = r#"
gardener: {project: kyma-dev}
kubernetes: {defaultVersion: "1.31.4"}
providers:
  aws:
    cloudProfile: aws
    machineImage: {name: gardenlinux, version: "1592.1.0"}
"#;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = from_yaml(MINIMAL).unwrap();
        assert_eq!(c.namespace(), "garden-kyma-dev");
        assert_eq!(c.kubeconfig.expiration_seconds, 86_400);
        assert_eq!(c.kubeconfig.rotation_fraction, 0.6);
        assert_eq!(
            c.kubeconfig_rotation_after(),
            Duration::from_secs_f64(86_400.0 * 0.6)
        );
        assert!(c.provider_defaults("azure").is_none());
        assert_eq!(c.provider_defaults("aws").unwrap().cloud_profile, "aws");
        assert_eq!(c.maintenance_window("eu-central-1"), None);
        assert_eq!(c.seed_region("eu-central-1"), "eu-central-1");
    }

    #[test]
    fn an_endless_or_oversized_file_is_refused_at_the_limit() {
        let err = Config::load("/dev/zero").unwrap_err().to_string();
        assert!(err.contains("/dev/zero") && err.contains("1 MiB"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        let text =
            format!("{MINIMAL}auditLog:\n  policyConfigMapName: p\n  tenantsFile: /dev/zero\n");
        std::fs::write(&config, text).unwrap();
        let err = Config::load(&config).unwrap_err().to_string();
        assert!(err.contains("/dev/zero") && err.contains("1 MiB"), "{err}");
    }

    #[test]
    fn seed_regions_map_a_shoot_region_to_its_seed_label() {
        let text = format!("{MINIMAL}seedRegions:\n  eastus: us-east\n");
        let c = Config::parse(&text, Path::new("t.yaml")).unwrap();
        assert_eq!(c.seed_region("eastus"), "us-east");
        assert_eq!(c.seed_region("westeurope"), "westeurope");
    }

    #[test]
    fn unknown_field_is_a_parse_error_naming_it() {
        let text = MINIMAL.replace("cloudProfile: aws", "cloudProfile: aws\n    colour: red");
        let err = from_yaml(&text).unwrap_err();
        assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn every_invalid_field_is_named() {
        let text = r#"
gardener: {project: Kyma_Dev}
kubernetes: {defaultVersion: "latest"}
providers:
  aws:
    cloudProfile: ""
    machineImage: {name: gardenlinux, version: ""}
    volume: {type: gp3, size: fifty}
  openstack:
    cloudProfile: cc
    machineImage: {name: gardenlinux, version: "1.0"}
    floatingPoolName: ""
    loadBalancerProvider: f5
maintenance:
  timeWindow: {begin: "250000+0000", end: "230000+0000"}
  byRegion:
    eastus: {begin: "220000+0000", end: "220500+0000"}
dns: {domain: "not a domain"}
kubeconfig: {expirationSeconds: 60, rotationFraction: 1.5}
"#;
        let err = from_yaml(text).unwrap_err();
        let ConfigError::Invalid { errors, .. } = &err else {
            panic!("{err}")
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "gardener.project",
            "kubernetes.defaultVersion",
            "providers.aws.cloudProfile",
            "providers.aws.machineImage.version",
            "providers.aws.volume.size",
            "providers.openstack.floatingPoolName",
            "maintenance.timeWindow.begin",
            "maintenance.byRegion.eastus",
            "dns.domain",
            "kubeconfig.expirationSeconds",
            "kubeconfig.rotationFraction",
        ] {
            assert!(fields.contains(&f), "{f} not reported in: {err}");
        }
        assert!(
            err.to_string()
                .contains("providers.aws.machineImage.version: must not be empty"),
            "{err}"
        );
    }

    #[test]
    fn kim_settings_default_and_are_validated_by_path() {
        let c = from_yaml(MINIMAL).unwrap();
        assert_eq!(c.max_token_expiration_seconds(), 30 * 86_400);
        assert_eq!(c.machine_drain_timeout_seconds(), 15 * 60);
        assert_eq!(c.workers.max_evict_retries, 2);
        assert!(c.audit_log.is_none());
        let text = format!(
            "{MINIMAL}{}",
            r#"
workers: {machineDrainTimeout: 15 minutes, maxEvictRetries: -1}
auditLog:
  policyConfigMapName: ""
  tenants:
    alicloud: {}
    aws:
      eu-central-1: {tenantID: "", serviceURL: "ftp://x", secretName: s}
"#
        )
        .replace(
            "defaultVersion: \"1.31.4\"}",
            "defaultVersion: \"1.31.4\", maxTokenExpiration: 24h}",
        );
        let err = from_yaml(&text).unwrap_err();
        let ConfigError::Invalid { errors, .. } = &err else {
            panic!("{err}")
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "kubernetes.maxTokenExpiration",
            "workers.machineDrainTimeout",
            "workers.maxEvictRetries",
            "auditLog.policyConfigMapName",
            "auditLog.tenants.alicloud",
            "auditLog.tenants.aws.eu-central-1.tenantID",
            "auditLog.tenants.aws.eu-central-1.serviceURL",
        ] {
            assert!(fields.contains(&f), "{f} not reported in: {err}");
        }
        let ok = format!(
            "{MINIMAL}auditLog:\n  policyConfigMapName: p\n  tenants:\n    aws:\n      eu-central-1: {{tenantID: t, serviceURL: \"https://a.example.com:8081\", secretName: s}}\n"
        );
        let c = from_yaml(&ok).unwrap();
        assert!(c.audit_log.as_ref().unwrap().mandatory);
        assert_eq!(
            c.audit_log_tenant("aws", "eu-central-1")
                .unwrap()
                .secret_name,
            "s"
        );
        assert!(c.audit_log_tenant("aws", "us-east-1").is_none());
    }

    #[test]
    fn kims_tenant_file_is_read_next_to_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tenants.json"),
            r#"{"aws": {"eu-central-1": {"tenantID": "t1", "serviceURL": "https://a.example.com:3001",
                "secretName": "s1"}, "us-east-1": {"tenantID": "t2",
                "serviceURL": "https://b.example.com", "secretName": "s2",
                "readCredsSecretName": "r"}}}"#,
        )
        .unwrap();
        let config = dir.path().join("config.yaml");
        let with = |extra: &str| {
            format!(
                "{MINIMAL}auditLog:\n  policyConfigMapName: p\n  tenantsFile: tenants.json\n{extra}"
            )
        };
        std::fs::write(&config, with("")).unwrap();
        let c = Config::load(&config).unwrap();
        assert_eq!(
            c.audit_log_tenant("aws", "eu-central-1").unwrap().tenant_id,
            "t1"
        );
        assert_eq!(
            c.audit_log_tenant("aws", "us-east-1").unwrap().secret_name,
            "s2"
        );
        std::fs::write(
            &config,
            with("  tenants: {aws: {us-east-1: {tenantID: x, serviceURL: \"https://x\", secretName: x}}}\n"),
        )
        .unwrap();
        let err = Config::load(&config).unwrap_err();
        assert!(
            err.to_string()
                .contains("auditLog.tenants.aws.us-east-1: also in auditLog.tenantsFile"),
            "{err}"
        );
        std::fs::write(dir.path().join("tenants.json"), "[1, 2]").unwrap();
        std::fs::write(&config, with("")).unwrap();
        let err = Config::load(&config).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Parse { path, .. } if path.ends_with("tenants.json")),
            "{err}"
        );
    }

    #[test]
    fn no_provider_is_invalid() {
        let text =
            "gardener: {project: p}\nkubernetes: {defaultVersion: \"1.30.1\"}\nproviders: {}\n";
        let err = from_yaml(text).unwrap_err();
        assert!(err.to_string().contains("providers: at least one"), "{err}");
    }

    #[test]
    fn window_times() {
        assert_eq!(parse_window_time("220000+0000"), Some(22 * 3600));
        assert_eq!(parse_window_time("010000+0200"), Some(-3600));
        assert_eq!(parse_window_time("010000-0130"), Some(9000));
        for bad in ["2200+0000", "240000+0000", "220000 0000", "22000a+0000", ""] {
            assert_eq!(parse_window_time(bad), None, "{bad}");
        }
        // Wrapping midnight is fine: 23:00 → 01:00 is two hours.
        let mut v = Validator::default();
        v.window(
            "w",
            &MaintenanceTimeWindow {
                begin: "230000+0000".into(),
                end: "010000+0000".into(),
            },
        );
        assert!(v.errors.is_empty(), "{:?}", v.errors);
    }

    #[test]
    fn quantities() {
        for ok in ["50Gi", "1", "1.5Ti", "100G"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "50 Gi", "fifty", "1.2.3Gi", "50gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
