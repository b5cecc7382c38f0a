//! The admission chain as shipped, on a real kube-apiserver: `manifests/base` (or an overlay)
//! installed with its webhook configurations pointed at a real `kim webhook`
//! ([`crate::support::real::Stack`]). What only kube-apiserver can judge: which requests it
//! sends to the hooks (every kind of status write, dry runs, not the main resource), what it
//! makes of their answers (warnings to kubectl, defaulting patches, odd answers of a hook:
//! wrong uid, a patch that does not apply, denial codes) and of their absence
//! (`failurePolicy`, `timeoutSeconds`, a caBundle it cannot use); the hooks as the shipped
//! overlays render them.

use crate::support::real::*;
use axum::extract::{Json, State};
use axum::http::Uri;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::controlplane::WebhookCerts;

/// How every denial of the validating webhook starts, as kube-apiserver words it.
fn denied_prefix() -> String {
    format!("admission webhook \"{VALIDATE_HOOK}\" denied the request: ")
}

/// Asserts that `result` is the validating webhook's 403 naming `rule`; returns its message.
fn assert_denied<T: std::fmt::Debug>(result: kube::Result<T>, rule: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.starts_with(&denied_prefix()),
                "not the validating webhook's denial: {}",
                s.message
            );
            assert!(
                s.message.contains(&format!("[{rule}]")),
                "denial without [{rule}]: {}",
                s.message
            );
            s.message
        }
        other => panic!("expected the webhook's 403 [{rule}], got {other:?}"),
    }
}

/// The stored Runtime as JSON.
async fn stored(stack: &Stack, name: &str) -> Value {
    serde_json::to_value(stack.runtimes().await.get(name).await.expect("get Runtime")).unwrap()
}

fn resource_version(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// `Pending` with `Provisioned` Unknown/Pending: legal from no status and from `Pending`.
fn pending() -> Value {
    json!({"status": {
        "state": "Pending",
        "conditions": [{
            "type": "Provisioned",
            "status": "Unknown",
            "reason": "Pending",
            "message": "Shoot creation in progress"
        }]
    }})
}

/// `Failed` with `Provisioned` False/GardenerErr: legal from `Pending`.
fn failed() -> Value {
    json!({"status": {
        "state": "Failed",
        "conditions": [{
            "type": "Provisioned",
            "status": "False",
            "reason": "GardenerErr",
            "message": "Gardener API call failed; retrying"
        }]
    }})
}

/// Merge patch, JSON patch, PUT and server-side apply of `/status` all arrive at the hooks:
/// an illegal write of each kind is denied with the validating webhook's 403 (and stores
/// nothing), a legal one of each kind is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_status_write_is_judged() {
    let stack = Stack::start("base", &[]).await;
    let name = "every-verb";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;
    let pp = PatchParams::default();

    // Merge patch.
    api.patch_status(name, &pp, &Patch::Merge(pending()))
        .await
        .expect("a legal merge patch is allowed");
    let before = stored(&stack, name).await;
    assert_eq!(before["status"]["state"], "Pending");
    let ready = json!({"status": {"state": "Ready"}});
    assert_denied(
        api.patch_status(name, &pp, &Patch::Merge(&ready)).await,
        "ready-requires",
    );
    assert_eq!(
        resource_version(&stored(&stack, name).await),
        resource_version(&before)
    );

    // JSON patch.
    let message = json!([{"op": "replace", "path": "/status/conditions/0/message", "value": "Shoot creation still in progress"}]);
    let message: json_patch::Patch = serde_json::from_value(message).unwrap();
    api.patch_status(name, &pp, &Patch::<()>::Json(message))
        .await
        .expect("a legal JSON patch is allowed");
    let before = stored(&stack, name).await;
    assert_eq!(
        before["status"]["conditions"][0]["message"],
        "Shoot creation still in progress"
    );
    let terminating = json!([{"op": "replace", "path": "/status/state", "value": "Terminating"}]);
    let terminating: json_patch::Patch = serde_json::from_value(terminating).unwrap();
    assert_denied(
        api.patch_status(name, &pp, &Patch::<()>::Json(terminating))
            .await,
        "transition-needs-deletion",
    );
    assert_eq!(
        resource_version(&stored(&stack, name).await),
        resource_version(&before)
    );

    // PUT (replace_status): the whole object, as read.
    let mut obj = api.get(name).await.unwrap();
    obj.data["status"]["conditions"][0]["message"] = json!("Shoot creation in progress (put)");
    api.replace_status(name, &PostParams::default(), &obj)
        .await
        .expect("a legal PUT is allowed");
    let before = stored(&stack, name).await;
    assert_eq!(
        before["status"]["conditions"][0]["message"],
        "Shoot creation in progress (put)"
    );
    let mut obj = api.get(name).await.unwrap();
    obj.data["status"]["state"] = json!("Failed");
    assert_denied(
        api.replace_status(name, &PostParams::default(), &obj).await,
        "failed-requires-false",
    );
    assert_eq!(
        resource_version(&stored(&stack, name).await),
        resource_version(&before)
    );

    // Server-side apply (forced: the fields belong to the manager of the writes above).
    let ssa = PatchParams::apply("real-admission").force();
    let applied = |status: Value| {
        json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "metadata": {"name": name, "namespace": NS},
            "status": status
        })
    };
    assert_denied(
        api.patch_status(
            name,
            &ssa,
            &Patch::Apply(applied(json!({"state": "Ready"}))),
        )
        .await,
        "ready-requires",
    );
    assert_eq!(
        resource_version(&stored(&stack, name).await),
        resource_version(&before)
    );
    api.patch_status(
        name,
        &ssa,
        &Patch::Apply(applied(failed()["status"].clone())),
    )
    .await
    .expect("a legal server-side apply is allowed");
    let after = stored(&stack, name).await;
    assert_eq!(after["status"]["state"], "Failed");
    assert_eq!(after["status"]["conditions"][0]["reason"], "GardenerErr");
}

/// A dry run (`dryRun=All`) is judged like any write: an illegal one is denied; a legal one
/// answers the object as it would be stored (the mutating webhook's defaults included) and
/// stores nothing (same status, same resourceVersion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_status_writes_are_judged_and_store_nothing() {
    let stack = Stack::start("base", &[]).await;
    let name = "dry-run";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(pending()))
        .await
        .expect("a legal status write is allowed");
    let before = stored(&stack, name).await;

    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let ready = json!({"status": {"state": "Ready"}});
    assert_denied(
        api.patch_status(name, &dry, &Patch::Merge(&ready)).await,
        "ready-requires",
    );

    let answered = api
        .patch_status(name, &dry, &Patch::Merge(failed()))
        .await
        .expect("a legal dry run is allowed");
    let answered = serde_json::to_value(answered).unwrap();
    assert_eq!(answered["status"]["state"], "Failed", "{answered}");
    assert!(
        answered["status"]["conditions"][0]["lastTransitionTime"].is_string(),
        "the dry run's answer lacks the mutating webhook's default: {answered}"
    );
    let after = stored(&stack, name).await;
    assert_eq!(
        after["status"], before["status"],
        "a dry run stored a status"
    );
    assert_eq!(resource_version(&after), resource_version(&before));
}

/// `kubectl <args>` as the admin of `stack`'s control plane (a kubeconfig and `HOME` of its
/// own, no proxy): (success, stdout, stderr).
async fn kubectl(stack: &Stack, test: &str, args: &[&str]) -> (bool, String, String) {
    let bin = testenv::tools::require("kubectl", test);
    let home = tempfile::tempdir().expect("tempdir");
    let kubeconfig = home.path().join("kubeconfig");
    std::fs::write(&kubeconfig, stack.cp.kubeconfig(stack.cp.admin_cert())).unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args)
        .env("HOME", home.path())
        .env("KUBECONFIG", &kubeconfig)
        .stdin(std::process::Stdio::null());
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("run kubectl");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    println!("$ kubectl {}\n{stdout}{stderr}", args.join(" "));
    (out.status.success(), stdout, stderr)
}

/// Stores `status` on Runtime `name` as if it had been written before the guard was
/// installed: the validating configuration is deleted, the write repeated until it is
/// stored, and the configuration created again (and waited for until it judges).
async fn store_unguarded(stack: &Stack, name: &str, status: &Value) {
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(stack.cp.admin().await);
    let mut config = configs
        .get(CONFIG_NAME)
        .await
        .expect("the validating configuration");
    configs
        .delete(CONFIG_NAME, &DeleteParams::default())
        .await
        .expect("delete the validating configuration");
    let api = stack.runtimes().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.message.contains(VALIDATE_HOOK) => {
                assert!(
                    Instant::now() < deadline,
                    "still judged 30 s after the validating configuration was deleted: {}",
                    s.message
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("storing the unguarded status: {e}"),
        }
    }
    config.metadata = ObjectMeta {
        name: config.metadata.name.take(),
        labels: config.metadata.labels.take(),
        ..Default::default()
    };
    configs
        .create(&PostParams::default(), &config)
        .await
        .expect("create the validating configuration again");
    stack.wait_until_judged().await;
}

/// A Runtime stored before the guard (a condition type of KIM's retired vocabulary) is
/// written on by kubectl: the write changes another condition, so the old violation is
/// ratcheted — allowed — and kube-apiserver hands the webhook's warning to kubectl, which
/// prints it as a `Warning:` line on stderr. The same condition written anew is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratcheted_violations_reach_kubectl_as_warnings() {
    let test = "ratcheted_violations_reach_kubectl_as_warnings";
    let stack = Stack::start("base", &[]).await;
    let retired = json!({
        "type": "RuntimeProvisioning",
        "status": "True",
        "reason": "Provisioned",
        "message": "Runtime provisioned",
        "lastTransitionTime": "2024-06-11T10:00:00Z"
    });
    let mut kim_era = pending();
    kim_era["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(retired);

    // Written anew, the retired type is denied.
    stack.create_runtime("new").await;
    assert_denied(
        stack
            .runtimes()
            .await
            .patch_status("new", &PatchParams::default(), &Patch::Merge(&kim_era))
            .await,
        "condition-type-unknown",
    );

    // Stored before the guard, it stays, with a warning.
    stack.create_runtime("kim-era").await;
    store_unguarded(&stack, "kim-era", &kim_era).await;
    let mut status = stored(&stack, "kim-era").await["status"].clone();
    assert_eq!(status["conditions"][1]["type"], "RuntimeProvisioning");
    status["conditions"][0]["message"] = json!("Shoot creation still in progress");
    let patch = json!({"status": status}).to_string();
    let (ok, stdout, stderr) = kubectl(
        &stack,
        test,
        &[
            "patch",
            "runtime",
            "kim-era",
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
    )
    .await;
    assert!(ok, "kubectl patch failed:\n{stderr}");
    assert!(
        stdout.contains("runtime.infrastructuremanager.kyma-project.io/kim-era patched"),
        "{stdout}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Warning: "))
        .collect();
    assert_eq!(warnings, [RATCHETED_WARNING], "kubectl's stderr:\n{stderr}");
    assert_eq!(
        stored(&stack, "kim-era").await["status"]["conditions"][0]["message"],
        "Shoot creation still in progress"
    );
}

/// What kubectl prints for the ratcheted retired condition type: `Warning: ` and the
/// webhook's warning, `[rule] (ratcheted) message` cut to 120 characters by the webhook.
const RATCHETED_WARNING: &str = "Warning: [condition-type-unknown] (ratcheted) status.conditions[1].type: \"RuntimeProvisioning\" was retired by KIM after 2024-0...";

/// Every answer `kim webhook` gave, on any path, from its `/metrics`.
async fn answered(stack: &Stack) -> u64 {
    let webhook = stack.webhook.as_ref().expect("the webhook runs");
    webhook.requests().await.values().sum()
}

/// Writes to the Runtime itself (create, a label change) do not go to the hooks, which
/// are registered for `runtimes/status` only: the webhook's request counters stay as they
/// were. One status write is one call of each hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_the_main_resource_are_not_sent_to_the_hooks() {
    let stack = Stack::start("base", &[]).await;
    let webhook = stack.webhook.as_ref().unwrap();
    let api = stack.runtimes().await;
    let before = answered(&stack).await;
    let (validate, mutate) = (
        webhook.count("/validate", "allowed").await,
        webhook.count("/mutate", "allowed").await,
    );

    stack.create_runtime("main").await;
    let label = json!({"metadata": {"labels": {"kyma-project.io/region": "eu-central-1"}}});
    api.patch("main", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("a label change is allowed");
    assert_eq!(
        stored(&stack, "main").await["metadata"]["labels"]["kyma-project.io/region"],
        "eu-central-1"
    );
    assert_eq!(
        answered(&stack).await,
        before,
        "a write to the main resource reached the webhook: {:?}",
        webhook.requests().await
    );

    api.patch_status("main", &PatchParams::default(), &Patch::Merge(pending()))
        .await
        .expect("a legal status write is allowed");
    assert_eq!(webhook.count("/validate", "allowed").await, validate + 1);
    assert_eq!(webhook.count("/mutate", "allowed").await, mutate + 1);
    assert_eq!(answered(&stack).await, before + 2);
}

/// `manifests/base` fails closed: with the webhook stopped (nothing listens on the
/// configured address), a status write that was legal a moment before fails
/// (`failurePolicy: Fail`), with kube-apiserver's error about calling the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_webhook_fails_status_writes_under_base() {
    let mut stack = Stack::start("base", &[]).await;
    let name = "unguarded";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(pending()))
        .await
        .expect("a legal status write is allowed while the webhook runs");
    let before = stored(&stack, name).await;

    stack.stop_webhook().await;
    let err = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(failed()))
        .await
        .expect_err("a status write without its webhook must fail under failurePolicy Fail");
    let kube::Error::Api(s) = err else {
        panic!("not an API error: {err:?}")
    };
    println!(
        "kube-apiserver, webhook stopped, failurePolicy Fail: {} {s:?}",
        s.code
    );
    let port = stack.addr.port();
    assert_eq!(s.code, 500, "{s:?}");
    assert_eq!(
        s.message,
        format!(
            "Internal error occurred: failed calling webhook \"{MUTATE_HOOK}\": failed to call webhook: Post \"https://127.0.0.1:{port}/mutate?timeout=5s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    assert_eq!(stored(&stack, name).await["status"], before["status"]);
    // Writes to the Runtime itself match no rule of the configurations: not affected.
    let label = json!({"metadata": {"labels": {"kim-test/while-down": "yes"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("a label change while the webhook is stopped");
    assert_eq!(
        stored(&stack, name).await["metadata"]["labels"]["kim-test/while-down"],
        "yes"
    );
}

/// `overlays/guard-kim` fails open: with its only webhook (validating, `failurePolicy:
/// Ignore`) stopped, a status write the webhook denied a moment before is stored. The overlay
/// is built on the cert-manager one: its cert-manager objects are not served here and are
/// named as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_webhook_is_ignored_under_guard_kim() {
    let mut stack = Stack::start("overlays/guard-kim", &[]).await;
    assert_guard_kim_installed(&stack);
    let name = "guarded";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;
    let ready = json!({"status": {"state": "Ready"}});
    assert_denied(
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
            .await,
        "ready-requires",
    );

    stack.stop_webhook().await;
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("failurePolicy Ignore: the write passes without its webhook");
    assert_eq!(stored(&stack, name).await["status"]["state"], "Ready");
}

/// What `manifests/overlays/guard-kim` installs here: the validating configuration and no
/// mutating one; the cert-manager Issuers and Certificates named as skipped.
fn assert_guard_kim_installed(stack: &Stack) {
    let skipped = &stack.installed.skipped;
    for kind in [
        "Issuer kim-system/kim-selfsigned",
        "Issuer kim-system/kim-ca",
        "Certificate kim-system/kim-ca",
        "Certificate kim-system/kim-webhook-serving",
    ] {
        assert!(
            skipped.iter().any(|s| s == kind),
            "{kind} not among the skipped: {skipped:?}"
        );
    }
    let applied = &stack.installed.applied;
    assert!(
        applied.contains(&format!("ValidatingWebhookConfiguration {CONFIG_NAME}")),
        "{applied:?}"
    );
    assert!(
        !applied
            .iter()
            .any(|a| a.starts_with("MutatingWebhookConfiguration")),
        "{applied:?}"
    );
}

/// A webhook server of the test's own on 127.0.0.1 that never answers in time: it denies
/// (on `/validate`) or allows (on `/mutate`) a write of [`PROBE`] at once, so that
/// [`Stack::start_pointing_at`] sees its configurations take effect, and denies every other
/// write only after [`TOO_LATE`] — so a write that is stored was stored without its answer.
struct SlowWebhook {
    addr: SocketAddr,
    held: Held,
}

/// Longer than any `timeoutSeconds` (at most 30).
const TOO_LATE: Duration = Duration::from_secs(60);

/// (path, Runtime name) of every review the [`SlowWebhook`] did not answer in time.
type Held = Arc<Mutex<Vec<(String, String)>>>;

async fn slow_webhook(certs: &WebhookCerts) -> SlowWebhook {
    let held: Held = Arc::default();
    async fn review(State(held): State<Held>, uri: Uri, Json(review): Json<Value>) -> Json<Value> {
        let request = &review["request"];
        let name = request["name"].as_str().unwrap_or_default().to_string();
        let probe = name == PROBE;
        if !probe {
            held.lock().unwrap().push((uri.path().to_string(), name));
            tokio::time::sleep(TOO_LATE).await;
        }
        let allowed = probe && uri.path() == "/mutate";
        Json(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": request["uid"],
                "allowed": allowed,
                "status": {"code": if allowed { 200 } else { 403 }, "message": "denied by the slow test webhook"}
            }
        }))
    }
    let app = axum::Router::new()
        .route("/validate", axum::routing::post(review))
        .route("/mutate", axum::routing::post(review))
        .with_state(held.clone());
    let addr = serve_tls(certs, app).await;
    SlowWebhook { addr, held }
}

/// Serves `app` over HTTPS with `certs` on a free port of 127.0.0.1, in the background.
async fn serve_tls(certs: &WebhookCerts, app: axum::Router) -> SocketAddr {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
        certs.dir.path().join("tls.crt"),
        certs.dir.path().join("tls.key"),
    )
    .await
    .expect("the test's serving certificate loads");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls).expect("listener");
    tokio::spawn(server.serve(app.into_make_service()));
    addr
}

/// `manifests/base` with a webhook slower than `timeoutSeconds` (5 s): kube-apiserver gives
/// up on it and, under `failurePolicy: Fail`, fails the write with a timeout error; nothing
/// is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_slower_than_its_timeout_fails_status_writes_under_base() {
    let certs = WebhookCerts::generate();
    let slow = slow_webhook(&certs).await;
    let stack = Stack::start_pointing_at("base", slow.addr, certs).await;
    let name = "slow";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;

    let t0 = Instant::now();
    let err = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(pending()))
        .await
        .expect_err("a write whose webhook times out must fail under failurePolicy Fail");
    let elapsed = t0.elapsed();
    let kube::Error::Api(s) = err else {
        panic!("not an API error: {err:?}")
    };
    println!(
        "kube-apiserver, webhook timed out after {:.1} s, failurePolicy Fail: {} {s:?}",
        elapsed.as_secs_f64(),
        s.code
    );
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    assert_eq!(
        *slow.held.lock().unwrap(),
        [("/mutate".to_string(), name.to_string())]
    );
    assert_eq!(s.code, 500, "{s:?}");
    assert_eq!(
        s.message,
        format!(
            "Internal error occurred: failed calling webhook \"{MUTATE_HOOK}\": failed to call webhook: Post \"https://{}/mutate?timeout=5s\": context deadline exceeded",
            slow.addr
        )
    );
    assert!(stored(&stack, name).await["status"].is_null());
}

/// `overlays/guard-kim` with a webhook slower than `timeoutSeconds` (5 s): kube-apiserver
/// calls it, gives up, and under `failurePolicy: Ignore` stores the write the webhook
/// would have denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_slower_than_its_timeout_is_ignored_under_guard_kim() {
    let certs = WebhookCerts::generate();
    let slow = slow_webhook(&certs).await;
    let stack = Stack::start_pointing_at("overlays/guard-kim", slow.addr, certs).await;
    assert_guard_kim_installed(&stack);
    let name = "slow";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;

    let t0 = Instant::now();
    let ready = json!({"status": {"state": "Ready"}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("failurePolicy Ignore: the write passes when its webhook times out");
    let elapsed = t0.elapsed();
    println!(
        "kube-apiserver, webhook timed out after {:.1} s, failurePolicy Ignore: stored",
        elapsed.as_secs_f64()
    );
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    assert_eq!(
        *slow.held.lock().unwrap(),
        [("/validate".to_string(), name.to_string())],
        "the webhook was not called"
    );
    assert_eq!(stored(&stack, name).await["status"]["state"], "Ready");
}

/// The mutating webhook's JSONPatch reaches the stored object: a condition written without
/// `lastTransitionTime` and `observedGeneration` is stored with both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutating_webhooks_defaults_are_stored() {
    let stack = Stack::start("base", &[]).await;
    stack.create_runtime("defaulted").await;
    let api = stack.runtimes().await;
    let status = json!({"status": {
        "state": "Pending",
        "conditions": [{
            "type": "Provisioned",
            "status": "Unknown",
            "reason": "Pending",
            "message": "Shoot creation in progress"
        }]
    }});
    let written = api
        .patch_status("defaulted", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("a legal status write is allowed");
    let stored = serde_json::to_value(api.get("defaulted").await.unwrap()).unwrap();
    let cond = &stored["status"]["conditions"][0];
    assert!(cond["lastTransitionTime"].is_string(), "{cond}");
    assert_eq!(cond["observedGeneration"], json!(1), "{cond}");
    assert_eq!(
        serde_json::to_value(written).unwrap()["status"],
        stored["status"]
    );
    // The same status written again changes nothing (no patch, nothing new to store).
    api.patch_status(
        "defaulted",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": stored["status"].clone()})),
    )
    .await
    .expect("the stored status written again is allowed");
    let again = serde_json::to_value(api.get("defaulted").await.unwrap()).unwrap();
    assert_eq!(again["status"], stored["status"]);
    assert_eq!(resource_version(&again), resource_version(&stored));

    // A condition without a message gets one.
    stack.create_runtime("defaulted-message").await;
    let status = json!({"status": {
        "state": "Pending",
        "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Initialised"}]
    }});
    api.patch_status(
        "defaulted-message",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("an incomplete first status is defaulted and allowed");
    let stored = serde_json::to_value(api.get("defaulted-message").await.unwrap()).unwrap();
    let cond = &stored["status"]["conditions"][0];
    assert!(
        cond["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{cond}"
    );
    let ltt = cond["lastTransitionTime"]
        .as_str()
        .expect("lastTransitionTime");
    chrono::DateTime::parse_from_rfc3339(ltt).expect("RFC 3339");
    assert_eq!(cond["observedGeneration"], json!(1), "{cond}");
}

/// `kubectl kustomize <dir>` (the real tool, no server needed): the rendered documents.
fn kustomize(test: &str, dir: &std::path::Path) -> Vec<Value> {
    let bin = testenv::tools::require("kubectl", test);
    let out = std::process::Command::new(bin)
        .arg("kustomize")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.split("\n---\n")
        .map(|d| serde_saphyr::from_str::<Value>(d).expect("a YAML document"))
        .filter(|d| !d.is_null())
        .collect()
}

/// The two webhook configurations of a render: (mutating, validating).
fn configurations(docs: &[Value]) -> (&Value, &Value) {
    let find = |kind: &str| {
        let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind}");
        found[0]
    };
    (
        find("MutatingWebhookConfiguration"),
        find("ValidatingWebhookConfiguration"),
    )
}

/// The shipped overlays as `kubectl kustomize` renders them: static-ca (with the caBundle
/// `certs/gen-certs.sh` writes into a copy of it: the CA it made) points both hooks at the
/// Service `kim-webhook.kim-system.svc:443` (`/mutate`, `/validate`), `timeoutSeconds` 5,
/// `failurePolicy: Fail`, UPDATE of `runtimes/status`, the mutating hook reinvoked if
/// needed; cert-manager gives no caBundle and annotates both for CA injection. Installed as
/// committed, with the placeholder caBundle, the configurations fail every status write
/// (kube-apiserver cannot verify the webhook) and the webhook is called no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_overlays_configure_the_hooks_and_the_placeholder_ca_bundle_fails_closed() {
    let test =
        "the_shipped_overlays_configure_the_hooks_and_the_placeholder_ca_bundle_fails_closed";
    // ---- static-ca, after certs/gen-certs.sh ----
    let copy = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(manifests(""))
        .arg(copy.path().join("manifests"))
        .status()
        .expect("cp -r manifests");
    assert!(status.success());
    let out = std::process::Command::new("bash")
        .arg(repo().join("certs/gen-certs.sh"))
        .arg("--out")
        .arg(copy.path().join("out"))
        .arg("--overlay")
        .arg(copy.path().join("manifests/overlays/static-ca"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run certs/gen-certs.sh (bash)");
    assert!(
        out.status.success(),
        "certs/gen-certs.sh failed (is openssl installed?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = std::fs::read_to_string(copy.path().join("out/ca.crt")).expect("ca.crt");
    let docs = kustomize(test, &copy.path().join("manifests/overlays/static-ca"));
    let (m, v) = configurations(&docs);
    for (c, hook, path) in [(m, MUTATE_HOOK, "/mutate"), (v, VALIDATE_HOOK, "/validate")] {
        let hooks = c["webhooks"].as_array().expect("webhooks");
        assert_eq!(hooks.len(), 1, "{c}");
        let w = &hooks[0];
        assert_eq!(w["name"], hook);
        assert_eq!(
            w["clientConfig"]["service"],
            json!({"name": "kim-webhook", "namespace": "kim-system", "port": 443, "path": path})
        );
        assert_eq!(w["timeoutSeconds"], 5);
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["sideEffects"], "None");
        let rules = w["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0]["resources"], json!(["runtimes/status"]));
        assert_eq!(rules[0]["operations"], json!(["UPDATE"]));
        let bundle = w["clientConfig"]["caBundle"].as_str().expect("caBundle");
        use base64::Engine as _;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .expect("base64");
        assert_eq!(
            String::from_utf8(pem).unwrap(),
            ca,
            "the caBundle is the generated CA"
        );
    }
    assert_eq!(m["webhooks"][0]["reinvocationPolicy"], "IfNeeded");

    // ---- cert-manager ----
    let docs = kustomize(test, &manifests("overlays/cert-manager"));
    let (m, v) = configurations(&docs);
    for c in [m, v] {
        assert!(
            c["webhooks"][0]["clientConfig"].get("caBundle").is_none(),
            "no caBundle: {c}"
        );
        assert_eq!(
            c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "kim-system/kim-webhook-serving"
        );
    }

    // ---- the committed placeholder caBundle, installed ----
    let docs = kustomize(test, &manifests("overlays/static-ca"));
    let placeholder = configurations(&docs).0["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .expect("the committed caBundle")
        .to_string();
    let stack = Stack::start("base", &[]).await;
    let name = "placeholder";
    stack.create_runtime(name).await;
    let admin = stack.cp.admin().await;
    let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": placeholder}]);
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
        admin.clone(),
    )
    .patch(
        CONFIG_NAME,
        &PatchParams::default(),
        &Patch::Json::<()>(patch.clone()),
    )
    .await
    .expect("the placeholder caBundle on the mutating configuration");
    Api::<ValidatingWebhookConfiguration>::all(admin)
        .patch(
            CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .expect("the placeholder caBundle on the validating configuration");
    let api = stack.runtimes().await;
    // A legal write fails once kube-apiserver uses the new caBundle.
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(pending()))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 500 => break s.message,
            other => assert!(
                Instant::now() < deadline,
                "the placeholder caBundle not in effect within 30 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("placeholder caBundle: 500 {message}");
    assert!(
        message.contains(&format!("failed calling webhook \"{MUTATE_HOOK}\""))
            && message.contains("unable to load root certificates"),
        "{message}"
    );
    let before = answered(&stack).await;
    let err = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(pending()))
        .await
        .expect_err("a status write with the placeholder caBundle");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500),
        "{err:?}"
    );
    assert_eq!(answered(&stack).await, before, "the webhook was not called");
}

/// What [`odd_webhook`] answers on `/mutate` (for any Runtime but [`PROBE`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Odd {
    /// Allowed, no patch.
    Allow,
    /// A JSONPatch adding to `/status/missing/-`, which the object lacks: it does not apply.
    BadPatch,
    /// `response.uid` not the request's.
    WrongUid,
    /// A denial without `status.code`.
    DenyNoCode,
    /// A denial with code 422 and a reason but no message.
    Deny422,
    /// Allowed with a patch that applies (`/status/state` set to `Pending`).
    GoodPatch,
}

/// A webhook server of the test's own on 127.0.0.1 answering `/mutate` as the mode says and
/// allowing every write on `/validate` but one of [`PROBE`] (denied, for
/// [`Stack::start_pointing_at`]); the uid of every review it got.
async fn odd_webhook(
    certs: &WebhookCerts,
    mode: Arc<Mutex<Odd>>,
    uids: Arc<Mutex<Vec<String>>>,
) -> SocketAddr {
    use base64::Engine as _;
    let answer = move |uri: Uri, Json(review): Json<Value>| {
        let mode = *mode.lock().unwrap();
        let uids = uids.clone();
        async move {
            let request = &review["request"];
            let uid = request["uid"].as_str().unwrap_or_default().to_string();
            uids.lock().unwrap().push(uid.clone());
            let b64 = |v: Value| {
                base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&v).unwrap())
            };
            let probe = request["name"] == PROBE;
            let response = match (uri.path(), probe, mode) {
                ("/validate", true, _) => json!({"uid": uid, "allowed": false,
                    "status": {"code": 403, "message": "the probe is denied"}}),
                ("/validate", false, _) | (_, true, _) | (_, _, Odd::Allow) => {
                    json!({"uid": uid, "allowed": true})
                }
                (_, _, Odd::BadPatch) => {
                    json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": b64(json!([{"op": "add", "path": "/status/missing/-", "value": {"type": "X"}}]))})
                }
                (_, _, Odd::WrongUid) => json!({"uid": "not-the-request-uid", "allowed": true}),
                (_, _, Odd::DenyNoCode) => {
                    json!({"uid": uid, "allowed": false, "status": {"message": "odd says no"}})
                }
                (_, _, Odd::Deny422) => json!({"uid": uid, "allowed": false,
                    "status": {"code": 422, "reason": "OddReason"}}),
                (_, _, Odd::GoodPatch) => {
                    json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": b64(json!([{"op": "add", "path": "/status/state", "value": "Pending"}]))})
                }
            };
            Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
            )
        }
    };
    let app = axum::Router::new()
        .route("/validate", axum::routing::post(answer.clone()))
        .route("/mutate", axum::routing::post(answer));
    serve_tls(certs, app).await
}

/// [`pending`] complete (the fake hook fills in nothing): what the CRD's schema requires.
fn complete() -> Value {
    let mut status = pending();
    let c = &mut status["status"]["conditions"][0];
    c["message"] = json!("Shoot creation in progress");
    c["lastTransitionTime"] = json!("2026-11-01T10:00:00Z");
    c["observedGeneration"] = json!(1);
    status
}

/// Sets `failurePolicy` of the mutating hook of `manifests/base` (as the admin).
async fn set_mutating_failure_policy(stack: &Stack, policy: &str) {
    let patch: json_patch::Patch = serde_json::from_value(
        json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}]),
    )
    .unwrap();
    Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
        stack.cp.admin().await,
    )
    .patch(
        CONFIG_NAME,
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await
    .expect("patch the mutating configuration");
}

/// What kube-apiserver makes of odd answers of a mutating hook: an answer with another uid is
/// a call failure (ignored under `failurePolicy: Ignore`, 500 under `Fail`); a patch that does
/// not apply fails the write with 500 even under `Ignore` (the message names the JSONPatch
/// operation and path, not the hook); a denial without `status.code` is
/// a 400, one with 422 a 422, each with the apiserver's message naming the hook; a patch that
/// applies is stored; every call has a uid of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_answers_of_a_mutating_hook() {
    let certs = WebhookCerts::generate();
    let mode = Arc::new(Mutex::new(Odd::Allow));
    let uids: Arc<Mutex<Vec<String>>> = Arc::default();
    let addr = odd_webhook(&certs, mode.clone(), uids.clone()).await;
    let stack = Stack::start_pointing_at("base", addr, certs).await;
    let name = "odd";
    stack.create_runtime(name).await;
    let api = stack.runtimes().await;
    let write = |status: Value| {
        let api = api.clone();
        async move {
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await
        }
    };
    let error = |r: kube::Result<kube::api::DynamicObject>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    };

    // ---- a wrong uid: ignored under Ignore (polled until the policy is in effect) ----
    *mode.lock().unwrap() = Odd::WrongUid;
    set_mutating_failure_policy(&stack, "Ignore").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = write(complete()).await {
        assert!(Instant::now() < deadline, "Ignore not in effect: {e:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stored(&stack, name).await["status"]["state"], "Pending");

    // ---- a patch that does not apply: 500 even under Ignore ----
    *mode.lock().unwrap() = Odd::BadPatch;
    let before = stored(&stack, name).await;
    let (code, message) = error(write(complete()).await);
    println!("bad patch, Ignore: {code} {message}");
    assert_eq!(code, 500, "{message}");
    // kube-apiserver names the operation and path, not the hook.
    assert!(
        message.starts_with(
            "Internal error occurred: add operation does not apply: doc is missing path: \"/status/missing/-\""
        ),
        "{message}"
    );
    assert_eq!(
        resource_version(&stored(&stack, name).await),
        resource_version(&before),
        "nothing stored"
    );

    // ---- a wrong uid under Fail: 500 (polled until the policy is in effect) ----
    *mode.lock().unwrap() = Odd::WrongUid;
    set_mutating_failure_policy(&stack, "Fail").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (code, message) = loop {
        match write(complete()).await {
            Err(kube::Error::Api(s)) => break (s.code, s.message),
            other => assert!(Instant::now() < deadline, "Fail not in effect: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("wrong uid, Fail: {code} {message}");
    assert_eq!(code, 500, "{message}");
    assert!(
        message.starts_with(&format!(
            "Internal error occurred: failed calling webhook \"{MUTATE_HOOK}\": received invalid webhook response: expected response.uid="
        )),
        "{message}"
    );

    // ---- denials ----
    *mode.lock().unwrap() = Odd::DenyNoCode;
    let (code, message) = error(write(complete()).await);
    println!("denial without a code: {code} {message}");
    assert_eq!(code, 400, "{message}");
    assert_eq!(
        message,
        format!("admission webhook \"{MUTATE_HOOK}\" denied the request: odd says no")
    );
    *mode.lock().unwrap() = Odd::Deny422;
    let (code, message) = error(write(complete()).await);
    println!("denial with 422: {code} {message}");
    assert_eq!(code, 422, "{message}");
    assert_eq!(
        message,
        format!("admission webhook \"{MUTATE_HOOK}\" denied the request: OddReason")
    );

    // ---- a patch that applies is stored ----
    *mode.lock().unwrap() = Odd::GoodPatch;
    write(json!({"status": {"state": "Failed"}}))
        .await
        .expect("a patch that applies");
    assert_eq!(
        stored(&stack, name).await["status"]["state"],
        "Pending",
        "the patched object is stored"
    );
    let uids = uids.lock().unwrap().clone();
    let distinct: std::collections::HashSet<&String> = uids.iter().collect();
    assert_eq!(distinct.len(), uids.len(), "a uid of its own per call");
}
