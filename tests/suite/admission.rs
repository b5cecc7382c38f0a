//! The AdmissionReview codec (`kim::admission::review`) on real JSON: reviews built from the
//! sample Runtimes as an apiserver sends them, the public capture files, and malformed bodies.

use kim::testing::model;

use kim::admission::{self, Hook};
use kim::status::Policy;
use model::*;
use serde_json::{Value, json};

fn run(hook: Hook, review: &Value) -> admission::Outcome {
    admission::review(
        hook,
        &Policy::builtin(),
        &serde_json::to_vec(review).unwrap(),
        t0(),
    )
}

#[test]
fn sample_lifecycles_pass_both_webhooks_over_json() {
    for (name, sample) in sample_runtimes() {
        let seq = lifecycle(sample);
        for (i, pair) in seq.windows(2).enumerate() {
            let uid = format!("uid-{name}-{i}");
            let review = status_review(
                &uid,
                &pair[0],
                &pair[1],
                RECONCILER,
                &["system:serviceaccounts", "system:authenticated"],
                false,
            );
            let m = run(Hook::Mutate, &review);
            let r = response_of(&m.body, &uid);
            assert_eq!(r["allowed"], true);
            assert!(
                r.get("patch").is_none() && r.get("patchType").is_none(),
                "{name} {i}: complete writes get no patch: {r}"
            );
            let v = run(Hook::Validate, &review);
            let r = response_of(&v.body, &uid);
            assert_eq!(r["allowed"], true, "{name} {i}: {r}");
            assert!(r.get("patch").is_none(), "validating webhook never patches");
            assert_eq!(v.operation, "UPDATE");
            assert_eq!(v.user, RECONCILER);
        }
    }
}

#[test]
fn illegal_write_is_denied_with_spec_message_and_audit_annotation() {
    let (_, sample) = sample_runtimes().remove(0);
    let seq = lifecycle(sample);
    let term = &seq[9];
    let bad = term.write("Ready", &[]);
    let review = status_review(
        "u-1",
        term,
        &bad,
        "system:masters-user",
        &["system:masters"],
        false,
    );
    let out = run(Hook::Validate, &review);
    let r = response_of(&out.body, "u-1");
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 403);
    assert_eq!(r["status"]["reason"], "Forbidden");
    assert_eq!(
        r["status"]["message"],
        "[transition] status.state: transition Terminating -> Ready is not allowed (deletion is final); allowed from Terminating: Terminating, Failed"
    );
    assert_eq!(r["auditAnnotations"]["violations"], "transition");
    assert_eq!(out.rules, vec!["transition"]);
    // Dry-run is evaluated the same way.
    let review = status_review("u-2", term, &bad, RECONCILER, &[], true);
    let out = run(Hook::Validate, &review);
    assert!(!out.allowed && out.dry_run);
}

#[test]
fn mutate_returns_standard_base64_json_patch_that_applies() {
    let (_, sample) = sample_runtimes().remove(2);
    let seq = lifecycle(sample);
    let old = &seq[2];
    // A client that omits lastTransitionTime and message on a new condition.
    let new = old.with(|o| {
        o["status"]["conditions"].as_array_mut().unwrap().push(
            json!({"type": "KubeconfigReady", "status": "True", "reason": "KubeconfigCreated"}),
        );
    });
    let review = status_review("u-m", old, &new, RECONCILER, &[], false);
    let out = run(Hook::Mutate, &review);
    assert!(out.patched);
    let r = response_of(&out.body, "u-m");
    assert_eq!(r["allowed"], true);
    let patch = patch_of(&r).expect("a patch");
    let mut obj = review["request"]["object"].clone();
    json_patch::patch(&mut obj, &patch).expect("patch applies to the object it was computed from");
    let kc = &obj["status"]["conditions"][1];
    assert_eq!(kc["lastTransitionTime"], "2026-11-01T10:00:00Z");
    assert_eq!(kc["observedGeneration"], 1);
    assert_eq!(kc["message"], "Kubeconfig Secret written");
    // Every patch path is under /status (the apiserver drops others for status writes).
    for op in &patch.0 {
        let v = serde_json::to_value(op).unwrap();
        assert!(
            v["path"]
                .as_str()
                .unwrap()
                .starts_with("/status/conditions/"),
            "{v}"
        );
    }
    // Reinvocation: the patched object needs nothing more.
    let mut again = review.clone();
    again["request"]["object"] = obj;
    let out2 = run(Hook::Mutate, &again);
    assert!(!out2.patched);
    assert!(response_of(&out2.body, "u-m").get("patch").is_none());
}

#[test]
fn public_capture_files_get_well_formed_answers() {
    for (name, bytes) in sample_reviews() {
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        let bare = doc.get("request").is_none();
        let uid = doc.get("request").unwrap_or(&doc)["uid"]
            .as_str()
            .unwrap()
            .to_string();
        for hook in [Hook::Validate, Hook::Mutate] {
            // The file's bytes as they are (bare requests included), as the webhook gets them.
            let out = admission::review(hook, &Policy::builtin(), &bytes, t0());
            let r = response_of(&out.body, &uid);
            assert_eq!(r["allowed"], true, "{name}: not a Runtime, allowed: {r}");
            let warnings: Vec<&str> = r["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            assert!(
                warnings.iter().all(|w| w.len() < 120),
                "{name}: {warnings:?}"
            );
            assert!(
                warnings
                    .last()
                    .unwrap()
                    .contains("not a Runtime status UPDATE"),
                "{name}: {warnings:?}"
            );
            assert_eq!(
                warnings.len(),
                if bare { 2 } else { 1 },
                "{name}: {warnings:?}"
            );
            if bare {
                assert!(
                    warnings[0].contains("bare AdmissionRequest"),
                    "{name}: {warnings:?}"
                );
            }
            assert!(r.get("patch").is_none());
        }
    }
}

#[test]
fn malformed_bodies_are_denied_with_400_and_uid_when_readable() {
    let p = Policy::builtin();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", b"".to_vec(), ""),
        ("whitespace", b"  \n".to_vec(), ""),
        ("truncated", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x1""#.to_vec(), "x1"),
        ("not json", b"hello".to_vec(), ""),
        ("array", b"[1,2]".to_vec(), ""),
        ("no request", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), ""),
        ("request null", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#.to_vec(), ""),
        ("no uid", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"UPDATE"}}"#.to_vec(), ""),
        ("wrong kind", br#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"x2"}}"#.to_vec(), "x2"),
        ("v2", br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x3"}}"#.to_vec(), "x3"),
        ("uid a number", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#.to_vec(), ""),
        (
            "runtime status without object",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x4","operation":"UPDATE","subResource":"status","resource":{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"},"oldObject":{}}}"#.to_vec(),
            "x4",
        ),
        (
            "runtime status with generation as string",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x5","operation":"UPDATE","subResource":"status","resource":{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"},"object":{"metadata":{"generation":"1"}},"oldObject":{}}}"#.to_vec(),
            "x5",
        ),
        (
            "duplicate keys in object",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x6","operation":"UPDATE","subResource":"status","resource":{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"},"object":{"status":{},"status":{}},"oldObject":{}}}"#.to_vec(),
            "x6",
        ),
    ];
    for (name, body, uid) in cases {
        for hook in [Hook::Validate, Hook::Mutate] {
            let out = admission::review(hook, &p, &body, t0());
            let r = response_of(&out.body, uid);
            assert_eq!(r["allowed"], false, "{name}");
            assert_eq!(r["status"]["code"], 400, "{name}: {r}");
            assert!(!r["status"]["message"].as_str().unwrap().is_empty());
        }
    }
    // Deep nesting: skipped without recursion where the field is ignored (a well-formed answer),
    // refused by the parser's recursion limit where it must be read (status) — never a stack
    // overflow.
    let nest = |inner: &str| format!("{}{inner}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"d","x":{}}}}}"#,
        nest("")
    );
    let out = admission::review(Hook::Validate, &p, deep.as_bytes(), t0());
    response_of(&out.body, "d");
    let deep = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"d2","operation":"UPDATE","subResource":"status","resource":{{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"}},"object":{{"status":{}}},"oldObject":{{}}}}}}"#,
        nest("")
    );
    for hook in [Hook::Validate, Hook::Mutate] {
        let out = admission::review(hook, &p, deep.as_bytes(), t0());
        let r = response_of(&out.body, "d2");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 400);
    }
}

#[test]
fn reject_echoes_uid_when_readable() {
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"big-1"}}"#;
    let out = admission::reject(413, "request body larger than 7 MiB", body);
    let r = response_of(&out.body, "big-1");
    assert_eq!(r["status"]["code"], 413);
    assert_eq!(r["status"]["reason"], "RequestEntityTooLarge");
    let out = admission::reject(413, "too large", b"{\"request\":{\"ui");
    response_of(&out.body, "");
    // A prefix of an oversized body: the uid is read from it.
    let prefix = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid" : "5c3d-77","kind":{"group":"","#;
    response_of(&admission::reject(413, "too large", prefix).body, "5c3d-77");
    // An escaped or unterminated value is not taken.
    response_of(
        &admission::reject(413, "too large", br#"{"request":{"uid":"a\"b","#).body,
        "",
    );
    response_of(
        &admission::reject(413, "too large", br#"{"request":{"uid":"abc"#).body,
        "",
    );
}

#[test]
fn v1beta1_reviews_are_answered_in_v1beta1() {
    let (name, bytes) = sample_reviews().remove(0);
    assert!(name.starts_with("kubewarden_kwctl"));
    let mut doc: Value = serde_json::from_slice(&bytes).unwrap();
    doc["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let out = run(Hook::Validate, &doc);
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(v["response"]["allowed"], true);
}

#[test]
fn writer_rule_applies_over_the_wire() {
    let (_, sample) = sample_runtimes().remove(0);
    let seq = lifecycle(sample);
    let review = status_review(
        "w-1",
        &seq[2],
        &seq[3],
        "alice",
        &["system:authenticated"],
        false,
    );
    let r = response_of(&run(Hook::Validate, &review).body, "w-1");
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("user \"alice\" may not write Runtime status")
    );
    // system:masters may.
    let review = status_review(
        "w-2",
        &seq[2],
        &seq[3],
        "admin",
        &["system:masters", "system:authenticated"],
        false,
    );
    assert_eq!(
        response_of(&run(Hook::Validate, &review).body, "w-2")["allowed"],
        true
    );
}

/// `observedGeneration: 0` is defaulted to `metadata.generation` in every JSON spelling of
/// zero (`0`, `-0`, `0.0`, `0e0`, `-0.0`), on the raw bytes as they come over the wire; a
/// non-zero value is left alone.
#[test]
fn observed_generation_zero_is_defaulted_in_every_spelling() {
    let (_, sample) = sample_runtimes().remove(2);
    let seq = lifecycle(sample);
    let old = &seq[2];
    let new = old.with(|o| {
        o["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "KubeconfigReady", "status": "True", "reason": "KubeconfigCreated",
                "message": "m", "lastTransitionTime": "2026-11-01T10:00:00Z",
                "observedGeneration": 424242
            }));
    });
    let review = status_review("u-og", old, &new, RECONCILER, &[], false);
    let text = serde_json::to_string(&review).unwrap();
    assert_eq!(text.matches("424242").count(), 1);
    let generation = review["request"]["object"]["metadata"]["generation"].clone();
    for zero in ["0", "-0", "0.0", "0e0", "-0.0", "0E+2"] {
        let body = text.replace("424242", zero);
        let out = admission::review(Hook::Mutate, &Policy::builtin(), body.as_bytes(), t0());
        let r = response_of(&out.body, "u-og");
        let patch = patch_of(&r).unwrap_or_else(|| panic!("{zero}: no patch"));
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops,
            json!([{"op": "replace", "path": "/status/conditions/1/observedGeneration", "value": generation}]),
            "observedGeneration {zero}"
        );
    }
    let out = admission::review(Hook::Mutate, &Policy::builtin(), text.as_bytes(), t0());
    assert!(!out.patched, "a non-zero observedGeneration is kept");
}
