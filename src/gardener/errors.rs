//! Classification of a Shoot's `status.lastOperation` and `status.lastErrors` into what the
//! reconciler needs (docs/reconciler.md, step 4): still in progress, succeeded, or failed —
//! and if failed, whether waiting/retrying can help ([`ShootProgress::Failed::retryable`]) or
//! the Runtime must go to `Failed` until its spec changes.
//!
//! States (Gardener `LastOperationState`): `Processing`, `Pending`, `Aborted` and `Error`
//! (Gardener retries on its own) are in progress; `Succeeded` is done; `Failed` (Gardener gives
//! up) is classified by the error codes of `lastErrors`. A Shoot whose
//! `status.observedGeneration` is behind `metadata.generation` has not seen the last spec
//! change yet, so its last operation says nothing about it: in progress
//! ([`classify_shoot`]).
//!
//! Error codes — Gardener `pkg/apis/core/v1beta1/types_common.go` lists eleven; the decisions
//! are docs/reconciler.md's step 4 and upstream KIM's (`pkg/gardener/errors.go`: only the two
//! credential codes are terminal, unknown codes are retryable):
//!
//! | code | Gardener's view | kim | why |
//! |---|---|---|---|
//! | `ERR_INFRA_UNAUTHENTICATED` | non-retryable | **terminal** | the credentials are invalid; only new credentials (a spec/secret change) help |
//! | `ERR_INFRA_UNAUTHORIZED` | non-retryable | **terminal** | the credentials lack permissions; same |
//! | `ERR_INFRA_QUOTA_EXCEEDED` | non-retryable | retryable | quota gets freed or raised without a spec change (KIM) |
//! | `ERR_INFRA_RATE_LIMITS_EXCEEDED` | retryable | retryable | throttling passes |
//! | `ERR_INFRA_DEPENDENCIES` | non-retryable | retryable | dependent objects are typically removed in time, notably during deletion (KIM) |
//! | `ERR_RETRYABLE_INFRA_DEPENDENCIES` | retryable | retryable | by definition |
//! | `ERR_INFRA_RESOURCES_DEPLETED` | retryable | retryable | hyperscaler capacity comes back |
//! | `ERR_CLEANUP_CLUSTER_RESOURCES` | retryable | retryable | resources stuck in deletion get cleaned up |
//! | `ERR_CONFIGURATION_PROBLEM` | non-retryable | retryable | often caused by transient state (KIM) |
//! | `ERR_RETRYABLE_CONFIGURATION_PROBLEM` | retryable | retryable | by definition |
//! | `ERR_PROBLEMATIC_WEBHOOK` | non-retryable | retryable | a webhook in the cluster gets fixed without a Runtime change (KIM) |
//! | any other code | — | retryable | codes added by newer Gardener versions must not make runtimes fail for good (KIM) |
//!
//! Combining: a `Failed` operation is terminal when any error carries a terminal code, or when
//! there are no `lastErrors` at all (Gardener failed without telling why; KIM does the same);
//! otherwise retryable (also when errors carry no codes). Gardener does not retry a `Failed`
//! operation by itself: to retry, the reconciler annotates the Shoot
//! `gardener.cloud/operation: retry` ([`crate::api::ANNOTATION_OPERATION`]).

use crate::api::{LastError, LastOperation, Shoot};

/// What kind of operation Gardener ran (Gardener `LastOperationType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OperationType {
    /// The Shoot is being created.
    Create,
    /// The Shoot is being reconciled (spec change, maintenance, periodic).
    Reconcile,
    /// The Shoot is being deleted.
    Delete,
    /// The control plane is moving to another seed.
    Migrate,
    /// The control plane is being restored after a migration.
    Restore,
    /// Any other value (kept verbatim).
    Other(String),
}

impl OperationType {
    /// Parses Gardener's `lastOperation.type`.
    pub(crate) fn parse(s: &str) -> OperationType {
        match s {
            "Create" => OperationType::Create,
            "Reconcile" => OperationType::Reconcile,
            "Delete" => OperationType::Delete,
            "Migrate" => OperationType::Migrate,
            "Restore" => OperationType::Restore,
            other => OperationType::Other(other.to_string()),
        }
    }
}

/// Where a Shoot's last operation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShootProgress {
    /// Gardener is still working (or has not reported yet, or has not seen the latest spec).
    InProgress {
        /// The running operation; `None` when Gardener has reported none yet.
        operation: Option<OperationType>,
        /// Gardener's state (`Processing`, `Pending`, `Error`, `Aborted`) or a note such as
        /// `NotObserved`.
        state: String,
        /// Progress in percent (0–100).
        progress: i32,
        /// Gardener's description of the operation.
        description: String,
    },
    /// The operation finished successfully.
    Succeeded {
        /// Which operation.
        operation: OperationType,
    },
    /// The operation failed and Gardener gave up.
    Failed {
        /// Which operation.
        operation: OperationType,
        /// True when the reconciler should keep the Runtime `Pending` and retry; false when
        /// the Runtime goes `Failed` (see the module table).
        retryable: bool,
        /// All error codes of `lastErrors`, in order, duplicates removed.
        codes: Vec<String>,
        /// The errors' descriptions numbered `1) … 2) …` (as KIM), or the operation's own
        /// description when there are no errors.
        description: String,
    },
}

/// Error codes that make a failed operation terminal.
pub(crate) const TERMINAL_CODES: [&str; 2] =
    ["ERR_INFRA_UNAUTHENTICATED", "ERR_INFRA_UNAUTHORIZED"];

/// Whether a single error code is retryable (everything but [`TERMINAL_CODES`]).
pub(crate) fn is_retryable_code(code: &str) -> bool {
    !TERMINAL_CODES.contains(&code)
}

/// Whether a failed operation with these `lastErrors` is retryable: at least one error and
/// no terminal code (upstream KIM `IsRetryable`).
pub(crate) fn is_retryable(last_errors: &[LastError]) -> bool {
    !last_errors.is_empty()
        && error_codes(last_errors)
            .iter()
            .all(|c| is_retryable_code(c))
}

/// All codes of `last_errors`, in order, without duplicates.
pub(crate) fn error_codes(last_errors: &[LastError]) -> Vec<String> {
    let mut codes: Vec<String> = Vec::new();
    for c in last_errors.iter().flat_map(|e| e.codes.iter().flatten()) {
        if !codes.contains(c) {
            codes.push(c.clone());
        }
    }
    codes
}

/// The errors' descriptions as `1) first 2) second` (upstream `CombineErrorDescriptions`,
/// without its trailing space).
pub(crate) fn combine_descriptions(last_errors: &[LastError]) -> String {
    last_errors
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}) {}", i + 1, e.description))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Classifies a last operation and its errors (see the module documentation).
pub(crate) fn classify(
    last_operation: Option<&LastOperation>,
    last_errors: &[LastError],
) -> ShootProgress {
    let Some(op) = last_operation else {
        return ShootProgress::InProgress {
            operation: None,
            state: "NotReported".into(),
            progress: 0,
            description: "Gardener has not reported an operation yet".into(),
        };
    };
    let operation = OperationType::parse(&op.type_);
    match op.state.as_str() {
        "Succeeded" => ShootProgress::Succeeded { operation },
        "Failed" => ShootProgress::Failed {
            operation,
            retryable: is_retryable(last_errors),
            codes: error_codes(last_errors),
            description: if last_errors.is_empty() {
                op.description.clone()
            } else {
                combine_descriptions(last_errors)
            },
        },
        // Processing, Pending, Error (Gardener retries), Aborted, and anything new.
        state => ShootProgress::InProgress {
            operation: Some(operation),
            state: state.to_string(),
            progress: op.progress,
            description: op.description.clone(),
        },
    }
}

/// Classifies a Shoot: [`classify`] of its status, except that a Shoot whose
/// `status.observedGeneration` is behind `metadata.generation` is in progress (state
/// `NotObserved`) — Gardener has not acted on the latest spec yet.
pub(crate) fn classify_shoot(shoot: &Shoot) -> ShootProgress {
    let status = shoot.status.as_ref();
    if let (Some(generation), Some(observed)) = (
        shoot.metadata.generation,
        status.and_then(|s| s.observed_generation),
    ) && observed < generation
    {
        return ShootProgress::InProgress {
            operation: status
                .and_then(|s| s.last_operation.as_ref())
                .map(|o| OperationType::parse(&o.type_)),
            state: "NotObserved".into(),
            progress: 0,
            description: format!(
                "Gardener has observed generation {observed}, the Shoot is at {generation}"
            ),
        };
    }
    classify(
        status.and_then(|s| s.last_operation.as_ref()),
        status.map(|s| s.last_errors.as_slice()).unwrap_or_default(),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// Every error code Gardener defines (`types_common.go`), with kim's decision: `true` =
    /// retryable. Codes not listed are retryable too.
    pub(in crate::gardener) const ERROR_CODES: [(&str, bool); 11] = [
        ("ERR_INFRA_UNAUTHENTICATED", false),
        ("ERR_INFRA_UNAUTHORIZED", false),
        ("ERR_INFRA_QUOTA_EXCEEDED", true),
        ("ERR_INFRA_RATE_LIMITS_EXCEEDED", true),
        ("ERR_INFRA_DEPENDENCIES", true),
        ("ERR_RETRYABLE_INFRA_DEPENDENCIES", true),
        ("ERR_INFRA_RESOURCES_DEPLETED", true),
        ("ERR_CLEANUP_CLUSTER_RESOURCES", true),
        ("ERR_CONFIGURATION_PROBLEM", true),
        ("ERR_RETRYABLE_CONFIGURATION_PROBLEM", true),
        ("ERR_PROBLEMATIC_WEBHOOK", true),
    ];

    fn op(type_: &str, state: &str) -> LastOperation {
        LastOperation {
            description: format!("{type_} {state}"),
            last_update_time: Time(Default::default()),
            progress: 42,
            state: state.into(),
            type_: type_.into(),
        }
    }

    fn err(desc: &str, codes: &[&str]) -> LastError {
        LastError {
            description: desc.into(),
            task_id: None,
            codes: Some(codes.iter().map(|c| c.to_string()).collect()),
            last_update_time: None,
        }
    }

    #[test]
    fn table_matches_is_retryable_code() {
        for (code, retryable) in ERROR_CODES {
            assert_eq!(is_retryable_code(code), retryable, "{code}");
            assert_eq!(is_retryable(&[err("x", &[code])]), retryable, "{code}");
        }
        assert!(is_retryable(&[err("x", &["ERR_SOMETHING_NEW"])]));
        assert!(is_retryable(&[err("no codes", &[])]));
        assert!(!is_retryable(&[]));
    }

    #[test]
    fn states() {
        for state in ["Processing", "Pending", "Error", "Aborted"] {
            assert!(
                matches!(
                    classify(Some(&op("Create", state)), &[]),
                    ShootProgress::InProgress {
                        operation: Some(OperationType::Create),
                        progress: 42,
                        ..
                    }
                ),
                "{state}"
            );
        }
        assert_eq!(
            classify(Some(&op("Reconcile", "Succeeded")), &[]),
            ShootProgress::Succeeded {
                operation: OperationType::Reconcile
            }
        );
        assert!(matches!(
            classify(None, &[]),
            ShootProgress::InProgress {
                operation: None,
                ..
            }
        ));
    }

    #[test]
    fn failed_mixture_is_terminal_and_lists_everything() {
        let errors = [
            err("quota", &["ERR_INFRA_QUOTA_EXCEEDED"]),
            err(
                "auth",
                &["ERR_INFRA_UNAUTHORIZED", "ERR_INFRA_QUOTA_EXCEEDED"],
            ),
        ];
        assert_eq!(
            classify(Some(&op("Create", "Failed")), &errors),
            ShootProgress::Failed {
                operation: OperationType::Create,
                retryable: false,
                codes: vec![
                    "ERR_INFRA_QUOTA_EXCEEDED".into(),
                    "ERR_INFRA_UNAUTHORIZED".into()
                ],
                description: "1) quota 2) auth".into(),
            }
        );
    }

    #[test]
    fn failed_without_errors_is_terminal_with_operation_description() {
        assert_eq!(
            classify(Some(&op("Delete", "Failed")), &[]),
            ShootProgress::Failed {
                operation: OperationType::Delete,
                retryable: false,
                codes: vec![],
                description: "Delete Failed".into(),
            }
        );
    }

    #[test]
    fn stale_observed_generation_is_in_progress() {
        let mut shoot = Shoot::new("s", Default::default());
        shoot.metadata.generation = Some(3);
        shoot.status = Some(crate::api::ShootStatus {
            last_operation: Some(op("Reconcile", "Succeeded")),
            observed_generation: Some(2),
            ..Default::default()
        });
        assert!(matches!(
            classify_shoot(&shoot),
            ShootProgress::InProgress { ref state, operation: Some(OperationType::Reconcile), .. } if state == "NotObserved"
        ));
        shoot.status.as_mut().unwrap().observed_generation = Some(3);
        assert!(matches!(
            classify_shoot(&shoot),
            ShootProgress::Succeeded { .. }
        ));
    }
}
