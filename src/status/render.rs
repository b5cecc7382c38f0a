//! Renders a [`Policy`] as Markdown, JSON, Graphviz dot or admission policies (`kim policy`).
//! The README's status model section is this Markdown (a test keeps them equal), so the docs
//! come from the table.

use super::Policy;
use super::history::{self, Kind};
use super::table::{CompatSwitch, CondStatus, Origin, Requirement, RuleId, State};
use std::fmt::Write as _;

/// Output formats of `kim policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Markdown,
    Json,
    Dot,
    /// A ValidatingAdmissionPolicy and its binding, judging Runtime status in every namespace.
    Vap,
    /// A MutatingAdmissionPolicy and its binding, defaulting Runtime status writes in every
    /// namespace (Kubernetes 1.36+).
    Map,
}

/// Renders `policy` in `format`. JSON is the serialised [`Policy`] (states, condition types with
/// reasons, transitions, switches, allowed writers) plus the rule list.
pub fn render(policy: &Policy, format: Format) -> String {
    match format {
        Format::Markdown => markdown(policy),
        Format::Json => json(policy),
        Format::Dot => dot(policy),
        Format::Vap => super::vap::yaml(policy),
        Format::Map => super::map::yaml(policy),
    }
}

fn statuses(s: &[CondStatus]) -> String {
    s.iter()
        .map(|s| s.letter().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn requirement_text(req: &Requirement) -> String {
    match req {
        Requirement::AllTrue(types) => format!("{} all present and True", types.join(", ")),
        Requirement::AnyFalse => "at least one condition with status False".to_string(),
        Requirement::TypeOrDeletionReason(t) => {
            format!("a {t} condition, or any condition with a deletion reason")
        }
    }
}

/// The Markdown form: states, transition matrix, requirements, types and reasons, rules.
pub fn markdown(policy: &Policy) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### States\n\n| state | meaning |\n|---|---|");
    for st in &policy.states {
        let _ = writeln!(s, "| `{st}` | {} |", st.meaning());
    }
    let _ = writeln!(
        s,
        "\n### Transitions\n\n∅ = no status yet. ¹ = only while `metadata.deletionTimestamp` is set. Nothing leads back to ∅.\n"
    );
    let mut header = "| from \\ to |".to_string();
    let mut rule = "|---|".to_string();
    for to in &policy.states {
        let _ = write!(header, " {to} |");
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{header}\n{rule}");
    let froms: Vec<Option<State>> = std::iter::once(None)
        .chain(policy.states.iter().copied().map(Some))
        .collect();
    for from in froms {
        let _ = write!(s, "| {} |", from.map_or("∅", State::as_str));
        for to in &policy.states {
            let cell = match policy.edge(from, *to) {
                Some(e) if e.only_while_deleting => "yes¹",
                Some(_) => "yes",
                None => "no",
            };
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "\n### What each state requires\n\n| state | requires | rule |\n|---|---|---|"
    );
    for (st, req, rule) in &policy.requirements {
        let _ = writeln!(s, "| `{st}` | {} | `{rule}` |", requirement_text(req));
    }
    let _ = writeln!(
        s,
        "\n### Condition types and reasons\n\nStatuses: T = True, F = False, U = Unknown. Deletion reasons count for `Terminating`.\n\n| type | reason | statuses | origin | deletion | default message |\n|---|---|---|---|---|---|"
    );
    let mut retired_pairs = 0;
    for t in &policy.types {
        for r in &t.reasons {
            if r.origin == Origin::KimRetired {
                retired_pairs += 1;
                continue;
            }
            let origin = serde_json::to_value(r.origin)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                t.condition_type,
                r.reason,
                statuses(&r.statuses),
                origin,
                if r.deletion { "yes" } else { "" },
                r.message
            );
        }
    }
    if retired_pairs > 0 {
        let _ = writeln!(
            s,
            "\nAlso accepted (compatibility switch `kimHistory`): {retired_pairs} pairs of KIM's retired vocabulary, origin `kim-retired`, any status (below)."
        );
    }
    retired_section(policy, &mut s);
    let _ = writeln!(
        s,
        "\n### Rules (ids in denials)\n\nSections (§) are those of docs/status-model.md. Action: what a violation does — `deny` rejects the write, `warn` allows it with a warning and an audit annotation. A violation the stored object already had, in a part the write does not change, is *ratcheted*: allowed with a warning.\n\n| rule | status model | checks | denial code | action |\n|---|---|---|---|---|"
    );
    for r in RuleId::ALL {
        let _ = writeln!(
            s,
            "| `{r}` | {} | {} | {} | {} |",
            r.spec_section(),
            r.description(),
            if r.is_malformed() { 400 } else { 403 },
            policy.action(r)
        );
    }
    let switches: Vec<_> = policy.switches.iter().map(|s| s.0).collect();
    let _ = writeln!(
        s,
        "\nCompatibility switches on: {}. Allowed writers: {}.",
        if switches.is_empty() {
            "none".to_string()
        } else {
            switches.join(", ")
        },
        policy.writers.describe()
    );
    s.push_str(&super::vap::markdown());
    s.push_str(&super::map::markdown());
    s
}

/// KIM's retired vocabulary with its dates, and what the policy does with each name.
fn retired_section(policy: &Policy, s: &mut String) {
    let history_on = policy.has_switch(CompatSwitch::KimHistory);
    let _ = writeln!(
        s,
        "\n### KIM's retired vocabulary\n\nNames KIM declared and later retired (`samples/kim/vocabulary-history.tsv`, from KIM's API history). Stored Runtimes may still carry them: an unchanged condition or state stays allowed, with a warning; writing one anew {}.\n\n| kind | name | declared by KIM | written anew |\n|---|---|---|---|",
        if history_on {
            "is accepted for the pairs KIM declared at the same time (`kimHistory` is on); a retired state never"
        } else {
            "is denied; the compatibility switch `kimHistory` accepts retired types and reasons again (never a retired state)"
        }
    );
    for n in history::vocabulary().iter().filter(|n| n.retired()) {
        let anew = match n.kind {
            Kind::State => "no",
            Kind::Type if policy.condition_type(n.name).is_some() => "yes",
            Kind::Reason
                if policy.types.iter().any(|t| {
                    t.reason(n.name)
                        .is_some_and(|r| r.origin != Origin::KimRetired)
                }) =>
            {
                "yes (seed)"
            }
            Kind::Reason if history_on => "with kimHistory",
            Kind::Type | Kind::Reason => "no",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} to {} | {anew} |",
            n.kind.as_str(),
            n.name,
            n.first_seen,
            n.last_seen
        );
    }
}

fn json(policy: &Policy) -> String {
    let mut v = serde_json::to_value(policy).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        let reqs: Vec<_> = policy
            .requirements
            .iter()
            .map(|(st, req, rule)| serde_json::json!({"state": st, "requires": requirement_text(req), "rule": rule}))
            .collect();
        obj.insert("requirements".into(), reqs.into());
        let rules: Vec<_> = RuleId::ALL
            .iter()
            .map(|r| serde_json::json!({"id": r, "spec": r.spec_section(), "description": r.description(), "code": if r.is_malformed() {400} else {403}}))
            .collect();
        obj.insert("rules".into(), rules.into());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

fn dot(policy: &Policy) -> String {
    let mut s = String::from(
        "digraph runtime_states {\n  rankdir=LR;\n  none [label=\"∅\", shape=point];\n",
    );
    for st in &policy.states {
        let _ = writeln!(s, "  {st} [shape=box];");
    }
    for e in &policy.transitions {
        let from = e.from.map_or("none", State::as_str);
        let style = if e.only_while_deleting {
            " [style=dashed, label=\"deleting\"]"
        } else {
            ""
        };
        let _ = writeln!(s, "  {from} -> {}{style};", e.to);
    }
    s.push_str("}\n");
    s
}
