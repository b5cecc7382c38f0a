//! What the simulated gardenlet ([`crate::gardenlet`]) plays for a Shoot: the outcome of each
//! operation ([`ShootScript`], [`Outcome`]), and the names Gardener gives the finalizer and
//! annotations it acts on.

use std::collections::VecDeque;

/// Finalizer Gardener puts on every Shoot.
pub const SHOOT_FINALIZER: &str = "gardener";
/// Annotation that must be `"true"` before a Shoot may be deleted.
pub const CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Annotation `gardener.cloud/operation`; value `retry` restarts a failed operation.
pub const OPERATION_ANNOTATION: &str = "gardener.cloud/operation";

/// How a simulated operation ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `state: Succeeded`, `progress: 100`, `lastErrors` cleared.
    Succeeded,
    /// `state: Failed` with `lastErrors[].codes` (terminal until spec change or retry annotation).
    Failed {
        /// Gardener error codes, e.g. `ERR_INFRA_UNAUTHORIZED`, `ERR_INFRA_QUOTA_EXCEEDED`.
        codes: Vec<String>,
        /// `lastErrors[].description` and `lastOperation.description`.
        description: String,
    },
    /// `state: Error` with `lastErrors[].codes`; the operation is retried at the next step.
    Error {
        /// Gardener error codes.
        codes: Vec<String>,
        /// Description.
        description: String,
    },
}

impl Outcome {
    /// `Failed` with these codes and a generic description.
    pub fn failed(codes: &[&str]) -> Self {
        Outcome::Failed {
            codes: codes.iter().map(|c| c.to_string()).collect(),
            description: format!("simulated failure: {}", codes.join(", ")),
        }
    }

    /// `Error` (retried automatically) with these codes.
    pub fn error(codes: &[&str]) -> Self {
        Outcome::Error {
            codes: codes.iter().map(|c| c.to_string()).collect(),
            description: format!("simulated error: {}", codes.join(", ")),
        }
    }
}

/// Outcomes of successive `Create` operations (first attempt, retries…), consumed in order;
/// once the list is exhausted, and for every `Reconcile` and `Delete`, operations succeed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShootScript {
    /// The outcomes still to come.
    pub create: VecDeque<Outcome>,
}

impl ShootScript {
    /// The first `Create` fails (terminally) with these codes.
    pub fn create_fails(codes: &[&str]) -> Self {
        Self {
            create: VecDeque::from([Outcome::failed(codes)]),
        }
    }

    /// Appends a `Create` outcome.
    #[must_use]
    pub fn then_create(mut self, o: Outcome) -> Self {
        self.create.push_back(o);
        self
    }
}
