//! `kim policy --format map`: the defaulting of `docs/status-model.md` §5 as a
//! `MutatingAdmissionPolicy` and its `MutatingAdmissionPolicyBinding`
//! (`admissionregistration.k8s.io/v1`, GA and on by default since Kubernetes 1.36), so that
//! kube-apiserver defaults Runtime status writes in-process, without the mutating webhook.
//! Beside the ValidatingAdmissionPolicy of [`super::vap`] it makes the whole guard run inside
//! kube-apiserver.
//!
//! The CEL mirrors [`super::mutate`] condition for condition (matched to the stored condition
//! of the same index when it has the same `type`, else the first of that `type`):
//! `lastTransitionTime` stamped when the status changed (or the condition is new) and the time
//! is unset, the stored one or earlier; the stored time restored when the status did not
//! change; `observedGeneration` set from `object.metadata.generation` when missing, `null` or
//! 0; an empty `message` set to the table's default message of (type, reason), a CEL map
//! literal generated from the [`Policy`] in force (built-in table, switches, policy file).
//! Nothing else is touched; a list of more than `MAX_CONDITIONS` conditions is left alone,
//! as the webhook leaves it (validation refuses it).
//!
//! **Patch type: `JSONPatch`.** The webhook answers with an RFC 6902 patch; the policy emits
//! the same operations (`add` or `replace` of `/status/conditions/<i>/<field>`, only where the
//! value changes), computed from the object as written. `ApplyConfiguration` merges with
//! structured-merge-diff, and `status.conditions` is an atomic list in kim's CRD (as in KIM's):
//! an apply configuration would have to restate every condition, and CEL cannot leave a field
//! out of an object literal per condition without optional-field syntax on every field. A JSON
//! Patch states only what defaulting changes.
//!
//! **`failurePolicy: Fail`**, as the ValidatingAdmissionPolicy: a defaulting that could not
//! run must not let a write through undefaulted (a status change keeping its old
//! `lastTransitionTime` is one the ValidatingAdmissionPolicy accepts, as it only checks that
//! the time does not move backwards). The expressions guard every type and parse, so that no
//! write the CRD schema accepts makes them fail. **`reinvocationPolicy: IfNeeded`**, as kim's
//! MutatingWebhookConfiguration: defaulting is idempotent (a second pass patches nothing), and
//! a condition that a later mutation adds is defaulted too.
//!
//! **What CEL cannot express: the request time.** CEL in admission has no clock (no `now()`
//! in the Kubernetes CEL libraries), and the `request` variable carries no time
//! (kube-apiserver's `CreateAdmissionRequest` fills kind, resource, name, namespace,
//! operation, userInfo, dryRun and options only; a `now()` or `request.requestTime` does not
//! compile). The policy reads the time kube-apiserver itself wrote into the object for this
//! write instead: its field manager (`managedfieldsupdater.go`, run before mutating admission
//! in the update and patch handlers) stamps the writer's `metadata.managedFields` entry with
//! its clock (RFC 3339, whole seconds) whenever the write adds or changes a field value, as a
//! write that needs a stamp does (a changed status, a new condition, a new time). On a
//! subresource write kube-apiserver ignores the request's `managedFields` and starts from the
//! stored ones, so a status writer can neither clear nor set them. The latest
//! `managedFields[*].time` is the policy's request time; its limits are in `limitations`.

use super::Policy;
use super::table::MAX_CONDITIONS;
use super::vap::{MAX_EXPRESSION_CHARS, lit};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Name of the policy and of its binding (as kim's webhook configurations and the
/// ValidatingAdmissionPolicy, `kim-runtime-status`: another kind, the same name).
pub const NAME: &str = "kim-runtime-status";

/// RFC 3339 as Go's `time.Parse(time.RFC3339, …)`, which CEL's `timestamp()` calls, parses
/// it without error: a calendar date (leap years included), hours 00–23, seconds 00–59 (no
/// leap second), any fraction, `Z` or an offset of at most ±23:59. CEL has no "try": a
/// `timestamp()` of anything else fails the whole mutation, so every string is matched
/// against this first and read as unset when it does not match.
pub(crate) const RFC3339: &str = concat!(
    r"^(\d{4}-(((0[13578]|1[02])-(0[1-9]|[12]\d|3[01]))|((0[469]|11)-(0[1-9]|[12]\d|30))|(02-(0[1-9]|1\d|2[0-8])))",
    r"|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)",
    r"T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$"
);

/// What the generated policy does not do as kim's mutating webhook does, one line each (the
/// YAML's comment block and `kim policy`'s Markdown).
pub(crate) fn limitations() -> Vec<String> {
    vec![
        "no clock in CEL (no now(), and the request variable carries no time): a lastTransitionTime is stamped with the latest metadata.managedFields[*].time, which kube-apiserver's field manager sets to its own clock (whole seconds) for this write before mutating admission runs (a runtimes/status write cannot set managedFields: kube-apiserver keeps the stored ones and adds this write's); the webhook stamps kim's clock when the review arrives".to_string(),
        "the latest managedFields time wins: a later one already stored (set through the main resource, whose writers may write managedFields, or by a kube-apiserver whose clock is ahead) is taken instead of this write's".to_string(),
        "CEL's timestamp() cannot fail softly: a lastTransitionTime counts as a time only when it is RFC 3339 as Go parses it (upper-case T and Z, a calendar date, seconds below 60, an offset below 24 h) and lies between years 1 and 9999 in UTC; spellings kim still reads (t, z, a leap second :60) count as unset".to_string(),
        "no AdmissionReview warnings, audit annotations or kim_webhook_* metrics for defaulted writes; kube-apiserver's own admission metrics only".to_string(),
        "needs Kubernetes 1.36 or newer (MutatingAdmissionPolicy v1); on 1.35 only the ValidatingAdmissionPolicy exists".to_string(),
    ]
}

/// Whether the generated policy reads `s` as a set `lastTransitionTime`, as its CEL does
/// (`valid_time`): `RFC3339` matches, the instant lies within CEL's timestamp range (years 1
/// and 9999 only with `Z`), and it is not Go's zero time. kim's own defaulting reads more
/// spellings (lower-case `t` and `z`, a leap second).
pub fn reads_as_time(s: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(RFC3339).expect("RFC3339 compiles"));
    let in_range = if s.ends_with('Z') {
        s >= "0001"
    } else {
        ("0002".."9999").contains(&s)
    };
    RE.is_match(s)
        && in_range
        && super::json::parse_time(s)
            .is_some_and(|t| t.timestamp() != -62_135_596_800 || t.timestamp_subsec_nanos() != 0)
}

/// The Markdown section on the generated policy, for `kim policy`.
pub(crate) fn markdown() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### MutatingAdmissionPolicy (`kim policy --format map`)\n\nThe generated policy defaults status writes in kube-apiserver with CEL, as kim's mutating webhook does (status model §5: `lastTransitionTime`, `observedGeneration`, empty messages from the table). It does not do the following:\n"
    );
    for line in limitations() {
        let _ = writeln!(s, "- {line}");
    }
    s
}

/// The table's default messages as a CEL map literal `{type: {reason: message}}`: the entry
/// `Policy::reason` gives for each (type, reason) the policy allows, the first of a name.
pub fn messages(policy: &Policy) -> String {
    let mut types = Vec::new();
    let mut seen_types = BTreeSet::new();
    for t in &policy.types {
        if !seen_types.insert(t.condition_type.as_str()) {
            continue;
        }
        let mut seen = BTreeSet::new();
        let reasons: Vec<String> = t
            .reasons
            .iter()
            .filter(|r| seen.insert(r.reason.as_str()))
            .map(|r| format!("{}: {}", lit(&r.reason), lit(&r.message)))
            .collect();
        types.push(format!(
            "{}: {{{}}}",
            lit(&t.condition_type),
            reasons.join(", ")
        ));
    }
    format!("{{{}}}", types.join(", "))
}

/// The field `f` (`c.lastTransitionTime`) holds a time kim reads as set: a string [`RFC3339`]
/// matches, within CEL's timestamp range (0001-01-01 to 9999-12-31 UTC; an offset could push
/// year 1 or 9999 out of it, so those years count only with `Z`), and not Go's zero time.
fn valid_time(f: &str) -> String {
    format!(
        "(has({f}) && type({f}) == string && {f}.matches({re}) && ({f}.endsWith('Z') ? {f} >= '0001' : ({f} >= '0002' && {f} < '9999')) && timestamp({f}) != timestamp('0001-01-01T00:00:00Z'))",
        re = lit(RFC3339)
    )
}

/// The policy's `variables`, in order (each may read the ones before it).
pub fn variables(policy: &Policy) -> Vec<(&'static str, String)> {
    let conds = |obj: &str| {
        format!(
            "has({obj}.status) && type({obj}.status) == map && has({obj}.status.conditions) && type({obj}.status.conditions) == list ? {obj}.status.conditions : []"
        )
    };
    let latest = "timestamp('9999-12-31T23:59:59Z')";
    // One condition `c` at index `i`: its new and stored times (optional timestamps) and the
    // stored condition it is judged against ({} when none).
    let (n, ot, o) = (
        "variables.newTimes[i]",
        "variables.oldTimes[i]",
        "variables.matched[i]",
    );
    let clock = "variables.clock";
    // The stamp of status model §5 (`transition_stamp`): the request time in whole seconds,
    // or one second after the stored time when the clock has not passed it.
    let stamp_after_old = format!(
        "({clock}.hasValue() ? optional.of(string(timestamp(int({ot}.hasValue() && {clock}.value() <= {ot}.value() ? ({ot}.value() >= {latest} ? {latest} : timestamp({ot}.value()) + duration('1s')) : {clock}.value())))) : optional.none())"
    );
    let stamp = format!(
        "({clock}.hasValue() ? optional.of(string(timestamp(int({clock}.value())))) : optional.none())"
    );
    let changed = format!(
        "(!has({o}.type) || has({o}.status) != has(c.status) || (has(c.status) && {o}.status != c.status))"
    );
    // The lastTransitionTime to set (status model §5), or none.
    let ltt = format!(
        "type(c) != map ? optional.none() : ({changed} ? ((!{n}.hasValue() || ({ot}.hasValue() && {n}.value() <= {ot}.value())) ? {stamp_after_old} : optional.none()) : ({ot}.hasValue() ? ((!{n}.hasValue() || {n}.value() != {ot}.value()) ? optional.of({o}.lastTransitionTime) : optional.none()) : (({n}.hasValue() || (has(c.lastTransitionTime) && has({o}.lastTransitionTime) && c.lastTransitionTime == {o}.lastTransitionTime)) ? optional.none() : {stamp})))"
    );
    vec![
        // More conditions than the model allows: left alone (validation refuses the list).
        (
            "conds",
            format!(
                "({}).size() <= {MAX_CONDITIONS} ? ({}) : []",
                conds("object"),
                conds("object")
            ),
        ),
        ("oldConds", conds("oldObject")),
        // The stored conditions' types (null for an entry that has none), for indexOf.
        (
            "oldTypes",
            "variables.oldConds.map(o, type(o) == map && has(o.type) ? o.type : null)".to_string(),
        ),
        // The stored condition each condition is judged against: the one at the same index
        // with the same type, else the first of its type, else {}.
        (
            "matched",
            "variables.conds.transformList(i, c, type(c) == map && has(c.type) && type(c.type) == string ? (i < variables.oldConds.size() && variables.oldTypes[i] == c.type ? variables.oldConds[i] : (c.type in variables.oldTypes ? variables.oldConds[variables.oldTypes.indexOf(c.type)] : {})) : {})".to_string(),
        ),
        (
            "newTimes",
            format!(
                "variables.conds.map(c, type(c) == map && {} ? optional.of(timestamp(c.lastTransitionTime)) : optional.none())",
                valid_time("c.lastTransitionTime")
            ),
        ),
        (
            "oldTimes",
            format!(
                "variables.matched.map(o, {} ? optional.of(timestamp(o.lastTransitionTime)) : optional.none())",
                valid_time("o.lastTransitionTime")
            ),
        ),
        // The request time: the latest time kube-apiserver's field manager wrote into
        // managedFields (this write's entry), if any.
        (
            "times",
            format!(
                "has(object.metadata.managedFields) && type(object.metadata.managedFields) == list ? object.metadata.managedFields.filter(m, type(m) == map && {}).map(m, timestamp(m.time)).sort() : []",
                valid_time("m.time")
            ),
        ),
        (
            "clock",
            "variables.times.size() > 0 ? optional.of(variables.times[variables.times.size() - 1]) : optional.none()".to_string(),
        ),
        (
            "ltt",
            format!("variables.conds.transformList(i, c, {ltt})"),
        ),
        ("messages", messages(policy)),
    ]
}

/// The one mutation: JSON Patch operations for every condition's `lastTransitionTime`, then
/// `observedGeneration`, then `message`, each `add` (field missing) or `replace`, only where
/// the value changes. The webhook orders them by condition; the paths are distinct, so the
/// patched object is the same.
pub fn mutation() -> String {
    let field = |name: &str, when: &str, value: &str| {
        format!(
            "variables.conds.transformList(i, c, {when}, JSONPatch{{op: has(c.{name}) ? 'replace' : 'add', path: '/status/conditions/' + string(i) + '/{name}', value: {value}}})"
        )
    };
    let ltt = field(
        "lastTransitionTime",
        "variables.ltt[i].hasValue() && !(has(c.lastTransitionTime) && c.lastTransitionTime == variables.ltt[i].value())",
        "variables.ltt[i].value()",
    );
    let generation = field(
        "observedGeneration",
        "type(c) == map && has(object.metadata.generation) && (!has(c.observedGeneration) || c.observedGeneration == null || c.observedGeneration == 0) && !(has(c.observedGeneration) && c.observedGeneration == object.metadata.generation)",
        "object.metadata.generation",
    );
    let message = field(
        "message",
        "type(c) == map && (!has(c.message) || c.message == null || c.message == '') && has(c.type) && type(c.type) == string && has(c.reason) && type(c.reason) == string && c.type in variables.messages && c.reason in variables.messages[c.type] && !(has(c.message) && c.message == variables.messages[c.type][c.reason])",
        "variables.messages[c.type][c.reason]",
    );
    format!("{ltt} + {generation} + {message}")
}

/// The labels of the generated objects, as the ValidatingAdmissionPolicy's.
fn labels() -> Value {
    json!({"app.kubernetes.io/component": "policy", "app.kubernetes.io/part-of": "kim"})
}

/// The policy and its binding. The binding has no `matchResources`: it matches
/// `runtimes/status` writes in every namespace, as the webhook configurations do. No
/// `matchConditions`: as the mutating webhook, every status write is defaulted.
pub fn objects(policy: &Policy) -> Vec<Value> {
    let vars: Vec<Value> = variables(policy)
        .into_iter()
        .map(|(name, expression)| json!({"name": name, "expression": expression}))
        .collect();
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": NAME, "labels": labels()},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": {
                    "resourceRules": [{
                        "apiGroups": ["infrastructuremanager.kyma-project.io"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["runtimes/status"],
                    }],
                },
                "variables": vars,
                "mutations": [{
                    "patchType": "JSONPatch",
                    "jsonPatch": {"expression": mutation()},
                }],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": labels()},
            "spec": {"policyName": NAME},
        }),
    ]
}

/// Checks that every expression of the generated policy fits kube-apiserver's limit
/// ([`MAX_EXPRESSION_CHARS`]); the message map of a policy file with very many or very long
/// messages can exceed it.
///
/// # Errors
/// One line naming the first variable (or the mutation) that is too long, and its size.
pub(crate) fn check_size(policy: &Policy) -> Result<(), String> {
    let mutation = mutation();
    for (name, e) in variables(policy)
        .iter()
        .map(|(n, e)| (*n, e.as_str()))
        .chain([("the mutation", mutation.as_str())])
    {
        let n = e.chars().count();
        if n > MAX_EXPRESSION_CHARS {
            return Err(format!(
                "the generated MutatingAdmissionPolicy's {name} is a CEL expression of {n} code points; kube-apiserver accepts at most {MAX_EXPRESSION_CHARS} (fewer or shorter messages in the policy file)"
            ));
        }
    }
    Ok(())
}

/// The YAML of [`objects`], documents separated by `---`, after a comment block saying what
/// the policy does and what it does not do.
pub(crate) fn yaml(policy: &Policy) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by `kim policy --format map` from the status model in force."
    );
    let _ = writeln!(
        s,
        "# Defaulting of status writes (status model §5) in kube-apiserver, without kim's mutating webhook:"
    );
    let _ = writeln!(
        s,
        "# lastTransitionTime, observedGeneration, empty messages (the table's default messages)."
    );
    let _ = writeln!(
        s,
        "# Scope: runtimes/status UPDATEs in every namespace (the binding selects none). Kubernetes 1.36+."
    );
    let _ = writeln!(s, "# What this policy does NOT do as the webhook does:");
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
    use crate::status::CompatSwitch;

    #[test]
    fn the_message_map_is_the_policys_default_messages() {
        for policy in [
            Policy::builtin(),
            Policy::builtin().with_switch(CompatSwitch::KimHistory),
        ] {
            let map = messages(&policy);
            let mut pairs = 0;
            for t in &policy.types {
                for r in &t.reasons {
                    let entry = policy.reason(&t.condition_type, &r.reason).unwrap();
                    let key = format!("{}: {}", lit(&r.reason), lit(&entry.message));
                    assert!(map.contains(&key), "{key} in {map}");
                    pairs += 1;
                }
            }
            // Each (type, reason) once: a CEL map literal with a repeated key does not compile.
            assert_eq!(map.matches("': '").count(), pairs);
        }
    }

    #[test]
    fn the_rfc3339_pattern_matches_calendar_times_only() {
        let re = regex::Regex::new(RFC3339).unwrap();
        for ok in [
            "2026-01-01T00:00:00Z",
            "2024-02-29T23:59:59.123456789Z",
            "2000-02-29T00:00:00+01:00",
            "2026-12-31T23:59:59-23:59",
            "2026-04-30T12:00:00.5+05:30",
        ] {
            assert!(re.is_match(ok), "{ok} should match");
        }
        // Spellings kim's parser reads but Go's RFC 3339 does not (or not without error).
        for bad in [
            "2026-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:60Z",
            "2026-01-01t00:00:00z",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01T00:00:00+0100",
            "2026-01-01T00:00:00.Z",
            "2026-1-01T00:00:00Z",
        ] {
            assert!(!re.is_match(bad), "{bad} should not match");
        }
        // Every date of leap and common years, centuries included: the pattern matches
        // exactly the calendar's days, and whatever it matches kim reads as the same instant.
        for year in [1900, 1996, 2000, 2023, 2024, 2100, 2400] {
            for month in 0..=13 {
                for day in 0..=32 {
                    let s = format!("{year:04}-{month:02}-{day:02}T01:02:03Z");
                    let real = chrono::NaiveDate::from_ymd_opt(year, month, day).is_some();
                    assert_eq!(re.is_match(&s), real, "{s}");
                    if real {
                        assert!(crate::status::json::parse_time(&s).is_some(), "{s}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_yaml_parses_back_to_the_objects_bound_in_every_namespace() {
        let p = Policy::builtin();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml(&p)).expect("YAML");
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        assert_eq!(docs, objects(&p));
        assert_eq!(docs[0]["kind"], "MutatingAdmissionPolicy");
        assert_eq!(docs[0]["spec"]["failurePolicy"], "Fail");
        assert_eq!(docs[0]["spec"]["reinvocationPolicy"], "IfNeeded");
        assert!(docs[0]["spec"].get("matchConditions").is_none());
        assert_eq!(docs[1]["kind"], "MutatingAdmissionPolicyBinding");
        assert_eq!(docs[1]["spec"], json!({"policyName": NAME}));
        // Variables read only earlier ones.
        let names: Vec<&str> = variables(&p).iter().map(|(n, _)| *n).collect();
        for (i, (name, expr)) in variables(&p).iter().enumerate() {
            for later in &names[i..] {
                assert!(
                    !expr.contains(&format!("variables.{later}")),
                    "{name} reads {later}"
                );
            }
        }
    }

    #[test]
    fn a_policy_file_s_messages_are_in_the_map_and_its_size_is_checked() {
        let file: crate::status::PolicyFile = serde_saphyr::from_str(
            "kind: StatusPolicy\nconditionTypes:\n  - type: Provisioned\n    reasons:\n      - {reason: ShootHibernated, statuses: [\"False\"], message: \"Shoot 'hibernated'\"}\n",
        )
        .unwrap();
        let p = Policy::builtin().extend(&file).unwrap();
        assert!(messages(&p).contains(r"'ShootHibernated': 'Shoot \'hibernated\''"));
        assert!(check_size(&p).is_ok());
        // Four messages of 30 000 characters: more than one CEL expression may hold.
        let mut text = "kind: StatusPolicy\nconditionTypes:\n  - type: Provisioned\n    reasons:\n"
            .to_string();
        for i in 0..4 {
            let long = "x".repeat(30_000);
            text.push_str(&format!(
                "      - {{reason: Long{i}, statuses: [\"False\"], message: {long}}}\n"
            ));
        }
        let file: crate::status::PolicyFile = serde_saphyr::from_str(&text).unwrap();
        let p = Policy::builtin().extend(&file).unwrap();
        let e = check_size(&p).unwrap_err();
        assert!(e.contains("messages"), "{e}");
    }

    /// The shipped file is the builtin policy's output.
    #[test]
    fn the_shipped_policy_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/manifests/overlays/policy-and-defaulting/mutating-admission-policy.yaml"
        );
        let shipped = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            shipped == yaml(&Policy::builtin()),
            "{path} is stale; regenerate with: cargo run -q -- policy --format map > manifests/overlays/policy-and-defaulting/mutating-admission-policy.yaml"
        );
    }
}
