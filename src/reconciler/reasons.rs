//! The condition reasons this reconciler writes, by step (spec `reconciler.md`). They are
//! names from the status table ([`crate::status::table::REASONS`]); a unit test checks that
//! each (type, reason, status) the reconciler uses is allowed by the built-in policy, so a
//! change of the table that the reconciler does not follow fails the build's tests, not a
//! write in production.

/// `Provisioned=Unknown`: Runtime accepted, nothing created yet (step 2).
pub const INITIALISED: &str = "Initialised";
/// `Provisioned=Unknown`: Shoot created / creation in progress / retryable Gardener failure.
pub const PENDING: &str = "Pending";
/// `Provisioned=True`: Gardener finished creating the Shoot.
pub const SHOOT_CREATION_COMPLETED: &str = "ShootCreationCompleted";
/// `Provisioned=Unknown`: Shoot update submitted or in progress.
pub const PROCESSING: &str = "Processing";
/// `Provisioned=True`: Shoot update finished.
pub const CONFIGURATION_COMPLETED: &str = "ConfigurationCompleted";
/// `Provisioned=False` / `Deprovisioned=False`: a Gardener API call failed (retried).
pub const GARDENER_ERR: &str = "GardenerErr";
/// `Provisioned=False`: Gardener reports that creation failed for good.
pub const CREATION_ERR: &str = "CreationErr";
/// `Provisioned=False`: the Runtime cannot be converted into a Shoot.
pub const CONVERSION_ERR: &str = "ConversionErr";
/// `Provisioned=False`: Gardener reports that the update failed for good.
pub const PROCESSING_ERR: &str = "ProcessingErr";
/// `KubeconfigReady=True`: kubeconfig Secret written or rotated.
pub const KUBECONFIG_CREATED: &str = "KubeconfigCreated";
/// `KubeconfigReady=False`: requesting the kubeconfig or writing the Secret failed.
pub const KUBERNETES_ERR: &str = "KubernetesErr";
/// `Configured=True`: administrators' bindings applied.
pub const ADMINISTRATORS_CONFIGURED: &str = "AdministratorsConfigured";
/// `Configured=False`: applying the bindings failed (retried).
pub const CONFIGURATION_ERROR: &str = "ConfigurationError";
/// `Deprovisioned=Unknown`: Shoot deletion requested / in progress; `False`: it failed.
pub const GARDENER_SHOOT_DELETED: &str = "GardenerShootDeleted";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::table::types::{CONFIGURED, DEPROVISIONED, KUBECONFIG_READY, PROVISIONED};
    use crate::status::{CondStatus, Policy};

    #[test]
    fn every_written_reason_is_in_the_table() {
        use CondStatus::{False as F, True as T, Unknown as U};
        let used: &[(&str, &str, CondStatus)] = &[
            (PROVISIONED, INITIALISED, U),
            (PROVISIONED, PENDING, U),
            (PROVISIONED, SHOOT_CREATION_COMPLETED, T),
            (PROVISIONED, PROCESSING, U),
            (PROVISIONED, CONFIGURATION_COMPLETED, T),
            (PROVISIONED, GARDENER_ERR, F),
            (PROVISIONED, CREATION_ERR, F),
            (PROVISIONED, CONVERSION_ERR, F),
            (PROVISIONED, PROCESSING_ERR, F),
            (KUBECONFIG_READY, KUBECONFIG_CREATED, T),
            (KUBECONFIG_READY, KUBERNETES_ERR, F),
            (CONFIGURED, ADMINISTRATORS_CONFIGURED, T),
            (CONFIGURED, CONFIGURATION_ERROR, F),
            (DEPROVISIONED, GARDENER_SHOOT_DELETED, U),
            (DEPROVISIONED, GARDENER_SHOOT_DELETED, F),
            (DEPROVISIONED, GARDENER_ERR, F),
        ];
        let policy = Policy::builtin();
        for (t, r, s) in used {
            let entry = policy
                .reason(t, r)
                .unwrap_or_else(|| panic!("{t}/{r} is not in the status table"));
            assert!(entry.statuses.contains(s), "{t}/{r} does not allow {s}");
        }
    }
}
