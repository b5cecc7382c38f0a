//! A stored Runtime as the tests hold it ([`Rt`]) and the two ways its status changes:
//! [`Rt::set`], the status the reconciler writes for an [`Update`] (its own `next_status`), and
//! [`Rt::write`], any status a client may send — also states, types and reasons the status
//! table does not know (the inputs of denial tests).

use crate::api::{Runtime, RuntimeSpec};
use crate::reconciler::status_update::{Update, next_status};
use crate::status::Policy;
use crate::status::table::DEFAULT_WRITER_USERS;
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use serde_json::{Value, json};
use std::sync::LazyLock;

/// The reconciler's service account: the first user the status model lets write status by
/// default (status model §4, invariant 8).
pub const RECONCILER: &str = DEFAULT_WRITER_USERS[0];

/// The clock of a new [`Rt`]: 2026-11-01T10:00:00Z.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 10, 0, 0)
        .single()
        .expect("a valid UTC time")
}

/// The time between two writes of an [`Rt`] (every write is a condition's possible transition,
/// so `lastTransitionTime`s of successive writes differ).
const WRITE_INTERVAL: Duration = Duration::seconds(10);

/// The built-in policy, whose table gives the reconciler's messages.
static POLICY: LazyLock<Policy> = LazyLock::new(Policy::builtin);

/// A Runtime as stored: generation, uid, and optionally a status and a deletionTimestamp.
#[derive(Clone, Debug)]
pub struct Rt {
    /// The Runtime object (JSON).
    pub obj: Value,
    /// The time of its last write (condition `lastTransitionTime`s are taken from it).
    pub clock: DateTime<Utc>,
}

impl Rt {
    /// A stored Runtime from a manifest: generation 1, a fixed uid and resourceVersion, clock
    /// [`t0`].
    pub fn new(mut obj: Value) -> Rt {
        obj["metadata"]["generation"] = json!(1);
        obj["metadata"]["uid"] = json!("0b7b6a8c-1111-2222-3333-444455556666");
        obj["metadata"]["resourceVersion"] = json!("1000");
        Rt { obj, clock: t0() }
    }

    /// Its `status`, if any.
    pub fn status(&self) -> Option<&Value> {
        self.obj.get("status")
    }

    /// The next Runtime, 10 s later, with the status the reconciler writes for `update`:
    /// [`next_status`] with the built-in policy (the table's default messages,
    /// `meta.SetStatusCondition` semantics, `observedGeneration` from `metadata.generation`).
    /// The status is replaced by kim's typed `RuntimeStatus` (fields it does not know are
    /// dropped, as in the reconciler's writes).
    ///
    /// Panics when the stored status is not one kim's `RuntimeStatus` reads.
    pub fn set(&self, update: &Update) -> Rt {
        let mut next = self.clone();
        next.clock = self.clock + WRITE_INTERVAL;
        let mut runtime = Runtime::new("", RuntimeSpec::default());
        runtime.metadata.generation = self.obj["metadata"]["generation"].as_i64();
        runtime.status = self.status().map(|s| {
            serde_json::from_value(s.clone())
                .unwrap_or_else(|e| panic!("the stored status is no RuntimeStatus: {e}: {s}"))
        });
        let status = next_status(&POLICY, &runtime, update, next.clock);
        next.obj["status"] = serde_json::to_value(status).expect("a RuntimeStatus is JSON");
        next
    }

    /// The next Runtime, 10 s later, with `state` and the conditions (type, status, reason)
    /// set as any client may write them, the table's known or not: `meta.SetStatusCondition`
    /// semantics (a new type is appended; `lastTransitionTime` changes only when the status
    /// changes), the message the table gives the pair (`"<type> <reason>"` for a pair it does
    /// not know), `observedGeneration` from `metadata.generation`. For a status the reconciler
    /// writes, use [`Rt::set`].
    pub fn write(&self, state: &str, conds: &[(&str, &str, &str)]) -> Rt {
        let mut next = self.clone();
        next.clock = self.clock + WRITE_INTERVAL;
        let now = next.clock.to_rfc3339_opts(SecondsFormat::Secs, true);
        let generation = next.obj["metadata"]["generation"].clone();
        let status = object_entry(&mut next.obj, "status", json!({}));
        status["state"] = json!(state);
        let list = object_entry(status, "conditions", json!([]));
        for (ctype, cstatus, reason) in conds {
            let message = POLICY.default_message(ctype, reason);
            let arr = list.as_array_mut().expect("status.conditions is a list");
            match arr.iter_mut().find(|c| c["type"] == json!(ctype)) {
                Some(c) => {
                    if c["status"] != json!(cstatus) {
                        c["lastTransitionTime"] = json!(now);
                    }
                    c["status"] = json!(cstatus);
                    c["reason"] = json!(reason);
                    c["message"] = json!(message);
                    c["observedGeneration"] = generation.clone();
                }
                None => arr.push(json!({
                    "type": ctype, "status": cstatus, "reason": reason, "message": message,
                    "lastTransitionTime": now, "observedGeneration": generation,
                })),
            }
        }
        next
    }

    /// A copy with `f` applied to the object.
    pub fn with(&self, f: impl FnOnce(&mut Value)) -> Rt {
        let mut next = self.clone();
        f(&mut next.obj);
        next
    }

    /// A copy with `status.provisioningCompleted: true`.
    pub fn completed(&self) -> Rt {
        self.with(|o| o["status"]["provisioningCompleted"] = json!(true))
    }

    /// A copy with `metadata.deletionTimestamp` set (2026-11-02T00:00:00Z).
    pub fn deleting(&self) -> Rt {
        self.with(|o| o["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z"))
    }

    /// A copy with `metadata.generation` one higher (a spec change).
    pub fn bump_generation(&self) -> Rt {
        self.with(|o| {
            let g = o["metadata"]["generation"]
                .as_i64()
                .expect("metadata.generation is a number");
            o["metadata"]["generation"] = json!(g + 1);
        })
    }
}

/// The member `key` of the JSON object `v`, inserted as `empty` when absent.
///
/// Panics when `v` is not an object.
fn object_entry<'a>(v: &'a mut Value, key: &str, empty: Value) -> &'a mut Value {
    v.as_object_mut()
        .unwrap_or_else(|| panic!("not an object where {key} belongs"))
        .entry(key)
        .or_insert(empty)
}
