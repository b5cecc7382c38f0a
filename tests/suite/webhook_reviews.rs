//! Reviews over real TLS: every captured AdmissionReview in `samples/admission/` and
//! status writes built from `samples/runtimes/` get a well-formed answer, and the
//! webhook's answer equals what `kim::admission::review` decides in-process (the HTTP layer
//! adds no rules).

use crate::support;
use kim::testing::model;

use base64::Engine as _;
use kim::admission::{self, Hook};
use kim::status::Policy;
use serde_json::{Value, json};
use std::path::PathBuf;
use support::*;

const JSON: &str = "application/json";

fn samples(kind: &str) -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("samples")
        .join(kind);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no samples in {}", dir.display());
    out
}

/// The sample as a full v1 envelope (some captures are the bare `request`).
fn envelope(doc: Value) -> Value {
    if doc.get("request").is_some() {
        doc
    } else {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": doc})
    }
}

/// Checks the protocol rules every answer obeys and returns `response`.
fn check_answer(hook: Hook, request: &Value, body: &[u8]) -> Value {
    let uid = request["request"]["uid"].as_str().expect("a string uid");
    let resp = model::response_of(body, uid);
    let v = &resp;
    let has_patch = resp.get("patch").is_some();
    assert_eq!(
        has_patch,
        resp.get("patchType").is_some(),
        "patch and patchType together: {v}"
    );
    if has_patch {
        assert_eq!(
            hook,
            Hook::Mutate,
            "a validating answer carries no patch: {v}"
        );
        assert_eq!(resp["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(resp["patch"].as_str().expect("patch is a base64 string"))
            .expect("standard base64");
        let ops: Value = serde_json::from_slice(&raw).expect("patch is JSON");
        assert!(
            ops.as_array().is_some_and(|a| !a.is_empty()),
            "non-empty JSON Patch array: {ops}"
        );
    }
    if resp["allowed"] == false {
        assert!(resp["status"]["code"].as_u64().unwrap() >= 400, "{v}");
    }
    resp
}

/// The answer `kim::admission::review` gives in-process, fields that do not depend on "now".
fn same_verdict(webhook: &Value, in_process: &[u8]) {
    let local: Value = serde_json::from_slice(in_process).unwrap();
    let local = &local["response"];
    for field in [
        "uid",
        "allowed",
        "status",
        "warnings",
        "auditAnnotations",
        "patchType",
    ] {
        assert_eq!(
            webhook.get(field),
            local.get(field),
            "{field}: webhook {webhook} vs in-process {local}"
        );
    }
}

async fn post(
    c: &reqwest::Client,
    addr: std::net::SocketAddr,
    hook: Hook,
    body: Vec<u8>,
) -> Vec<u8> {
    let path = match hook {
        Hook::Validate => "/validate?timeout=10s",
        Hook::Mutate => "/mutate?timeout=10s",
    };
    let r = c
        .post(url(addr, path))
        .header("content-type", JSON)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], JSON);
    r.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admission_sample_gets_a_well_formed_answer() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let policy = Policy::builtin();
    for http1 in [false, true] {
        let c = client(&[&c0.ca_pem], server.addr, http1);
        for (name, text) in samples("admission") {
            let review =
                envelope(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}")));
            let bytes = serde_json::to_vec(&review).unwrap();
            for hook in [Hook::Validate, Hook::Mutate] {
                let answer = post(&c, server.addr, hook, bytes.clone()).await;
                let resp = check_answer(hook, &review, &answer);
                let local = admission::review(hook, &policy, &bytes, chrono::Utc::now());
                same_verdict(&resp, &local.body);
            }
        }
    }
}

/// A `runtimes/status` UPDATE review shaped like a real apiserver's: uid, userInfo,
/// managedFields, UpdateOptions, same generation on both sides.
fn status_write(
    uid: &str,
    runtime: &Value,
    old_status: Value,
    new_status: Value,
    user: &str,
    dry_run: bool,
) -> Value {
    let mut old = runtime.clone();
    old["metadata"]["generation"] = json!(3);
    old["metadata"]["uid"] = json!("0b9e7e39-4a4f-4c8b-9d3e-2c1f5f7f1a11");
    old["metadata"]["resourceVersion"] = json!("1200");
    old["metadata"]["managedFields"] = json!([{
        "manager": "kim", "operation": "Update", "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
        "fieldsV1": {"f:status": {".": {}, "f:state": {}}}
    }]);
    old["status"] = old_status;
    let mut new = old.clone();
    new["status"] = new_status;
    model::update_status_review(
        uid,
        json!({"username": user, "uid": "f00", "groups": ["system:serviceaccounts", "system:authenticated"]}),
        new,
        old,
        dry_run,
    )
}

fn condition(ctype: &str, status: &str, reason: &str) -> Value {
    json!({"type": ctype, "status": status, "reason": reason, "message": format!("{ctype} {reason}"),
           "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_status_writes_answer_like_the_in_process_review() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let policy = Policy::builtin();
    let c = client(&[&c0.ca_pem], server.addr, false);
    let writer = "system:serviceaccount:kim-system:kim-controller";
    for (name, text) in samples("runtimes") {
        let runtime: Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pending = json!({"state": "Pending", "conditions": [condition("Provisioned", "Unknown", "Initialised")]});
        let progressing = json!({"state": "Pending", "conditions": [condition("Provisioned", "Unknown", "Pending")]});
        let cases = [
            (writer, false, pending.clone(), progressing.clone()),
            (writer, true, pending.clone(), progressing.clone()),
            (
                "system:serviceaccount:default:mallory",
                false,
                pending.clone(),
                progressing.clone(),
            ),
            // Missing lastTransitionTime: the mutating hook defaults it.
            (
                writer,
                false,
                pending.clone(),
                json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Pending", "message": "x"}]}),
            ),
        ];
        for (i, (user, dry_run, old, new)) in cases.into_iter().enumerate() {
            let review = status_write(&format!("{name}-{i}"), &runtime, old, new, user, dry_run);
            let bytes = serde_json::to_vec(&review).unwrap();
            for hook in [Hook::Validate, Hook::Mutate] {
                let answer = post(&c, server.addr, hook, bytes.clone()).await;
                let resp = check_answer(hook, &review, &answer);
                let local = admission::review(hook, &policy, &bytes, chrono::Utc::now());
                same_verdict(&resp, &local.body);
                if i == 3 && hook == Hook::Mutate {
                    assert!(
                        resp.get("patch").is_some(),
                        "{name}: defaulting patch: {resp}"
                    );
                }
                if user.ends_with("mallory") && hook == Hook::Validate {
                    assert_eq!(
                        resp["allowed"], false,
                        "{name}: unlisted writer denied: {resp}"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_empty_bodies_get_400_reviews() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let c = client(&[&c0.ca_pem], server.addr, true);
    for body in [
        &b""[..],
        b"   ",
        b"{",
        b"[]",
        b"null",
        b"{\"kind\":\"AdmissionReview\"}",
        b"\xff\xfe",
    ] {
        for hook in [Hook::Validate, Hook::Mutate] {
            let answer = post(&c, server.addr, hook, body.to_vec()).await;
            let v = model::response_of(&answer, "");
            assert_eq!(
                v["allowed"],
                false,
                "{:?}: {v}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(v["status"]["code"], 400, "{v}");
        }
    }
    let text = scrape(server.metrics_addr).await;
    assert!(!text.contains("code=\"500\""), "no internal errors: {text}");
}
