//! Defaulting of one status write (`docs/status-model.md` §5): the mutating webhook's JSON Patch.

use super::Policy;
use super::json::{
    Facts, JsonView, Snapshot, condition_field, condition_objects, format_time, latest_time,
    matching_old, parse_time,
};
use super::table::MAX_CONDITIONS;
use chrono::{DateTime, Utc};
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use serde_json::Value;

/// Go's zero `time.Time` (`0001-01-01T00:00:00Z`), which `meta.SetStatusCondition` and
/// `metav1.Time` treat as unset.
fn is_zero_time(t: DateTime<Utc>) -> bool {
    t.timestamp() == -62_135_596_800 && t.timestamp_subsec_nanos() == 0
}

/// A `lastTransitionTime` as an instant; `None` when missing, not a string, not RFC 3339, or
/// Go's zero time (all of which mean "unset").
fn instant<J: JsonView>(v: Option<&J>) -> Option<DateTime<Utc>> {
    v.and_then(J::as_str)
        .and_then(parse_time)
        .filter(|t| !is_zero_time(*t))
}

/// The `lastTransitionTime` of a condition whose status changes at `now` (status model §5): `now` in
/// whole seconds (the precision `metav1.Time` is stored with), or one second after the
/// `previous` transition when that second has not passed it yet (so times never move backwards
/// and a change is never stamped with the instant it replaces — a second transition within the
/// same second as the first gets the next second), never later than RFC 3339's last second,
/// 9999-12-31T23:59:59Z. The reconciler stamps its own writes with it, so they never need
/// defaulting.
pub fn transition_stamp(previous: Option<DateTime<Utc>>, now: DateTime<Utc>) -> DateTime<Utc> {
    let now = DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    let stamp = match previous {
        Some(p) if now <= p => p + chrono::Duration::seconds(1),
        _ => now,
    };
    stamp.min(latest_time())
}

/// What defaulting does with one condition's `lastTransitionTime`: nothing, or set it to a
/// value (status model §5). Times are compared as instants, in any RFC 3339 spelling.
fn transition_time<J: JsonView>(
    old_cond: Option<&J>,
    cond: &J,
    now: DateTime<Utc>,
) -> Option<Value> {
    let new_ltt = cond.get("lastTransitionTime");
    let old_ltt = old_cond.and_then(|o| o.get("lastTransitionTime"));
    let (new_t, old_t) = (instant(new_ltt), instant(old_ltt));
    let status_changed = old_cond.is_none_or(|o| o.get("status") != cond.get("status"));
    if status_changed {
        let needs_now = match (new_t, old_t) {
            (None, _) => true,
            (Some(n), Some(o)) => n <= o,
            (Some(_), None) => false,
        };
        if !needs_now {
            return None;
        }
        return Some(Value::String(format_time(transition_stamp(old_t, now))));
    }
    // Status unchanged: the stored time stays (no churn); the same instant in another
    // spelling is no change. A stored time that is not one (unparsable, Go's zero time) is
    // never copied: the written one stays when it is a time, else the request time repairs it.
    let stored = || {
        old_ltt
            .and_then(J::as_str)
            .map(|s| Value::String(s.to_string()))
    };
    match (new_t, old_t) {
        (Some(n), Some(o)) => (n != o).then(stored).flatten(),
        (None, Some(_)) => stored(),
        (Some(_), None) => None,
        (None, None) => {
            let unchanged_text = old_ltt.is_some() && new_ltt == old_ltt;
            (!unchanged_text || new_ltt.is_none())
                .then(|| Value::String(format_time(transition_stamp(None, now))))
        }
    }
}

/// Defaulting of status model §5 as JSON Patch operations against the object `new` was read from.
///
/// For each condition (matched to the old one by `type`):
/// - status changed (or new condition) and `lastTransitionTime` unset (missing, unparsable or
///   Go's zero time `0001-01-01T00:00:00Z`), the same instant as the old value (in any RFC 3339
///   spelling), or earlier than it → request time in whole seconds (one second after the old
///   value if the clock is behind it or still in its second, so the result is stable);
/// - status unchanged but `lastTransitionTime` a different instant or unset → the old value;
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
        // Sets a field unless it already holds the value (so a second pass patches nothing).
        let mut set = |name: &str, value: Value, current: Option<&J>| {
            if current.is_some_and(|c| c.eq_value(&value)) {
                return;
            }
            let path = condition_field(i, name);
            ops.push(if current.is_some() {
                PatchOperation::Replace(ReplaceOperation { path, value })
            } else {
                PatchOperation::Add(AddOperation { path, value })
            });
        };
        let ctype = cond.get("type").and_then(J::as_str);
        let old_cond = ctype.and_then(|t| matching_old(old_status, i, t));

        if let Some(ltt) = transition_time(old_cond, cond, facts.now) {
            set("lastTransitionTime", ltt, cond.get("lastTransitionTime"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(seconds, nanos).unwrap()
    }

    #[test]
    fn a_second_transition_within_the_same_second_is_stamped_one_second_later() {
        let previous = at(1_000, 0);
        // Stored with second precision, `now` alone would be written as the previous instant.
        assert_eq!(
            transition_stamp(Some(previous), at(1_000, 900_000_000)),
            at(1_001, 0)
        );
        assert_eq!(
            transition_stamp(Some(previous), at(1_002, 300_000_000)),
            at(1_002, 0)
        );
        assert_eq!(transition_stamp(None, at(1_002, 300_000_000)), at(1_002, 0));
        assert_eq!(
            transition_stamp(Some(at(1_000, 500_000_000)), at(1_000, 900_000_000)),
            at(1_001, 500_000_000)
        );
        assert_eq!(
            transition_stamp(Some(latest_time()), at(1_000, 0)),
            latest_time()
        );
    }
}
