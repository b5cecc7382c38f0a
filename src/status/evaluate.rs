//! Evaluation of one status write: defaulting ([`mutate`], spec §5), validation ([`validate`],
//! spec §3–§4, messages per §6) and both chained as the API server does ([`evaluate`]).
//!
//! Pure functions over JSON values: the mutating webhook sees objects *before* schema
//! validation (admission-protocol.md), so nothing here assumes the CRD schema holds — a field
//! of the wrong JSON type is a [`RuleId::Malformed`] / [`RuleId::ConditionShape`] violation,
//! never a panic. Every rule is looked up in the [`Policy`] (the table); this file holds only
//! the mechanics of applying it.

use super::Policy;
use super::table::{CondStatus, MAX_CONDITIONS, Requirement, RuleId, State};
use chrono::{DateTime, SecondsFormat, Utc};
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

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
/// `status.conditions[2].reason`), the value as written, what is allowed, and the full
/// human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: RuleId,
    pub path: String,
    pub value: String,
    pub allowed: String,
    pub message: String,
}

/// The outcome of [`evaluate`]: violations (empty = allowed), the defaulting JSON Patch (empty
/// when nothing needed defaulting) and warnings for the client.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub violations: Vec<Violation>,
    pub patch: Patch,
    pub warnings: Vec<String>,
}

impl Decision {
    /// True when no rule is broken.
    pub fn allowed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The denial's `status.code`: 400 when any violation is about the object's shape,
    /// otherwise 403; 200 when allowed (spec §6).
    pub fn code(&self) -> u16 {
        denial_code(&self.violations)
    }

    /// All violation messages in one line, separated by `"; "` (spec §6: several violations
    /// are all reported in one message).
    pub fn message(&self) -> String {
        denial_message(&self.violations)
    }
}

/// `status.code` for a list of violations: 200 if empty, 400 if any is a shape problem, else 403.
pub fn denial_code(violations: &[Violation]) -> u16 {
    if violations.is_empty() {
        200
    } else if violations.iter().any(|v| v.rule.is_malformed()) {
        400
    } else {
        403
    }
}

/// The messages in one line, separated by `"; "`; after the first 20, the rest are counted.
pub fn denial_message(violations: &[Violation]) -> String {
    let mut out = String::new();
    for (i, v) in violations.iter().take(LISTED_VIOLATIONS).enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&v.message);
    }
    if violations.len() > LISTED_VIOLATIONS {
        out.push_str(&format!(
            "; ... and {} more violations",
            violations.len() - LISTED_VIOLATIONS
        ));
    }
    out
}

/// RFC 3339 with seconds and `Z`, as Kubernetes writes `metav1.Time`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The latest time RFC 3339 can write: 9999-12-31T23:59:59Z.
fn latest_time() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// `/status/conditions/<i>/<name>`: one string when `name` needs no escaping (the field names
/// used here), otherwise token by token.
fn condition_field(i: usize, name: &str) -> PointerBuf {
    if !name.contains(['~', '/'])
        && let Ok(p) = PointerBuf::parse(format!("/status/conditions/{i}/{name}"))
    {
        return p;
    }
    pointer(&["status", "conditions", &i.to_string(), name])
}

/// Conditions as a list of `(index, object)`; non-object entries and a non-array `conditions`
/// are skipped (validation reports them).
fn condition_objects<J: JsonView>(status: Option<&J>) -> impl Iterator<Item = (usize, &J)> {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(J::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.is_object())
}

fn find_by_type<'v, J: JsonView>(status: Option<&'v J>, ctype: &str) -> Option<&'v J> {
    condition_objects(status)
        .map(|(_, o)| o)
        .find(|o| o.get("type").and_then(J::as_str) == Some(ctype))
}

/// Defaulting of spec §5 as JSON Patch operations against the object `new` was read from.
///
/// For each condition (matched to the old one by `type`):
/// - status changed (or new condition) and `lastTransitionTime` missing, unparsable, unchanged
///   from the old value, or earlier than it → request time (one second after the old value if
///   the clock is behind it, so the result is stable);
/// - status unchanged but `lastTransitionTime` changed or missing → the old value;
/// - `observedGeneration` missing, null or 0 (in any JSON spelling: `-0`, `0.0`, `0e0`) →
///   `metadata.generation`;
/// - `message` missing or empty → the table's default message for (type, reason).
///
/// Paths only under `/status/conditions/<i>/`, built token by token (escaped). Applying the
/// result and calling `mutate` again yields an empty patch.
pub fn mutate<J: JsonView>(
    policy: &Policy,
    old: Option<&Snapshot<'_, J>>,
    new: &Snapshot<'_, J>,
    facts: &Facts,
) -> Patch {
    let mut ops = Vec::new();
    let old_status = old.and_then(|o| o.status);
    let now = facts.now;
    let count = new
        .status
        .and_then(|s| s.get("conditions"))
        .and_then(J::as_array)
        .map_or(0, <[J]>::len);
    if count > MAX_CONDITIONS {
        // Validation denies the list as malformed; defaulting it would only cost time.
        return Patch(ops);
    }
    for (i, cond) in condition_objects(new.status) {
        let field = |name: &str| condition_field(i, name);
        // Sets a field unless it already holds the value (so a second pass patches nothing).
        let mut set = |name: &str, value: Value, current: Option<&J>| {
            if current.is_some_and(|c| c.eq_value(&value)) {
                return;
            }
            let path = field(name);
            ops.push(if current.is_some() {
                PatchOperation::Replace(ReplaceOperation { path, value })
            } else {
                PatchOperation::Add(AddOperation { path, value })
            });
        };
        let ctype = cond.get("type").and_then(J::as_str);
        let old_cond = ctype.and_then(|t| find_by_type(old_status, t));
        let new_ltt = cond.get("lastTransitionTime");
        let new_ltt_str = new_ltt.and_then(J::as_str);
        let old_ltt_str = old_cond
            .and_then(|o| o.get("lastTransitionTime"))
            .and_then(J::as_str);
        let status_changed = old_cond.is_none_or(|o| o.get("status") != cond.get("status"));

        if status_changed {
            let old_t = old_ltt_str.and_then(parse_time);
            let new_t = new_ltt_str.and_then(parse_time);
            let needs_now = match (new_t, old_t) {
                (None, _) => true,
                (Some(_), _) if new_ltt_str == old_ltt_str => true,
                (Some(n), Some(o)) => n < o,
                (Some(_), None) => false,
            };
            if needs_now {
                let stamp = match old_t {
                    Some(o) if now <= o => o + chrono::Duration::seconds(1),
                    _ => now,
                };
                // RFC 3339 has four-digit years: an old time at the very end of 9999 is kept.
                let stamp = stamp.min(latest_time());
                set(
                    "lastTransitionTime",
                    Value::String(format_time(stamp)),
                    new_ltt,
                );
            }
        } else if let Some(old_ltt) = old_ltt_str
            && new_ltt_str != Some(old_ltt)
        {
            set(
                "lastTransitionTime",
                Value::String(old_ltt.to_string()),
                new_ltt,
            );
        }

        if let Some(generation) = new.generation {
            let og = cond.get("observedGeneration");
            // 0 written as `-0`, `0.0` or `0e0` is 0 too (kube-apiserver would store it as 0).
            if og.is_none_or(|v| v.is_null() || v.as_f64() == Some(0.0)) {
                set("observedGeneration", Value::from(generation), og);
            }
        }

        let message = cond.get("message");
        if message.is_none_or(|m| m.is_null() || m.as_str() == Some(""))
            && let (Some(t), Some(r)) = (ctype, cond.get("reason").and_then(J::as_str))
            && let Some(entry) = policy.reason(t, r)
        {
            set("message", Value::String(entry.message.clone()), message);
        }
    }
    Patch(ops)
}

fn violation(
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
fn show<J: JsonView>(v: &J) -> String {
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

fn state_of<J: JsonView>(status: Option<&J>) -> Option<State> {
    status
        .and_then(|s| s.get("state"))
        .and_then(J::as_str)
        .and_then(State::parse)
}

fn state_list(policy: &Policy) -> String {
    policy
        .states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Validation of spec §3 and §4 on the object as written (the validating webhook's view).
/// Returns every violation, in the order: writer, shape and state, transition, conditions,
/// state requirements, `provisioningCompleted`, `lastTransitionTime`.
pub fn validate<J: JsonView>(
    policy: &Policy,
    old: Option<&Snapshot<'_, J>>,
    new: &Snapshot<'_, J>,
    facts: &Facts,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let old_status = old.and_then(|o| o.status);

    // §4.8 — only when the write changes the status.
    if old_status != new.status && !policy.writers.allows(&facts.user, &facts.groups) {
        out.push(violation(
            RuleId::Writer,
            "request.userInfo.username",
            facts.user.clone(),
            policy.writers.describe(),
            format!(
                "user {:?} may not write Runtime status (spec §4.8); allowed writers: {}",
                facts.user,
                policy.writers.describe()
            ),
        ));
    }

    let old_state = state_of(old_status);
    let Some(status) = new.status else {
        // §3: nothing leads to ∅.
        if old_status.is_some() {
            let was = old_state.map_or("no state".to_string(), |s| format!("state {s}"));
            out.push(violation(
                RuleId::StatusRemoved,
                "status",
                "null",
                "a status with a state",
                format!("status: removing the status is not allowed (was {was}); a Runtime's status may change but never disappear"),
            ));
        }
        return out;
    };
    if !status.is_object() {
        out.push(violation(
            RuleId::Malformed,
            "status",
            show(status),
            "an object",
            format!("status: must be an object, got {}", show(status)),
        ));
        return out;
    }
    let status_obj = status;

    // §1 — state.
    let new_state = match status_obj.get("state").filter(|v| !v.is_null()) {
        None => {
            out.push(violation(
                RuleId::StateRequired,
                "status.state",
                "",
                state_list(policy),
                format!(
                    "status.state: missing; required once status exists; allowed: {}",
                    state_list(policy)
                ),
            ));
            None
        }
        Some(v) => match v.as_str().and_then(State::parse) {
            Some(s) => Some(s),
            None => {
                out.push(violation(
                    RuleId::StateUnknown,
                    "status.state",
                    show(v),
                    state_list(policy),
                    format!(
                        "status.state: unknown state {:?}; allowed: {}",
                        show(v),
                        state_list(policy)
                    ),
                ));
                None
            }
        },
    };

    // §3 — transition.
    if let Some(to) = new_state {
        check_transition(policy, old_state, to, new.deleting, &mut out);
    }

    // §1, §4.1, §4.2 — conditions.
    let conds = read_conditions(policy, status_obj, &mut out);

    // §4.3–§4.5 — what the state requires.
    if let Some(state) = new_state {
        for (s, req, rule) in &policy.requirements {
            if *s == state {
                check_requirement(policy, state, *req, *rule, &conds, &mut out);
            }
        }
    }

    // §4.6 — provisioningCompleted never goes back.
    match status_obj.get("provisioningCompleted") {
        None => {}
        Some(v) if v.is_null() || v.as_bool().is_some() => {}
        Some(other) => out.push(violation(
            RuleId::Malformed,
            "status.provisioningCompleted",
            show(other),
            "true or false",
            format!(
                "status.provisioningCompleted: must be a boolean, got {}",
                show(other)
            ),
        )),
    }
    let was_completed = old_status
        .and_then(|s| s.get("provisioningCompleted"))
        .and_then(J::as_bool)
        == Some(true);
    let is_completed = status_obj.get("provisioningCompleted").and_then(J::as_bool) == Some(true);
    if was_completed && !is_completed {
        let got = status_obj
            .get("provisioningCompleted")
            .map_or("absent".to_string(), show);
        out.push(violation(
            RuleId::ProvisioningCompleted,
            "status.provisioningCompleted",
            got.clone(),
            "true",
            format!("status.provisioningCompleted: may not go from true to {got} (spec §4.6: it never goes back)"),
        ));
    }

    // §4.7 — lastTransitionTime.
    for c in &conds {
        let (Some(ctype), Some(ltt)) = (c.ctype, c.obj.get("lastTransitionTime")) else {
            continue;
        };
        let path = || format!("status.conditions[{}].lastTransitionTime", c.index);
        let Some(new_t) = ltt.as_str().and_then(parse_time) else {
            let path = path();
            out.push(violation(
                RuleId::ConditionShape,
                path.clone(),
                show(ltt),
                "an RFC 3339 time",
                format!("{path}: {:?} is not an RFC 3339 time", show(ltt)),
            ));
            continue;
        };
        let Some(old_c) = find_by_type(old_status, ctype) else {
            continue;
        };
        let Some(old_ltt) = old_c.get("lastTransitionTime").and_then(J::as_str) else {
            continue;
        };
        let Some(old_t) = parse_time(old_ltt) else {
            continue;
        };
        let same_status = old_c.get("status") == c.obj.get("status");
        if same_status && new_t != old_t {
            let path = path();
            out.push(violation(
                RuleId::LastTransitionTime,
                path.clone(),
                show(ltt),
                old_ltt.to_string(),
                format!(
                    "{path}: changed from {old_ltt} to {} although {ctype} stayed {}; it changes only when the status changes",
                    show(ltt),
                    c.obj.get("status").map_or(String::new(), show)
                ),
            ));
        } else if !same_status && new_t < old_t {
            let path = path();
            out.push(violation(
                RuleId::LastTransitionTime,
                path.clone(),
                show(ltt),
                format!("{old_ltt} or later"),
                format!("{path}: moved backwards from {old_ltt} to {}", show(ltt)),
            ));
        }
    }
    out
}

fn check_transition(
    policy: &Policy,
    from: Option<State>,
    to: State,
    deleting: bool,
    out: &mut Vec<Violation>,
) {
    let from_name = from.map_or("none", State::as_str);
    match policy.edge(from, to) {
        Some(e) if e.only_while_deleting && !deleting => out.push(violation(
            RuleId::TransitionNeedsDeletion,
            "status.state",
            to.as_str(),
            "metadata.deletionTimestamp set",
            format!(
                "status.state: transition {from_name} -> {to} is allowed only while the Runtime is being deleted (metadata.deletionTimestamp is not set)"
            ),
        )),
        Some(_) => {}
        None => {
            let mut allowed = Vec::new();
            for e in policy.edges_from(from) {
                if e.only_while_deleting && !deleting {
                    allowed.push(format!("{} (while deleting)", e.to));
                } else {
                    allowed.push(e.to.to_string());
                }
            }
            let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
            let note = super::table::from_note(from).map_or(String::new(), |n| format!(" ({n})"));
            out.push(violation(
                RuleId::Transition,
                "status.state",
                to.as_str(),
                allowed.clone(),
                format!("status.state: transition {from_name} -> {to} is not allowed{note}; allowed from {from_name}: {allowed}"),
            ));
        }
    }
}

/// `status.conditions[i]`, formatted only when a message needs it.
struct At(usize);

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status.conditions[{}]", self.0)
    }
}

/// A condition as read for validation.
struct Cond<'v, J> {
    index: usize,
    obj: &'v J,
    /// `type`, when it is a string.
    ctype: Option<&'v str>,
    status: Option<CondStatus>,
    reason: Option<&'v str>,
    /// The (type, reason) pair is in the table with this status.
    deletion: bool,
}

fn read_conditions<'v, J: JsonView>(
    policy: &Policy,
    status: &'v J,
    out: &mut Vec<Violation>,
) -> Vec<Cond<'v, J>> {
    let list = match status.get("conditions") {
        None => return Vec::new(),
        Some(v) if v.is_null() => return Vec::new(),
        Some(v) if v.as_array().is_some() => v.as_array().unwrap_or_default(),
        Some(other) => {
            out.push(violation(
                RuleId::Malformed,
                "status.conditions",
                show(other),
                "a list of conditions",
                format!("status.conditions: must be a list, got {}", show(other)),
            ));
            return Vec::new();
        }
    };
    if list.len() > MAX_CONDITIONS {
        out.push(violation(
            RuleId::Malformed,
            "status.conditions",
            format!("{} entries", list.len()),
            format!("at most {MAX_CONDITIONS}"),
            format!(
                "status.conditions: {} entries; at most {MAX_CONDITIONS} are accepted (one per condition type)",
                list.len()
            ),
        ));
        return Vec::new();
    }
    let mut conds: Vec<Cond<'v, J>> = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let at = At(index);
        if !item.is_object() {
            out.push(violation(
                RuleId::ConditionShape,
                at.to_string(),
                show(item),
                "an object",
                format!(
                    "{at}: must be an object with type, status and reason, got {}",
                    show(item)
                ),
            ));
            continue;
        }
        let obj = item;
        let field = |name: &str, out: &mut Vec<Violation>| -> Option<&'v str> {
            match obj.get(name) {
                Some(v) if v.as_str().is_some_and(|s| !s.is_empty()) => v.as_str(),
                Some(v) => {
                    out.push(violation(
                        RuleId::ConditionShape,
                        format!("{at}.{name}"),
                        show(v),
                        "a non-empty string",
                        format!("{at}.{name}: must be a non-empty string, got {}", show(v)),
                    ));
                    None
                }
                None => {
                    out.push(violation(
                        RuleId::ConditionShape,
                        format!("{at}.{name}"),
                        "",
                        "a non-empty string",
                        format!(
                            "{at}.{name}: missing; every condition needs type, status and reason"
                        ),
                    ));
                    None
                }
            }
        };
        let ctype = field("type", out);
        let status_raw = field("status", out);
        let reason = field("reason", out);
        let status = status_raw.and_then(|s| {
            let parsed = CondStatus::parse(s);
            if parsed.is_none() {
                out.push(violation(
                    RuleId::ConditionShape,
                    format!("{at}.status"),
                    s,
                    "True, False, Unknown",
                    format!("{at}.status: {s:?} is not one of True, False, Unknown"),
                ));
            }
            parsed
        });
        let mut deletion = false;
        if let Some(t) = ctype {
            if let Some(first) = conds.iter().find(|c| c.ctype == Some(t)) {
                out.push(violation(
                    RuleId::ConditionTypeDuplicate,
                    format!("{at}.type"),
                    t,
                    "at most one condition per type",
                    format!("{at}.type: duplicate condition type {t:?} (also at status.conditions[{}]); at most one condition per type", first.index),
                ));
            }
            match policy.condition_type(t) {
                None => {
                    let known: Vec<_> = policy
                        .types
                        .iter()
                        .map(|t| t.condition_type.as_str())
                        .collect();
                    out.push(violation(
                        RuleId::ConditionTypeUnknown,
                        format!("{at}.type"),
                        t,
                        known.join(", "),
                        format!(
                            "{at}.type: unknown condition type {t:?}; allowed: {}",
                            known.join(", ")
                        ),
                    ));
                }
                Some(entry) => {
                    if let Some(r) = reason {
                        match entry.reason(r) {
                            None => {
                                let allowed: Vec<_> =
                                    entry.reasons.iter().map(|r| r.reason.as_str()).collect();
                                let mut msg = format!(
                                    "{at}.reason: reason {r:?} is not allowed for type {t}; allowed: {}",
                                    allowed.join(", ")
                                );
                                let elsewhere: Vec<_> = policy
                                    .types
                                    .iter()
                                    .filter(|o| o.reason(r).is_some())
                                    .map(|o| o.condition_type.as_str())
                                    .collect();
                                if !elsewhere.is_empty() {
                                    let _ = write!(
                                        msg,
                                        " ({r:?} is a reason of type {})",
                                        elsewhere.join(", ")
                                    );
                                }
                                out.push(violation(
                                    RuleId::ReasonUnknown,
                                    format!("{at}.reason"),
                                    r,
                                    allowed.join(", "),
                                    msg,
                                ));
                            }
                            Some(re) => {
                                deletion = re.deletion;
                                if let Some(s) = status
                                    && !re.statuses.contains(&s)
                                {
                                    let allowed: Vec<_> =
                                        re.statuses.iter().map(|s| s.as_str()).collect();
                                    out.push(violation(
                                        RuleId::ReasonStatus,
                                        format!("{at}.status"),
                                        s.as_str(),
                                        allowed.join(", "),
                                        format!(
                                            "{at}.status: {t}/{r} may only be {}, got {s}",
                                            allowed.join(" or ")
                                        ),
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
        conds.push(Cond {
            index,
            obj,
            ctype,
            status,
            reason,
            deletion,
        });
    }
    conds
}

fn check_requirement<J>(
    policy: &Policy,
    state: State,
    req: Requirement,
    rule: RuleId,
    conds: &[Cond<'_, J>],
    out: &mut Vec<Violation>,
) {
    match req {
        Requirement::AllTrue(types) => {
            for t in types {
                match conds.iter().find(|c| c.ctype == Some(*t)) {
                    Some(c) if c.status == Some(CondStatus::True) => {}
                    Some(c) => {
                        let got = c.status.map_or("an invalid status", CondStatus::as_str);
                        let reason = c.reason.map_or(String::new(), |r| format!(" ({r})"));
                        out.push(violation(
                            rule,
                            format!("status.conditions[{}].status", c.index),
                            got,
                            "True",
                            format!("status.state: {state} requires condition {t} with status True, found {got}{reason}"),
                        ));
                    }
                    None => out.push(violation(
                        rule,
                        "status.conditions",
                        "",
                        format!("{t}=True"),
                        format!("status.state: {state} requires condition {t} with status True, but it is missing"),
                    )),
                }
            }
        }
        Requirement::AnyFalse => {
            if !conds.iter().any(|c| c.status == Some(CondStatus::False)) {
                out.push(violation(
                    rule,
                    "status.conditions",
                    "",
                    "a condition with status False",
                    format!("status.state: {state} requires at least one condition with status False (the error that stopped the runtime); found none"),
                ));
            }
        }
        Requirement::TypeOrDeletionReason(t) => {
            if !conds.iter().any(|c| c.ctype == Some(t) || c.deletion) {
                let deletion_reasons: Vec<String> = policy
                    .types
                    .iter()
                    .flat_map(|ty| {
                        ty.reasons
                            .iter()
                            .filter(|r| r.deletion)
                            .map(move |r| format!("{}/{}", ty.condition_type, r.reason))
                    })
                    .filter(|s| !s.starts_with(&format!("{t}/")))
                    .collect();
                let alt = if deletion_reasons.is_empty() {
                    String::new()
                } else {
                    format!(
                        " or a condition with a deletion reason ({})",
                        deletion_reasons.join(", ")
                    )
                };
                out.push(violation(
                    rule,
                    "status.conditions",
                    "",
                    format!("a {t} condition"),
                    format!("status.state: {state} requires a {t} condition{alt}; found none"),
                ));
            }
        }
    }
}

/// The API server's chain on whole objects: [`mutate`], apply the patch, [`validate`] the result.
/// `old` is `None` for a Runtime that had no status yet (or, in `kim check`, `--old none`).
/// Warnings: none from the model today; the field is there for callers to add to.
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
        violations,
        patch,
        warnings: Vec::new(),
    }
}
