//! Evaluation of one status write (spec §3–§6). Pure functions over JSON values.

use super::{Policy, RuleId};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

/// What the evaluation needs of one Runtime object: `metadata.generation`, whether
/// `metadata.deletionTimestamp` is set, and `status` (`None` when absent or null).
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub generation: Option<i64>,
    pub deleting: bool,
    pub status: Option<&'a Value>,
}

impl<'a> Snapshot<'a> {
    /// Reads a snapshot from a whole Runtime object (JSON).
    pub fn of_object(obj: &'a Value) -> Snapshot<'a> {
        let meta = obj.get("metadata");
        Snapshot {
            generation: meta
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64),
            deleting: meta
                .and_then(|m| m.get("deletionTimestamp"))
                .is_some_and(|d| !d.is_null()),
            status: obj.get("status").filter(|s| !s.is_null()),
        }
    }
}

/// Facts of the request: who writes, whether it is a dry run, and the request time.
#[derive(Debug, Clone)]
pub struct Facts {
    pub user: String,
    pub groups: Vec<String>,
    pub dry_run: bool,
    pub now: DateTime<Utc>,
}

/// One broken rule: its id, the JSON path of the offending value, the value, what is allowed
/// and the full human message (spec §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: RuleId,
    pub path: String,
    pub value: String,
    pub allowed: String,
    pub message: String,
}

/// The outcome of [`evaluate`]: violations (empty = allowed), the defaulting JSON Patch and warnings.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub violations: Vec<Violation>,
    pub patch: json_patch::Patch,
    pub warnings: Vec<String>,
}

/// Defaulting (spec §5).
pub fn mutate(
    policy: &Policy,
    old: Option<&Snapshot<'_>>,
    new: &Snapshot<'_>,
    facts: &Facts,
) -> json_patch::Patch {
    let _ = (policy, old, new, facts);
    todo!()
}

/// Validation (spec §3, §4).
pub fn validate(
    policy: &Policy,
    old: Option<&Snapshot<'_>>,
    new: &Snapshot<'_>,
    facts: &Facts,
) -> Vec<Violation> {
    let _ = (policy, old, new, facts);
    todo!()
}

/// Mutate, apply, validate: the API server's admission chain on whole objects.
pub fn evaluate(policy: &Policy, old: Option<&Value>, new: &Value, facts: &Facts) -> Decision {
    let _ = (policy, old, new, facts);
    todo!()
}
