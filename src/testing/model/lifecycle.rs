//! The statuses a Runtime goes through under the reconciler: create, a spec update, deletion,
//! one write per step of docs/reconciler.md ("Steps and the status they write"). A pass that
//! runs several steps writes only the last one's status (docs/reconciler.md, "One status write
//! per pass"); each status here is one a pass ending after that step writes.

use super::runtime::Rt;
use crate::reconciler::status_update::{Cond, Update};
use crate::status::table::reasons::{
    ADMINISTRATORS_CONFIGURED, CONFIGURATION_COMPLETED, GARDENER_SHOOT_DELETED, INITIALISED,
    KUBECONFIG_CREATED, PENDING, PROCESSING, SHOOT_CREATION_COMPLETED,
};
use crate::status::table::types::{CONFIGURED, DEPROVISIONED, KUBECONFIG_READY, PROVISIONED};
use crate::status::{CondStatus, State};
use serde_json::Value;

/// The create → update → delete sequence for one Runtime manifest: the Runtime without status,
/// then the status of each step, 10 s apart, each built by [`Rt::set`] (the reconciler's
/// `next_status`). Ten objects:
///
/// | # | object | state | condition set |
/// |---|---|---|---|
/// | 0 | as created | — | — |
/// | 1 | | `Pending` | `Provisioned=Unknown/Initialised` (step 2) |
/// | 2 | | `Pending` | `Provisioned=Unknown/Pending` (step 3) |
/// | 3 | | `Pending` | `Provisioned=True/ShootCreationCompleted` (step 4) |
/// | 4 | | `Pending` | `KubeconfigReady=True/KubeconfigCreated` (step 5) |
/// | 5 | | `Ready` | `Configured=True/AdministratorsConfigured`, `provisioningCompleted` (step 6) |
/// | 6 | generation 2 | `Pending` | `Provisioned=Unknown/Processing` (update) |
/// | 7 | | `Pending` | `Provisioned=True/ConfigurationCompleted` |
/// | 8 | | `Ready` | `KubeconfigReady=True/KubeconfigCreated`, `Configured=True/AdministratorsConfigured` (5–6 again) |
/// | 9 | deletionTimestamp | `Terminating` | `Deprovisioned=Unknown/GardenerShootDeleted` (delete) |
///
/// The Shoot gone, the reconciler deletes the kubeconfig Secret and removes its finalizer
/// without a status write, so the sequence ends at 9.
pub fn lifecycle(sample: Value) -> Vec<Rt> {
    let mut seq = vec![Rt::new(sample)];
    for (change, update) in steps() {
        let last = seq.last().expect("the sequence starts with the sample");
        let next = match change {
            Change::None => last.clone(),
            Change::Spec => last.bump_generation(),
            Change::Deletion => last.deleting(),
        };
        seq.push(next.set(&update));
    }
    seq
}

/// What happened to the Runtime before a step's write.
enum Change {
    /// Nothing: the reconciler's next step.
    None,
    /// Its spec changed (`metadata.generation` one higher).
    Spec,
    /// It is being deleted (`metadata.deletionTimestamp` set).
    Deletion,
}

/// The steps of [`lifecycle`], in order, with the update each one asks the reconciler to write.
fn steps() -> Vec<(Change, Update)> {
    use CondStatus::{True as T, Unknown as U};
    let pending = |c| Update::new(State::Pending, vec![c]);
    vec![
        // Create (steps 2–6).
        (
            Change::None,
            pending(Cond::new(PROVISIONED, U, INITIALISED)),
        ),
        (Change::None, pending(Cond::new(PROVISIONED, U, PENDING))),
        (
            Change::None,
            pending(Cond::new(PROVISIONED, T, SHOOT_CREATION_COMPLETED)),
        ),
        (
            Change::None,
            pending(Cond::new(KUBECONFIG_READY, T, KUBECONFIG_CREATED)),
        ),
        (
            Change::None,
            Update::new(
                State::Ready,
                vec![Cond::new(CONFIGURED, T, ADMINISTRATORS_CONFIGURED)],
            )
            .completed(),
        ),
        // Update: the Shoot patched, Gardener done, steps 5–6 again in one pass.
        (Change::Spec, pending(Cond::new(PROVISIONED, U, PROCESSING))),
        (
            Change::None,
            pending(Cond::new(PROVISIONED, T, CONFIGURATION_COMPLETED)),
        ),
        (
            Change::None,
            Update::new(
                State::Ready,
                vec![
                    Cond::new(KUBECONFIG_READY, T, KUBECONFIG_CREATED),
                    Cond::new(CONFIGURED, T, ADMINISTRATORS_CONFIGURED),
                ],
            ),
        ),
        // Delete: the Shoot's deletion requested.
        (
            Change::Deletion,
            Update::new(
                State::Terminating,
                vec![Cond::new(DEPROVISIONED, U, GARDENER_SHOOT_DELETED)],
            ),
        ),
    ]
}
