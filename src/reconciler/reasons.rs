//! The condition reasons this reconciler writes, by step (docs/reconciler.md). They are
//! names from the status table ([`crate::status::table::REASONS`]); a unit test checks that
//! each (type, reason, status) the reconciler uses is allowed by the built-in policy, so a
//! change of the table that the reconciler does not follow fails the build's tests, not a
//! write in production.

pub(crate) use crate::status::table::reasons::*;

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
