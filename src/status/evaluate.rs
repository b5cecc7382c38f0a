//! Evaluation of one status write: the types both steps share ([`JsonView`], [`Snapshot`],
//! [`Facts`], [`Violation`]), and defaulting ([`mutate`], spec §5) and validation
//! ([`validate`], spec §3–§4 and §7, messages per §6) chained as the API server does
//! ([`evaluate`]).
//!
//! Pure functions over JSON values: the mutating webhook sees objects *before* schema
//! validation (admission-protocol.md), so nothing here assumes the CRD schema holds — a field
//! of the wrong JSON type is a [`RuleId::Malformed`] / [`RuleId::ConditionShape`] violation,
//! never a panic. Every rule is looked up in the [`Policy`] (the table); this file holds only
//! the mechanics of applying it.

use super::Policy;
use super::defaulting::mutate;
use super::table::{Action, RuleId};
use super::validate::validate;
use chrono::{DateTime, SecondsFormat, Utc};
use json_patch::Patch;
use jsonptr::PointerBuf;
use serde::Serialize;
use serde_json::Value;

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
    /// value for `observedGeneration` (admission-protocol.md).
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp` is set (the Runtime is being deleted; spec §3 footnote ¹).
    pub deleting: bool,
    /// `status`, `None` when absent or `null` (∅ in spec §3).
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
    /// `dryRun`: evaluated the same way; recorded for logs only (spec §6).
    pub dry_run: bool,
    /// The request time; defaulting writes it as RFC 3339 with seconds (spec §5).
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

/// One broken rule (spec §6): its id, the JSON path of the offending value (e.g.
/// `status.conditions[2].reason`), the value as written, what is allowed, the full
/// human-readable message, and what became of it ([`Action`]: it denies the write, or is a
/// warning because the rule runs in `warn` mode or because it is ratcheted, spec §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: RuleId,
    pub path: String,
    pub value: String,
    pub allowed: String,
    pub message: String,
    pub action: Action,
}

impl Violation {
    /// Whether this violation denies the write.
    pub fn denies(&self) -> bool {
        self.action == Action::Deny
    }

    /// The message with the rule id first: `[rule-id] message` (denials, `kim check`).
    pub fn line(&self) -> String {
        format!("[{}] {}", self.rule, self.message)
    }

    /// The AdmissionReview warning for a violation that does not deny (spec §7.7): one line,
    /// rule id first, what became of it, at most [`WARNING_LIMIT`] characters, e.g.
    /// `[condition-type-unknown] (ratcheted) status.conditions[3].type: …`.
    pub fn warning(&self) -> String {
        let text = format!("[{}] ({}) {}", self.rule, self.action, self.message);
        match text.char_indices().nth(WARNING_LIMIT - 3) {
            Some((i, _)) if text.chars().count() > WARNING_LIMIT => format!("{}...", &text[..i]),
            _ => text,
        }
    }
}

/// Longest AdmissionReview warning (characters); the apiserver passes longer ones on cut.
pub const WARNING_LIMIT: usize = 120;
/// Most warnings listed for one write; a last line counts the rest (spec §7.7).
pub const LISTED_WARNINGS: usize = 10;

/// The outcome of [`evaluate`]: violations (each with its [`Action`]), the defaulting JSON
/// Patch (empty when nothing needed defaulting) and the warnings for the client.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub violations: Vec<Violation>,
    pub patch: Patch,
    pub warnings: Vec<String>,
}

impl Decision {
    /// True when no violation denies the write.
    pub fn allowed(&self) -> bool {
        allowed(&self.violations)
    }

    /// The denial's `status.code`: 400 when any denying violation is about the object's
    /// shape, otherwise 403; 200 when allowed (spec §6).
    pub fn code(&self) -> u16 {
        denial_code(&self.violations)
    }

    /// The denying violations in one line (spec §6), see [`denial_message`].
    pub fn message(&self) -> String {
        denial_message(&self.violations)
    }
}

/// Whether a write with these violations is allowed: none has [`Action::Deny`].
pub fn allowed(violations: &[Violation]) -> bool {
    !violations.iter().any(Violation::denies)
}

/// `status.code` for the denying violations: 200 if none, 400 if any is a shape problem,
/// else 403.
pub fn denial_code(violations: &[Violation]) -> u16 {
    code_of(violations.iter().filter(|v| v.denies()))
}

fn code_of<'a>(mut denying: impl Iterator<Item = &'a Violation>) -> u16 {
    let mut code = 200;
    for v in denying.by_ref() {
        if v.rule.is_malformed() {
            return 400;
        }
        code = 403;
    }
    code
}

/// The denying violations in one line, each `[rule-id] message`, separated by `"; "` (spec
/// §6: several violations are all reported in one message); after the first 20, the rest
/// are counted. Empty when the write is allowed.
pub fn denial_message(violations: &[Violation]) -> String {
    join_lines(violations.iter().filter(|v| v.denies()))
}

/// What a denial would have said for the violations in `warn` mode ([`Action::Warn`]), in
/// the form of [`denial_message`]; empty when there are none. Carried in an audit annotation.
pub fn warn_message(violations: &[Violation]) -> String {
    join_lines(violations.iter().filter(|v| v.action == Action::Warn))
}

/// The `status.code` a denial would have had for the violations in `warn` mode.
pub fn warn_code(violations: &[Violation]) -> u16 {
    code_of(violations.iter().filter(|v| v.action == Action::Warn))
}

fn join_lines<'a>(violations: impl Iterator<Item = &'a Violation>) -> String {
    let mut out = String::new();
    let mut n = 0;
    for v in violations {
        if n < LISTED_VIOLATIONS {
            if n > 0 {
                out.push_str("; ");
            }
            out.push_str(&v.line());
        }
        n += 1;
    }
    if n > LISTED_VIOLATIONS {
        out.push_str(&format!(
            "; ... and {} more violations",
            n - LISTED_VIOLATIONS
        ));
    }
    out
}

/// The AdmissionReview warnings for the violations that do not deny (spec §7.7): `warn` ones
/// first, then ratcheted ones, one line each ([`Violation::warning`]), at most
/// [`LISTED_WARNINGS`] plus a line counting the rest.
pub fn warnings(violations: &[Violation]) -> Vec<String> {
    let mut ordered: Vec<&Violation> = violations
        .iter()
        .filter(|v| v.action == Action::Warn)
        .collect();
    ordered.extend(violations.iter().filter(|v| v.action == Action::Ratcheted));
    let mut out: Vec<String> = ordered
        .iter()
        .take(LISTED_WARNINGS)
        .map(|v| v.warning())
        .collect();
    if ordered.len() > LISTED_WARNINGS {
        out.push(format!(
            "... and {} more warnings",
            ordered.len() - LISTED_WARNINGS
        ));
    }
    out
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

/// `/status/conditions/<i>/<name>`: one string when `name` needs no escaping (the field names
/// used here), otherwise token by token.
pub(super) fn condition_field(i: usize, name: &str) -> PointerBuf {
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

pub(super) fn violation(
    rule: RuleId,
    path: impl Into<String>,
    value: impl Into<String>,
    allowed: impl Into<String>,
    message: String,
) -> Violation {
    Violation {
        rule,
        path: path.into(),
        value: cut(value.into(), VALUE_LIMIT),
        allowed: allowed.into(),
        message: cut(message, MESSAGE_LIMIT),
        action: Action::Deny,
    }
}

/// Longest offending value kept in a [`Violation`] (characters).
const VALUE_LIMIT: usize = 80;
/// Longest message of one [`Violation`] (characters): a request-controlled string (a 40 000
/// character condition type, say) never makes an answer or a log line big.
const MESSAGE_LIMIT: usize = 1000;
/// Most violations listed in one denial message; the rest are counted.
const LISTED_VIOLATIONS: usize = 20;

fn cut(s: String, limit: usize) -> String {
    match s.char_indices().nth(limit) {
        None => s,
        Some((i, _)) => format!("{}...", &s[..i]),
    }
}
/// Short display of a JSON value for messages (strings unquoted, others as JSON, long values cut).
pub(super) fn show<J: JsonView>(v: &J) -> String {
    let s = match v.as_str() {
        Some(s) => s.to_string(),
        None => v.to_json(),
    };
    if s.chars().count() > 80 {
        let mut cut: String = s.chars().take(77).collect();
        cut.push_str("...");
        cut
    } else {
        s
    }
}

/// The API server's chain on whole objects: [`mutate`], apply the patch, [`validate`] the result.
/// `old` is `None` for a Runtime that had no status yet (or, in `kim check`, `--old none`).
/// The warnings are those of the violations that do not deny ([`warnings`]).
pub fn evaluate(policy: &Policy, old: Option<&Value>, new: &Value, facts: &Facts) -> Decision {
    let old_snap = old.map(Snapshot::of_object);
    let new_snap = Snapshot::of_object(new);
    let patch = mutate(policy, old_snap.as_ref(), &new_snap, facts);
    let violations = if patch.0.is_empty() {
        validate(policy, old_snap.as_ref(), &new_snap, facts)
    } else {
        let mut patched = new.clone();
        match json_patch::patch(&mut patched, &patch) {
            Ok(()) => validate(
                policy,
                old_snap.as_ref(),
                &Snapshot::of_object(&patched),
                facts,
            ),
            // Unreachable by construction (paths point at existing entries); report, never panic.
            Err(e) => vec![violation(
                RuleId::Malformed,
                "status",
                "",
                "",
                format!("status: defaulting patch does not apply: {e}"),
            )],
        }
    };
    Decision {
        warnings: warnings(&violations),
        violations,
        patch,
    }
}
