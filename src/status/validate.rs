//! Validation of one status write (`docs/status-model.md` §3, §4, messages per §6), judged on what
//! the write changes (ratcheting, §7.1–7.5), with each violation's enforcement action (§7).
//!
//! Pure functions over [`JsonView`]s; every rule is looked up in the [`Policy`].

use super::Policy;
use super::history::{self, Kind};
use super::json::{
    Facts, JsonView, Snapshot, find_by_type, matching_old, parse_time, quoted, show,
};
use super::table::{Action, CondStatus, Enforcement, MAX_CONDITIONS, Requirement, RuleId, State};
use super::violation::{Violation, Violations, violation};
use std::fmt::Write as _;

/// Validation of status model §3 and §4 on the object as written (the validating webhook's view).
///
/// Returns every violation, in the order: writer, shape and state, transition, conditions,
/// state requirements, `provisioningCompleted`, `lastTransitionTime`. Each carries its
/// [`Action`]: [`Action::Ratcheted`] when the stored object (`old`) already broke the rule and
/// the write does not change what the rule reads (status model §7.1–7.5; a write that leaves the
/// status as it was is never denied), otherwise the rule's enforcement in the policy
/// ([`Action::Deny`] or [`Action::Warn`]). The write is allowed when no violation has
/// [`Action::Deny`] ([`Violations::allowed`]).
pub fn validate<J: JsonView>(
    policy: &Policy,
    old: Option<&Snapshot<'_, J>>,
    new: &Snapshot<'_, J>,
    facts: &Facts,
) -> Violations {
    let mut out = Vec::new();
    let old_status = old.and_then(|o| o.status);
    check_writer(policy, old_status, new.status, facts, &mut out);
    check_status(policy, old_status, new, &mut out);
    // §7: a write that leaves the status as it was changes nothing to judge.
    if old_status.is_some() && old_status == new.status {
        for v in &mut out {
            if v.rule != RuleId::Writer {
                v.action = Action::Ratcheted;
            }
        }
    }
    enforce(policy, &mut out);
    out.into()
}

/// The per-object rules of a stored status (status model §1, §4.1–4.5): what `kim audit` reports.
/// No transition, writer, `provisioningCompleted` or `lastTransitionTime` rule (they judge a
/// change), no ratcheting; every violation carries the action its rule's enforcement gives.
pub fn validate_stored<J: JsonView>(policy: &Policy, stored: &Snapshot<'_, J>) -> Violations {
    let mut out = Vec::new();
    let Some(status) = stored.status else {
        return Violations::default();
    };
    if !status.is_object() {
        out.push(malformed_status(status));
        enforce(policy, &mut out);
        return out.into();
    }
    let state = read_state(policy, None, status, &mut out);
    let conds = read_conditions(policy, status, &mut out);
    if let Some(state) = state {
        for (s, req, rule) in &policy.requirements {
            if *s == state {
                check_requirement(policy, state, *req, *rule, &conds, &mut out);
            }
        }
    }
    check_provisioning_completed_type(None, status, &mut out);
    for c in &conds {
        if let Some(ltt) = c.obj.get("lastTransitionTime")
            && ltt.as_str().and_then(parse_time).is_none()
        {
            out.push(bad_time(c.index, ltt));
        }
    }
    enforce(policy, &mut out);
    out.into()
}

/// Sets the action of every violation that is not ratcheted from the rule's enforcement.
fn enforce(policy: &Policy, out: &mut [Violation]) {
    for v in out {
        if v.action != Action::Ratcheted {
            v.action = match policy.action(v.rule) {
                Enforcement::Deny => Action::Deny,
                Enforcement::Warn => Action::Warn,
            };
        }
    }
}

/// §4.8 — only when the write changes the status.
fn check_writer<J: JsonView>(
    policy: &Policy,
    old_status: Option<&J>,
    new_status: Option<&J>,
    facts: &Facts,
    out: &mut Vec<Violation>,
) {
    if old_status != new_status && !policy.writers.allows(&facts.user, &facts.groups) {
        out.push(violation(
            RuleId::Writer,
            "request.userInfo.username",
            facts.user.clone(),
            policy.writers.describe(),
            format!(
                "user {:?} may not write Runtime status; allowed writers: {}",
                facts.user,
                policy.writers.describe()
            ),
        ));
    }
}

/// Everything about the new status but the writer: removal, shape, state, transition,
/// conditions, requirements, `provisioningCompleted`, `lastTransitionTime`.
fn check_status<J: JsonView>(
    policy: &Policy,
    old_status: Option<&J>,
    new: &Snapshot<'_, J>,
    out: &mut Vec<Violation>,
) {
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
        return;
    };
    if !status.is_object() {
        out.push(malformed_status(status));
        return;
    }
    let new_state = read_state(policy, old_status, status, out);
    if let Some(to) = new_state {
        check_transition(policy, old_state, to, new.deleting, out);
    }
    let conds = read_conditions(policy, status, out);
    ratchet_conditions(old_status, &conds, out);
    if let Some(state) = new_state {
        check_requirements(policy, old_status, status, state, &conds, out);
    }
    check_provisioning_completed_type(old_status, status, out);
    check_provisioning_completed(old_status, status, out);
    check_transition_times(old_status, &conds, out);
}

fn malformed_status<J: JsonView>(status: &J) -> Violation {
    violation(
        RuleId::Malformed,
        "status",
        show(status),
        "an object",
        format!("status: must be an object, got {}", show(status)),
    )
}

/// The state of a stored status for its transitions: a state of the table, or the
/// equivalent of a retired one ([`super::table::RETIRED_STATE_EQUIVALENTS`]); `None` (∅) for
/// no status, no state or an unknown one.
fn state_of<J: JsonView>(status: Option<&J>) -> Option<State> {
    let name = status.and_then(|s| s.get("state")).and_then(J::as_str)?;
    State::parse(name).or_else(|| {
        super::table::RETIRED_STATE_EQUIVALENTS
            .iter()
            .find(|(retired, _)| *retired == name)
            .map(|(_, equivalent)| *equivalent)
    })
}

fn state_list(policy: &Policy) -> String {
    policy
        .states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"NAME" was retired by KIM after D (declared F to D)` for a retired name (status model §7.6), short
/// enough to fit a warning line with its path.
fn retired_note(policy: &Policy, kind: Kind, name: &str) -> Option<String> {
    let n = policy.retired(kind, name)?;
    let made = history::vocabulary()
        .iter()
        .position(|v| std::ptr::eq(v, n))
        .and_then(|i| RETIRED_NOTES.get(i));
    Some(made.cloned().unwrap_or_else(|| note_of(n)))
}

fn note_of(n: &history::Name) -> String {
    format!(
        "{:?} was retired by KIM after {} (declared {} to {})",
        n.name, n.last_seen, n.first_seen, n.last_seen
    )
}

/// [`retired_note`] of every vocabulary row, in `history::vocabulary()`'s order, made once:
/// KIM-era Runtimes carry retired names on every write, and formatting the dates each time was
/// most of what judging such a write cost.
static RETIRED_NOTES: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| history::vocabulary().iter().map(note_of).collect());

/// §1 — `status.state`: required, one of the states. An unknown state the stored object
/// already had is ratcheted (status model §7.4).
fn read_state<J: JsonView>(
    policy: &Policy,
    old_status: Option<&J>,
    status: &J,
    out: &mut Vec<Violation>,
) -> Option<State> {
    let raw = status.get("state").filter(|v| !v.is_null());
    let Some(v) = raw else {
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
        return None;
    };
    if let Some(s) = v.as_str().and_then(State::parse) {
        return Some(s);
    }
    let what = match v
        .as_str()
        .and_then(|s| retired_note(policy, Kind::State, s))
    {
        Some(note) => note,
        None => format!("unknown state {}", quoted(v)),
    };
    let mut viol = violation(
        RuleId::StateUnknown,
        "status.state",
        show(v),
        state_list(policy),
        format!("status.state: {what}; allowed: {}", state_list(policy)),
    );
    if old_status.and_then(|o| o.get("state")) == Some(v) {
        viol.action = Action::Ratcheted;
    }
    out.push(viol);
    None
}

/// §3 — the state change is an edge of the table; a footnote edge only while deleting. A
/// same-state write on an object that already broke the footnote is ratcheted (status model §7).
fn check_transition(
    policy: &Policy,
    from: Option<State>,
    to: State,
    deleting: bool,
    out: &mut Vec<Violation>,
) {
    let from_name = from.map_or("none", State::as_str);
    match policy.edge(from, to) {
        Some(e) if e.only_while_deleting && !deleting => {
            let mut v = violation(
                RuleId::TransitionNeedsDeletion,
                "status.state",
                to.as_str(),
                "metadata.deletionTimestamp set",
                format!(
                    "status.state: transition {from_name} -> {to} is allowed only while the Runtime is being deleted (metadata.deletionTimestamp is not set)"
                ),
            );
            if from == Some(to) {
                v.action = Action::Ratcheted;
            }
            out.push(v);
        }
        Some(_) => {}
        None => {
            let allowed: Vec<String> = policy
                .edges_from(from)
                .map(|e| {
                    if e.only_while_deleting && !deleting {
                        format!("{} (while deleting)", e.to)
                    } else {
                        e.to.to_string()
                    }
                })
                .collect();
            let allowed = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            };
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
pub(super) struct Cond<'v, J> {
    index: usize,
    obj: &'v J,
    /// `type`, when it is a non-empty string.
    ctype: Option<&'v str>,
    status: Option<CondStatus>,
    reason: Option<&'v str>,
    /// The (type, reason) pair is in the table as a deletion reason.
    deletion: bool,
    /// Violations pushed while reading this condition: `out[first..end]`.
    violations: std::ops::Range<usize>,
}

/// §1, §4.1, §4.2 — reads `status.conditions`, pushing shape, type, reason and duplicate
/// violations; returns every entry (a non-object one with no type, status or reason).
fn read_conditions<'v, J: JsonView>(
    policy: &Policy,
    status: &'v J,
    out: &mut Vec<Violation>,
) -> Vec<Cond<'v, J>> {
    let Some(list) = condition_list(status, out) else {
        return Vec::new();
    };
    let mut conds: Vec<Cond<'v, J>> = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let first = out.len();
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
            conds.push(Cond {
                index,
                obj: item,
                ctype: None,
                status: None,
                reason: None,
                deletion: false,
                violations: first..out.len(),
            });
            continue;
        }
        let ctype = required_string(item, &at, "type", out);
        let status_raw = required_string(item, &at, "status", out);
        let reason = required_string(item, &at, "reason", out);
        let status = status_raw.and_then(|s| {
            let parsed = CondStatus::parse(s);
            if parsed.is_none() {
                let names = super::policy::status_names();
                out.push(violation(
                    RuleId::ConditionShape,
                    format!("{at}.status"),
                    s,
                    names.clone(),
                    format!("{at}.status: {s:?} is not one of {names}"),
                ));
            }
            parsed
        });
        let mut deletion = false;
        if let Some(t) = ctype {
            if let Some(dup) = conds.iter().find(|c| c.ctype == Some(t)) {
                out.push(violation(
                    RuleId::ConditionTypeDuplicate,
                    format!("{at}.type"),
                    t,
                    "at most one condition per type",
                    format!("{at}.type: duplicate condition type {t:?} (also at status.conditions[{}]); at most one condition per type", dup.index),
                ));
            }
            deletion = check_type_and_reason(policy, &at, t, reason, status, out);
        }
        conds.push(Cond {
            index,
            obj: item,
            ctype,
            status,
            reason,
            deletion,
            violations: first..out.len(),
        });
    }
    conds
}

/// The conditions list, `None` (nothing to read) when absent or null; a non-list or an
/// over-long list is a [`RuleId::Malformed`] violation.
fn condition_list<'v, J: JsonView>(status: &'v J, out: &mut Vec<Violation>) -> Option<&'v [J]> {
    let v = status.get("conditions").filter(|v| !v.is_null())?;
    let Some(list) = v.as_array() else {
        out.push(violation(
            RuleId::Malformed,
            "status.conditions",
            show(v),
            "a list of conditions",
            format!("status.conditions: must be a list, got {}", show(v)),
        ));
        return None;
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
        return None;
    }
    Some(list)
}

/// A condition's `type`, `status` or `reason`: a non-empty string, else a shape violation.
fn required_string<'v, J: JsonView>(
    obj: &'v J,
    at: &At,
    name: &str,
    out: &mut Vec<Violation>,
) -> Option<&'v str> {
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
                format!("{at}.{name}: missing; every condition needs type, status and reason"),
            ));
            None
        }
    }
}

/// §4.1–4.2 for one condition: the type is known, the reason allowed for it, the status
/// allowed for the pair. Returns whether the pair is a deletion reason.
fn check_type_and_reason(
    policy: &Policy,
    at: &At,
    t: &str,
    reason: Option<&str>,
    status: Option<CondStatus>,
    out: &mut Vec<Violation>,
) -> bool {
    let Some(entry) = policy.condition_type(t) else {
        let known = policy
            .types
            .iter()
            .map(|t| t.condition_type.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let what = match retired_note(policy, Kind::Type, t) {
            Some(note) => format!(
                "{note}; a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory"
            ),
            None => format!("unknown condition type {t:?}"),
        };
        let message = format!("{at}.type: {what}; allowed: {known}");
        out.push(violation(
            RuleId::ConditionTypeUnknown,
            format!("{at}.type"),
            t,
            known,
            message,
        ));
        return false;
    };
    let Some(r) = reason else {
        return false;
    };
    let Some(re) = entry.reason(r) else {
        let allowed: Vec<_> = entry.reasons.iter().map(|r| r.reason.as_str()).collect();
        let what = match retired_note(policy, Kind::Reason, r) {
            Some(note) if policy.has_switch(super::CompatSwitch::KimHistory) => {
                format!("{note}, never together with type {t}")
            }
            Some(note) => format!(
                "{note}; a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory"
            ),
            None => format!("reason {r:?} is not allowed for type {t}"),
        };
        let mut msg = format!("{at}.reason: {what}; allowed: {}", allowed.join(", "));
        let elsewhere: Vec<_> = policy
            .types
            .iter()
            .filter(|o| {
                o.reason(r)
                    .is_some_and(|e| e.origin != super::table::Origin::KimRetired)
            })
            .map(|o| o.condition_type.as_str())
            .collect();
        if !elsewhere.is_empty() {
            let _ = write!(msg, " ({r:?} is a reason of type {})", elsewhere.join(", "));
        }
        out.push(violation(
            RuleId::ReasonUnknown,
            format!("{at}.reason"),
            r,
            allowed.join(", "),
            msg,
        ));
        return false;
    };
    if let Some(s) = status
        && !re.statuses.contains(&s)
    {
        let allowed: Vec<_> = re.statuses.iter().map(|s| s.as_str()).collect();
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
    re.deletion
}

/// Whether the old status has a condition with the same `type`, `status` and `reason` as
/// `cond` (status model §7.1: message, `lastTransitionTime` and `observedGeneration` may differ).
fn unchanged<J: JsonView>(old_status: Option<&J>, cond: &J) -> bool {
    if !cond.is_object() {
        return old_conditions(old_status).any(|o| o == cond);
    }
    let (t, s, r) = (cond.get("type"), cond.get("status"), cond.get("reason"));
    old_conditions(old_status).any(|o| {
        o.is_object() && o.get("type") == t && o.get("status") == s && o.get("reason") == r
    })
}

/// The old status's condition entries (objects or not).
fn old_conditions<J: JsonView>(old_status: Option<&J>) -> impl Iterator<Item = &J> {
    old_status
        .and_then(|s| s.get("conditions"))
        .and_then(J::as_array)
        .into_iter()
        .flatten()
}

/// Spec §7.1–7.2: the shape, type, reason and status violations of an unchanged condition
/// are ratcheted; a duplicate type is ratcheted unless the write adds a condition of that type.
fn ratchet_conditions<J: JsonView>(
    old_status: Option<&J>,
    conds: &[Cond<'_, J>],
    out: &mut [Violation],
) {
    if old_status.is_none() {
        return;
    }
    for c in conds {
        if c.violations.is_empty() {
            continue;
        }
        let is_unchanged = unchanged(old_status, c.obj);
        let same_type = |o: &&J| o.get("type") == c.obj.get("type");
        let added = conds.iter().map(|c| c.obj).filter(same_type).count()
            > old_conditions(old_status).filter(same_type).count();
        for v in &mut out[c.violations.clone()] {
            let ratcheted = if v.rule == RuleId::ConditionTypeDuplicate {
                !added
            } else {
                is_unchanged
            };
            if ratcheted {
                v.action = Action::Ratcheted;
            }
        }
    }
}

/// §4.3–4.5 — what the new state requires; ratcheted when the state is unchanged, the write
/// changes no condition the requirement reads, and the stored object broke it too (status model §7.3).
fn check_requirements<J: JsonView>(
    policy: &Policy,
    old_status: Option<&J>,
    status: &J,
    state: State,
    conds: &[Cond<'_, J>],
    out: &mut Vec<Violation>,
) {
    let same_state = old_status.and_then(|o| o.get("state")) == status.get("state");
    for (s, req, rule) in &policy.requirements {
        if *s != state {
            continue;
        }
        let first = out.len();
        check_requirement(policy, state, *req, *rule, conds, out);
        if out.len() == first || !same_state {
            continue;
        }
        let Some(old) = old_status else { continue };
        if !requirement_inputs_unchanged(*req, old, conds) {
            continue;
        }
        let mut scratch = Vec::new();
        let old_conds = read_conditions(policy, old, &mut scratch);
        let mut old_out = Vec::new();
        check_requirement(policy, state, *req, *rule, &old_conds, &mut old_out);
        if !old_out.is_empty() {
            for v in &mut out[first..] {
                v.action = Action::Ratcheted;
            }
        }
    }
}

/// Whether the write leaves every condition `req` reads as it was (status model §7.3): for
/// [`Requirement::AllTrue`] the named types; otherwise every condition.
fn requirement_inputs_unchanged<J: JsonView>(
    req: Requirement,
    old: &J,
    conds: &[Cond<'_, J>],
) -> bool {
    fn key<J: JsonView>(c: &J) -> (Option<&J>, Option<&J>) {
        (c.get("status"), c.get("reason"))
    }
    match req {
        Requirement::AllTrue(types) => types.iter().all(|t| {
            find_by_type(Some(old), t).map(key::<J>)
                == conds
                    .iter()
                    .find(|c| c.ctype == Some(*t))
                    .map(|c| key(c.obj))
        }),
        Requirement::AnyFalse | Requirement::TypeOrDeletionReason(_) => {
            conds.len() == old_conditions(Some(old)).count()
                && conds.iter().all(|c| unchanged(Some(old), c.obj))
        }
    }
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
                out.push(violation(
                    rule,
                    "status.conditions",
                    "",
                    format!("a {t} condition"),
                    format!(
                        "status.state: {state} requires a {t} condition{}; found none",
                        deletion_alternatives(policy, t)
                    ),
                ));
            }
        }
    }
}

/// " or a condition with a deletion reason (T/R, …)" for the deletion reasons of other types.
fn deletion_alternatives(policy: &Policy, t: &str) -> String {
    let reasons: Vec<String> = policy
        .types
        .iter()
        .filter(|ty| ty.condition_type != t)
        .flat_map(|ty| {
            ty.reasons
                .iter()
                .filter(|r| r.deletion)
                .map(move |r| format!("{}/{}", ty.condition_type, r.reason))
        })
        .collect();
    if reasons.is_empty() {
        String::new()
    } else {
        format!(
            " or a condition with a deletion reason ({})",
            reasons.join(", ")
        )
    }
}

/// §1 — `provisioningCompleted` is a boolean when present; a wrong value the stored object
/// already had is ratcheted (status model §7: a write is judged on what it changes).
fn check_provisioning_completed_type<J: JsonView>(
    old_status: Option<&J>,
    status: &J,
    out: &mut Vec<Violation>,
) {
    match status.get("provisioningCompleted") {
        None => {}
        Some(v) if v.is_null() || v.as_bool().is_some() => {}
        Some(other) => {
            let mut v = violation(
                RuleId::Malformed,
                "status.provisioningCompleted",
                show(other),
                "true or false",
                format!(
                    "status.provisioningCompleted: must be a boolean, got {}",
                    show(other)
                ),
            );
            if old_status.and_then(|o| o.get("provisioningCompleted")) == Some(other) {
                v.action = Action::Ratcheted;
            }
            out.push(v);
        }
    }
}

/// §4.6 — `provisioningCompleted` never goes from true back.
fn check_provisioning_completed<J: JsonView>(
    old_status: Option<&J>,
    status: &J,
    out: &mut Vec<Violation>,
) {
    let completed = |s: Option<&J>| {
        s.and_then(|s| s.get("provisioningCompleted"))
            .and_then(J::as_bool)
            == Some(true)
    };
    if completed(old_status) && !completed(Some(status)) {
        let got = status
            .get("provisioningCompleted")
            .map_or("absent".to_string(), show);
        out.push(violation(
            RuleId::ProvisioningCompleted,
            "status.provisioningCompleted",
            got.clone(),
            "true",
            format!("status.provisioningCompleted: may not go from true to {got}; once provisioning has completed it stays completed"),
        ));
    }
}

fn bad_time<J: JsonView>(index: usize, ltt: &J) -> Violation {
    let path = format!("status.conditions[{index}].lastTransitionTime");
    violation(
        RuleId::ConditionShape,
        path.clone(),
        show(ltt),
        "an RFC 3339 time",
        format!("{path}: {} is not an RFC 3339 time", quoted(ltt)),
    )
}

/// §4.7 — `lastTransitionTime` is an RFC 3339 time (an unparsable one the stored condition
/// already had, unchanged, is ratcheted), changes only with the status and never moves
/// backwards (compared as instants).
fn check_transition_times<J: JsonView>(
    old_status: Option<&J>,
    conds: &[Cond<'_, J>],
    out: &mut Vec<Violation>,
) {
    for c in conds {
        let (Some(ctype), Some(ltt)) = (c.ctype, c.obj.get("lastTransitionTime")) else {
            continue;
        };
        let Some(new_t) = ltt.as_str().and_then(parse_time) else {
            let mut v = bad_time(c.index, ltt);
            let key = ["type", "status", "reason", "lastTransitionTime"];
            if old_conditions(old_status).any(|o| key.iter().all(|k| o.get(k) == c.obj.get(k))) {
                v.action = Action::Ratcheted;
            }
            out.push(v);
            continue;
        };
        let old_c = matching_old(old_status, c.index, ctype);
        let old_ltt = old_c.and_then(|o| o.get("lastTransitionTime"));
        let (Some(old_c), Some(old_ltt)) = (old_c, old_ltt.and_then(J::as_str)) else {
            continue;
        };
        let Some(old_t) = parse_time(old_ltt) else {
            continue;
        };
        let path = || format!("status.conditions[{}].lastTransitionTime", c.index);
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
}
