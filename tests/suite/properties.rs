//! Property tests (proptest) on review decoding and evaluation:
//! - no input panics `admission::review`, and every answer is a well-formed review;
//! - every defaulting patch applies to the object it was computed from, and a second
//!   mutation of the patched object returns no patch (reinvocation is a no-op);
//! - mutate-then-validate never denies what mutate produced from a valid predecessor;
//! - a write that changes nothing is never denied (`docs/status-model.md` §7: a write is judged
//!   on what it changes), whatever the stored object holds.

use kim::testing::model;

use chrono::{Duration, TimeZone, Utc};
use kim::admission::{self, Hook};
use kim::status::{self, Facts, Policy};
use model::*;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};
use std::sync::OnceLock;

fn lifecycles() -> &'static Vec<Vec<Rt>> {
    static L: OnceLock<Vec<Vec<Rt>>> = OnceLock::new();
    L.get_or_init(|| {
        sample_runtimes()
            .into_iter()
            .map(|(_, s)| lifecycle(s))
            .collect()
    })
}

const TYPES: &[&str] = &[
    "Provisioned",
    "KubeconfigReady",
    "Configured",
    "Deprovisioned",
    "KymaSystemNSCreated",
    "Bogus",
    "Terminating",
    "a/b~c",
];
const REASONS: &[&str] = &[
    "Initialised",
    "Pending",
    "ShootCreationCompleted",
    "Processing",
    "GardenerErr",
    "KubeconfigCreated",
    "AdministratorsConfigured",
    "GardenerShootDeleted",
    "KubernetesErr",
    "Nope",
    "",
];
const STATUSES: &[&str] = &["True", "False", "Unknown", "true", ""];
const STATES: &[&str] = &["Pending", "Ready", "Failed", "Terminating", "ready", ""];

fn any_time() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..400_000_000).prop_map(|s| json!(
            (Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap() + Duration::seconds(s))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )),
        Just(json!("not-a-time")),
        Just(Value::Null),
        Just(json!(17)),
    ]
}

fn any_condition() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(TYPES),
        prop::sample::select(STATUSES),
        prop::sample::select(REASONS),
        prop::option::of(any_time()),
        prop::option::of(prop_oneof![
            Just(json!("")),
            Just(json!("msg")),
            Just(Value::Null)
        ]),
        prop::option::of(prop_oneof![
            Just(json!(0)),
            Just(json!(1)),
            Just(json!(7)),
            Just(Value::Null)
        ]),
    )
        .prop_map(|(t, s, r, ltt, msg, og)| {
            let mut c = json!({"type": t, "status": s, "reason": r});
            if let Some(v) = ltt {
                c["lastTransitionTime"] = v;
            }
            if let Some(v) = msg {
                c["message"] = v;
            }
            if let Some(v) = og {
                c["observedGeneration"] = v;
            }
            c
        })
}

fn any_status() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        (
            prop::sample::select(STATES),
            prop::collection::vec(any_condition(), 0..6),
            prop::option::of(any::<bool>()),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(st, conds, pc, weird)| {
                if weird {
                    return json!({"state": st, "conditions": {"not": "a list"}});
                }
                let mut s = json!({"state": st, "conditions": conds});
                if let Some(b) = pc {
                    s["provisioningCompleted"] = json!(b);
                }
                s
            }),
    )
}

fn object(status: Option<Value>, generation: i64, deleting: bool) -> Value {
    let mut o = json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": "r", "namespace": "kcp-system", "generation": generation}, "spec": {}});
    if deleting {
        o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    if let Some(s) = status {
        o["status"] = s;
    }
    o
}

// Failures are kept in `properties.proptest-regressions` beside this file (checked in; its
// seeds run before any new case). proptest's default would be a `proptest-regressions/`
// directory beside `tests/suite/`, since this directory has a `main.rs`.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 3000,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random statuses: mutate's patch applies and is idempotent; nothing panics.
    #[test]
    fn defaulting_patch_applies_and_is_idempotent(old in any_status(), new in any_status(), generation in 1i64..5, deleting in any::<bool>(), secs in 0i64..400_000_000) {
        let policy = Policy::builtin();
        let now = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap() + Duration::seconds(secs);
        let old_obj = object(old, generation, deleting);
        let new_obj = object(new, generation, deleting);
        let facts = Facts::by(RECONCILER, now);
        let d = status::evaluate(&policy, Some(&old_obj), &new_obj, &facts);
        let mut patched = new_obj.clone();
        json_patch::patch(&mut patched, &d.patch).map_err(|e| TestCaseError::fail(format!("patch does not apply: {e}")))?;
        let again = status::mutate(&policy, Some(&status::Snapshot::of_object(&old_obj)), &status::Snapshot::of_object(&patched), &facts);
        prop_assert!(again.0.is_empty(), "second mutation patched again: {:?}", again);
        // Every path stays under /status/conditions.
        for op in &d.patch.0 {
            let v = serde_json::to_value(op).unwrap();
            prop_assert!(v["path"].as_str().unwrap().starts_with("/status/conditions/"));
        }
    }

    /// A legal reconciler step whose new condition fields were stripped or garbled by a client:
    /// after defaulting it is allowed.
    #[test]
    fn mutate_then_validate_allows_a_legal_step(seq_i in 0usize..6, step in 0usize..9, edits in prop::collection::vec((0usize..6, 0u8..6), 0..6), ahead in 0i64..100_000) {
        let seq = &lifecycles()[seq_i];
        let (old, new) = (&seq[step], &seq[step + 1]);
        let mut obj = new.obj.clone();
        if let Some(conds) = obj["status"]["conditions"].as_array_mut() {
            let n = conds.len();
            for (i, kind) in edits {
                let c = conds[i % n].as_object_mut().unwrap();
                match kind {
                    0 => { c.remove("lastTransitionTime"); }
                    1 => { c.remove("message"); }
                    2 => { c.insert("message".into(), json!("")); }
                    3 => { c.remove("observedGeneration"); }
                    4 => { c.insert("observedGeneration".into(), json!(0)); }
                    _ => { c.insert("lastTransitionTime".into(), json!("1999-01-01T00:00:00Z")); }
                }
            }
        }
        let policy = Policy::builtin();
        let facts = Facts::by(RECONCILER, new.clock + Duration::seconds(ahead));
        let d = status::evaluate(&policy, Some(&old.obj), &obj, &facts);
        prop_assert!(d.violations.allowed(), "step {step} of sample {seq_i} denied after defaulting: {:?}", d.violations);
    }

    /// Arbitrary bytes: a well-formed answer, never a panic.
    #[test]
    fn any_bytes_get_a_well_formed_review(body in prop::collection::vec(any::<u8>(), 0..512)) {
        for hook in [Hook::Validate, Hook::Mutate] {
            let out = admission::review(hook, &Policy::builtin(), &body, t0());
            let v: Value = serde_json::from_slice(&out.body).unwrap();
            prop_assert_eq!(&v["kind"], "AdmissionReview");
            prop_assert!(v["response"]["allowed"].is_boolean());
            prop_assert!(!out.allowed);
        }
    }

    /// A real review with one field replaced by junk: well-formed answer, uid echoed.
    #[test]
    fn damaged_reviews_get_well_formed_answers(which in 0usize..12, junk in prop_oneof![Just(Value::Null), Just(json!(1)), Just(json!("x")), Just(json!([])), Just(json!({})), Just(json!(true))]) {
        let seq = &lifecycles()[0];
        let mut review = status_review("p-1", &seq[3], &seq[4], RECONCILER, &[], false);
        let req = review["request"].as_object_mut().unwrap();
        let fields = ["kind", "resource", "subResource", "operation", "userInfo", "object", "oldObject", "dryRun", "options", "name", "namespace", "requestKind"];
        req.insert(fields[which].to_string(), junk.clone());
        let body = serde_json::to_vec(&review).unwrap();
        for hook in [Hook::Validate, Hook::Mutate] {
            let out = admission::review(hook, &Policy::builtin(), &body, t0());
            let v: Value = serde_json::from_slice(&out.body).unwrap();
            prop_assert_eq!(&v["response"]["uid"], "p-1");
            prop_assert!(v["response"]["allowed"].is_boolean());
        }
    }

    /// A write that leaves any stored status as it was is never denied, by `validate`, over the
    /// wire, or after defaulting with an allowed writer (which may still patch the status).
    #[test]
    fn a_write_that_changes_nothing_is_never_denied(old in any_status(), generation in 1i64..5, deleting in any::<bool>(), history in any::<bool>(), garbage in prop::option::of(prop_oneof![Just(json!("x")), Just(json!(3)), Just(json!([1, {"type": "Provisioned"}]))])) {
        let mut policy = Policy::builtin();
        if history {
            policy = policy.with_switch(kim::status::CompatSwitch::KimHistory);
        }
        let mut obj = object(old, generation, deleting);
        if let Some(g) = garbage {
            // A stored conditions list with non-object entries, or a status that is not an object.
            match obj.get_mut("status") {
                Some(s) if s.is_object() => s["conditions"] = g,
                Some(s) => *s = g,
                None => {}
            }
        }
        let now = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
        let snap = status::Snapshot::of_object(&obj);
        let v = status::validate(&policy, Some(&snap), &snap, &Facts::by("anyone", now));
        prop_assert!(v.allowed(), "validate denied a no-op write: {v:?}");
        let review = update_status_review("u", json!({"username": "anyone"}), obj.clone(), obj.clone(), false);
        let out = admission::review(Hook::Validate, &policy, &serde_json::to_vec(&review).unwrap(), now);
        prop_assert!(out.allowed, "the webhook denied a no-op write: {}", String::from_utf8_lossy(&out.body));
        let d = status::evaluate(&policy, Some(&obj), &obj, &Facts::by(RECONCILER, now));
        prop_assert!(d.violations.allowed(), "defaulting made a no-op write deniable: {:?} {:?}", d.patch, d.violations);
    }
}
