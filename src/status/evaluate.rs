//! Defaulting ([`mutate`], `docs/status-model.md` §5) and validation ([`validate`], §3–§4 and
//! §7, messages per §6) chained as the API server does ([`evaluate`]).

use super::Policy;
use super::defaulting::mutate;
use super::json::{Facts, Snapshot};
use super::table::RuleId;
use super::validate::validate;
use super::violation::{Violations, violation};
use json_patch::Patch;
use serde_json::Value;

/// The outcome of [`evaluate`]: violations (each with its `Action`), the defaulting JSON
/// Patch (empty when nothing needed defaulting) and the warnings for the client.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub violations: Violations,
    pub patch: Patch,
    pub warnings: Vec<String>,
}

/// The API server's chain on whole objects: [`mutate`], apply the patch, [`validate`] the result.
/// `old` is `None` for a Runtime that had no status yet (or, in `kim check`, `--old none`).
/// The warnings are those of the violations that do not deny ([`Violations::warnings`]).
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
            Err(e) => Violations::from(vec![violation(
                RuleId::Malformed,
                "status",
                "",
                "",
                format!("status: defaulting patch does not apply: {e}"),
            )]),
        }
    };
    Decision {
        warnings: violations.warnings(),
        violations,
        patch,
    }
}
