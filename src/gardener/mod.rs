//! Gardener: Runtime → Shoot conversion, provider configs, error classification, configuration.
//!
//! Pure code (no I/O except [`config::Config::load`] reading its file and KIM's audit log
//! tenant file):
//! - [`config`]: the converter configuration file (defaults per provider, maintenance window,
//!   DNS, audit log tenants, token lifetime, worker defaults, kubeconfig lifetime), validated
//!   at start-up;
//! - `convert`: [`runtime_to_shoot`], `runtime_to_shoot_for_update`,
//!   `apply_no_downgrade`, the structured-authentication ConfigMap for OIDC — the Shoot KIM
//!   writes for the same Runtime (docs/reconciler.md, "Shoots equal to KIM's");
//! - `worker_rules`: KIM's rules for every worker pool (`maxPods` caps,
//!   machine-controller-manager defaults, gVisor `net-raw`);
//! - `duration`: Go duration strings as KIM writes them;
//! - `provider`: AWS/Azure/GCP/OpenStack `infrastructureConfig` and `controlPlaneConfig`,
//!   zones → subnets;
//! - `errors`: a Shoot's `lastOperation`/`lastErrors` → in progress / succeeded / failed
//!   (retryable or terminal).
//!
//! The Shoot and `AdminKubeconfigRequest` types themselves are in [`crate::api::shoot`].

pub mod config;
pub(crate) mod convert;
mod duration;
mod errors;
mod provider;
mod version;
mod worker_rules;

pub use config::{Config, ConfigError};
pub(crate) use convert::{
    ConversionError, check_names_shoot, runtime_to_shoot, runtime_to_shoot_for_update,
    structured_authentication_config,
};
pub(crate) use errors::{OperationType, ShootProgress, classify_shoot};

#[cfg(test)]
mod tests;
