//! `kim policy --format vap`: the policy in force as `ValidatingAdmissionPolicy` and
//! `ValidatingAdmissionPolicyBinding` objects (`admissionregistration.k8s.io/v1`), so that
//! kube-apiserver enforces the rules CEL expresses simply, in-process, without the webhook.
//!
//! Every expression is generated from the [`Policy`]: its states, edges, condition types,
//! reasons, statuses, deletion reasons, state requirements and allowed writers. Each rule is
//! one `validations` entry whose message starts with the rule id, as the webhook's denial
//! lines do (`[transition] …`). Rules in `deny` mode go into one policy bound with
//! `validationActions: [Deny]`, rules in `warn` mode into a second one bound with
//! `[Warn, Audit]`. The bindings select no namespace: as kim's webhook configurations, they
//! judge `runtimes/status` writes in every namespace (the status model does not depend on it).
//!
//! Ratcheting (`docs/status-model.md` §7) as the webhook does it: a write that leaves `status`
//! as it was is not judged at all (the policies' match condition); condition rules judge only
//! conditions that the stored object has with no identical `type`, `status` and `reason`; an
//! unknown state the stored object already had, a footnote edge from a state to itself, and a
//! state requirement the stored object broke too with the write leaving its inputs alone are
//! not judged.

use super::Policy;
use super::table::{CondStatus, Enforcement, Requirement, RuleId, State};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// Name of the policy (and its binding) holding the rules in `deny` mode.
pub const DENY_NAME: &str = "kim-runtime-status";
/// Name of the policy (and its binding) holding the rules in `warn` mode.
pub const WARN_NAME: &str = "kim-runtime-status-warn";

/// The rules the generated policy does not express, and why.
pub const LEFT_OUT: &[(RuleId, &str)] = &[
    (
        RuleId::Malformed,
        "the CRD's structural schema refuses wrong JSON types before any policy runs",
    ),
    (
        RuleId::StateRequired,
        "the CRD schema requires status.state once status exists",
    ),
    (
        RuleId::ConditionShape,
        "the CRD schema requires type, status, reason, message and lastTransitionTime and checks their patterns",
    ),
];

/// What the generated policy does not do, one line each (shown in the YAML's comment block
/// and in `kim policy`'s Markdown).
pub(crate) fn limitations() -> Vec<String> {
    let mut out = vec![
        "no defaulting or mutation (status model §5): a ValidatingAdmissionPolicy only admits or refuses; empty messages and lastTransitionTime are not filled in".to_string(),
        "messages start with the webhook's rule id but are shorter: they name the first offending value, not every one, nor the allowed alternatives".to_string(),
        "when several rules fail, kube-apiserver reports one denial message, not every violation".to_string(),
        "no 10-warnings cap and no per-warning length limit of the webhook: kube-apiserver adds one warning per failing rule in warn mode".to_string(),
        "ratcheted violations (status model §7) are skipped silently, without the webhook's (ratcheted) warnings, audit annotations or metrics".to_string(),
        "an unknown state or condition status is refused by the CRD schema before the policy runs, so [state-unknown] is only seen from the schema's answer".to_string(),
        "[last-transition-time] compares a condition with the stored condition of its type (the first of that type); the webhook prefers the one at the same index, which differs only where a type repeats".to_string(),
    ];
    for (rule, why) in LEFT_OUT {
        out.push(format!("rule {} is left out: {why}", rule.as_str()));
    }
    out
}

/// The Markdown section on the generated policy, for `kim policy`.
pub(crate) fn markdown() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### ValidatingAdmissionPolicy (`kim policy --format vap`)\n\nThe generated policy enforces the model in kube-apiserver with CEL. It does not do the following:\n"
    );
    for line in limitations() {
        let _ = writeln!(s, "- {line}");
    }
    s
}

/// A CEL string literal.
pub(crate) fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            // A raw control character ends a CEL string literal with a syntax error; U+FFFE
            // and U+FFFF are refused by the YAML reader of `kubectl apply --server-side`.
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A CEL list of string literals.
fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| lit(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// One `validations` entry: the rule, the expression that must hold, the message expression.
pub struct Validation {
    pub rule: RuleId,
    pub expression: String,
    pub message_expression: String,
}

fn v(rule: RuleId, expression: String, message: String) -> Validation {
    Validation {
        rule,
        expression,
        message_expression: format!("{} + {message}", lit(&format!("[{}] ", rule.as_str()))),
    }
}

/// The policy's `variables`: reads of the new and stored status every rule shares.
fn variables(policy: &Policy) -> Vec<(&'static str, String)> {
    let states = list(policy.states.iter().map(|s| s.as_str()));
    let retired: Vec<String> = super::table::RETIRED_STATE_EQUIVALENTS
        .iter()
        .map(|(name, eq)| format!("{}: {}", lit(name), lit(eq.as_str())))
        .collect();
    let retired = format!("{{{}}}", retired.join(", "));
    let conds = |obj: &str| {
        format!("has({obj}.status) && has({obj}.status.conditions) ? {obj}.status.conditions : []")
    };
    vec![
        ("hasStatus", "has(object.status)".to_string()),
        ("hadStatus", "has(oldObject.status)".to_string()),
        (
            "state",
            "has(object.status) && has(object.status.state) ? object.status.state : ''".to_string(),
        ),
        (
            "oldState",
            "has(oldObject.status) && has(oldObject.status.state) ? oldObject.status.state : ''"
                .to_string(),
        ),
        // The stored state for transitions: a state, a retired state's equivalent, or '' (∅).
        (
            "from",
            format!(
                "variables.oldState in {states} ? variables.oldState : (variables.oldState in {retired} ? {retired}[variables.oldState] : '')"
            ),
        ),
        ("conds", conds("object")),
        ("oldConds", conds("oldObject")),
        // The types of the conditions, in order: `indexOf`, `lastIndexOf` and `in` on them
        // loop in Go, not in CEL (the condition rules stay linear in CEL steps).
        ("types", "variables.conds.map(c, c.type)".to_string()),
        ("oldTypes", "variables.oldConds.map(c, c.type)".to_string()),
        // (type, status, reason) of each stored condition; status and reason never contain
        // '/', so the key reads back unambiguously from the right.
        (
            "oldKeys",
            "variables.oldConds.map(o, o.type + '/' + o.status + '/' + o.reason)".to_string(),
        ),
        // (type, status, lastTransitionTime) of each stored condition.
        (
            "oldTimes",
            "variables.oldConds.map(o, o.type + '/' + o.status + '/' + (has(o.lastTransitionTime) ? o.lastTransitionTime : ''))".to_string(),
        ),
        // Conditions the stored status has no identical (type, status, reason) of (§7.1).
        (
            "changed",
            "variables.conds.filter(c, !((c.type + '/' + c.status + '/' + c.reason) in variables.oldKeys))".to_string(),
        ),
    ]
}

/// `L` has a first condition of type `t` with status True.
fn first_true(l: &str, t: &str) -> String {
    let t = lit(t);
    format!("({l}.exists(c, c.type == {t}) && {l}.filter(c, c.type == {t})[0].status == 'True')")
}

/// The first condition of type `t` has the same status and reason in both lists (or neither has one).
fn first_same(t: &str) -> String {
    let t = lit(t);
    let (n, o) = ("variables.conds", "variables.oldConds");
    format!(
        "({n}.exists(c, c.type == {t}) == {o}.exists(c, c.type == {t}) && (!{n}.exists(c, c.type == {t}) || ({n}.filter(c, c.type == {t})[0].status == {o}.filter(c, c.type == {t})[0].status && {n}.filter(c, c.type == {t})[0].reason == {o}.filter(c, c.type == {t})[0].reason)))"
    )
}

fn requirement(policy: &Policy, state: State, req: Requirement, rule: RuleId) -> Validation {
    let holds = |l: &str| match req {
        Requirement::AllTrue(types) => types
            .iter()
            .map(|t| first_true(l, t))
            .collect::<Vec<_>>()
            .join(" && "),
        Requirement::AnyFalse => format!("{l}.exists(c, c.status == 'False')"),
        Requirement::TypeOrDeletionReason(t) => {
            let pairs = policy.types.iter().flat_map(|ty| {
                ty.reasons
                    .iter()
                    .filter(|r| r.deletion)
                    .map(move |r| format!("{}/{}", ty.condition_type, r.reason))
            });
            format!(
                "{l}.exists(c, c.type == {} || (c.type + '/' + c.reason) in {})",
                lit(t),
                list(pairs)
            )
        }
    };
    let unchanged = match req {
        Requirement::AllTrue(types) => types
            .iter()
            .map(|t| first_same(t))
            .collect::<Vec<_>>()
            .join(" && "),
        Requirement::AnyFalse | Requirement::TypeOrDeletionReason(_) => {
            "(variables.conds.size() == variables.oldConds.size() && variables.changed.size() == 0)"
                .to_string()
        }
    };
    let st = lit(state.as_str());
    let expression = format!(
        "variables.state != {st} || ({}) || (variables.oldState == variables.state && {unchanged} && !({}))",
        holds("variables.conds"),
        holds("variables.oldConds")
    );
    let what = match req {
        Requirement::AllTrue(types) => {
            format!("requires conditions {} with status True", types.join(", "))
        }
        Requirement::AnyFalse => "requires at least one condition with status False".to_string(),
        Requirement::TypeOrDeletionReason(t) => {
            format!("requires a {t} condition or one with a deletion reason")
        }
    };
    v(
        rule,
        expression,
        lit(&format!("status.state: {state} {what}")),
    )
}

/// Every `validations` entry the policy in force gives, in the webhook's rule order.
pub fn validations(policy: &Policy) -> Vec<Validation> {
    let states: Vec<&str> = policy.states.iter().map(|s| s.as_str()).collect();
    let state_list = list(&states);
    let mut out = Vec::new();
    if !policy.writers.any {
        out.push(v(
            RuleId::Writer,
            format!(
                "request.userInfo.username in {} || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in {}))",
                list(&policy.writers.users),
                list(&policy.writers.groups)
            ),
            format!(
                "'user ' + request.userInfo.username + {}",
                lit(&format!(
                    " may not write Runtime status; allowed writers: {}",
                    policy.writers.describe()
                ))
            ),
        ));
    }
    out.push(v(
        RuleId::StatusRemoved,
        "!variables.hadStatus || variables.hasStatus".to_string(),
        lit("status: removing the status is not allowed; a Runtime's status may change but never disappear"),
    ));
    out.push(v(
        RuleId::StateUnknown,
        format!(
            "!variables.hasStatus || variables.state == '' || variables.state in {state_list} || variables.state == variables.oldState"
        ),
        format!(
            "'status.state: unknown state ' + variables.state + {}",
            lit(&format!("; allowed: {}", states.join(", ")))
        ),
    ));
    let mut edges = Vec::new();
    let mut deleting_edges = Vec::new();
    let froms = std::iter::once(None).chain(policy.states.iter().copied().map(Some));
    for from in froms {
        for &to in &policy.states {
            if let Some(e) = policy.edge(from, to) {
                let key = format!("{}>{}", from.map_or("", State::as_str), to.as_str());
                if e.only_while_deleting {
                    deleting_edges.push(key.clone());
                }
                edges.push(key);
            }
        }
    }
    let from_name = "(variables.from == '' ? 'none' : variables.from)";
    let pair = "(variables.from + '>' + variables.state)";
    out.push(v(
        RuleId::Transition,
        format!(
            "!variables.hasStatus || !(variables.state in {state_list}) || {pair} in {}",
            list(&edges)
        ),
        format!(
            "'status.state: transition ' + {from_name} + ' -> ' + variables.state + ' is not allowed'"
        ),
    ));
    out.push(v(
        RuleId::TransitionNeedsDeletion,
        format!(
            "!variables.hasStatus || !({pair} in {}) || has(object.metadata.deletionTimestamp) || variables.from == variables.state",
            list(&deleting_edges)
        ),
        format!(
            "'status.state: transition ' + {from_name} + ' -> ' + variables.state + ' is allowed only while the Runtime is being deleted (metadata.deletionTimestamp is not set)'"
        ),
    ));
    let types = list(policy.types.iter().map(|t| t.condition_type.as_str()));
    out.push(v(
        RuleId::ConditionTypeUnknown,
        format!("variables.changed.all(c, c.type in {types})"),
        format!(
            "'status.conditions: unknown condition type ' + variables.changed.filter(c, !(c.type in {types}))[0].type"
        ),
    ));
    // A type is counted only when it occurs twice (rare): the common case is two native scans.
    out.push(v(
        RuleId::ConditionTypeDuplicate,
        "variables.types.all(t, variables.types.indexOf(t) == variables.types.lastIndexOf(t) || variables.types.filter(x, x == t).size() <= variables.oldTypes.filter(x, x == t).size())".to_string(),
        lit("status.conditions: duplicate condition type; at most one condition per type"),
    ));
    let reasons: Vec<String> = policy
        .types
        .iter()
        .map(|t| {
            format!(
                "{}: {}",
                lit(&t.condition_type),
                list(t.reasons.iter().map(|r| r.reason.as_str()))
            )
        })
        .collect();
    let reasons = format!("{{{}}}", reasons.join(", "));
    let bad_reason = format!("!(c.type in {reasons}) || c.reason in {reasons}[c.type]");
    out.push(v(
        RuleId::ReasonUnknown,
        format!("variables.changed.all(c, {bad_reason})"),
        format!(
            "'status.conditions: reason ' + variables.changed.filter(c, !({bad_reason}))[0].reason + ' is not allowed for type ' + variables.changed.filter(c, !({bad_reason}))[0].type"
        ),
    ));
    let statuses: Vec<String> = policy
        .types
        .iter()
        .flat_map(|t| {
            t.reasons.iter().map(move |r| {
                format!(
                    "{}: {}",
                    lit(&format!("{}/{}", t.condition_type, r.reason)),
                    list(r.statuses.iter().map(|s: &CondStatus| s.as_str()))
                )
            })
        })
        .collect();
    let statuses = format!("{{{}}}", statuses.join(", "));
    let key = "(c.type + '/' + c.reason)";
    let bad_status = format!("!({key} in {statuses}) || c.status in {statuses}[{key}]");
    out.push(v(
        RuleId::ReasonStatus,
        format!("variables.changed.all(c, {bad_status})"),
        format!(
            "'status.conditions: ' + variables.changed.filter(c, !({bad_status})).map(c, {key} + ' may not be ' + c.status)[0]"
        ),
    ));
    for (state, req, rule) in &policy.requirements {
        out.push(requirement(policy, *state, *req, *rule));
    }
    out.push(v(
        RuleId::ProvisioningCompleted,
        "!variables.hasStatus || !(variables.hadStatus && has(oldObject.status.provisioningCompleted) && oldObject.status.provisioningCompleted == true) || (has(object.status.provisioningCompleted) && object.status.provisioningCompleted == true)".to_string(),
        lit("status.provisioningCompleted: may not go from true to false; once provisioning has completed it stays completed"),
    ));
    // A condition whose (type, status, lastTransitionTime) the stored status has is fine (the
    // common case, one `in`); otherwise the stored condition of its type (`indexOf`, repeated
    // rather than bound) is compared as instants.
    let o = "variables.oldConds[variables.oldTypes.indexOf(c.type)]";
    let ltt_ok = format!(
        "!has(c.lastTransitionTime) || (c.type + '/' + c.status + '/' + c.lastTransitionTime) in variables.oldTimes || !(c.type in variables.oldTypes) || !has({o}.lastTransitionTime) || ({o}.status == c.status ? timestamp(c.lastTransitionTime) == timestamp({o}.lastTransitionTime) : timestamp(c.lastTransitionTime) >= timestamp({o}.lastTransitionTime))"
    );
    out.push(v(
        RuleId::LastTransitionTime,
        format!("!variables.hasStatus || variables.conds.all(c, {ltt_ok})"),
        format!(
            "'status.conditions: lastTransitionTime of ' + variables.conds.filter(c, !({ltt_ok}))[0].type + {}",
            lit(" changed although its status did not, or moved backwards; it changes only when the status changes")
        ),
    ));
    out
}

/// The labels of the generated objects, in the style of the other manifests.
fn labels() -> Value {
    json!({"app.kubernetes.io/component": "policy", "app.kubernetes.io/part-of": "kim"})
}

/// The policy and binding objects: one pair for the rules in `deny` mode, one for those in
/// `warn` mode (each only when it has rules). The bindings have no `matchResources`: they
/// match `runtimes/status` writes in every namespace, as the webhook configurations do.
pub fn objects(policy: &Policy) -> Vec<Value> {
    let all = validations(policy);
    let vars: Vec<Value> = variables(policy)
        .into_iter()
        .map(|(name, expression)| json!({"name": name, "expression": expression}))
        .collect();
    let mut out = Vec::new();
    for (mode, name, actions) in [
        (Enforcement::Deny, DENY_NAME, json!(["Deny"])),
        (Enforcement::Warn, WARN_NAME, json!(["Warn", "Audit"])),
    ] {
        let validations: Vec<Value> = all
            .iter()
            .filter(|v| policy.action(v.rule) == mode)
            .map(|v| {
                json!({
                    "expression": v.expression,
                    "messageExpression": v.message_expression,
                    "reason": "Forbidden",
                })
            })
            .collect();
        if validations.is_empty() {
            continue;
        }
        out.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels()},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [{
                        "apiGroups": ["infrastructuremanager.kyma-project.io"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["runtimes/status"],
                    }],
                },
                // §7: a write that leaves the status as it was is not judged.
                "matchConditions": [{
                    "name": "status-changed",
                    "expression": "has(object.status) != has(oldObject.status) || (has(object.status) && object.status != oldObject.status)",
                }],
                "variables": vars,
                "validations": validations,
            },
        }));
        out.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels()},
            "spec": {"policyName": name, "validationActions": actions},
        }));
    }
    out
}

/// kube-apiserver's limit on one CEL expression, in code points.
pub(crate) const MAX_EXPRESSION_CHARS: usize = 100_000;

/// Checks that every expression of the generated policy fits kube-apiserver's limit
/// ([`MAX_EXPRESSION_CHARS`]), which a policy file with very many or very long reasons can
/// exceed.
///
/// # Errors
/// One line naming the first rule whose expression (or message expression) is too long, and
/// its size.
pub(crate) fn check_size(policy: &Policy) -> Result<(), String> {
    for v in validations(policy) {
        for (what, e) in [
            ("expression", &v.expression),
            ("messageExpression", &v.message_expression),
        ] {
            let n = e.chars().count();
            if n > MAX_EXPRESSION_CHARS {
                return Err(format!(
                    "the generated policy's rule {} has a CEL {what} of {n} code points; kube-apiserver accepts at most {MAX_EXPRESSION_CHARS} (fewer or shorter reasons in the policy file)",
                    v.rule.as_str()
                ));
            }
        }
    }
    Ok(())
}

/// The YAML of [`objects`], documents separated by `---`, after a comment block saying what
/// the policy covers and what it does not do.
pub(crate) fn yaml(policy: &Policy) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by `kim policy --format vap` from the status model in force."
    );
    let covered: Vec<&str> = validations(policy)
        .iter()
        .map(|v| v.rule.as_str())
        .collect();
    let _ = writeln!(s, "# Rules enforced with CEL: {}.", covered.join(", "));
    let _ = writeln!(
        s,
        "# Scope: runtimes/status UPDATEs in every namespace (the bindings select none)."
    );
    let _ = writeln!(s, "# What this policy does NOT do:");
    for line in limitations() {
        let _ = writeln!(s, "#   - {line}");
    }
    for obj in objects(policy) {
        let _ = writeln!(s, "---");
        s.push_str(&serde_saphyr::to_string(&obj).expect("the policy serialises to YAML"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_literals_escape_quotes_and_backslashes() {
        assert_eq!(lit("a'b\\c"), "'a\\'b\\\\c'");
        assert_eq!(lit("a\rb\u{7}c\nd"), "'a\\u000db\\u0007c\\nd'");
        assert_eq!(lit("a\u{fffe}b\u{ffff}"), "'a\\ufffeb\\uffff'");
    }

    #[test]
    fn warn_rules_get_their_own_policy() {
        let p = Policy::builtin().with_rule_action(RuleId::Writer, Enforcement::Warn);
        let objs = objects(&p);
        assert_eq!(objs.len(), 4);
        assert_eq!(
            objs[3]["spec"]["validationActions"],
            json!(["Warn", "Audit"])
        );
        assert_eq!(
            objs[2]["spec"]["validations"].as_array().map(Vec::len),
            Some(1)
        );
        let all_warn = objects(&Policy::builtin().with_enforcement(Enforcement::Warn));
        assert_eq!(all_warn.len(), 2);
        assert_eq!(all_warn[0]["metadata"]["name"], WARN_NAME);
    }

    #[test]
    fn the_yaml_parses_back_to_the_objects_bound_in_every_namespace() {
        let p = Policy::builtin().with_rule_action(RuleId::Writer, Enforcement::Warn);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml(&p)).expect("YAML");
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        assert_eq!(docs, objects(&p));
        let bindings: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
            .collect();
        assert_eq!(bindings.len(), 2, "a deny and a warn binding");
        for b in bindings {
            assert!(b["spec"].get("matchResources").is_none(), "{b}");
        }
    }
}
