//! [`Policy`]: the status model in force — the built-in table of [`super::table`], optionally
//! extended by an operator's policy file and compatibility switches, plus the allowed writers.
//!
//! A policy file can only *add* (condition types, reasons, statuses of a reason, transitions)
//! and name the allowed writers; it is validated completely when loaded, and any error stops
//! the load with a message naming the file, the field and what was expected
//! (`docs/status-model.md` §2, last paragraph: "an invalid file … never weakens the policy
//! silently").

use super::history::{self, Kind};
use super::table::{
    self, CompatSwitch, CondStatus, Edge, Enforcement, Origin, Requirement, RuleId, State,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

/// One reason of a condition type, with the statuses it may carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonEntry {
    pub reason: String,
    pub statuses: Vec<CondStatus>,
    /// Default message used when a condition arrives with an empty `message` (status model §5).
    pub message: String,
    /// Counts as a deletion reason for invariant 5.
    pub deletion: bool,
    pub origin: Origin,
}

/// A condition type and its reasons, in table order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeEntry {
    #[serde(rename = "type")]
    pub condition_type: String,
    pub reasons: Vec<ReasonEntry>,
}

impl TypeEntry {
    /// The entry for `reason`, if this type allows it.
    pub fn reason(&self, reason: &str) -> Option<&ReasonEntry> {
        self.reasons.iter().find(|r| r.reason == reason)
    }
}

/// Who may write `runtimes/status` (status model §4, invariant 8). A request is allowed when its user
/// is in `users` or one of its groups is in `groups`; `any: true` disables the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Writers {
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Anyone may write (the check is off). Only by explicit choice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any: bool,
}

impl Writers {
    /// The defaults of status model §4.8: the reconciler's service account and `system:masters`.
    pub(crate) fn defaults() -> Writers {
        Writers {
            users: table::DEFAULT_WRITER_USERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            groups: table::DEFAULT_WRITER_GROUPS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            any: false,
        }
    }

    /// Parses the `--allowed-writers` form: a comma-separated list where `group:NAME` names a
    /// group, `*` allows anyone and anything else is a user name, e.g.
    /// `system:serviceaccount:kim-system:kim-controller,group:system:masters`.
    ///
    /// Errors: an empty list or an empty entry ([`FieldError`] with path `allowed writers`).
    pub fn parse_list(s: &str) -> Result<Writers, FieldError> {
        let mut w = Writers::default();
        for raw in s.split(',') {
            let entry = raw.trim();
            if entry.is_empty() {
                return Err(FieldError::new(
                    "allowed writers",
                    format!("{s:?}: empty entry (expected user, group:NAME or *)"),
                ));
            }
            if entry == "*" {
                w.any = true;
            } else if let Some(g) = entry.strip_prefix("group:") {
                if g.is_empty() {
                    return Err(FieldError::new(
                        "allowed writers",
                        format!("{s:?}: \"group:\" without a name"),
                    ));
                }
                w.groups.push(g.to_string());
            } else {
                w.users.push(entry.to_string());
            }
        }
        Ok(w)
    }

    /// Whether `user` (with `groups`) may write.
    pub(crate) fn allows(&self, user: &str, groups: &[String]) -> bool {
        self.any
            || self.users.iter().any(|u| u == user)
            || groups.iter().any(|g| self.groups.contains(g))
    }

    /// Human form for messages: `users a, b; groups c`.
    pub(crate) fn describe(&self) -> String {
        if self.any {
            return "anyone".to_string();
        }
        let users = if self.users.is_empty() {
            "none".to_string()
        } else {
            self.users.join(", ")
        };
        let groups = if self.groups.is_empty() {
            "none".to_string()
        } else {
            self.groups.join(", ")
        };
        format!("users {users}; groups {groups}")
    }
}

/// The status model in force. Build it with [`Policy::builtin`], then optionally
/// [`Policy::with_switch`], [`Policy::load_file`] / `Policy::extend` and [`Policy::writers`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub states: Vec<State>,
    #[serde(rename = "conditionTypes")]
    pub types: Vec<TypeEntry>,
    #[serde(serialize_with = "ser_edges")]
    pub transitions: Vec<Edge>,
    #[serde(skip)]
    pub requirements: Vec<(State, Requirement, RuleId)>,
    pub switches: BTreeSet<CompatSwitchName>,
    #[serde(rename = "allowedWriters")]
    pub writers: Writers,
    /// The enforcement action of every rule without an entry in `rule_actions` (status model §7).
    pub enforcement: Enforcement,
    /// Per-rule enforcement actions; they win over `enforcement`.
    #[serde(rename = "ruleActions")]
    pub rule_actions: BTreeMap<RuleId, Enforcement>,
}

/// Serialisable wrapper so that `switches` prints as names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CompatSwitchName(pub &'static str);

fn ser_edges<S: serde::Serializer>(edges: &[Edge], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct E {
        from: &'static str,
        to: &'static str,
        only_while_deleting: bool,
    }
    s.collect_seq(edges.iter().map(|e| E {
        from: e.from.map_or("none", State::as_str),
        to: e.to.as_str(),
        only_while_deleting: e.only_while_deleting,
    }))
}

impl Default for Policy {
    fn default() -> Self {
        Policy::builtin()
    }
}

impl Policy {
    /// The built-in model of status model §2–§4, with no compatibility switch on and the default writers.
    pub fn builtin() -> Policy {
        let mut p = Policy {
            states: State::ALL.to_vec(),
            types: Vec::new(),
            transitions: table::EDGES.to_vec(),
            requirements: table::STATE_REQUIREMENTS.to_vec(),
            switches: BTreeSet::new(),
            writers: Writers::defaults(),
            enforcement: Enforcement::Deny,
            rule_actions: BTreeMap::new(),
        };
        for row in table::REASONS.iter().filter(|r| r.switch.is_none()) {
            p.add_reason(
                row.condition_type,
                row.reason,
                row.statuses,
                row.message,
                row.deletion,
                row.origin,
            );
        }
        p
    }

    /// Turns a compatibility switch on: its rows of the built-in table become allowed; for
    /// [`CompatSwitch::KimHistory`], the pairs of KIM's retired vocabulary
    /// (`Policy::add_kim_history`).
    pub fn with_switch(mut self, switch: CompatSwitch) -> Policy {
        if self.switches.insert(CompatSwitchName(switch.as_str())) {
            for row in table::REASONS.iter().filter(|r| r.switch == Some(switch)) {
                self.add_reason(
                    row.condition_type,
                    row.reason,
                    row.statuses,
                    row.message,
                    row.deletion,
                    row.origin,
                );
            }
            if switch == CompatSwitch::KimHistory {
                self.add_kim_history();
            }
        }
        self
    }

    /// Adds the (type, reason) pairs of KIM's history that involve a retired name (status model §7.6):
    /// every condition type and reason KIM declared at the same time (their date ranges
    /// overlap, [`history::Name::overlaps`]) where at least one of the two is retired, with any
    /// status (KIM never bound statuses to reasons), origin [`Origin::KimRetired`]. Pairs
    /// already in the table keep their row, widened to every status.
    fn add_kim_history(&mut self) {
        let vocabulary = history::vocabulary();
        let of = |kind: Kind| vocabulary.iter().filter(move |n| n.kind == kind);
        for t in of(Kind::Type) {
            for r in of(Kind::Reason) {
                // A pair the table has (a seed reason, say) keeps its row and gains every
                // status; a new one is added.
                if (t.retired() || r.retired()) && t.overlaps(r) {
                    let message = format!("{} (retired KIM vocabulary)", r.name);
                    self.add_reason(
                        t.name,
                        r.name,
                        &CondStatus::ALL,
                        &message,
                        false,
                        Origin::KimRetired,
                    );
                }
            }
        }
    }

    /// Whether a compatibility switch is on.
    pub(crate) fn has_switch(&self, switch: CompatSwitch) -> bool {
        self.switches.contains(&CompatSwitchName(switch.as_str()))
    }

    /// The enforcement action of `rule`: its entry in `rule_actions`, else `enforcement`.
    pub fn action(&self, rule: RuleId) -> Enforcement {
        self.rule_actions
            .get(&rule)
            .copied()
            .unwrap_or(self.enforcement)
    }

    /// Sets the default enforcement action of every rule without its own.
    pub fn with_enforcement(mut self, action: Enforcement) -> Policy {
        self.enforcement = action;
        self
    }

    /// Sets the enforcement action of one rule (wins over the default).
    pub fn with_rule_action(mut self, rule: RuleId, action: Enforcement) -> Policy {
        self.rule_actions.insert(rule, action);
        self
    }

    /// KIM's retired name of `kind` (status model §7.6), for messages: `None` when KIM never declared
    /// it or still does.
    pub(crate) fn retired(&self, kind: Kind, name: &str) -> Option<&'static history::Name> {
        history::retired(kind, name)
    }

    /// Replaces the allowed writers.
    pub fn with_writers(mut self, writers: Writers) -> Policy {
        self.writers = writers;
        self
    }

    fn add_reason(
        &mut self,
        ctype: &str,
        reason: &str,
        statuses: &[CondStatus],
        message: &str,
        deletion: bool,
        origin: Origin,
    ) {
        let idx = match self.types.iter().position(|t| t.condition_type == ctype) {
            Some(i) => i,
            None => {
                self.types.push(TypeEntry {
                    condition_type: ctype.to_string(),
                    reasons: Vec::new(),
                });
                self.types.len() - 1
            }
        };
        let t = &mut self.types[idx];
        if let Some(r) = t.reasons.iter_mut().find(|r| r.reason == reason) {
            for s in statuses {
                if !r.statuses.contains(s) {
                    r.statuses.push(*s);
                }
            }
            r.deletion |= deletion;
        } else {
            t.reasons.push(ReasonEntry {
                reason: reason.to_string(),
                statuses: statuses.to_vec(),
                message: message.to_string(),
                deletion,
                origin,
            });
        }
    }

    /// The entry of a condition type, if known.
    pub fn condition_type(&self, ctype: &str) -> Option<&TypeEntry> {
        self.types.iter().find(|t| t.condition_type == ctype)
    }

    /// The default message of a (type, reason) pair (status model §5): the table's, or `"TYPE REASON"`
    /// for a pair the policy does not know.
    pub(crate) fn default_message(&self, ctype: &str, reason: &str) -> String {
        self.reason(ctype, reason)
            .map_or_else(|| format!("{ctype} {reason}"), |r| r.message.clone())
    }

    /// The entry of a (type, reason) pair, if allowed.
    pub(crate) fn reason(&self, ctype: &str, reason: &str) -> Option<&ReasonEntry> {
        self.condition_type(ctype)?.reason(reason)
    }

    /// The edge `from -> to`, if the table has it.
    pub(crate) fn edge(&self, from: Option<State>, to: State) -> Option<&Edge> {
        self.transitions
            .iter()
            .find(|e| e.from == from && e.to == to)
    }

    /// All edges out of `from`, in table order.
    pub(crate) fn edges_from(&self, from: Option<State>) -> impl Iterator<Item = &Edge> {
        self.transitions.iter().filter(move |e| e.from == from)
    }

    /// Loads a policy file (YAML or JSON, at most [`POLICY_FILE_LIMIT`] bytes) and adds it to
    /// this policy.
    ///
    /// Errors: unreadable or larger file, YAML syntax or unknown field (with line and column), or a
    /// semantic error naming the field path (e.g. `conditionTypes[1].reasons[0].statuses[2]`).
    pub fn load_file(self, path: &Path) -> Result<Policy, PolicyError> {
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(POLICY_FILE_LIMIT + 1).read_to_string(&mut text))
            .map_err(|e| PolicyError {
                file: path.display().to_string(),
                message: format!("cannot read: {e}"),
            })?;
        if text.len() as u64 > POLICY_FILE_LIMIT {
            return Err(PolicyError {
                file: path.display().to_string(),
                message: "larger than 1 MiB, a ConfigMap's limit".into(),
            });
        }
        let file: PolicyFile = serde_saphyr::from_str(&text).map_err(|e| PolicyError {
            file: path.display().to_string(),
            message: one_line(&e.to_string()),
        })?;
        self.extend(&file).map_err(|e| PolicyError {
            file: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// Adds a parsed policy file, step by step: `kind`, compatibility switches, condition
    /// types and reasons, transitions, enforcement actions, writers.
    ///
    /// Errors: the first invalid field, with its path (e.g. `conditionTypes[1].reasons[0]`).
    pub(crate) fn extend(mut self, file: &PolicyFile) -> Result<Policy, FieldError> {
        if let Some(kind) = file.kind.as_deref().filter(|k| *k != "StatusPolicy") {
            return Err(FieldError::new(
                "kind",
                format!("{kind:?}; expected StatusPolicy"),
            ));
        }
        for (i, name) in file.compatibility.iter().enumerate() {
            let sw = CompatSwitch::parse(name).ok_or_else(|| {
                let known: Vec<_> = CompatSwitch::ALL.iter().map(|s| s.as_str()).collect();
                FieldError::new(
                    format!("compatibility[{i}]"),
                    format!("unknown switch {name:?}; known: {}", known.join(", ")),
                )
            })?;
            self = self.with_switch(sw);
        }
        for (i, t) in file.condition_types.iter().enumerate() {
            self.extend_type(&format!("conditionTypes[{i}]"), t)?;
        }
        for (i, tr) in file.transitions.iter().enumerate() {
            self.extend_transition(&format!("transitions[{i}]"), tr)?;
        }
        if let Some(e) = &file.enforcement {
            self.extend_enforcement(e)?;
        }
        if let Some(w) = &file.allowed_writers {
            if !w.any && w.users.is_empty() && w.groups.is_empty() {
                return Err(FieldError::new(
                    "allowedWriters",
                    "names no user and no group (set any: true to allow everyone)",
                ));
            }
            self.writers = w.clone();
        }
        Ok(self)
    }

    /// A condition type of a policy file and its reasons (`at` = `conditionTypes[i]`).
    fn extend_type(&mut self, at: &str, t: &PolicyFileType) -> Result<(), FieldError> {
        check_type_name(&t.condition_type).map_err(|m| FieldError::new(format!("{at}.type"), m))?;
        if State::parse(&t.condition_type).is_some() {
            return Err(FieldError::new(
                format!("{at}.type"),
                format!(
                    "{:?} is a state name, not a condition type (use a compatibility switch for KIM's Terminating condition)",
                    t.condition_type
                ),
            ));
        }
        if t.reasons.is_empty() {
            return Err(FieldError::new(
                format!("{at}.reasons"),
                "at least one reason is required",
            ));
        }
        for (j, r) in t.reasons.iter().enumerate() {
            let at = format!("{at}.reasons[{j}]");
            check_reason_name(&r.reason).map_err(|m| FieldError::new(format!("{at}.reason"), m))?;
            if r.statuses.is_empty() {
                return Err(FieldError::new(
                    format!("{at}.statuses"),
                    format!("at least one of {} is required", status_names()),
                ));
            }
            let mut statuses = Vec::new();
            for (k, s) in r.statuses.iter().enumerate() {
                statuses.push(CondStatus::parse(s).ok_or_else(|| {
                    FieldError::new(
                        format!("{at}.statuses[{k}]"),
                        format!("{s:?} is not one of {}", status_names()),
                    )
                })?);
            }
            let message = match &r.message {
                Some(m) => m.clone(),
                None => self.default_message(&t.condition_type, &r.reason),
            };
            if message.chars().count() > 32768 {
                return Err(FieldError::new(
                    format!("{at}.message"),
                    "longer than 32768 characters",
                ));
            }
            self.add_reason(
                &t.condition_type,
                &r.reason,
                &statuses,
                &message,
                r.deletion,
                Origin::PolicyFile,
            );
        }
        Ok(())
    }

    /// A transition of a policy file (`at` = `transitions[i]`). Deletion is final: nothing
    /// leaves Terminating but the built-in edges, Terminating is entered only while deleting,
    /// and a file only widens (a footnote edge may become unconditional, never the reverse).
    fn extend_transition(&mut self, at: &str, tr: &PolicyFileTransition) -> Result<(), FieldError> {
        let from = if tr.from == "none" {
            None
        } else {
            Some(State::parse(&tr.from).ok_or_else(|| {
                FieldError::new(
                    format!("{at}.from"),
                    format!("{:?} is not a state ({}) or none", tr.from, state_names()),
                )
            })?)
        };
        if from == Some(State::Terminating) {
            return Err(FieldError::new(
                format!("{at}.from"),
                "edges out of Terminating cannot be added (deletion is final)",
            ));
        }
        if tr.to == State::Terminating.as_str() && !tr.only_while_deleting {
            return Err(FieldError::new(
                format!("{at}.onlyWhileDeleting"),
                "must be true for a transition to Terminating (Terminating is entered only while the Runtime is being deleted)",
            ));
        }
        let to = State::parse(&tr.to).ok_or_else(|| {
            FieldError::new(
                format!("{at}.to"),
                format!(
                    "{:?} is not a state ({}); removing the status is never allowed",
                    tr.to,
                    state_names()
                ),
            )
        })?;
        match self
            .transitions
            .iter_mut()
            .find(|e| e.from == from && e.to == to)
        {
            Some(e) if tr.only_while_deleting && !e.only_while_deleting => {
                return Err(FieldError::new(
                    at,
                    format!(
                        "{} -> {} is already allowed unconditionally; a policy file can only add",
                        tr.from, tr.to
                    ),
                ));
            }
            Some(e) => e.only_while_deleting = tr.only_while_deleting,
            None => self.transitions.push(Edge {
                from,
                to,
                only_while_deleting: tr.only_while_deleting,
            }),
        }
        Ok(())
    }

    /// The `enforcement` block of a policy file.
    fn extend_enforcement(&mut self, e: &PolicyFileEnforcement) -> Result<(), FieldError> {
        let parse = |at: String, a: &str| {
            Enforcement::parse(a)
                .ok_or_else(|| FieldError::new(at, format!("{a:?} is not one of deny, warn")))
        };
        if let Some(a) = &e.action {
            self.enforcement = parse("enforcement.action".into(), a)?;
        }
        for (rule, action) in &e.rules {
            let at = format!("enforcement.rules.{rule}");
            let id = RuleId::parse(rule).ok_or_else(|| {
                let known: Vec<_> = RuleId::ALL.iter().map(|r| r.as_str()).collect();
                FieldError::new(
                    at.clone(),
                    format!("unknown rule id; known: {}", known.join(", ")),
                )
            })?;
            self.rule_actions.insert(id, parse(at, action)?);
        }
        Ok(())
    }
}

/// `Pending, Ready, Failed, Terminating`, from the table.
fn state_names() -> String {
    State::ALL.map(State::as_str).join(", ")
}

/// `True, False, Unknown`, from the table.
pub(crate) fn status_names() -> String {
    CondStatus::ALL.map(CondStatus::as_str).join(", ")
}

/// An invalid field of a policy file: its path (e.g. `conditionTypes[1].reasons[0].statuses[2]`)
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Largest policy file read: 1 MiB, the most a ConfigMap (where a policy file is mounted
/// from) can hold.
pub const POLICY_FILE_LIMIT: u64 = 1024 * 1024;

/// A policy-file load error: the file and a one-line message naming the field or position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy file {file}: {message}")]
pub struct PolicyError {
    pub file: String,
    pub message: String,
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Condition `reason` syntax of the Kubernetes `metav1.Condition` type (CamelCase word).
pub const REASON_PATTERN: &str = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// Condition `type` syntax of the Kubernetes `metav1.Condition` type (optionally prefixed).
pub const TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

fn check_reason_name(r: &str) -> Result<(), String> {
    let b = r.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 1024
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        && (b.len() == 1 || b[b.len() - 1].is_ascii_alphanumeric() || b[b.len() - 1] == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{r:?} does not match {REASON_PATTERN} (at most 1024 characters)"
        ))
    }
}

fn check_type_name(t: &str) -> Result<(), String> {
    let (prefix, name) = t.rsplit_once('/').map_or((None, t), |(p, n)| (Some(p), n));
    // The optional prefix is a DNS subdomain: dot-separated RFC 1123 labels.
    let label = |l: &str| {
        let b = l.as_bytes();
        let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !b.is_empty()
            && b.len() <= 63
            && b.iter().all(|c| ok(c) || *c == b'-')
            && b.first().is_some_and(ok)
            && b.last().is_some_and(ok)
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(label));
    let b = name.as_bytes();
    let ok = prefix_ok
        && !b.is_empty()
        && t.len() <= 316
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{t:?} does not match {TYPE_PATTERN} (at most 316 characters)"
        ))
    }
}

/// The policy file format (YAML or JSON). Unknown fields are errors.
///
/// ```yaml
/// compatibility: [terminatingConditionType, kimHistory]
/// enforcement: {action: warn, rules: {writer: deny}}
/// allowedWriters: {users: ["system:serviceaccount:kim-system:kim-controller"], groups: ["system:masters"]}
/// conditionTypes:
///   - type: BackupConfigured
///     reasons:
///       - {reason: BackupReady, statuses: ["True"], message: "Backup configured"}
/// transitions:
///   - {from: none, to: Ready}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyFile {
    /// Ignored except for documentation (e.g. `kim.kyma-project.io/v1alpha1`).
    #[serde(default)]
    pub api_version: Option<String>,
    /// Must be `StatusPolicy` when present.
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub compatibility: Vec<String>,
    #[serde(default)]
    pub allowed_writers: Option<Writers>,
    #[serde(default)]
    pub condition_types: Vec<PolicyFileType>,
    #[serde(default)]
    pub transitions: Vec<PolicyFileTransition>,
    /// Enforcement actions (status model §7): `{action: warn, rules: {writer: deny}}`.
    #[serde(default)]
    pub enforcement: Option<PolicyFileEnforcement>,
}

/// The `enforcement` block of a policy file: the default action of every rule (`deny` or
/// `warn`) and per-rule actions keyed by rule id (`kim policy` lists the ids).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFileEnforcement {
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub rules: BTreeMap<String, String>,
}

/// A condition type added (or extended) by a policy file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFileType {
    #[serde(rename = "type")]
    pub condition_type: String,
    pub reasons: Vec<PolicyFileReason>,
}

/// A reason added by a policy file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFileReason {
    pub reason: String,
    pub statuses: Vec<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub deletion: bool,
}

/// A transition added by a policy file; `from: none` is ∅.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyFileTransition {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub only_while_deleting: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_has_every_row_once() {
        let p = Policy::builtin();
        let n: usize = p.types.iter().map(|t| t.reasons.len()).sum();
        assert_eq!(
            n,
            table::REASONS.iter().filter(|r| r.switch.is_none()).count()
        );
        assert!(p.reason("Terminating", "KubernetesErr").is_none());
        let p = p.with_switch(CompatSwitch::TerminatingConditionType);
        assert!(p.reason("Terminating", "KubernetesErr").unwrap().deletion);
    }

    #[test]
    fn policy_file_adds_and_rejects() {
        let f: PolicyFile = serde_saphyr::from_str(
            "conditionTypes:\n  - type: BackupConfigured\n    reasons:\n      - {reason: BackupReady, statuses: [\"True\"]}\ntransitions:\n  - {from: none, to: Ready}\n",
        )
        .unwrap();
        let p = Policy::builtin().extend(&f).unwrap();
        assert_eq!(
            p.reason("BackupConfigured", "BackupReady")
                .unwrap()
                .statuses,
            vec![CondStatus::True]
        );
        assert!(!p.edge(None, State::Ready).unwrap().only_while_deleting);
        for bad in [
            "transitions:\n  - {from: Terminating, to: Pending, onlyWhileDeleting: true}\n",
            "transitions:\n  - {from: Ready, to: Terminating}\n",
        ] {
            let f: PolicyFile = serde_saphyr::from_str(bad).unwrap();
            let err = Policy::builtin().extend(&f).unwrap_err().to_string();
            assert!(
                err.starts_with("transitions[0]")
                    && (err.contains("deletion is final") || err.contains("being deleted")),
                "{err}"
            );
        }

        let bad: PolicyFile = serde_saphyr::from_str("conditionTypes:\n  - type: X\n    reasons:\n      - {reason: \"bad reason\", statuses: [\"True\"]}\n").unwrap();
        let err = Policy::builtin().extend(&bad).unwrap_err().to_string();
        assert!(
            err.starts_with("conditionTypes[0].reasons[0].reason:"),
            "{err}"
        );

        let bad: PolicyFile =
            serde_saphyr::from_str("transitions:\n  - {from: Ready, to: none}\n").unwrap();
        assert!(
            Policy::builtin()
                .extend(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("transitions[0].to:")
        );

        let unknown = serde_saphyr::from_str::<PolicyFile>("conditionType: []\n");
        assert!(unknown.is_err());
    }

    #[test]
    fn writers_list() {
        let w = Writers::parse_list("alice, group:ops").unwrap();
        assert!(w.allows("alice", &[]));
        assert!(w.allows("bob", &["ops".into()]));
        assert!(!w.allows("bob", &["dev".into()]));
        assert!(Writers::parse_list("a,,b").is_err());
        assert!(Writers::parse_list("*").unwrap().allows("x", &[]));
    }
}
