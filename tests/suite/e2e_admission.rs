//! End to end, the admission stage's behaviours one at a time, with the real `kim webhook`
//! process (and, where kim cannot misbehave on purpose, a fake webhook serving the same
//! gen-certs.sh certificate): the defaulting patch applied to a status write,
//! `failurePolicy: Fail` rejecting writes while the webhook is down (and `Ignore` letting them
//! through), `timeoutSeconds`, a patch that does not apply (500 whatever the failure policy),
//! invalid answers, denial codes and messages as kube-apiserver words them.

use crate::support::reconciler;

use crate::support::e2e;

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use e2e::*;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use reconciler::{NS, sample};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::WebhookStage;
use testenv::webhook_stage::{CallOutcome, FailurePolicy, StageResult};

fn api_as(e: &E2e, token: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    );
    Api::namespaced_with(e.env.kcp.client_as(Some(token)), NS, &ar)
}

/// Creates the `aws-minimal` sample (no controller runs in these tests); returns its name.
async fn create_runtime(e: &E2e) -> String {
    let rt = sample("aws-minimal.yaml");
    e.env.create(&rt).await;
    rt.metadata.name.unwrap()
}

/// A merge patch of `status` as the controller's identity.
async fn write_status(e: &E2e, name: &str, status: Value) -> Result<DynamicObject, kube::Error> {
    api_as(e, IMPOSTOR_TOKEN)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
}

fn first_status(complete: bool) -> Value {
    let mut c = json!({"type": "Provisioned", "status": "Unknown", "reason": "Initialised"});
    if complete {
        c["message"] = json!("Runtime initialised");
        c["lastTransitionTime"] = json!("2026-11-01T10:00:00Z");
        c["observedGeneration"] = json!(1);
    }
    json!({"state": "Pending", "conditions": [c]})
}

fn api_error(r: Result<DynamicObject, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A write missing `lastTransitionTime`, `message` and `observedGeneration` gets them from the
/// mutating webhook's JSONPatch; the validating webhook sees the patched object; the stored
/// status carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defaulting_patch_is_applied() {
    let e = E2e::start().await;
    let name = create_runtime(&e).await;
    write_status(&e, &name, first_status(false))
        .await
        .expect("an incomplete first status is defaulted and admitted");
    let stored = e.env.runtime_json(&name).unwrap();
    let c = &stored["status"]["conditions"][0];
    assert_eq!(c["reason"], "Initialised");
    let ltt = c["lastTransitionTime"]
        .as_str()
        .expect("lastTransitionTime filled");
    chrono::DateTime::parse_from_rfc3339(ltt).expect("RFC 3339");
    assert!(
        c["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message filled: {c}"
    );
    assert_eq!(c["observedGeneration"], 1, "generation of the Runtime");

    let records = e.status_records(&name);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.result, StageResult::Allowed { patched: true });
    let CallOutcome::Allowed { patch: Some(patch) } = &r.calls[0].outcome else {
        panic!(
            "the mutating webhook returned a patch: {:?}",
            r.calls[0].outcome
        );
    };
    let paths: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|op| op["path"].as_str())
        .collect();
    for p in [
        "/status/conditions/0/lastTransitionTime",
        "/status/conditions/0/message",
        "/status/conditions/0/observedGeneration",
    ] {
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    assert_eq!(
        r.calls[0].response.as_ref().unwrap()["patchType"],
        "JSONPatch"
    );
    let seen = &r.calls[1].review["request"]["object"]["status"]["conditions"][0];
    assert_eq!(seen, c, "the validating webhook saw the patched condition");
    assert!(matches!(
        r.calls[1].outcome,
        CallOutcome::Allowed { patch: None }
    ));
    assert_eq!(e.webhook.count("/mutate", "allowed").await, 1);
    assert_eq!(e.webhook.count("/validate", "allowed").await, 1);
    eprintln!("defaulting: patch {patch}");

    // The same write again changes nothing: the mutating webhook returns no patch.
    write_status(&e, &name, stored["status"].clone())
        .await
        .expect("idempotent");
    let records = e.status_records(&name);
    assert_eq!(records.len(), 2);
    assert!(matches!(
        records[1].calls[0].outcome,
        CallOutcome::Allowed { patch: None }
    ));
}

/// `failurePolicy: Fail` (the manifests'): with the webhook down, every status write is
/// rejected with 500 naming the webhook; main-resource writes are not affected. With
/// `Ignore` the same write — even an illegal one — goes through unchecked. A webhook that
/// never answers fails the call after `timeoutSeconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_and_timeout() {
    let mut e = E2e::start().await;
    let name = create_runtime(&e).await;
    write_status(&e, &name, first_status(true))
        .await
        .expect("admitted while the webhook runs");
    let before = e.env.runtime_json(&name).unwrap();

    // ---- Fail, webhook down ----
    e.webhook.proc.kill();
    let mut next = first_status(true);
    next["conditions"][0]["reason"] = json!("Pending");
    next["conditions"][0]["message"] = json!("waiting for Gardener");
    let (code, reason, message) = api_error(write_status(&e, &name, next.clone()).await);
    eprintln!("webhook down, Fail: {code} {reason}: {message}");
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    let prefix = format!(
        "Internal error occurred: failed calling webhook \"{MUTATE_HOOK}\": failed to call webhook: Post \"https://kim-webhook.kim-system.svc/mutate?timeout=5s\": "
    );
    assert!(message.starts_with(&prefix), "{message}");
    assert_eq!(
        e.env.runtime_json(&name).unwrap()["status"],
        before["status"],
        "nothing stored"
    );
    // Main-resource writes do not match the rules: not affected.
    e.env
        .edit(&name, |r| {
            r.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("e2e/while-down".into(), "yes".into());
        })
        .await;
    let last = e.stage.log().last().cloned().unwrap();
    assert_eq!(last.result, StageResult::NotMatched);

    // ---- Ignore ----
    let mut configs = e.certs.configurations();
    for w in &mut configs.webhooks {
        w.failure_policy = FailurePolicy::Ignore;
    }
    e.stage = WebhookStage::new(configs, e.webhook.addr);
    e.install_stage();
    let mut illegal = next.clone();
    illegal["conditions"][0]["reason"] = json!("NotAReason");
    write_status(&e, &name, illegal)
        .await
        .expect("Ignore lets the write through unchecked");
    let r = e.status_records(&name).pop().unwrap();
    assert_eq!(r.result, StageResult::Allowed { patched: false });
    assert_eq!(r.calls.len(), 2, "both webhooks tried");
    for c in &r.calls {
        assert!(
            matches!(c.outcome, CallOutcome::Failed { ignored: true, .. }),
            "{:?}",
            c.outcome
        );
    }
    assert_eq!(
        e.env.runtime_json(&name).unwrap()["status"]["conditions"][0]["reason"],
        "NotAReason"
    );

    // ---- timeoutSeconds: a webhook that accepts connections and never answers ----
    let blackhole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_addr = blackhole.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    let acceptor = tokio::spawn(async move {
        while let Ok((s, _)) = blackhole.accept().await {
            h.lock().unwrap().push(s);
        }
    });
    let mut configs = e.certs.configurations();
    for w in &mut configs.webhooks {
        w.timeout_seconds = 1;
    }
    e.stage = WebhookStage::new(configs, hole_addr);
    e.install_stage();
    let started = Instant::now();
    let (code, _, message) = api_error(write_status(&e, &name, next).await);
    let took = started.elapsed();
    eprintln!("webhook hangs, timeoutSeconds 1: {code} after {took:?}: {message}");
    assert_eq!(code, 500);
    assert!(
        message.contains("mutate?timeout=1s"),
        "the timeout is passed as a query parameter: {message}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "not before the timeout: {took:?}"
    );
    let r = e.status_records(&name).pop().unwrap();
    assert_eq!(r.calls.len(), 1, "Fail stops at the mutating webhook");
    assert!(
        !held.lock().unwrap().is_empty(),
        "the call reached the endpoint"
    );
    acceptor.abort();
}

/// What the fake webhook answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// A JSONPatch adding to `/status/conditions/-` (absent in the object: does not apply).
    BadPatch,
    /// `response.uid` not the request's.
    WrongUid,
    /// A denial without `status.code`.
    DenyNoCode,
    /// A denial with code 422 and a reason but no message.
    Deny422,
    /// Allowed with a patch that applies (adds a label under status, which is kept).
    GoodPatch,
}

/// A fake mutating/validating webhook (axum over rustls) serving the gen-certs.sh
/// certificate, answering as `mode` says on `/mutate` and allowing everything on `/validate`.
async fn fake_webhook(certs: &Certs, mode: Arc<Mutex<Mode>>) -> std::net::SocketAddr {
    kim::webhook::certs::install_default_provider();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
        certs.out().join("tls.crt"),
        certs.out().join("tls.key"),
    )
    .await
    .expect("serving certificate");
    let answer = move |Json(review): Json<Value>| {
        let mode = *mode.lock().unwrap();
        async move {
            let uid = review["request"]["uid"].as_str().unwrap_or("").to_string();
            let b64 = |v: Value| {
                base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&v).unwrap())
            };
            let response = match mode {
                Mode::BadPatch => json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": b64(json!([{"op": "add", "path": "/status/conditions/-", "value": {"type": "X"}}]))}),
                Mode::WrongUid => json!({"uid": "not-the-request-uid", "allowed": true}),
                Mode::DenyNoCode => {
                    json!({"uid": uid, "allowed": false, "status": {"message": "fake says no"}})
                }
                Mode::Deny422 => {
                    json!({"uid": uid, "allowed": false, "status": {"code": 422, "reason": "FakeReason"}})
                }
                Mode::GoodPatch => json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": b64(json!([{"op": "add", "path": "/status/state", "value": "Pending"}]))}),
            };
            Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
            )
        }
    };
    let allow = |Json(review): Json<Value>| async move {
        Json(
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": true}}),
        )
    };
    let app = axum::Router::new()
        .route("/mutate", post(answer))
        .route("/validate", post(allow));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls).expect("listener");
    tokio::spawn(server.serve(app.into_make_service()));
    addr
}

/// A patch that does not apply fails the write with 500 even under `failurePolicy: Ignore`;
/// an answer with the wrong uid is a call failure (500 under Fail); denials get the code of
/// `status.code` (at least 400; unset = 400) and the apiserver's message; a patch that
/// applies is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_webhook_bad_patch_wrong_uid_and_denial_codes() {
    let mut e = E2e::start().await;
    let name = create_runtime(&e).await;
    let mode = Arc::new(Mutex::new(Mode::BadPatch));
    let addr = fake_webhook(&e.certs, mode.clone()).await;
    let mut configs = e.certs.configurations();
    for w in &mut configs.webhooks {
        w.failure_policy = FailurePolicy::Ignore;
    }
    e.stage = WebhookStage::new(configs, addr);
    e.install_stage();

    let (code, reason, message) =
        api_error(write_status(&e, &name, json!({"state": "Pending"})).await);
    eprintln!("bad patch, Ignore: {code} {reason}: {message}");
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert!(
        message.starts_with(&format!(
            "Internal error occurred: the patch of admission webhook \"{MUTATE_HOOK}\" does not apply: "
        )),
        "{message}"
    );
    assert!(e.env.runtime_json(&name).unwrap().get("status").is_none());
    let r = e.status_records(&name).pop().unwrap();
    assert!(
        matches!(r.calls[0].outcome, CallOutcome::BadPatch { .. }),
        "{:?}",
        r.calls[0].outcome
    );
    assert_eq!(r.calls.len(), 1, "the validating webhook is not called");

    // Back to Fail for the rest.
    e.stage = WebhookStage::new(e.certs.configurations(), addr);
    e.install_stage();

    *mode.lock().unwrap() = Mode::WrongUid;
    let (code, _, message) = api_error(write_status(&e, &name, json!({"state": "Pending"})).await);
    eprintln!("wrong uid, Fail: {code}: {message}");
    assert_eq!(code, 500);
    assert!(
        message.starts_with(&format!(
            "Internal error occurred: failed calling webhook \"{MUTATE_HOOK}\": received invalid webhook response: expected response.uid=\""
        )),
        "{message}"
    );

    *mode.lock().unwrap() = Mode::DenyNoCode;
    let (code, reason, message) =
        api_error(write_status(&e, &name, json!({"state": "Pending"})).await);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        message,
        format!("admission webhook \"{MUTATE_HOOK}\" denied the request: fake says no")
    );

    *mode.lock().unwrap() = Mode::Deny422;
    let (code, _, message) = api_error(write_status(&e, &name, json!({"state": "Pending"})).await);
    assert_eq!(code, 422);
    assert_eq!(
        message,
        format!("admission webhook \"{MUTATE_HOOK}\" denied the request: FakeReason")
    );

    *mode.lock().unwrap() = Mode::GoodPatch;
    write_status(&e, &name, json!({"state": "Failed"}))
        .await
        .expect("a patch that applies");
    assert_eq!(
        e.env.runtime_json(&name).unwrap()["status"]["state"],
        "Pending",
        "the patched object is stored"
    );
    let uids: std::collections::HashSet<String> =
        e.stage.calls().into_iter().map(|c| c.uid).collect();
    assert_eq!(uids.len(), e.stage.calls().len(), "a fresh uid per call");
}

/// The manifests as the stage reads them: the static-ca overlay (JSON 6902 caBundle patch on
/// both configurations) and the cert-manager overlay (strategic-merge annotation patches, no
/// caBundle). With the committed placeholder caBundle every status write is rejected (the
/// apiserver cannot verify the webhook and `failurePolicy` is `Fail`), as the overlay warns. A
/// dry-run write reaches the webhooks (`sideEffects: None`) with `dryRun: true` and stores
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_placeholder_ca_bundle_and_dry_run() {
    let mut e = E2e::start().await;
    let configs = e.certs.configurations();
    assert_eq!(configs.webhooks.len(), 2);
    let (m, v) = (&configs.webhooks[0], &configs.webhooks[1]);
    assert_eq!(
        (m.name.as_str(), v.name.as_str()),
        (MUTATE_HOOK, VALIDATE_HOOK)
    );
    for w in [m, v] {
        let svc = w.service.as_ref().expect("service");
        assert_eq!(svc.host(), "kim-webhook.kim-system.svc");
        assert_eq!(svc.port, 443);
        assert_eq!(w.timeout_seconds, 5);
        assert_eq!(w.failure_policy, FailurePolicy::Fail);
        assert_eq!(w.rules.len(), 1);
        assert_eq!(w.rules[0].resources, ["runtimes/status"]);
        assert_eq!(w.rules[0].operations, ["UPDATE"]);
        let ca = String::from_utf8(w.ca_bundle.clone()).unwrap();
        assert_eq!(
            ca,
            std::fs::read_to_string(e.certs.out().join("ca.crt")).unwrap(),
            "the caBundle is the generated CA"
        );
    }
    assert_eq!(m.service.as_ref().unwrap().path, "/mutate");
    assert_eq!(v.service.as_ref().unwrap().path, "/validate");
    assert!(m.reinvoke_if_needed);

    let cm_dir = reconciler::manifest_dir().join("manifests/overlays/cert-manager");
    let docs = testenv::webhook_stage::kustomize_build(&cm_dir).expect("cert-manager overlay");
    let cm = testenv::WebhookConfigurations::from_documents(&docs).unwrap();
    assert_eq!(cm.webhooks.len(), 2);
    assert!(cm.webhooks.iter().all(|w| w.ca_bundle.is_empty()));
    let annotated = docs
        .iter()
        .filter(|d| {
            d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
                == "kim-system/kim-webhook-serving"
        })
        .count();
    assert_eq!(
        annotated, 2,
        "both configurations annotated by the strategic-merge patches"
    );

    // Dry run: called, nothing stored.
    let name = create_runtime(&e).await;
    let api = api_as(&e, IMPOSTOR_TOKEN);
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    api.patch_status(
        &name,
        &dry,
        &Patch::Merge(json!({"status": first_status(false)})),
    )
    .await
    .expect("dry run admitted");
    assert!(
        e.env.runtime_json(&name).unwrap().get("status").is_none(),
        "dry run stores nothing"
    );
    let r = e.status_records(&name).pop().unwrap();
    assert!(r.dry_run);
    assert_eq!(r.calls.len(), 2);
    for c in &r.calls {
        assert_eq!(c.review["request"]["dryRun"], true);
        assert_eq!(c.review["request"]["options"]["dryRun"], json!(["All"]));
    }

    // The committed placeholder caBundle.
    let placeholder = testenv::WebhookConfigurations::from_kustomization(
        &reconciler::manifest_dir().join("manifests/overlays/static-ca"),
    )
    .unwrap();
    e.stage = WebhookStage::new(placeholder, e.webhook.addr);
    e.install_stage();
    let (code, _, message) = api_error(write_status(&e, &name, first_status(true)).await);
    eprintln!("placeholder caBundle: {code}: {message}");
    assert_eq!(code, 500);
    assert!(
        message.contains(&format!("failed calling webhook \"{MUTATE_HOOK}\"")),
        "{message}"
    );
    assert_eq!(
        (
            e.webhook.count("/mutate", "allowed").await,
            e.webhook.count("/validate", "allowed").await
        ),
        (1, 1),
        "the webhook saw only the dry run"
    );
}
