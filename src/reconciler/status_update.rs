//! Status updates of the reconciler: what a step asks to write ([`Update`]), the next status it
//! leads to, built the way `meta.SetStatusCondition` does ([`next_status`]), its check against
//! the status model (the same [`crate::status::evaluate`] the webhook uses — a denied write is a
//! bug in the reconciler, never sent), and whether anything changed (no change → no write, so a
//! resync writes nothing and status writes never loop). The write itself is
//! `Pass::set` (`pass.rs`).
//!
//! Named `status_update` to keep it apart from [`crate::status`], the status model it obeys.

use crate::api::{LastError, LastOperation, Runtime, RuntimeStatus};
use crate::status::{self, CondStatus, Facts, Policy, State, Violations};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// One condition to set: type, status, reason and an optional specific message (the table's
/// default message is used when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// Condition type (see [`crate::status::table::types`]).
    pub condition_type: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: CondStatus,
    /// Reason from the status table (see `super::reasons`).
    pub reason: &'static str,
    /// Specific message; the table's default message when `None`.
    pub message: Option<String>,
}

impl Cond {
    /// A condition with the table's default message.
    pub fn new(condition_type: &'static str, status: CondStatus, reason: &'static str) -> Cond {
        Cond {
            condition_type,
            status,
            reason,
            message: None,
        }
    }

    /// The same condition with a specific message (e.g. the error that caused it).
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Cond {
        self.message = Some(message.into());
        self
    }
}

/// A status update: the new state, the conditions to set (others are kept), and optionally
/// `provisioningCompleted: true` and the Shoot's last operation/errors.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// The new `status.state`.
    pub state: State,
    /// Conditions to set (by type; conditions of other types are kept).
    pub conditions: Vec<Cond>,
    /// Set `provisioningCompleted: true`.
    pub provisioning_completed: bool,
    /// The Shoot's `lastOperation` and `lastErrors` to copy, if any.
    pub shoot: Option<(Option<LastOperation>, Vec<LastError>)>,
}

impl Update {
    /// An update to `state` setting `conditions`.
    pub fn new(state: State, conditions: Vec<Cond>) -> Update {
        Update {
            state,
            conditions,
            provisioning_completed: false,
            shoot: None,
        }
    }

    /// Also set `provisioningCompleted: true` (first `Ready`).
    pub(crate) fn completed(mut self) -> Update {
        self.provisioning_completed = true;
        self
    }

    /// Also copy the Shoot's `lastOperation`/`lastErrors`.
    pub(crate) fn with_shoot(
        mut self,
        op: Option<LastOperation>,
        errors: Vec<LastError>,
    ) -> Update {
        self.shoot = Some((op, errors));
        self
    }
}

/// Messages are capped to the CRD's `maxLength` (32768) — characters, not bytes.
fn cap_message(m: String) -> String {
    const MAX: usize = crate::crd::CONDITION_MESSAGE_MAX_LENGTH as usize;
    if m.chars().count() <= MAX {
        m
    } else {
        m.chars().take(MAX - 3).chain("...".chars()).collect()
    }
}

/// The status after `update`, with `meta.SetStatusCondition` semantics: a condition's
/// `lastTransitionTime` changes only when its status changes; `observedGeneration` is the
/// Runtime's `metadata.generation`; `provisioningCompleted` never goes back.
pub fn next_status(
    policy: &Policy,
    runtime: &Runtime,
    update: &Update,
    now: DateTime<Utc>,
) -> RuntimeStatus {
    let mut st = runtime.status.clone().unwrap_or_default();
    let generation = runtime.metadata.generation;
    st.state = Some(update.state);
    for c in &update.conditions {
        let message = cap_message(
            c.message
                .clone()
                .unwrap_or_else(|| policy.default_message(c.condition_type, c.reason)),
        );
        match st
            .conditions
            .iter_mut()
            .find(|x| x.type_ == c.condition_type)
        {
            Some(x) => {
                if x.status != c.status.as_str() {
                    x.last_transition_time = transition_time(&x.last_transition_time, now);
                    x.status = c.status.as_str().to_string();
                }
                x.reason = c.reason.to_string();
                x.message = message;
                x.observed_generation = generation;
            }
            None => st.conditions.push(Condition {
                type_: c.condition_type.to_string(),
                status: c.status.as_str().to_string(),
                reason: c.reason.to_string(),
                message,
                last_transition_time: k8s_time(now),
                observed_generation: generation,
            }),
        }
    }
    if update.provisioning_completed {
        st.provisioning_completed = Some(true);
    }
    if let Some((op, errors)) = &update.shoot {
        st.shoot_last_operation = op.clone();
        st.shoot_last_errors = errors.clone();
    }
    st
}

/// The `lastTransitionTime` of a condition whose status changes now: the model's
/// [`status::transition_stamp`], exactly what the mutating webhook would default, so a write
/// never needs repairing.
fn transition_time(previous: &Time, now: DateTime<Utc>) -> Time {
    let previous = DateTime::from_timestamp(previous.0.as_second(), 0);
    k8s_time(status::transition_stamp(previous, now))
}

/// Whether `new` differs from the Runtime's current status.
pub(crate) fn changed(runtime: &Runtime, new: &RuntimeStatus) -> bool {
    runtime.status.as_ref() != Some(new)
}

/// Whether the Shoot's last operation or errors in `new` differ from those in `old` in a way
/// worth a write: another operation type or state, or other errors. Progress, description
/// and `lastUpdateTime` of a running operation alone are not (they change on every Gardener
/// step and would cost a status write each).
pub(crate) fn shoot_changed(old: Option<&RuntimeStatus>, new: &RuntimeStatus) -> bool {
    let op = |s: Option<&RuntimeStatus>| {
        s.and_then(|s| s.shoot_last_operation.as_ref())
            .map(|o| (o.type_.clone(), o.state.clone()))
    };
    let errors = |s: Option<&RuntimeStatus>| {
        s.map(|s| {
            s.shoot_last_errors
                .iter()
                .map(|e| (e.description.clone(), e.codes.clone()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
    };
    op(old) != op(Some(new)) || errors(old) != errors(Some(new))
}

/// The condition of `condition_type` in `status`, if any.
pub(crate) fn condition<'a>(
    status: Option<&'a RuntimeStatus>,
    condition_type: &str,
) -> Option<&'a Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == condition_type))
}

/// `now` as a `metav1.Time` with the second precision it is stored with, so that a status
/// read back compares equal to the one written.
pub(crate) fn k8s_time(now: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(now.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// Checks a status write against the model exactly as the admission webhook will (mutate,
/// then validate), as the reconciler's own user.
///
/// Errors: the violations — a reconciler bug; the write must not be sent.
pub(crate) fn check(
    policy: &Policy,
    runtime: &Runtime,
    new: &RuntimeStatus,
    user: &str,
    now: DateTime<Utc>,
) -> Result<(), Violations> {
    let old = serde_json::to_value(runtime).unwrap_or_default();
    let mut next = old.clone();
    next["status"] = serde_json::to_value(new).unwrap_or_default();
    let d = status::evaluate(policy, Some(&old), &next, &Facts::by(user, now));
    if d.violations.allowed() {
        Ok(())
    } else {
        Err(d.violations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::table::reasons::{GARDENER_ERR, PENDING};
    use crate::status::table::types::PROVISIONED;

    /// A condition that changes twice within one second (an error, then its retry succeeding)
    /// gets a `lastTransitionTime` the webhook leaves alone: one second after the first change,
    /// not the first change's instant again.
    #[test]
    fn two_transitions_within_one_second_need_no_defaulting() {
        let policy = Policy::builtin();
        let mut rt = Runtime::new("rt", Default::default());
        rt.metadata.generation = Some(1);
        let first = DateTime::from_timestamp(1_800_000_000, 100_000_000).unwrap();
        let update = |status| {
            Update::new(
                State::Pending,
                vec![Cond::new(PROVISIONED, status, PENDING)],
            )
        };
        rt.status = Some(next_status(
            &policy,
            &rt,
            &update(CondStatus::Unknown),
            first,
        ));
        let failed = Update::new(
            State::Pending,
            vec![Cond::new(PROVISIONED, CondStatus::False, GARDENER_ERR)],
        );
        for (update, nanos) in [
            (failed, 400_000_000),
            (update(CondStatus::Unknown), 900_000_000),
        ] {
            let now = DateTime::from_timestamp(1_800_000_000, nanos).unwrap();
            let next = next_status(&policy, &rt, &update, now);
            let old = serde_json::to_value(&rt).unwrap();
            let mut new = old.clone();
            new["status"] = serde_json::to_value(&next).unwrap();
            let decision = status::evaluate(&policy, Some(&old), &new, &Facts::by("kim", now));
            assert!(
                decision.patch.0.is_empty(),
                "needs defaulting: {:?}",
                decision.patch
            );
            rt.status = Some(next);
        }
        let ltt = &rt.status.unwrap().conditions[0].last_transition_time;
        assert_eq!(
            ltt.0.as_second(),
            1_800_000_002,
            "one second per transition"
        );
    }
}
