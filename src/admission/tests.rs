//! Tests of the decoder through [`review`]: what it reads, skips and refuses, and a fuzz test
//! (proptest) of arbitrary bytes and of damaged real reviews — never a panic, always a
//! well-formed review with the uid echoed when it is readable, and a body the one pass takes
//! answered as the staged reading answers it.
//!
//! `PROPTEST_CASES=N` sets the cases of every property test here (for a long fuzz run); each
//! run prints its seed, and `PROPTEST_RNG_SEED=<seed>` replays it.

use super::decode::{self, Json};
use super::{Hook, Outcome, answer, review};
use crate::status::{Action, CompatSwitch, Enforcement, Policy};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap()
}

/// `cases` cases (or `PROPTEST_CASES`), no failure file under the source tree; the seed is
/// printed instead, which the test harness shows with a failure.
fn config(cases: u32) -> ProptestConfig {
    use proptest::test_runner::RngSeed;
    use std::hash::BuildHasher as _;
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    let mut config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let seed = match config.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => std::collections::hash_map::RandomState::new().hash_one(cases),
    };
    config.rng_seed = RngSeed::Fixed(seed);
    eprintln!("proptest seed {seed}: PROPTEST_RNG_SEED={seed} replays this run");
    config
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    a.body == b.body
        && a.violations == b.violations
        && a.allowed == b.allowed
        && a.code == b.code
        && a.uid == b.uid
        && a.operation == b.operation
        && a.user == b.user
        && a.dry_run == b.dry_run
        && a.patched == b.patched
        && a.rules == b.rules
        && a.detail == b.detail
        && a.unchecked == b.unchecked
}

/// The uid a body's answer must echo: `request.uid` of a JSON body whose `request` and `uid`
/// each appear once (as kube-apiserver sends them), when it is a non-empty string of at most
/// [`super::UID_LIMIT`] bytes.
fn readable_uid(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Env {
        request: Req,
    }
    #[derive(serde::Deserialize)]
    struct Req {
        uid: String,
    }
    let uid = serde_json::from_slice::<Env>(body).ok()?.request.uid;
    (!uid.is_empty() && uid.len() <= super::UID_LIMIT).then_some(uid)
}

/// Answers `body` with both hooks and checks each answer: a well-formed AdmissionReview that
/// agrees with the [`Outcome`], the readable uid echoed, and — when the one pass takes the
/// body — the same answer as the staged reading gives. Returns whether the one pass took it.
fn check(policy: &Policy, body: &[u8]) -> bool {
    let text = std::str::from_utf8(body).ok();
    let one_pass = text.is_some_and(|t| matches!(decode::one_pass(t), Ok(Some(_))));
    let uid = readable_uid(body);
    for hook in [Hook::Validate, Hook::Mutate] {
        let o = review(hook, policy, body, now());
        let shown = || {
            String::from_utf8_lossy(body)
                .chars()
                .take(2000)
                .collect::<String>()
        };
        let v: Value = serde_json::from_slice(&o.body)
            .unwrap_or_else(|e| panic!("{hook:?}: answer is not JSON ({e}) for {}", shown()));
        assert!(
            v["apiVersion"] == "admission.k8s.io/v1"
                || v["apiVersion"] == "admission.k8s.io/v1beta1",
            "{v}"
        );
        assert_eq!(v["kind"], "AdmissionReview", "{v}");
        let r = &v["response"];
        assert_eq!(r["uid"], json!(o.uid), "{v}");
        if let Some(uid) = &uid {
            assert_eq!(&o.uid, uid, "{hook:?}: uid not echoed: {v} for {}", shown());
        }
        assert_eq!(r["allowed"], json!(o.allowed), "{v}");
        if o.allowed {
            assert_eq!(o.code, 200, "{v}");
        } else {
            assert!(o.code >= 400, "{v}");
            assert_eq!(r["status"]["code"], json!(o.code), "{v}");
            assert!(r["status"]["reason"].is_string(), "{v}");
            assert_eq!(r["status"]["message"], json!(o.detail), "{v}");
            assert!(!o.detail.is_empty(), "{v}");
            assert!(r.get("patch").is_none(), "{v}");
        }
        assert_eq!(r.get("patch").is_some(), o.patched, "{v}");
        assert_eq!(
            r.get("patch").is_some(),
            r.get("patchType").is_some(),
            "{v}"
        );
        assert!(hook == Hook::Mutate || !o.patched, "{v}");
        for w in r["warnings"].as_array().into_iter().flatten() {
            assert!(w.as_str().is_some_and(|w| w.chars().count() <= 120), "{v}");
        }
        if one_pass {
            let (api_version, req, warnings) = decode::staged(text.unwrap()).unwrap_or_else(|e| {
                panic!(
                    "one pass took what the staged reading refuses ({e:?}): {}",
                    shown()
                )
            });
            let staged = answer(hook, policy, api_version, req, now(), warnings);
            assert!(
                same(&o, &staged),
                "{hook:?}: the one pass answers {} and the staged reading {} for {}",
                String::from_utf8_lossy(&o.body),
                String::from_utf8_lossy(&staged.body),
                shown()
            );
        }
    }
    one_pass
}

fn condition(t: &str, s: &str, r: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": format!("{t} {r}"),
           "lastTransitionTime": "2026-11-01T10:00:00Z", "observedGeneration": 2})
}

/// A `runtimes/status` UPDATE shaped like the apiserver's, Pending -> Ready.
fn review_value() -> Value {
    let object = |state: &str, configured: &str| {
        json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
            "metadata": {"name": "r1", "namespace": "kcp-system", "generation": 2,
                "uid": "0b7b6a8c-1111-2222-3333-444455556666",
                "labels": {"kyma-project.io/runtime-id": "r1"},
                "managedFields": [{"manager": "kim", "operation": "Update",
                    "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {".": {}, "f:state": {}}}}]},
            "spec": {"shoot": {"name": "s", "provider": {"type": "aws", "workers": [
                {"name": "w", "minimum": 1, "maximum": 3}]}}},
            "status": {"state": state, "conditions": [
                condition("Provisioned", "True", "ShootCreationCompleted"),
                condition("KubeconfigReady", "True", "KubeconfigCreated"),
                condition("Configured", configured, "ConfigurationCompleted"),
            ]}
        })
    };
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
            "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
            "subResource": "status", "name": "r1", "namespace": "kcp-system",
            "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:kim-system:kim-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": object("Ready", "True"),
            "oldObject": object("Pending", "Unknown"),
            "dryRun": false,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

fn body(v: &Value, pretty: bool) -> Vec<u8> {
    if pretty {
        serde_json::to_vec_pretty(v).unwrap()
    } else {
        serde_json::to_vec(v).unwrap()
    }
}

fn answers(body: &[u8]) -> [Outcome; 2] {
    check(&Policy::builtin(), body);
    [Hook::Validate, Hook::Mutate].map(|hook| review(hook, &Policy::builtin(), body, now()))
}

/// Every AdmissionReview of the samples (`samples/admission`), by name.
fn samples() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/admission");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no samples in {}", dir.display());
    out
}

/// The policies the answers depend on: the built-in one, every rule in warn mode, KIM's
/// history switched on, and both switches with warn mode.
fn policies() -> Vec<Policy> {
    vec![
        Policy::builtin(),
        Policy::builtin().with_enforcement(Enforcement::Warn),
        Policy::builtin().with_switch(CompatSwitch::KimHistory),
        Policy::builtin()
            .with_switch(CompatSwitch::KimHistory)
            .with_switch(CompatSwitch::TerminatingConditionType)
            .with_enforcement(Enforcement::Warn),
    ]
}

// ---------------------------------------------------------------------------------------------
// What the decoder reads, skips and refuses.

/// A `runtimes/status` UPDATE, Pending -> Pending, with `top` put into the envelope's members,
/// `label` as a label of the objects and `spec` into their `spec`.
fn small_body(top: &str, label: &str, spec: &str) -> Vec<u8> {
    let object = |state: &str| {
        format!(
            r#"{{"apiVersion":"infrastructuremanager.kyma-project.io/v1","kind":"Runtime","metadata":{{"name":"r1","generation":2,"labels":{{"l":"{label}"}}}},"spec":{{"shoot":{{"name":"s"}}{spec}}},"status":{{"state":"{state}","conditions":[{{"type":"Provisioned","status":"Unknown","reason":"Processing"}}]}}}}"#
        )
    };
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",{top}"request":{{"uid":"5c3d-77","kind":{{"group":"infrastructuremanager.kyma-project.io","version":"v1","kind":"Runtime"}},"resource":{{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"}},"subResource":"status","operation":"UPDATE","userInfo":{{"username":"system:serviceaccount:kim-system:kim-controller"}},"object":{},"oldObject":{},"dryRun":false}}}}"#,
        object("Pending"),
        object("Pending")
    )
    .into_bytes()
}

/// Members kim skips are only checked: serde_json's raw-value key in `spec`, a repeated `uid`
/// or `operation` in the envelope (members of a bare request only) are answered as without
/// them, with or without escapes elsewhere.
#[test]
fn skipped_members_do_not_change_the_answer() {
    let plain = answers(&small_body("", "a", ""));
    assert!(plain.iter().all(|o| o.allowed && o.code == 200));
    for (top, spec) in [
        ("", r#","x":{"$serde_json::private::RawValue":"1"}"#),
        (r#""uid":"a","uid":"b","operation":1,"operation":2,"#, ""),
        (
            r#""uid":"a","uid":"b","#,
            r#","$serde_json::private::RawValue":{}"#,
        ),
    ] {
        for label in ["a", r"\ud83d\ude00"] {
            let text = small_body(top, label, spec);
            for (a, b) in answers(&text).iter().zip(&plain) {
                assert!(same(a, b), "{}", String::from_utf8_lossy(&text));
            }
        }
    }
}

/// Where kim reads a JSON value (the envelope's `apiVersion` and `kind`, an object's
/// `status`), serde_json's raw-value key is refused, whatever the request (a Pod's status
/// too); where kim only skips a member it is data, also beside a status with a repeated key;
/// a bare request with a repeated `uid` is not read.
#[test]
fn raw_value_keys_where_kim_reads_a_value_are_refused() {
    let reserved = "request body uses the reserved key \"$serde_json::private::RawValue\" (kim does not accept it)";
    let review = String::from_utf8(small_body("", "a", "")).unwrap();
    let pod = review.replacen(r#""resource":"runtimes""#, r#""resource":"pods""#, 1);
    for text in [
        review.replacen(
            r#""admission.k8s.io/v1""#,
            r#"{"$serde_json::private::RawValue":"\"admission.k8s.io/v1\""}"#,
            1,
        ),
        review.replacen(
            r#""AdmissionReview""#,
            r#"{"$serde_json::private::RawValue":"\"AdmissionReview\""}"#,
            1,
        ),
        review.replacen(
            r#""state":"Pending""#,
            r#""state":{"$serde_json::private::RawValue":"\"Pending\""}"#,
            1,
        ),
        pod.replacen(
            r#""state":"Pending""#,
            r#""state":{"\u0024serde_json::private::RawValue":"\"Pending\""}"#,
            1,
        ),
    ] {
        assert_ne!(text, review);
        for o in answers(text.as_bytes()) {
            assert_eq!(
                (o.code, o.detail.as_str(), o.uid.as_str()),
                (400, reserved, "5c3d-77"),
                "{text}"
            );
        }
    }
    // The key where it is data, beside a status with a repeated key (the last one counts).
    let data = String::from_utf8(small_body(
        "",
        "a",
        r#","$serde_json::private::RawValue":{}"#,
    ))
    .unwrap()
    .replacen(
        r#""state":"Pending""#,
        r#""state":"Ready","state":"Pending""#,
        1,
    );
    for (a, b) in answers(data.as_bytes())
        .iter()
        .zip(&answers(review.as_bytes()))
    {
        assert!(same(a, b), "{data}");
    }
    let bare = r#"{"uid":"a","operation":"UPDATE","uid":"b"}"#;
    for o in answers(bare.as_bytes()) {
        assert_eq!(
            (o.code, o.detail.as_str()),
            (
                400,
                "request body is not an AdmissionReview: a field appears twice at line 1 column 37"
            ),
        );
    }
}

#[test]
fn raw_value_keys_are_found_however_spelled_and_nothing_else_is() {
    let refused = |text: &str| {
        serde_json::from_str::<Json>(text)
            .is_err_and(|e| e.to_string().starts_with("kim: reserved raw-value key"))
    };
    assert!(refused(r#"{"a":{"$serde_json::private::RawValue":"1"}}"#));
    assert!(refused(
        r#"[{"b":[{"\u0024serde_json::private::RawValue":5}]}]"#
    ));
    assert!(refused(
        r#"{"\u0024serde_json::priv\u0061te::RawValue":"{}"}"#
    ));
    let kept = |text: &str| {
        serde_json::from_str::<Json>(text)
            .is_ok_and(|j| j.0 == serde_json::from_str::<Value>(text).unwrap())
    };
    assert!(kept(r#"{"a":"$serde_json::private::RawValue"}"#));
    assert!(kept(r#"{"$serde_json::private::RawValueX":1}"#));
    // Built as `Value` builds it: numbers, member order, the last of a repeated key.
    let text =
        r#"{"z":1,"a":[-1,1.5,-0,18446744073709551615,1e300,null,true,"\u00e9"],"z":{"b":2}}"#;
    let Json(v) = serde_json::from_str(text).unwrap();
    assert_eq!(v, serde_json::from_str::<Value>(text).unwrap());
    assert_eq!(
        v.to_string(),
        serde_json::from_str::<Value>(text).unwrap().to_string()
    );
    assert!(serde_json::from_str::<Json>("{not json").is_err());
}

/// Each refusal says what is wrong, without quoting the body, with the uid when readable.
#[test]
fn refusals_say_what_is_wrong() {
    let text = String::from_utf8(body(&review_value(), false)).unwrap();
    let uid = "705ab4f5-6393-11e8-b7cc-42010a800002";
    let pod = text.replacen(r#""resource":"runtimes""#, r#""resource":"pods""#, 1);
    let long_uid = text.replacen(uid, &"u".repeat(1 << 20), 1);
    let too_long =
        "request.uid is 1048576 bytes, longer than 128: not a uid kube-apiserver sends (a UUID)";
    let mut wrong = Vec::new();
    for (body, code, detail, want_uid) in [
        ("", 400, "request body is empty; expected an AdmissionReview (admission.k8s.io/v1)".to_string(), ""),
        ("\"x\"", 400, "request body is not an AdmissionReview: a value has the wrong type or form (expected struct ReviewIn) at line 1 column 3".to_string(), ""),
        (r#"{"apiVersion":"v1","kind":"Pod"}"#, 400, r#"expected an AdmissionReview (apiVersion admission.k8s.io/v1, kind AdmissionReview), got apiVersion "v1" kind "Pod""#.to_string(), ""),
        (r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#, 400, "AdmissionReview has no request".to_string(), ""),
        (&text.replacen(r#""dryRun":false"#, r#""dryRun":"no""#, 1), 400, "request is malformed: a value has the wrong type or form (expected a boolean) at line 1 column 2654".to_string(), uid),
        (&text.replacen(r#""generation":2"#, r#""generation":"2""#, 1), 400, "request.object is not a valid Runtime: a value has the wrong type or form (expected i64) at line 1 column 139".to_string(), uid),
        (&text.replacen(r#""status":{"state":"Pending""#, r#""status":{},"status":{"state":"Pending""#, 1), 400, "request.oldObject is not a valid Runtime: a field appears twice at line 1 column 504".to_string(), uid),
        (&text.replacen(r#","oldObject":{"#, r#","oldObjekt":{"#, 1), 400, "request.oldObject is required for a Runtime status UPDATE".to_string(), uid),
        (&text.replacen(r#""uid":"705ab4f5"#, r#""uid":"","x":"705ab4f5"#, 1), 400, "request.uid is missing".to_string(), ""),
        // A uid the answer would echo is bounded: not echoed, whatever else is wrong.
        (&long_uid, 400, too_long.to_string(), ""),
        // Not a Runtime status UPDATE: its objects are not read, a broken one is no refusal.
        (&pod.replacen(r#""generation":2"#, r#""generation":"2""#, 1), 200, "kim: Runtime UPDATE is not a Runtime status UPDATE; nothing was checked".to_string(), uid),
    ] {
        for o in answers(body.as_bytes()) {
            let got = (o.code, o.detail.as_str(), o.uid.as_str());
            if got != (code, detail.as_str(), want_uid) {
                wrong.push(format!("{got:?} for {}", &body[..body.len().min(80)]));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nor echoed by a refusal before decoding (the uid read from a body the HTTP layer refused).
    assert_eq!(super::reject(413, "too large", long_uid.as_bytes()).uid, "");
    assert_eq!(super::reject(413, "too large", text.as_bytes()).uid, uid);
    let mut bad = text.clone().into_bytes();
    bad[text.find("kcp-system").unwrap()] = 0xff;
    for o in answers(&bad) {
        assert_eq!(
            (o.code, o.detail.as_str(), o.uid.as_str()),
            (400, "request body is not valid UTF-8 JSON", uid)
        );
    }
}

/// A member name with an escape is matched unescaped, as serde_json matches field names;
/// escapes and non-ASCII text in read and skipped members; v1beta1 is answered in v1beta1;
/// deep nesting in a skipped member costs nothing.
#[test]
fn escapes_versions_and_skipped_nesting_are_read_as_json_says() {
    let policy = Policy::builtin();
    let text = String::from_utf8(body(&review_value(), false)).unwrap();
    let plain = review(Hook::Validate, &policy, text.as_bytes(), now());
    assert!(plain.allowed);
    for variant in [
        text.replacen("\"operation\"", "\"oper\\u0061tion\"", 1),
        text.replacen(
            "\"spec\":",
            &format!(
                "\"spec\":{}1{},\"x\":",
                "[".repeat(10_000),
                "]".repeat(10_000)
            ),
            1,
        ),
        text.replacen(
            "\"kind\":\"AdmissionReview\"",
            "\"kind\":\"Admission\\u0052eview\"",
            1,
        ),
    ] {
        assert!(check(&policy, variant.as_bytes()), "{variant}");
        assert!(same(
            &review(Hook::Validate, &policy, variant.as_bytes(), now()),
            &plain
        ));
    }
    let mut v = review_value();
    v["request"]["uid"] = json!("uid-\u{e9}-\"q\"");
    v["request"]["userInfo"]["username"] = json!("\u{1F600}user\\n");
    v["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
    v["request"]["object"]["spec"]["note"] = json!("caf\u{e9} \u{1} \u{2028}");
    v["request"]["object"]["status"]["conditions"][0]["message"] = json!("d\u{e9}j\u{e0} \"vu\"");
    assert!(check(&policy, &body(&v, false)));
    let o = review(Hook::Validate, &policy, &body(&v, true), now());
    assert_eq!(
        (o.uid.as_str(), o.user.as_str()),
        ("uid-\u{e9}-\"q\"", "\u{1F600}user\\n")
    );
    v["apiVersion"] = json!("admission.k8s.io/v1beta1");
    assert!(check(&policy, &body(&v, false)));
    let answer: Value =
        serde_json::from_slice(&review(Hook::Mutate, &policy, &body(&v, false), now()).body)
            .unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1beta1");
}

/// The depth of a `status`: what serde_json's recursion limit (128) lets through is answered,
/// the one pass and the staged reading agreeing where the one pass (which counts the envelope,
/// the request and the object too) stops first; deeper is a 400 with the uid, never a stack
/// overflow.
#[test]
fn status_depth_is_bounded_by_serde_json() {
    let policy = Policy::builtin();
    let text = serde_json::to_string(&{
        let mut v = review_value();
        v["request"]["object"]["status"]["x"] = json!("@@");
        v
    })
    .unwrap();
    let mut answered = Vec::new();
    for depth in [1, 100, 120, 123, 124, 125, 126, 127, 128, 129, 200, 10_000] {
        for nested in [
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth)),
            format!("{}{{}}{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
        ] {
            let body = text.replace("\"@@\"", &nested);
            check(&policy, body.as_bytes());
            let o = review(Hook::Validate, &policy, body.as_bytes(), now());
            assert_eq!(o.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
            assert!(o.allowed || o.code == 400, "{depth}: {}", o.detail);
            answered.push((depth, o.allowed));
        }
    }
    let allowed = |d: usize| {
        answered
            .iter()
            .filter(|(depth, _)| *depth == d)
            .all(|(_, a)| *a)
    };
    assert!(allowed(100) && allowed(124), "{answered:?}");
    assert!(!allowed(126) && !allowed(10_000), "{answered:?}");
}

/// Counts the heap this thread holds, as glibc's malloc holds it (usable size plus the chunk
/// header), to check [`decode`]'s estimate of what decoding builds against the real figure.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub(super) struct Counting;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    /// Bytes held now by allocations this thread made (and freed).
    pub(super) fn live() -> isize {
        LIVE.with(Cell::get)
    }

    #[allow(unsafe_code)]
    fn footprint(p: *mut u8) -> isize {
        // SAFETY: `p` is a live allocation of the system allocator (glibc malloc).
        (unsafe { libc::malloc_usable_size(p.cast()) } + 8) as isize
    }

    fn add(n: isize) {
        let _ = LIVE.try_with(|c| c.set(c.get() + n));
    }

    // SAFETY: every call is passed on to `System` unchanged; only a counter is kept beside.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                add(footprint(p));
            }
            p
        }
        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            add(-footprint(p));
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(p, layout) }
        }
        unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
            let before = footprint(p);
            // SAFETY: the caller's contract, passed on.
            let q = unsafe { System.realloc(p, layout, size) };
            if !q.is_null() {
                add(footprint(q) - before);
            }
            q
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;
}

/// The decoder's estimate of what it builds ([`decode::DECODED_LIMIT`] is counted in it) is
/// what the allocator really holds for the values (within the page rounding of large buffers),
/// and not far above it, for the
/// shapes that expand most (an object, an array, an empty string per few bytes of JSON) and
/// for realistic ones. Prints the figures (bytes built per byte of JSON).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_estimate_of_what_decoding_builds_holds() {
    let repeat = |item: &str, n: usize| format!("[{}]", vec![item; n].join(","));
    let conditions = |n: usize, message: usize| {
        serde_json::to_string(
            &json!({"state": "Ready", "conditions": (0..n).map(|i| json!({
            "type": format!("Type{i}"), "status": "True", "reason": "Done",
            "message": "m".repeat(message), "lastTransitionTime": "2026-11-01T10:00:00Z",
            "observedGeneration": 2}
        )).collect::<Vec<_>>()}),
        )
        .unwrap()
    };
    let nested = |open: &str, inner: &str, close: &str, depth: usize| {
        format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
    };
    let wide = format!(
        "{{{}}}",
        (0..10_000)
            .map(|i| format!("\"k{i}\":{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let shapes = [
        ("[{\"a\":0},…]", repeat("{\"a\":0}", 50_000)),
        (
            "[{\"a\":0,\"b\":0,\"c\":0,\"d\":0},…]",
            repeat("{\"a\":0,\"b\":0,\"c\":0,\"d\":0}", 20_000),
        ),
        ("[{},…]", repeat("{}", 50_000)),
        ("[[0],…]", repeat("[0]", 50_000)),
        ("[0,…]", repeat("0", 100_000)),
        ("[\"\",…]", repeat("\"\"", 100_000)),
        ("[\"a\",…]", repeat("\"a\"", 100_000)),
        ("[\"\\u0041…\",…]", repeat("\"\\u0041bc\"", 50_000)),
        ("an object of 10 000 members", wide),
        (
            "[[[…[0]…]]],… (120 deep)",
            repeat(&nested("[", "0", "]", 120), 1_000),
        ),
        (
            "[{\"\":{\"\":…0…}},…] (120 deep)",
            repeat(&nested("{\"\":", "0", "}", 120), 1_000),
        ),
        ("64 conditions", conditions(64, 20)),
        ("64 conditions, 16 KiB messages", conditions(64, 16 * 1024)),
        ("10 000 conditions", conditions(10_000, 20)),
    ];
    let mut wrong = Vec::new();
    for (name, text) in shapes {
        let before = counting::live();
        let limited = decode::Limited::start(usize::MAX);
        let value: Json = serde_json::from_str(&text).unwrap();
        let charged = decode::Limited::charged(usize::MAX);
        drop(limited);
        let built = usize::try_from(counting::live() - before).unwrap();
        eprintln!(
            "{name}: {} bytes of JSON build {built} bytes ({:.1} a byte), estimated {charged}",
            text.len(),
            built as f64 / text.len() as f64
        );
        // Within a constant: the page rounding of buffers large enough to be mapped.
        if charged + 64 * 1024 < built || charged > built + built / 2 + 1024 {
            wrong.push(format!("{name}: {charged} charged, {built} built"));
        }
        drop(value);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The review of [`review_value`] with `status` as the status of `object` and `oldObject`.
fn with_statuses(status: &str) -> Vec<u8> {
    with_statuses_in(review_value(), status)
}

/// `v` with `status` as the status of `object` and `oldObject`.
fn with_statuses_in(mut v: Value, status: &str) -> Vec<u8> {
    v["request"]["object"]["status"] = json!("@@");
    v["request"]["oldObject"]["status"] = json!("@@");
    serde_json::to_string(&v)
        .unwrap()
        .replace("\"@@\"", status)
        .into_bytes()
}

/// A review that decodes to more than [`decode::DECODED_LIMIT`] — statuses, or `userInfo.groups`,
/// of the shapes that build the most per byte — is denied 413 with its uid, by both hooks and
/// in both readings (a malformed `spec` sends it to the staged one); a large status the model
/// evaluates (64 conditions of 16 KiB messages, 1 MiB in each object) is evaluated.
#[test]
fn what_a_review_decodes_to_is_bounded() {
    let policy = Policy::builtin();
    let uid = "705ab4f5-6393-11e8-b7cc-42010a800002";
    let objects = format!("[{}]", vec!["{\"a\":0}"; 400_000].join(","));
    let groups = format!("[{}]", vec!["\"g\""; 1_500_000].join(","));
    let mut with_groups = review_value();
    with_groups["request"]["userInfo"]["groups"] = json!("@@");
    let with_groups = serde_json::to_string(&with_groups)
        .unwrap()
        .replace("\"@@\"", &groups)
        .into_bytes();
    // `object` is not a valid Runtime: the one pass stops there, the staged reading goes on
    // to `oldObject`.
    let mut staged = review_value();
    staged["request"]["object"]["metadata"]["generation"] = json!("x");
    let staged = with_statuses_in(staged, &objects);
    for (name, body) in [
        ("statuses", with_statuses(&objects)),
        ("groups", with_groups),
        ("statuses, staged", staged),
    ] {
        assert!(body.len() < 7 * 1024 * 1024, "{name}: {}", body.len());
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            matches!(decode::one_pass(text), Err(decode::Refusal::TooLarge(_)))
                || name.ends_with("staged")
        );
        assert!(matches!(
            decode::staged(text),
            Err(decode::Refusal::TooLarge(_))
        ));
        for hook in [Hook::Validate, Hook::Mutate] {
            let o = review(hook, &policy, &body, now());
            assert_eq!((o.allowed, o.code), (false, 413), "{name}: {}", o.detail);
            assert_eq!(o.uid, uid, "{name}");
            assert!(
                o.detail
                    .contains(&format!("more than {} bytes", decode::DECODED_LIMIT)),
                "{name}: {}",
                o.detail
            );
            let v: Value = serde_json::from_slice(&o.body).unwrap();
            assert_eq!(v["response"]["status"]["code"], 413, "{v}");
            assert_eq!(v["response"]["uid"], uid, "{v}");
        }
    }

    let large = serde_json::to_string(
        &json!({"state": "Ready", "conditions": (0..64).map(|i| json!({
        "type": format!("Type{i}"), "status": "True", "reason": "Done",
        "message": "m".repeat(16 * 1024), "lastTransitionTime": "2026-11-01T10:00:00Z",
        "observedGeneration": 2}
    )).collect::<Vec<_>>()}),
    )
    .unwrap();
    let body = with_statuses(&large);
    assert!(body.len() > 2 * 1024 * 1024, "{}", body.len());
    check(&policy, &body);
    for hook in [Hook::Validate, Hook::Mutate] {
        let o = review(hook, &policy, &body, now());
        assert_ne!(o.code, 413, "{hook:?}: {}", o.detail);
        assert!(!o.unchecked, "{hook:?}: {}", o.detail);
        match hook {
            Hook::Mutate => assert!(o.allowed, "{}", o.detail),
            Hook::Validate => assert!(o.allowed || !o.violations.is_empty(), "{}", o.detail),
        }
    }
}

/// `metadata.generation` written `-0` (in `object` or `oldObject`): serde_json reads `-0` as
/// the float -0.0, which an `i64` refuses, so the object is not a valid Runtime and the review
/// is denied with 400 (not read as 0).
#[test]
fn negative_zero_generation_is_refused() {
    let text = serde_json::to_string(&review_value()).unwrap();
    for nth in 0..2 {
        let mut body = String::new();
        for (i, part) in text.split("\"generation\":2").enumerate() {
            if i > 0 {
                body.push_str(if i - 1 == nth {
                    "\"generation\":-0"
                } else {
                    "\"generation\":2"
                });
            }
            body.push_str(part);
        }
        assert_ne!(body, text);
        for policy in &policies() {
            check(policy, body.as_bytes());
            for hook in [Hook::Validate, Hook::Mutate] {
                let o = review(hook, policy, body.as_bytes(), now());
                assert_eq!((o.allowed, o.code), (false, 400), "{hook:?}: {body}");
            }
        }
    }
}

/// KIM-era writes (retired condition types, reasons and states, stored values the model
/// ratchets) and other writes whose answer carries warnings or ratcheted violations: taken by
/// the one pass under every policy, compact or pretty alike, and the answers do carry them.
#[test]
fn kim_era_and_warned_writes_are_answered_in_every_mode() {
    let base = review_value();
    let retired = json!({"type": "RuntimeProvisioning", "status": "True", "reason": "Verified",
        "message": "verified", "lastTransitionTime": "2024-06-11T10:00:00Z"});
    let push = |v: &mut Value, o: &str, c: Value| {
        v["request"][o]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(c);
    };
    let mut writes: Vec<(&str, Value)> = Vec::new();
    let mut v = base.clone();
    for o in ["object", "oldObject"] {
        push(&mut v, o, retired.clone());
    }
    writes.push(("retired type carried", v.clone()));
    let mut anew = v.clone();
    anew["request"]["object"]["status"]["conditions"][3]["lastTransitionTime"] =
        json!("2026-11-01T10:00:00Z");
    writes.push(("retired type written anew", anew));
    let mut r = base.clone();
    r["request"]["object"]["status"]["conditions"][0]["reason"] = json!("ProcessingCompleted");
    push(
        &mut r,
        "object",
        json!({"type": "OidcConfigured", "status": "True", "reason": "OidcConfigured"}),
    );
    writes.push(("retired reasons", r));
    let mut d = base.clone();
    d["request"]["oldObject"]["status"]["state"] = json!("Deleting");
    d["request"]["object"]["status"]["state"] = json!("Terminating");
    d["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
    push(
        &mut d,
        "object",
        json!({"type": "Provisioned", "status": "Unknown", "reason": "Deletion"}),
    );
    writes.push(("stored Deleting", d.clone()));
    d["request"]["object"]["status"]["state"] = json!("Deleting");
    writes.push(("Deleting written", d));
    let mut u = base.clone();
    for o in ["object", "oldObject"] {
        u["request"][o]["status"]["state"] = json!("R\u{e9}ady\u{1}\u{202e}");
    }
    writes.push(("unknown state", u));
    let mut t = base.clone();
    for o in ["object", "oldObject"] {
        t["request"][o]["status"]["conditions"][0]["lastTransitionTime"] = json!("yesterday");
        push(&mut t, o, json!({"status": "True", "reason": "Whatever"}));
    }
    writes.push(("unparsable time, typeless condition", t));
    let mut w = base.clone();
    for i in 0..14 {
        let long = format!("T{i}-{}", "\u{e9}\u{1F600}".repeat(40));
        push(
            &mut w,
            "object",
            json!({"type": long, "status": "True", "reason": "R"}),
        );
    }
    writes.push(("many long unknown types", w));

    let (mut warned, mut ratcheted) = (0, 0);
    for policy in &policies() {
        for (what, v) in &writes {
            let compact = body(v, false);
            assert!(check(policy, &compact), "{what}: not taken by the one pass");
            let o = review(Hook::Validate, policy, &compact, now());
            assert!(
                same(&o, &review(Hook::Validate, policy, &body(v, true), now())),
                "{what}"
            );
            let answer: Value = serde_json::from_slice(&o.body).unwrap();
            warned += usize::from(
                answer["response"]["warnings"]
                    .as_array()
                    .is_some_and(|w| !w.is_empty()),
            );
            ratcheted += o
                .violations
                .iter()
                .filter(|(_, a)| *a == Action::Ratcheted)
                .count();
        }
    }
    assert!(warned > 10, "{warned} answers with warnings");
    assert!(ratcheted > 5, "{ratcheted} ratcheted violations");
}

/// What the webhook logs at `info` (see [`Outcome::is_routine`]): a ratcheted-only write
/// is routine; the same unknown condition type is not when its rule is in `warn` mode
/// (allowed too), nor when denied.
#[test]
fn ratcheted_answers_are_routine_warned_and_denied_ones_are_not() {
    let unknown = json!({"type": "Unheard", "status": "True", "reason": "R"});
    let mut carried = review_value();
    for o in ["object", "oldObject"] {
        carried["request"][o]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(unknown.clone());
    }
    let mut added = review_value();
    added["request"]["object"]["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(unknown);
    let deny = Policy::builtin();
    let warn = Policy::builtin().with_enforcement(Enforcement::Warn);
    let answer = |policy: &Policy, v: &Value| {
        let o = review(Hook::Validate, policy, &body(v, false), now());
        let actions: Vec<Action> = o.violations.iter().map(|(_, a)| *a).collect();
        (o.allowed, actions, o.is_routine())
    };
    assert_eq!(
        answer(&deny, &carried),
        (true, vec![Action::Ratcheted], true)
    );
    assert_eq!(answer(&deny, &added), (false, vec![Action::Deny], false));
    assert_eq!(answer(&warn, &added), (true, vec![Action::Warn], false));
    assert_eq!(answer(&deny, &review_value()), (true, vec![], true));
}

/// The shared sample reviews as they are (three are bare AdmissionRequests: answered as v1,
/// with a warning) and wrapped in a v1 envelope (taken by the one pass), under every policy.
#[test]
fn samples_get_well_formed_answers() {
    for (name, bytes) in samples() {
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let enveloped = v.get("kind").and_then(Value::as_str) == Some("AdmissionReview");
        let wrapped = if enveloped {
            v.clone()
        } else {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": v.clone()})
        };
        for policy in &policies() {
            assert_eq!(check(policy, &bytes), enveloped, "{name}");
            let o = review(Hook::Validate, policy, &bytes, now());
            assert!(o.allowed && o.unchecked, "{name}: {}", o.detail);
            let bare_warned = String::from_utf8_lossy(&o.body).contains("bare AdmissionRequest");
            assert_eq!(bare_warned, !enveloped, "{name}");
            for pretty in [false, true] {
                assert!(
                    check(policy, &body(&wrapped, pretty)),
                    "{name}: enveloped, not taken"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzz test: arbitrary bytes, and real reviews damaged structurally and textually.

/// Where a generated value goes: members kim reads, members it skips, new members.
const PLACES: &[&str] = &[
    "/request/object/spec",
    "/request/object/status",
    "/request/object/status/state",
    "/request/object/status/conditions",
    "/request/object/status/conditions/0",
    "/request/object/status/conditions/1/lastTransitionTime",
    "/request/object/status/conditions/2/observedGeneration",
    "/request/object/metadata",
    "/request/object/metadata/generation",
    "/request/object/metadata/deletionTimestamp",
    "/request/object/metadata/labels",
    "/request/object/metadata/managedFields",
    "/request/object",
    "/request/oldObject",
    "/request/oldObject/status",
    "/request/oldObject/metadata/generation",
    "/request/uid",
    "/request/kind",
    "/request/resource",
    "/request/resource/resource",
    "/request/subResource",
    "/request/operation",
    "/request/userInfo",
    "/request/userInfo/username",
    "/request/userInfo/groups",
    "/request/dryRun",
    "/request/options",
    "/request/extra",
    "/request",
    "/apiVersion",
    "/kind",
    "/extra",
    "/uid",
    "/operation",
];

/// Member names: those kim reads at some level, serde_json's raw-value key, and any others.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "uid",
            "kind",
            "status",
            "metadata",
            "generation",
            "deletionTimestamp",
            "request",
            "object",
            "oldObject",
            "userInfo",
            "dryRun",
            "apiVersion",
            "state",
            "conditions",
            "type",
            "reason",
            "subResource",
            "operation",
            "resource",
            "group",
            "username",
            "groups",
            "$serde_json::private::RawValue",
        ])
        .prop_map(str::to_string),
        "\\PC{0,6}",
        any::<String>(),
    ]
}

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .:/-]{0,24}",
        prop::sample::select(vec![
            "Ready",
            "Pending",
            "Failed",
            "Terminating",
            "True",
            "False",
            "Unknown",
            "Provisioned",
            "ShootCreationCompleted",
            "UPDATE",
            "status",
            "runtimes",
            "AdmissionReview",
            "admission.k8s.io/v1",
            "admission.k8s.io/v1beta1",
            "infrastructuremanager.kyma-project.io",
            "2026-11-01T10:00:00Z",
            "null",
            "",
        ])
        .prop_map(str::to_string),
        any::<String>(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-3i64..4).prop_map(Value::from),
        string().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Text put into a body: whitespace, JSON tokens, broken tokens, repeated members.
const TOKENS: &[&str] = &[
    " ",
    "\n",
    "\t",
    "\r",
    "\u{c}",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "0",
    "-0",
    "01",
    "1.",
    ".5",
    "1e",
    "1E+2",
    "-1.5e-3",
    "2.0",
    "1e999",
    "true",
    "tru",
    "null",
    "nul",
    "false",
    "\"a\"",
    "\"\\u00e9\"",
    "\"\\ud800\"",
    "\"\\uDC00\\u0041\"",
    "\"\\uD83D\\uDE00\"",
    "\"\\x\"",
    "\"\u{1}\"",
    "\"\u{7f}\"",
    "é",
    "\u{feff}",
    "\"uid\":\"dup\",",
    "\"status\":null,",
    "\"status\":{},",
    "\"metadata\":[],",
    "\"object\":null,",
    "\"generation\":3,",
    "\"generation\":1.0,",
    "\"dryRun\":1,",
    "\"request\":null,",
    "\"kind\":5,",
    "\"u\\u0069d\":\"x\",",
    "\"deletionTimestamp\":\"2026-11-02T00:00:00Z\",",
    "\"state\":\"Ready\",",
    "\"$serde_json::private::RawValue\":\"1\",",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
];

/// One textual edit at a byte position (bytes, not chars: invalid UTF-8 included): remove a
/// byte (0), insert any byte (1), copy a span of up to 40 bytes from elsewhere (2: repeated
/// members), insert a token (3, 4).
type Edit = (Index, u8, Index, usize);

fn edits(max: usize) -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(
        (any::<Index>(), 0u8..5, any::<Index>(), 1usize..40),
        0..=max,
    )
}

fn apply(mut t: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for (at, kind, what, len) in edits {
        let i = at.index(t.len() + 1);
        match kind {
            0 if i < t.len() => {
                t.remove(i);
            }
            0 => {}
            1 => t.insert(i, what.index(256) as u8),
            2 if !t.is_empty() => {
                let a = what.index(t.len());
                let span = t[a..(a + len).min(t.len())].to_vec();
                t.splice(i..i, span);
            }
            _ => {
                let tok = TOKENS[what.index(TOKENS.len())].as_bytes();
                t.splice(i..i, tok.iter().copied());
            }
        }
    }
    t
}

fn put(v: &mut Value, place: &str, value: Value) {
    let (parent, member) = place.rsplit_once('/').unwrap();
    match v.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(member.to_string(), value);
        }
        Some(Value::Array(a)) => {
            if let Some(slot) = member.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *slot = value;
            }
        }
        _ => {}
    }
}

/// The fuzz targets are not vacuous: most generated reviews without textual edits are taken
/// by the one pass, and most are answered with an evaluation.
#[test]
fn generated_reviews_are_mostly_decoded() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let policy = Policy::builtin();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = (prop::sample::select(PLACES), json_value(), any::<bool>());
    let (mut taken, mut evaluated, n) = (0, 0, 600);
    for _ in 0..n {
        let (at, value, pretty) = strategy.new_tree(&mut runner).unwrap().current();
        let mut v = review_value();
        put(&mut v, at, value);
        let text = body(&v, pretty);
        taken += usize::from(check(&policy, &text));
        let o = review(Hook::Validate, &policy, &text, now());
        evaluated += usize::from(!o.unchecked && o.code != 400);
    }
    eprintln!("one pass took {taken} of {n} generated reviews, {evaluated} evaluated");
    assert!(taken * 5 > n * 2, "taken {taken} of {n}");
    assert!(evaluated * 3 > n, "evaluated {evaluated} of {n}");
}

proptest! {
    #![proptest_config(config(1500))]

    /// Arbitrary bytes, alone or after the start of a review: a well-formed answer.
    #[test]
    fn fuzz_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..1024), prefixed in any::<bool>()) {
        let body = if prefixed {
            [br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"f-1","#.as_slice(), &bytes].concat()
        } else {
            bytes
        };
        check(&Policy::builtin(), &body);
    }

    /// A generated value put at a place of a real review, written compactly or pretty, then
    /// zero to three textual edits.
    #[test]
    fn fuzz_damaged_reviews(
        place in prop::sample::select(PLACES),
        value in json_value(),
        pretty in any::<bool>(),
        edits in edits(3),
        policy in any::<Index>(),
    ) {
        let policies = policies();
        let policy = policy.get(&policies);
        let mut v = review_value();
        put(&mut v, place, value);
        let text = body(&v, pretty);
        check(policy, &text);
        check(policy, &apply(text, &edits));
    }

    /// Token soup in place of a skipped member and of a status.
    #[test]
    fn fuzz_token_soup(
        tokens in prop::collection::vec(prop::sample::select(TOKENS), 1..12),
        in_status in any::<bool>(),
    ) {
        let mut v = review_value();
        v["request"]["object"][if in_status { "status" } else { "spec" }] = json!("@@");
        let text = serde_json::to_string(&v).unwrap().replace("\"@@\"", &tokens.concat());
        check(&Policy::builtin(), text.as_bytes());
    }

    /// A shared sample under one to four textual edits, under any policy.
    #[test]
    fn fuzz_damaged_samples(
        sample in any::<Index>(),
        policy in any::<Index>(),
        edits in edits(4),
    ) {
        let samples = samples();
        let policies = policies();
        let (_, text) = sample.get(&samples);
        check(policy.get(&policies), &apply(text.clone(), &edits));
    }
}
