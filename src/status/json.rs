//! What evaluation reads: JSON values through [`JsonView`] (a `serde_json::Value` or the
//! admission decoder's borrowed values), the [`Snapshot`] of a Runtime, the [`Facts`] of a
//! request, and helpers over conditions and times shared by defaulting and validation.

use super::table::MAX_CONDITIONS;
use chrono::{DateTime, SecondsFormat, Utc};
use jsonptr::PointerBuf;
use serde_json::Value;
use std::sync::LazyLock;

/// Read access to a JSON value, as evaluation needs it. Implemented for [`serde_json::Value`]
/// and for the admission decoder's borrowed values, so the same rules run on either without
/// converting. Semantics are those of `serde_json::Value`: `get` is `None` unless the value is
/// an object with that key; `==` is JSON equality (objects compared as maps).
pub trait JsonView: PartialEq + Sized {
    /// The member `key` of an object; `None` for a missing key or a non-object.
    fn get(&self, key: &str) -> Option<&Self>;
    /// The string, if this is one.
    fn as_str(&self) -> Option<&str>;
    /// The boolean, if this is one.
    fn as_bool(&self) -> Option<bool>;
    /// The number as `i64`, if it is an integer in range (as `Value::as_i64`).
    fn as_i64(&self) -> Option<i64>;
    /// The value as a float, if it is a number (any JSON number: `0`, `-0`, `0.0`, `1e3`).
    fn as_f64(&self) -> Option<f64>;
    /// The elements, if this is an array.
    fn as_array(&self) -> Option<&[Self]>;
    /// Whether this is an object.
    fn is_object(&self) -> bool;
    /// Whether this is `null`.
    fn is_null(&self) -> bool;
    /// JSON equality with a `serde_json::Value`.
    fn eq_value(&self, v: &Value) -> bool;
    /// Compact JSON, exactly as `serde_json` writes the equivalent `Value`.
    fn to_json(&self) -> String;
}

impl JsonView for Value {
    fn get(&self, key: &str) -> Option<&Value> {
        Value::get(self, key)
    }
    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }
    fn as_bool(&self) -> Option<bool> {
        Value::as_bool(self)
    }
    fn as_i64(&self) -> Option<i64> {
        Value::as_i64(self)
    }
    fn as_f64(&self) -> Option<f64> {
        Value::as_f64(self)
    }
    fn as_array(&self) -> Option<&[Value]> {
        Value::as_array(self).map(Vec::as_slice)
    }
    fn is_object(&self) -> bool {
        Value::is_object(self)
    }
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn eq_value(&self, v: &Value) -> bool {
        self == v
    }
    fn to_json(&self) -> String {
        self.to_string()
    }
}

/// What the evaluation needs of one Runtime object: `metadata.generation`, whether
/// `metadata.deletionTimestamp` is set, and `status` (`None` when absent or `null`). `J` is
/// how the status is held ([`JsonView`]); `serde_json::Value` unless said otherwise.
#[derive(Debug)]
pub struct Snapshot<'a, J = Value> {
    /// `metadata.generation`; on a status write it equals the stored generation, which is the
    /// value for `observedGeneration` (docs/admission-protocol.md).
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp` is set (the Runtime is being deleted; status model §3 footnote ¹).
    pub deleting: bool,
    /// `status`, `None` when absent or `null` (∅ in status model §3).
    pub status: Option<&'a J>,
}

impl<J> Clone for Snapshot<'_, J> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<J> Copy for Snapshot<'_, J> {}

impl<J> Default for Snapshot<'_, J> {
    fn default() -> Self {
        Snapshot {
            generation: None,
            deleting: false,
            status: None,
        }
    }
}

impl<'a> Snapshot<'a> {
    /// Reads a snapshot from a whole Runtime object (JSON). Never fails: missing or mistyped
    /// fields read as absent.
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

/// Facts of the request (from the AdmissionReview's `userInfo`, `dryRun`) and the request time.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `userInfo.username`.
    pub user: String,
    /// `userInfo.groups`.
    pub groups: Vec<String>,
    /// `dryRun`: evaluated the same way; recorded for logs only (status model §6).
    pub dry_run: bool,
    /// The request time; defaulting writes it as RFC 3339 with seconds (status model §5).
    pub now: DateTime<Utc>,
}

impl Facts {
    /// Facts for a write by `user` (no groups) at `now`, not a dry run.
    pub fn by(user: &str, now: DateTime<Utc>) -> Facts {
        Facts {
            user: user.to_string(),
            groups: Vec::new(),
            dry_run: false,
            now,
        }
    }
}

/// RFC 3339 with seconds and `Z`, as Kubernetes writes `metav1.Time`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The latest time RFC 3339 can write: 9999-12-31T23:59:59Z.
pub(super) fn latest_time() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

pub(super) fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// The condition fields defaulting sets, whose pointers [`condition_field`] keeps ready.
const DEFAULTED_FIELDS: [&str; 3] = ["lastTransitionTime", "observedGeneration", "message"];

/// `/status/conditions/<i>/<name>` for every defaulted field of every condition a list may
/// have, made once.
static CONDITION_FIELDS: LazyLock<Vec<[PointerBuf; 3]>> = LazyLock::new(|| {
    (0..MAX_CONDITIONS)
        .map(|i| {
            DEFAULTED_FIELDS.map(|name| pointer(&["status", "conditions", &i.to_string(), name]))
        })
        .collect()
});

/// `/status/conditions/<i>/<name>`: a copy of a ready one for the defaulted fields, one string
/// when `name` needs no escaping, otherwise token by token.
pub(super) fn condition_field(i: usize, name: &str) -> PointerBuf {
    if let Some(f) = DEFAULTED_FIELDS.iter().position(|n| *n == name)
        && let Some(ready) = CONDITION_FIELDS.get(i)
    {
        return ready[f].clone();
    }
    if !name.contains(['~', '/'])
        && let Ok(p) = PointerBuf::parse(format!("/status/conditions/{i}/{name}"))
    {
        return p;
    }
    pointer(&["status", "conditions", &i.to_string(), name])
}

/// Conditions as a list of `(index, object)`; non-object entries and a non-array `conditions`
/// are skipped (validation reports them).
pub(super) fn condition_objects<J: JsonView>(
    status: Option<&J>,
) -> impl Iterator<Item = (usize, &J)> {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(J::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.is_object())
}

pub(super) fn find_by_type<'v, J: JsonView>(status: Option<&'v J>, ctype: &str) -> Option<&'v J> {
    condition_objects(status)
        .map(|(_, o)| o)
        .find(|o| o.get("type").and_then(J::as_str) == Some(ctype))
}

/// The old condition that new condition `index` of type `ctype` is judged against: the old
/// entry at the same index when it has that type (so duplicates pair up in order), else the
/// first old condition of that type.
pub(super) fn matching_old<'v, J: JsonView>(
    old_status: Option<&'v J>,
    index: usize,
    ctype: &str,
) -> Option<&'v J> {
    let same_index = old_status
        .and_then(|s| s.get("conditions"))
        .and_then(J::as_array)
        .and_then(|l| l.get(index))
        .filter(|o| o.get("type").and_then(J::as_str) == Some(ctype));
    same_index.or_else(|| find_by_type(old_status, ctype))
}

/// Short display of a JSON value for messages: a string unquoted (quoted and escaped when it
/// holds a control character, so a message stays one line), anything else as JSON; long
/// values cut.
pub(super) fn show<J: JsonView>(v: &J) -> String {
    let s = match v.as_str() {
        Some(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => v.to_json(),
    };
    if s.len() > 80 && s.chars().count() > 80 {
        let mut cut: String = s.chars().take(77).collect();
        cut.push_str("...");
        cut
    } else {
        s
    }
}

/// A JSON value quoted for messages: a string as a Rust string literal (`"Up\nDown"`, control
/// characters escaped), anything else as JSON; long values cut.
pub(super) fn quoted<J: JsonView>(v: &J) -> String {
    match v.as_str() {
        Some(s) => {
            let q = format!("{s:?}");
            if q.chars().count() > 80 {
                let mut cut: String = q.chars().take(77).collect();
                cut.push_str("...");
                cut
            } else {
                q
            }
        }
        None => show(v),
    }
}
