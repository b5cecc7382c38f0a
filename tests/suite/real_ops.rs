//! Operating `kim webhook` and `kim controller` on the real servers ([`RealEnv`]: kube-apiserver
//! and etcd with kim's CRD, `manifests/base` and the real `kim webhook`; gardener-apiserver
//! aggregated behind the same kube-apiserver; the simulated gardenlet with a real runtime
//! cluster per Shoot) and the real `kim controller` binary, as its ServiceAccount and garden
//! user with the shipped RBAC:
//! - the metrics of both processes: `promtool check metrics` accepts both expositions; the
//!   series operators need are there with the values the traffic implies (decisions,
//!   violations, certificate reload, per-Runtime state, kubeconfig expiry, provisioning time,
//!   Gardener errors by code, status writes); a deleted Runtime's series go; every metric the
//!   dashboard and the alerts read is one the two processes export (a renamed metric is
//!   caught); `/healthz` and `/readyz`;
//! - leader election: only the Lease holder reconciles and reports per-Runtime series; a
//!   leader that cannot renew stops leading (its series go) and the standby takes over; a
//!   leader stopped with SIGTERM releases the Lease; a leader killed with SIGKILL is replaced
//!   once its Lease has expired;
//! - a no-op resync writes no status and reads neither the Shoot nor the kubeconfig Secret; a
//!   provisioning publishes one Event; runtime-cluster clients are bounded and follow the
//!   kubeconfig;
//! - the kubeconfig is rotated without status writes;
//! - a stale read of a new Runtime restarts the pass instead of failing it;
//! - `--policy-file` is in force, an invalid one and an invalid configuration stop start-up
//!   naming the field.
//!
//! What happened is read on the servers' side: status writes from a test admission webhook on
//! kube-apiserver that records every `runtimes/status` write beside kim's
//! ([`install_admission_hook`]); the controller's reads and Gardener requests from
//! kube-apiserver's flow control, which counts the requests of a user and rule
//! ([`count_requests`]); answers by code from kube-apiserver's `apiserver_request_total`; the
//! Lease's and the kubeconfig Secret's versions from watches. Tests wait for a state that stays
//! (`Ready`, a Runtime gone, a counter past a value, a gauge of a replica that leads or not).
//!
//! The tests share one environment ([`turn`], `support/real_shared.rs`): started by the first, used by one test at a time
//! (each starts the controllers it needs and stops them), stopped after the last. Each test
//! names its Runtimes (and so Shoots, Secrets and runtime clusters) on its own.

use crate::support::ops::{
    dashboard, dashboard_exprs, dashboard_file, exported_names, metric_names, promtool, rule_exprs,
    rules_file, tool, unknown_metrics, yaml,
};
use crate::support::real::{NS, VALIDATE_HOOK, repo};
use crate::support::real_controller::*;
use crate::support::real_shared::{Recorder, Seen, SharedEnv, Turn};
use crate::support::reconciler::{CONTROLLER_USER, GARDEN_NS};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::conditions::is_deleted;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use testenv::process::Process;

// ---- the environment the tests share ----

/// How many tests of this module use the shared environment: it stops after the last of them.
const TESTS: usize = 6;

/// The module's environment; what it adds records every `runtimes/status` write kube-apiserver
/// sent to validation: a test admission webhook beside kim's (it allows them all).
static ENV: SharedEnv<AdmissionHook> =
    SharedEnv::with_setup(TESTS, "real-ops-env", record_status_writes);

fn record_status_writes(env: &RealEnv) -> Pin<Box<dyn Future<Output = AdmissionHook> + Send + '_>> {
    Box::pin(async move {
        let rules = json!([{
            "apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
            "resources": ["runtimes/status"], "operations": ["UPDATE"],
        }]);
        install_admission_hook(env.stack.cp.admin().await, "status-writes", rules, |_| {
            Admission::Allow
        })
        .await
    })
}

/// Waits for the turn of the calling test ([`SharedEnv::turn`]); Runtimes an earlier test left
/// behind when it failed half-way are removed (their finalizers too).
async fn turn() -> Turn<AdmissionHook> {
    ENV.turn(async |env: &RealEnv| {
        let left = env
            .runtimes()
            .await
            .list(&Default::default())
            .await
            .expect("listing the Runtimes");
        for rt in left.items {
            eprintln!("removing Runtime {} left by an earlier test", rt.name_any());
            env.force_delete(&rt.name_any()).await;
        }
    })
    .await
}

/// The statuses the controller's user wrote to Runtime `name` so far (each write's
/// `object.status`, in the order kube-apiserver sent them to validation).
fn controller_writes(env: &Turn<AdmissionHook>, name: &str) -> Vec<Value> {
    env.extra()
        .seen()
        .into_iter()
        .filter(|(r, _)| {
            r["namespace"] == NS
                && r["name"] == name
                && r["userInfo"]["username"] == CONTROLLER_USER
        })
        .map(|(r, _)| r["object"]["status"].clone())
        .collect()
}

// ---- metrics ----

/// What Prometheus 2.42 sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// `GET http://addr/metrics` with `accept`; returns the body (asserting the content type).
async fn scrape_as(addr: &str, accept: &str) -> String {
    let resp = http()
        .get(format!("http://{addr}/metrics"))
        .header("Accept", accept)
        .send()
        .await
        .expect("scrape");
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let text = resp.text().await.unwrap();
    if accept.starts_with("text/plain") {
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        assert!(!text.contains("# EOF"), "{text}");
    } else {
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
    text
}

/// A scrape as Prometheus makes it (OpenMetrics).
async fn scrape(addr: &str) -> String {
    scrape_as(addr, PROMETHEUS_ACCEPT).await
}

/// The value of the one sample `series` (name and labels exactly as exposed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Scrapes `addr` until `check` holds for a scrape (at most [`LIMIT`]); returns that scrape.
async fn scrape_until(addr: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let check = &check;
    let seen = crate::support::eventually(LIMIT, || async move {
        let text = scrape(addr).await;
        check(&text).then_some(text)
    })
    .await;
    match seen {
        Some(t) => t,
        None => panic!(
            "{what}: not within {LIMIT:?}; last scrape:\n{}",
            scrape(addr).await
        ),
    }
}

/// `promtool check metrics` on a text-format scrape.
fn promtool_check_metrics(who: &str, text: &str) {
    let (ok, out) = promtool(&tool("promtool"), &["check", "metrics"], Some(text));
    eprintln!(
        "promtool check metrics ({who}): {}",
        if ok { "ok" } else { &out }
    );
    assert!(
        ok,
        "promtool check metrics of {who}:\n{out}\n--- exposition:\n{text}"
    );
}

/// The HTTP status of `GET http://addr/path`.
async fn status_of(addr: &str, path: &str) -> u16 {
    http()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .status()
        .as_u16()
}

/// The sum of the samples of kube-apiserver's `apiserver_request_total` of the control
/// cluster whose labels include every `name="value"` of `labels`.
async fn apiserver_requests(env: &RealEnv, labels: &[(&str, &str)]) -> u64 {
    let cp = &env.stack.cp;
    let text = cp
        .http_client(cp.admin_cert())
        .expect("an HTTPS client")
        .get(format!("{}/metrics", cp.url()))
        .send()
        .await
        .expect("scrape kube-apiserver")
        .text()
        .await
        .expect("kube-apiserver's metrics");
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|l| l.split_once("} "))
        .filter(|(set, _)| {
            let have: Vec<&str> = set.split(',').collect();
            wanted.iter().all(|w| have.contains(&w.as_str()))
        })
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .map(|v| v.round() as u64)
        .sum()
}

/// Denials of kim's validating webhook so far.
async fn webhook_denials(env: &RealEnv) -> u64 {
    env.stack
        .webhook
        .as_ref()
        .expect("the webhook runs")
        .count("/validate", "denied")
        .await
}

// ---- one controller process ----

/// A `kim controller` process of a test, with the address of its `/metrics` and its leader
/// identity.
struct Controller {
    proc: Process,
    metrics: String,
    identity: String,
}

impl Controller {
    /// `kim controller` as deployed ([`RealEnv::spawn_controller_with`]) with `extra` flags.
    async fn start(env: &RealEnv, extra: &[&str]) -> Controller {
        Self::started(env.spawn_controller_with("info,kim=debug", extra)).await
    }

    /// As [`Controller::start`] on the converter configuration `config`.
    async fn start_on(env: &RealEnv, config: &std::path::Path, extra: &[&str]) -> Controller {
        Self::started(env.spawn_controller_on(config, "info,kim=debug", extra)).await
    }

    async fn started(mut proc: Process) -> Controller {
        let metrics = proc
            .logged("metrics_addr", LIMIT)
            .await
            .unwrap_or_else(|e| panic!("kim controller: {e}"));
        // Logged when it starts waiting for the Lease.
        let identity = proc
            .logged("identity", LIMIT)
            .await
            .unwrap_or_else(|e| panic!("kim controller: {e}"));
        Controller {
            proc,
            metrics,
            identity,
        }
    }

    async fn scrape(&self) -> String {
        scrape(&self.metrics).await
    }

    /// The sum of the samples of family `name` (a counter's `_total`).
    async fn metric(&self, name: &str) -> f64 {
        let text = self.scrape().await;
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Scrapes until `check` holds; panics with `what` and the output.
    async fn until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let (addr, check) = (&self.metrics, &check);
        let seen = crate::support::eventually(LIMIT, || async move {
            let text = scrape(addr).await;
            check(&text).then_some(text)
        })
        .await;
        seen.unwrap_or_else(|| panic!("{what}: not within {LIMIT:?}\n{}", self.context()))
    }

    /// Waits until `kim_controller_reconciles_total` passes `done`.
    async fn reconciled_past(&self, done: f64, what: &str) -> f64 {
        let name = "kim_controller_reconciles_total";
        let text = self
            .until(what, |t| value(t, name).is_some_and(|n| n > done))
            .await;
        value(&text, name).unwrap_or_default()
    }

    fn context(&self) -> String {
        format!(
            "controller {} stdout:\n{}\nstderr:\n{}",
            self.identity,
            self.proc.stdout(),
            self.proc.stderr()
        )
    }

    /// Asserts that kim's webhook denied none of the status writes sent since `denied_before`
    /// (its count then) and the controller's own check none, then stops it (SIGTERM: it
    /// releases the Lease).
    async fn finish(mut self, env: &RealEnv, denied_before: u64) {
        let denied = webhook_denials(env).await - denied_before;
        let own = self.metric("kim_controller_status_denied_total").await;
        let (out, err) = self.proc.terminate(Duration::from_secs(20));
        assert!(
            denied == 0 && own == 0.0,
            "status writes denied: {denied} by the webhook, {own} by the controller's own \
             check\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
}

fn ready(o: Option<&DynamicObject>) -> bool {
    o.is_some_and(|o| o.data["status"]["state"] == "Ready")
}

/// The per-Runtime state series of Runtime `name` in `state`.
fn state_series(name: &str, state: &str) -> String {
    format!(r#"kim_controller_runtime_state{{namespace="{NS}",runtime="{name}",state="{state}"}}"#)
}

/// Whether a scrape has any per-Runtime series.
fn has_runtime_series(text: &str) -> bool {
    text.contains("runtime=\"")
}

fn leader(text: &str) -> Option<f64> {
    value(text, "kim_controller_leader")
}

/// Deletes Runtime `name` (as the admin) and waits until `controller` has released it.
async fn delete_runtime(env: &RealEnv, name: &str, controller: &Controller) {
    let api = env.runtimes().await;
    let uid = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading Runtime {name}: {e}"))
        .uid()
        .expect("uid");
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Runtime {name}: {e}"));
    env.wait_runtime(name, "gone", is_deleted(&uid), &controller.proc)
        .await;
}

/// Removes what a test left of Runtime `name` without a controller: the Runtime (finalizers
/// removed) and its Shoot (deleted through Gardener's confirmation; a Shoot the paused
/// gardenlet never took has no finalizer and goes at once).
async fn discard(env: &RealEnv, name: &str) {
    env.force_delete(name).await;
    let shoots = env.shoots().await;
    let Some(shoot) = env.shoot(name).await else {
        return;
    };
    let confirm =
        json!({"metadata": {"annotations": {"confirmation.gardener.cloud/deletion": "true"}}});
    shoots
        .patch(name, &PatchParams::default(), &Patch::Merge(&confirm))
        .await
        .unwrap_or_else(|e| panic!("confirming the deletion of Shoot {name}: {e}"));
    shoots
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Shoot {name}: {e}"));
    let uid = shoot.uid().unwrap_or_default();
    let gone = kube::runtime::wait::await_condition(shoots, name, is_deleted(&uid));
    tokio::time::timeout(LIMIT, gone)
        .await
        .unwrap_or_else(|_| panic!("Shoot {name} not gone within {LIMIT:?}"))
        .unwrap_or_else(|e| panic!("watching Shoot {name}: {e}"));
}

// ---- watch histories ----

/// The objects a [`Recorder`] delivered as added, modified or listed, in order.
fn applied<K: Clone>(history: &[Seen<K>]) -> Vec<K> {
    history
        .iter()
        .filter_map(|s| s.applied().cloned())
        .collect()
}

/// The converter configuration the controllers run with (`docs/config.example.yaml`).
fn example_config() -> kim::gardener::Config {
    kim::reconciler::load_config(&repo().join("docs/config.example.yaml"), None)
        .expect("the example configuration loads")
}

// ---- the metrics of both processes ----

/// A user of the control cluster RBAC lets write Runtime status (bound to the controller's
/// shipped Role) but that is no allowed writer of the status model.
const ROGUE_USER: &str = "rogue-operator";

/// Binds [`ROGUE_USER`] to the shipped Role of the controller in kcp-system and waits until
/// RBAC lets it update Runtime status (PUT, the controller's one status write).
async fn let_the_rogue_write_status(env: &RealEnv, rogue: &kube::Client) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "rogue-status-writer", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE.1},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ROGUE_USER}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(env.stack.cp.admin().await, NS)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the rogue to the controller's Role");
    let access = Access {
        verb: "update",
        group: "infrastructuremanager.kyma-project.io",
        resource: "runtimes/status",
        namespace: NS,
        name: None,
    };
    let seen = crate::support::eventually(LIMIT, || async {
        Kcp::can(rogue, &access).await.then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "{ROGUE_USER} may not update runtimes/status"
    );
}

/// The first status a controller writes (`kim check`: allowed for the controller, denied for
/// any other writer by the writer rule only).
fn first_status() -> Value {
    json!({"state": "Pending", "conditions": [{
        "type": "Provisioned", "status": "Unknown", "reason": "Pending",
        "message": "Shoot creation pending",
        "lastTransitionTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "observedGeneration": 1,
    }]})
}

/// The increase of series `series` from `before` to `after` (a missing series is 0).
fn delta(before: &str, after: &str, series: &str) -> f64 {
    value(after, series).unwrap_or_default() - value(before, series).unwrap_or_default()
}

/// The webhook answers the writes kube-apiserver sends it and the controller provisions a
/// Runtime through one Gardener 500 and deletes it: both expositions pass promtool, and the
/// series carry what the servers saw (the status writes the recording webhook saw, the Shoot
/// creations gardener-apiserver admitted or refused, the admin kubeconfig Gardener issued);
/// every metric the dashboard and the alerts read is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_processes_export_the_traffic_and_what_the_dashboard_and_the_alerts_read() {
    let env = turn().await;
    let name = "ops-metrics";
    let webhook = env.stack.webhook.as_ref().expect("the webhook runs");
    let wh = webhook.metrics_addr.to_string();
    let rogue = env
        .stack
        .cp
        .client(&env.stack.cp.user(ROGUE_USER, &[]))
        .await;
    let_the_rogue_write_status(&env, &rogue).await;
    let kubeconfigs = count_requests(
        &env.stack.cp,
        "ops-metrics-adminkubeconfig",
        json!([user_subject(GARDEN_USER)]),
        json!([{"verbs": ["create"], "apiGroups": ["core.gardener.cloud"],
                "resources": ["shoots/adminkubeconfig"], "namespaces": [GARDEN_NS]}]),
    )
    .await;
    env.create_runtime(name).await;
    let before = scrape(&wh).await;

    // The rogue's write of a status the controller could write: denied by the writer rule.
    let rogue_runtimes = kube::Api::<DynamicObject>::namespaced_with(
        rogue,
        NS,
        &crate::support::real::runtime_resource(),
    );
    let mut written = rogue_runtimes
        .get(name)
        .await
        .expect("the rogue reads the Runtime");
    written.data["status"] = first_status();
    match rogue_runtimes
        .replace_status(name, &PostParams::default(), &written)
        .await
    {
        Err(kube::Error::Api(s)) => assert!(
            s.code == 403 && s.message.contains(VALIDATE_HOOK) && s.message.contains("[writer]"),
            "{s:?}"
        ),
        other => panic!("the rogue's status write: expected the webhook's 403, got {other:?}"),
    }

    // The controller; the Shoot's first creation is answered 500 by gardener-apiserver.
    let mut hold = env.hold_shoot_writes(name, "shoots", &["CREATE"]).await;
    let controller = Controller::start(&env, &[]).await;
    let denied_before = webhook_denials(&env).await;
    let mut creations = 0;
    for answer in [
        Admission::Deny {
            code: 500,
            message: "etcdserver: request timed out".into(),
        },
        Admission::Allow,
    ] {
        let held = hold.next("a creation of the Shoot").await;
        creations += 1;
        held.answer(answer);
    }
    hold.remove().await;
    env.wait_runtime(name, "Ready", ready, &controller.proc)
        .await;
    let labels = format!(r#"namespace="{NS}",runtime="{name}""#);
    // Every series read below is waited for: one scrape is not atomic across families.
    let text = controller
        .until("the Runtime is Ready in the metrics", |t| {
            value(t, &state_series(name, "Ready")) == Some(1.0)
                && value(
                    t,
                    &format!("kim_controller_runtime_provisioning_completed{{{labels}}}"),
                ) == Some(1.0)
                && value(t, r#"kim_controller_runtimes{state="Ready"}"#) == Some(1.0)
                && value(t, "kim_controller_provisioning_duration_seconds_count")
                    .is_some_and(|n| n >= 1.0)
        })
        .await;
    for state in ["Pending", "None"] {
        let series = state_series(name, state);
        assert_eq!(
            value(&text, &series),
            None,
            "old state gone: {series}\n{text}"
        );
    }
    let writes = controller_writes(&env, name).len() as f64;
    let issued = kubeconfigs.dispatched().await as f64;
    kubeconfigs.remove().await;
    for (series, want) in [
        ("kim_controller_provisioning_duration_seconds_count", 1.0),
        (
            r#"kim_controller_gardener_request_errors_total{operation="create",code="500"}"#,
            1.0,
        ),
        (
            r#"kim_controller_gardener_request_duration_seconds_count{operation="create"}"#,
            creations as f64,
        ),
        (
            r#"kim_controller_gardener_request_duration_seconds_count{operation="adminkubeconfig"}"#,
            issued,
        ),
        ("kim_controller_status_writes_total", writes),
        ("kim_controller_status_denied_total", 0.0),
        ("kim_controller_leader", 1.0),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series}:\n{text}");
    }
    assert_eq!(issued, 1.0, "one admin kubeconfig for one provisioning");
    for present in [
        "kim_controller_reconciles_total",
        r#"kim_controller_reconcile_errors_total{kind="api"}"#,
        "kim_controller_reconcile_duration_seconds_bucket",
    ] {
        assert!(text.contains(present), "{present} missing in:\n{text}");
    }
    // The kubeconfig expiry is the one Gardener answered, kept on the Secret.
    let expiry = value(
        &text,
        &format!("kim_controller_runtime_kubeconfig_expiry_timestamp_seconds{{{labels}}}"),
    )
    .expect("kubeconfig expiry");
    let secret = Api::<Secret>::namespaced(env.stack.cp.admin().await, NS)
        .get(&format!("kubeconfig-{name}"))
        .await
        .expect("the kubeconfig Secret");
    let answered = secret
        .annotations()
        .get("infrastructuremanager.kyma-project.io/kubeconfig-expiration")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("the expiration annotation")
        .timestamp() as f64;
    assert_eq!(expiry, answered, "the expiry Gardener answered");
    let lifetime = example_config().kubeconfig.expiration_seconds as f64;
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        (expiry - (now + lifetime)).abs() < 120.0,
        "expiry {expiry}, now {now}, lifetime {lifetime}"
    );
    for path in ["/healthz", "/readyz"] {
        assert_eq!(status_of(&controller.metrics, path).await, 200, "{path}");
    }
    promtool_check_metrics(
        "kim controller",
        &scrape_as(&controller.metrics, "text/plain; version=0.0.4").await,
    );

    // The webhook judged the rogue's write and each of the controller's: every write is
    // mutated, then validated.
    let after = scrape(&wh).await;
    assert_eq!(
        writes,
        controller_writes(&env, name).len() as f64,
        "no status write since"
    );
    for (series, want) in [
        (
            r#"kim_webhook_requests_total{path="/validate",decision="allowed",code="200"}"#,
            writes,
        ),
        (
            r#"kim_webhook_requests_total{path="/validate",decision="denied",code="403"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_requests_total{path="/mutate",decision="allowed",code="200"}"#,
            writes + 1.0,
        ),
        (
            r#"kim_webhook_violations_total{rule="writer",action="deny"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_request_duration_seconds_count{path="/validate"}"#,
            writes + 1.0,
        ),
    ] {
        assert_eq!(delta(&before, &after, series), want, "{series}:\n{after}");
    }
    assert_eq!(
        value(&after, "kim_webhook_cert_last_reload_successful"),
        Some(1.0)
    );
    let cert_expiry = value(&after, "kim_webhook_cert_expiry_timestamp_seconds").unwrap();
    assert!(
        cert_expiry > now + 86_400.0,
        "serving certificate expiry {cert_expiry}"
    );

    // Deleted: the Runtime's series go.
    delete_runtime(&env, name, &controller).await;
    let gone = controller
        .until("the deleted Runtime's series go", |t| {
            !t.contains(&format!(r#"runtime="{name}""#))
        })
        .await;
    assert_eq!(
        value(&gone, r#"kim_controller_runtimes{state="Ready"}"#),
        Some(0.0)
    );
    controller.finish(&env, denied_before).await;

    // A certificate file that does not load: the previous one stays, the gauge says so.
    // Replaced in one rename, as kubelet swaps a Secret volume: a plain write truncates first,
    // and a reload that reads the empty file in between counts a second distinct change.
    let certs = env.stack.certs.dir.path();
    let good = std::fs::read(certs.join("tls.crt")).unwrap();
    let failures = r#"kim_webhook_cert_reloads_total{result="failure"}"#;
    let failed_before = value(&after, failures).unwrap_or_default();
    std::fs::write(certs.join("tls.crt.new"), "not a certificate\n").unwrap();
    std::fs::rename(certs.join("tls.crt.new"), certs.join("tls.crt")).unwrap();
    let failed = scrape_until(&wh, "the failed reload shows", |t| {
        value(t, "kim_webhook_cert_last_reload_successful") == Some(0.0)
    })
    .await;
    assert_eq!(
        value(&failed, failures).unwrap_or_default() - failed_before,
        1.0,
        "{failed}"
    );
    promtool_check_metrics(
        "kim webhook",
        &scrape_as(&wh, "text/plain; version=0.0.4").await,
    );
    // The certificate back: loaded again.
    std::fs::write(certs.join("tls.crt.new"), good).unwrap();
    std::fs::rename(certs.join("tls.crt.new"), certs.join("tls.crt")).unwrap();
    scrape_until(&wh, "the certificate reloaded", |t| {
        value(t, "kim_webhook_cert_last_reload_successful") == Some(1.0)
    })
    .await;

    // Every metric the dashboard and the alerts read is exported.
    let mut exported = exported_names(&failed);
    exported.extend(exported_names(&text));
    eprintln!("exported: {exported:?}");
    let mut exprs = rule_exprs(&yaml(&rules_file()));
    exprs.extend(dashboard_exprs(&dashboard()));
    let problems = unknown_metrics(&exprs, &exported);
    assert!(
        problems.is_empty(),
        "expressions read metrics the processes do not export:\n{}",
        problems.join("\n")
    );
    let read: std::collections::BTreeSet<String> =
        exprs.iter().flat_map(|e| metric_names(&e.expr)).collect();
    eprintln!(
        "exported and read by no panel or alert: {:?}",
        exported.difference(&read).collect::<Vec<_>>()
    );
    // The check fails on a rename, on either side. A dashboard that reads a metric under
    // another name:
    let renamed = std::fs::read_to_string(dashboard_file()).unwrap().replace(
        "kim_webhook_request_duration_seconds_bucket",
        "kim_webhook_request_latency_seconds_bucket",
    );
    let renamed: Value = serde_json::from_str(&renamed).unwrap();
    let problems = unknown_metrics(&dashboard_exprs(&renamed), &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("kim_webhook_request_latency_seconds_bucket is not exported")),
        "{problems:?}"
    );
    // A process that exports a metric under another name (as if a family were renamed in
    // src/reconciler/metrics.rs):
    let controller_renamed = text.replace(
        "kim_controller_runtime_state",
        "kim_controller_runtime_phase",
    );
    let mut exported = exported_names(&failed);
    exported.extend(exported_names(&controller_renamed));
    let problems = unknown_metrics(&rule_exprs(&yaml(&rules_file())), &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("KimRuntimeFailed: kim_controller_runtime_state is not exported")),
        "{problems:?}"
    );
}

/// The controller's metrics listener answers `/readyz` as the controller set it: 503 until it
/// is ready and once it is not any more (a `kim controller` stops serving when it stops, so
/// the 503 after the stop is seen on an in-process listener), `/healthz` 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_answers_readiness_as_set() {
    let metrics = Arc::new(kim::reconciler::Metrics::new());
    let server = kim::reconciler::metrics::serve("127.0.0.1:0".parse().unwrap(), metrics.clone())
        .await
        .unwrap();
    let addr = server.addr.to_string();
    assert_eq!(status_of(&addr, "/readyz").await, 503);
    metrics.set_ready(true);
    assert_eq!(status_of(&addr, "/readyz").await, 200);
    metrics.set_ready(false);
    assert_eq!(status_of(&addr, "/readyz").await, 503);
    assert_eq!(status_of(&addr, "/healthz").await, 200);
    server.stop();
}

// ---- leader election ----

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref()?.holder_identity.as_deref()
}

fn micro(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> i128 {
    t.map(|t| t.0.as_nanosecond()).expect("a MicroTime")
}

/// The Lease's versions once one held by `identity` is among them.
async fn held_by(history: &Recorder<Lease>, identity: &str) -> Vec<Lease> {
    history
        .wait_for(
            &format!("{identity} in the Lease's history"),
            |h| {
                let v = applied(h);
                v.iter().any(|l| holder(l) == Some(identity)).then_some(v)
            },
            || format!("{:#?}", applied(&history.since(0))),
        )
        .await
}

/// In the Lease's history, where `new` took it from `old`: (when `old`'s last renewal before
/// `new`'s first version expired, when `new` acquired it), in nanoseconds since the epoch.
fn takeover(versions: &[Lease], old: &str, new: &str) -> (i128, i128) {
    let first_new = versions
        .iter()
        .position(|l| holder(l) == Some(new))
        .unwrap_or_else(|| panic!("{new} never held the Lease: {versions:#?}"));
    let last_old = versions[..first_new]
        .iter()
        .rfind(|l| holder(l) == Some(old))
        .unwrap_or_else(|| panic!("{old} did not hold the Lease before {new}: {versions:#?}"));
    let spec = last_old.spec.as_ref().expect("spec");
    let duration = i128::from(spec.lease_duration_seconds.expect("leaseDurationSeconds"));
    let expired = micro(spec.renew_time.as_ref()) + duration * 1_000_000_000;
    let taken = micro(
        versions[first_new]
            .spec
            .as_ref()
            .and_then(|s| s.acquire_time.as_ref()),
    );
    (expired, taken)
}

/// Three `kim controller` replicas with leader election on the shipped Lease (6 s):
/// - `a` leads, `b` stands by: only `a` reconciles, and only `a` reports the Runtime's series;
/// - `a` cannot renew (a test admission webhook refuses its renewals, as if it were cut off
///   from kube-apiserver) and stays running: it stops leading and drops every per-Runtime
///   series, and `b` takes the Lease once it has expired and reports the Runtime, so
///   `max by (namespace, runtime)` in the alerts sees one continuous Runtime;
/// - `b` is stopped (SIGTERM): it releases the Lease and `a` provisions the next Runtime;
/// - `c` stands by and `a` is killed (SIGKILL: no release): `c` takes over only once `a`'s Lease
///   has expired — read from the Lease's history: `c`'s acquisition is at least one lease
///   duration after `a`'s last renewal — and provisions the next Runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_reports_and_a_standby_takes_over() {
    let env = turn().await;
    let admin = env.stack.cp.admin().await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), LEASE.0);
    let history = Recorder::start(
        leases.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", LEASE.1)),
    )
    .await;
    let lease_holder = || async {
        let lease = leases.get(LEASE.1).await.expect("the Lease");
        holder(&lease).map(String::from)
    };
    let denied_before = webhook_denials(&env).await;
    let (first, second, third) = ("ops-lead-1", "ops-lead-2", "ops-lead-3");

    let a = Controller::start(&env, &[]).await;
    a.until("a leads", |t| leader(t) == Some(1.0)).await;
    let b = Controller::start(&env, &[]).await;
    env.create_runtime(first).await;
    env.wait_runtime(first, "Ready", ready, &a.proc).await;
    a.until("a reports the Runtime", |t| {
        value(t, &state_series(first, "Ready")) == Some(1.0)
    })
    .await;
    let standby = b.scrape().await;
    assert_eq!(leader(&standby), Some(0.0), "b stands by");
    assert_eq!(
        value(&standby, "kim_controller_reconciles_total"),
        Some(0.0),
        "the standby reconciles nothing"
    );
    assert!(
        !has_runtime_series(&standby),
        "the standby reports no Runtime:\n{standby}"
    );
    assert_eq!(lease_holder().await.as_deref(), Some(a.identity.as_str()));

    // a's renewals refused: a stops leading while it runs, b takes over.
    let a_id = a.identity.clone();
    let refuse = install_admission_hook(
        admin.clone(),
        "refuse-renewals",
        json!([{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                "resources": ["leases"], "operations": ["UPDATE"]}]),
        move |r| {
            let held_by = |o: &Value| o["spec"]["holderIdentity"] == a_id.as_str();
            if r["name"] == LEASE.1 && held_by(&r["object"]) && held_by(&r["oldObject"]) {
                Admission::Deny {
                    code: 503,
                    message: "kube-apiserver out of reach".into(),
                }
            } else {
                Admission::Allow
            }
        },
    )
    .await;
    b.until("b leads", |t| leader(t) == Some(1.0)).await;
    let dropped = a
        .until("a stops leading and drops the Runtime's series", |t| {
            leader(t) == Some(0.0) && !has_runtime_series(t)
        })
        .await;
    assert_eq!(
        value(&dropped, r#"kim_controller_runtimes{state="Ready"}"#),
        Some(0.0),
        "{dropped}"
    );
    b.until("b reports the Runtime", |t| {
        value(t, &state_series(first, "Ready")) == Some(1.0)
    })
    .await;
    let refused = refuse
        .seen()
        .iter()
        .filter(|(_, a)| matches!(a, Admission::Deny { .. }))
        .count();
    assert!(refused >= 1, "no renewal of a was refused");
    refuse.remove().await;
    let (expired, taken) = takeover(
        &held_by(&history, &b.identity).await,
        &a.identity,
        &b.identity,
    );
    assert!(
        taken >= expired,
        "b took the Lease {} ms before a's expired",
        (expired - taken) / 1_000_000
    );
    assert_eq!(lease_holder().await.as_deref(), Some(b.identity.as_str()));

    // b stopped: it releases the Lease; a leads again and provisions the next Runtime.
    let b_id = b.identity.clone();
    b.finish(&env, denied_before).await;
    history
        .wait_for(
            "b's release of the Lease when it stopped",
            |h| {
                let v = applied(h);
                let b_last = v.iter().rposition(|l| holder(l) == Some(b_id.as_str()))?;
                v[b_last..]
                    .iter()
                    .any(|l| holder(l).is_none())
                    .then_some(())
            },
            || format!("{:#?}", applied(&history.since(0))),
        )
        .await;
    a.until("a leads again", |t| leader(t) == Some(1.0)).await;
    env.create_sample("azure-fremium.yaml", second).await;
    env.wait_runtime(second, "Ready", ready, &a.proc).await;
    a.until("a reports the next Runtime", |t| {
        value(t, &state_series(second, "Ready")) == Some(1.0)
    })
    .await;
    assert_eq!(lease_holder().await.as_deref(), Some(a.identity.as_str()));

    // c stands by; a killed: c takes over once a's Lease has expired.
    let c = Controller::start(&env, &[]).await;
    let (a_identity, a_metrics, mut a_proc) = (a.identity.clone(), a.metrics.clone(), a.proc);
    assert_eq!(
        value(&c.scrape().await, "kim_controller_reconciles_total"),
        Some(0.0),
        "the standby reconciles nothing"
    );
    assert_eq!(
        value(
            &scrape(&a_metrics).await,
            "kim_controller_status_denied_total"
        ),
        Some(0.0),
        "a's own check denied no status write"
    );
    let (a_out, a_err) = a_proc.kill();
    env.create_runtime(third).await;
    env.wait_runtime(third, "Ready", ready, &c.proc).await;
    c.until("c leads and reports the Runtimes", |t| {
        leader(t) == Some(1.0) && value(t, &state_series(third, "Ready")) == Some(1.0)
    })
    .await;
    let (expired, taken) = takeover(
        &held_by(&history, &c.identity).await,
        &a_identity,
        &c.identity,
    );
    assert!(
        taken >= expired,
        "c took the Lease {} ms before the killed a's expired\na stdout:\n{a_out}\nstderr:\n{a_err}",
        (expired - taken) / 1_000_000
    );
    futures::future::join_all([first, second, third].map(|n| delete_runtime(&env, n, &c))).await;
    c.finish(&env, denied_before).await;
}

// ---- resyncs and runtime-cluster clients ----

/// A `Ready` Runtime resynced every second: its resyncs write no status and read neither its
/// Shoot nor its kubeconfig Secret (both come from the watch caches; the runtime-cluster
/// client from its cache), counted by kube-apiserver for the controller's two users; its
/// provisioning published one Event. Then the runtime-cluster clients, built by kim's own
/// code from kubeconfig Secrets: at most `runtime_client_cache` of them are kept, and a changed
/// Secret (a new resourceVersion) gets a new client whose requests go where the new
/// kubeconfig points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_resync_writes_and_reads_nothing_and_runtime_clients_follow_the_kubeconfig() {
    let env = turn().await;
    let name = "ops-resync";
    let secret_gets = count_requests(
        &env.stack.cp,
        "ops-resync-secret-gets",
        json!([controller_subject()]),
        json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"],
                "namespaces": [NS]}]),
    )
    .await;
    let shoot_gets = count_requests(
        &env.stack.cp,
        "ops-resync-shoot-gets",
        json!([user_subject(GARDEN_USER)]),
        json!([{"verbs": ["get"], "apiGroups": ["core.gardener.cloud"],
                "resources": ["shoots"], "namespaces": [GARDEN_NS]}]),
    )
    .await;
    let denied_before = webhook_denials(&env).await;
    let controller = Controller::start(&env, &["--resync-seconds", "1"]).await;
    env.create_runtime(name).await;
    env.wait_runtime(name, "Ready", ready, &controller.proc)
        .await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the Shoot's runtime cluster");
    let binding_lists = count_requests(
        &cluster,
        "ops-resync-binding-lists",
        json!([user_subject(&format!("gardener.cloud:admin:{GARDEN_USER}"))]),
        json!([{"verbs": ["list"], "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterrolebindings"], "clusterScope": true}]),
    )
    .await;

    // One Event for the provisioning: the Runtime became Ready (progress is in the status).
    let events: Api<K8sEvent> = Api::namespaced(env.stack.cp.admin().await, NS);
    let regarding =
        |e: &K8sEvent| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name);
    let published = crate::support::eventually(LIMIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            let of: Vec<String> = list
                .items
                .iter()
                .filter(|e| regarding(e))
                .map(|e| {
                    let s = |v: &Option<String>| v.clone().unwrap_or_default();
                    format!("{} {} {} {name}", s(&e.type_), s(&e.reason), s(&e.action))
                })
                .collect();
            (!of.is_empty()).then_some(of)
        }
    })
    .await;
    assert_eq!(
        published.as_deref(),
        Some(&[format!("Normal Ready Reconcile {name}")][..])
    );

    // Let the reconciles triggered by the last writes settle, then count from a quiet point.
    let settled = controller.metric("kim_controller_reconciles_total").await;
    let start = controller
        .reconciled_past(settled, "a reconcile after Ready")
        .await;
    let writes = controller_writes(&env, name).len();
    let (secrets, shoots, lists) = (
        secret_gets.dispatched().await,
        shoot_gets.dispatched().await,
        binding_lists.dispatched().await,
    );
    let end = controller
        .reconciled_past(start + 2.0, "three resyncs")
        .await;
    let resyncs = end - start;
    let (secrets, shoots, lists) = (
        secret_gets.dispatched().await - secrets,
        shoot_gets.dispatched().await - shoots,
        binding_lists.dispatched().await - lists,
    );
    assert_eq!(
        controller_writes(&env, name).len(),
        writes,
        "a no-op resync writes no status"
    );
    assert_eq!(
        (shoots, secrets),
        (0, 0),
        "Shoot and Secret GETs of resyncs"
    );
    // The counts see such a GET: one of the test's own, as the same users.
    let (secrets_then, shoots_then) = (
        secret_gets.dispatched().await,
        shoot_gets.dispatched().await,
    );
    Api::<Secret>::namespaced(env.controller_client().await, NS)
        .get(&format!("kubeconfig-{name}"))
        .await
        .expect("the kubeconfig Secret, as the controller");
    Api::<DynamicObject>::namespaced_with(
        env.garden_client().await,
        GARDEN_NS,
        &testenv::gardenlet::shoot_resource(),
    )
    .get(name)
    .await
    .expect("the Shoot, as the garden user");
    assert_eq!(
        (
            secret_gets.dispatched().await - secrets_then,
            shoot_gets.dispatched().await - shoots_then
        ),
        (1, 1),
        "one Secret GET and one Shoot GET counted"
    );
    println!(
        "no-op resync: {resyncs} resyncs, 0 status writes, 0 Shoot GETs, 0 Secret GETs, {lists} binding lists ({:.1} per resync)",
        lists as f64 / resyncs
    );
    for rule in [secret_gets, shoot_gets, binding_lists] {
        rule.remove().await;
    }

    // Runtime-cluster clients, bounded and following the kubeconfig.
    runtime_clients_are_bounded_and_follow_the_kubeconfig(&env, name, &cluster).await;

    delete_runtime(&env, name, &controller).await;
    controller.finish(&env, denied_before).await;
}

/// Runtime-cluster clients are kept in a bounded cache (`Settings::runtime_client_cache`), and a
/// changed kubeconfig Secret (a new resourceVersion: every write of it has one) gets a new
/// client: its requests go where the new kubeconfig points (told apart by the uid of each
/// cluster's `kube-system` Namespace). The kubeconfigs: Runtime `name`'s as stored (its runtime
/// cluster `cluster`) and the control cluster's admin's.
async fn runtime_clients_are_bounded_and_follow_the_kubeconfig(
    env: &RealEnv,
    name: &str,
    cluster: &testenv::controlplane::ControlPlane,
) {
    use k8s_openapi::ByteString;
    use kim::testing::reconciler::{Ctx, SECRET_KEY, runtime_client};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    let mut settings = kim::reconciler::Settings::new(
        env.controller_client().await,
        env.garden_client().await,
        example_config(),
        kim::status::Policy::builtin(),
    );
    settings.namespace = NS.to_string();
    settings.runtime_client_cache = 3;
    let ctx = Ctx::new(settings);
    let stored = Api::<Secret>::namespaced(env.stack.cp.admin().await, NS)
        .get(&format!("kubeconfig-{name}"))
        .await
        .expect("the kubeconfig Secret");
    let to_runtime = stored
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_KEY))
        .map(|b| String::from_utf8(b.0.clone()).expect("UTF-8"))
        .expect("the stored kubeconfig");
    let to_kcp = env.stack.cp.kubeconfig(env.stack.cp.admin_cert());
    let secret = |rv: &str, kubeconfig: &str| Secret {
        metadata: ObjectMeta {
            name: Some("kubeconfig-x".into()),
            namespace: Some(NS.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    let kube_system = |client: kube::Client| async move {
        Api::<Namespace>::all(client)
            .get("kube-system")
            .await
            .expect("the kube-system Namespace")
            .uid()
            .expect("uid")
    };
    let runtime_uid = kube_system(cluster.admin().await).await;
    let kcp_uid = kube_system(env.stack.cp.admin().await).await;
    assert_ne!(runtime_uid, kcp_uid);

    for i in 0..10 {
        runtime_client(&ctx, &format!("{NS}/rt{i}"), &secret("1", &to_runtime))
            .await
            .expect("client");
        assert!(ctx.cached_clients() <= 3, "{}", ctx.cached_clients());
    }
    assert_eq!(ctx.cached_clients(), 3);
    // Where a request through the client of rt9 lands.
    let lands = |rv: &'static str, kubeconfig: String| {
        let (ctx, secret) = (&ctx, &secret);
        async move {
            let client = runtime_client(ctx, &format!("{NS}/rt9"), &secret(rv, &kubeconfig))
                .await
                .expect("client");
            kube_system(client).await
        }
    };
    assert_eq!(lands("1", to_runtime.clone()).await, runtime_uid);
    // Rotated (new resourceVersion, other cluster): a new client, not the cached one.
    assert_eq!(lands("2", to_kcp.clone()).await, kcp_uid);
    assert_eq!(ctx.cached_clients(), 3, "replaced, not added");
}

// ---- kubeconfig rotation ----

/// The controller on a configuration that renews the admin kubeconfig after 0.6 s (600 s
/// lifetime, Gardener's least, × 0.001): each renewal is a new admin kubeconfig from Gardener,
/// a new version of the Secret, and the administrators bound anew with it (it may be for a new
/// cluster: one binding list per rotation) — and no status write; the Runtime stays `Ready`.
/// A Secret of that name another tool wrote first is taken over, and every version kim writes
/// keeps that tool's label and annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeconfig_is_rotated_without_status_writes() {
    let env = turn().await;
    let name = "ops-rotate";
    let mut rotating = std::fs::read_to_string(repo().join("docs/config.example.yaml"))
        .expect("docs/config.example.yaml");
    for (from, to) in [
        ("expirationSeconds: 86400", "expirationSeconds: 600"),
        ("rotationFraction: 0.6", "rotationFraction: 0.001"),
    ] {
        assert!(
            rotating.contains(from),
            "the example configuration has {from}"
        );
        rotating = rotating.replace(from, to);
    }
    let config = env.dir.path().join("config-rotation.yaml");
    std::fs::write(&config, rotating).unwrap();
    let issued = count_requests(
        &env.stack.cp,
        "ops-rotate-adminkubeconfig",
        json!([user_subject(GARDEN_USER)]),
        json!([{"verbs": ["create"], "apiGroups": ["core.gardener.cloud"],
                "resources": ["shoots/adminkubeconfig"], "namespaces": [GARDEN_NS]}]),
    )
    .await;
    let denied_before = webhook_denials(&env).await;
    // The Secret is there before kim writes it, with a label and an annotation of another
    // tool's (as KIM's Secrets carry): kim's writes keep them.
    let foreign = |s: &Secret| {
        (
            s.labels().get("example.com/team").cloned(),
            s.annotations().get("example.com/note").cloned(),
        )
    };
    let secrets_api = Api::<Secret>::namespaced(env.stack.cp.admin().await, NS);
    secrets_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("kubeconfig-{name}"),
                             "labels": {"example.com/team": "ops"},
                             "annotations": {"example.com/note": "kept"}},
            }))
            .unwrap(),
        )
        .await
        .expect("the Secret of another tool");
    let controller = Controller::start_on(&env, &config, &[]).await;
    env.create_runtime(name).await;
    env.wait_runtime(name, "Ready", ready, &controller.proc)
        .await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the Shoot's runtime cluster");
    let binding_lists = count_requests(
        &cluster,
        "ops-rotate-binding-lists",
        json!([user_subject(&format!("gardener.cloud:admin:{GARDEN_USER}"))]),
        json!([{"verbs": ["list"], "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterrolebindings"], "clusterScope": true}]),
    )
    .await;
    let secrets = Recorder::start(
        Api::<Secret>::namespaced(env.stack.cp.admin().await, NS),
        watcher::Config::default().fields(&format!("metadata.name=kubeconfig-{name}")),
    )
    .await;
    let settled = controller.metric("kim_controller_reconciles_total").await;
    controller
        .reconciled_past(settled, "a reconcile after Ready")
        .await;
    let writes = controller_writes(&env, name).len();
    let (issued_before, lists_before) =
        (issued.dispatched().await, binding_lists.dispatched().await);
    let mark = applied(&secrets.since(0)).len();
    let kubeconfig = |s: &Secret| s.data.as_ref().and_then(|d| d.get("config")).cloned();
    let first = kubeconfig(
        applied(&secrets.since(0))
            .last()
            .expect("the kubeconfig Secret"),
    );
    // Two rotations: two more versions, each with a kubeconfig of its own.
    secrets
        .wait_for(
            "two rotations of the kubeconfig",
            |h| {
                let v = applied(h);
                let mut seen = vec![first.clone()];
                for s in &v[mark..] {
                    let k = kubeconfig(s);
                    if !seen.contains(&k) {
                        seen.push(k);
                    }
                }
                (seen.len() >= 3).then_some(())
            },
            || format!("{} versions of the Secret", secrets.len()),
        )
        .await;
    let both = crate::support::eventually(LIMIT, || async {
        (issued.dispatched().await >= issued_before + 2
            && binding_lists.dispatched().await >= lists_before + 2)
            .then_some(())
    })
    .await;
    assert!(
        both.is_some(),
        "two admin kubeconfigs issued and the bindings listed twice since: {} and {}",
        issued.dispatched().await - issued_before,
        binding_lists.dispatched().await - lists_before
    );
    assert_eq!(
        controller_writes(&env, name).len(),
        writes,
        "a rotation changes no status"
    );
    let versions = applied(&secrets.since(0));
    for s in &versions {
        assert_eq!(
            foreign(s),
            (Some("ops".into()), Some("kept".into())),
            "every version kim wrote keeps the other tool's label and annotation: {:?} {:?}",
            s.labels(),
            s.annotations()
        );
        assert!(
            s.labels().contains_key("kyma-project.io/runtime-id"),
            "and has kim's labels: {:?}",
            s.labels()
        );
    }
    let now = env.runtimes().await.get(name).await.expect("the Runtime");
    assert_eq!(now.data["status"]["state"], "Ready");
    issued.remove().await;
    binding_lists.remove().await;
    drop(secrets);
    delete_runtime(&env, name, &controller).await;
    controller.finish(&env, denied_before).await;
}

// ---- a stale read ----

/// A reconcile that starts from a stale copy of a new Runtime (another client changed it after
/// the controller's cache saw it, and the cache has not caught up: its watch is held in
/// kube-apiserver's flow control after the first list, [`hold_requests`]) does not fail: the
/// finalizer patch's guard (`test` of the resourceVersion read) is answered 422 by
/// kube-apiserver, and the pass starts over from a fresh read. Before, this was a reconcile
/// error with an error backoff — the kind of all 156 errors of the 3 000-Runtime bench run.
/// kim's reconcile runs in the test process (its caches filled by kim's own watches) against
/// the real servers, as the controller's ServiceAccount and garden user; the gardenlet is paused
/// (the Shoot the pass creates is not taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_of_a_new_runtime_restarts_the_pass_instead_of_failing() {
    use kim::status::table::FINALIZER;
    use kim::testing::reconciler::{Ctx, fill_caches, reconcile};

    let env = turn().await;
    let name = "ops-stale";
    env.gardenlet.pause();
    let held = hold_requests(
        &env.stack.cp,
        "ops-stale-runtime-watch",
        json!([controller_subject()]),
        json!([{"verbs": ["watch"], "apiGroups": ["infrastructuremanager.kyma-project.io"],
                "resources": ["runtimes"], "namespaces": [NS]}]),
    )
    .await;
    let mut settings = kim::reconciler::Settings::new(
        env.controller_client().await,
        env.garden_client().await,
        example_config(),
        kim::status::Policy::builtin(),
    );
    settings.namespace = NS.to_string();
    settings.user = CONTROLLER_USER.to_string();
    let metrics = settings.metrics.clone();
    let ctx = Arc::new(Ctx::new(settings));
    let created = env.create_runtime(name).await;
    let stale: kim::api::Runtime =
        serde_json::from_value(serde_json::to_value(&created).unwrap()).expect("a Runtime");
    assert!(stale.metadata.finalizers.is_none());
    let watches = fill_caches(&ctx);
    // The cache has listed the Runtime: its watch, sent after the list, waits in the queue.
    let queued =
        crate::support::eventually(LIMIT, || async { (held.queued().await >= 1).then_some(()) })
            .await;
    assert!(queued.is_some(), "the cache's Runtime watch never came");
    // Another client changes the Runtime (a PUT: the PATCHes counted below are the pass's).
    let api = env.runtimes().await;
    let mut edited = api.get(name).await.expect("the Runtime");
    edited
        .metadata
        .labels
        .get_or_insert_default()
        .insert("edited-by".into(), "someone-else".into());
    api.replace(name, &PostParams::default(), &edited)
        .await
        .expect("the other client's change");
    let patches = |code: &'static str| {
        let env = &*env;
        async move {
            apiserver_requests(
                env,
                &[
                    ("resource", "runtimes"),
                    ("subresource", ""),
                    ("verb", "PATCH"),
                    ("code", code),
                ],
            )
            .await
        }
    };
    let (refused, applied) = (patches("422").await, patches("200").await);

    let result = reconcile(Arc::new(stale), ctx.clone()).await;
    assert!(result.is_ok(), "reconcile failed: {:?}", result.err());
    assert_eq!(
        (
            patches("422").await - refused,
            patches("200").await - applied
        ),
        (1, 1),
        "the stale guard fails once, the retried patch applies"
    );
    let stored = api.get(name).await.expect("the Runtime");
    assert_eq!(
        stored.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_string()][..])
    );
    assert_eq!(
        stored.labels().get("edited-by").map(String::as_str),
        Some("someone-else"),
        "the other client's change is kept"
    );
    let text = metrics.encode();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kim_controller_reconcile_errors_total{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert_eq!(metrics.reconciles(), 1);
    assert!(errors.is_empty(), "reconcile errors counted: {errors:?}");
    assert_eq!(held.dispatched().await, 0, "the cache's watch was held");
    watches.abort();
    held.remove().await;
    discard(&env, name).await;
    env.gardenlet.resume();
}

// ---- start-up validation ----

/// `kim controller --policy-file`: the file is in force in the running process (its
/// `allowedWriters` leave out the controller's own user, so the pre-write check denies every
/// status write: none reaches the control cluster, each is counted on `/metrics`), and an
/// invalid file stops start-up with a non-zero exit naming the offending field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_policy_file_is_in_force_and_an_invalid_one_stops_start_up() {
    let env = turn().await;
    let name = "ops-policy";
    // No Shoot taken: the denied writes are the test, not the provisioning.
    env.gardenlet.pause();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "kind: StatusPolicy\nallowedWriters:\n  users: [\"system:serviceaccount:other:writer\"]\n",
    )
    .unwrap();
    let policy_arg = policy.to_str().unwrap();
    let mut controller = Controller::start(&env, &["--policy-file", policy_arg]).await;
    env.create_runtime(name).await;
    let denied = crate::support::eventually(LIMIT, || async {
        let n = controller
            .metric("kim_controller_status_denied_total")
            .await;
        (n >= 2.0).then_some(n)
    })
    .await;
    let (stdout, stderr) = controller.proc.terminate(Duration::from_secs(10));
    assert!(
        denied.is_some(),
        "no denial counted\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let written = controller_writes(&env, name);
    assert!(written.is_empty(), "status written: {written:#?}");
    assert!(
        stdout.contains("writer"),
        "the denial names the rule: {stdout}"
    );
    discard(&env, name).await;
    env.gardenlet.resume();

    std::fs::write(
        &policy,
        "conditionTypes:\n  - type: X\n    reasons:\n      - {reason: R, statuses: [Maybe]}\n",
    )
    .unwrap();
    let mut bad = env.spawn_controller_with("info", &["--policy-file", policy_arg]);
    let status = bad.exit(LIMIT).await.expect("kim controller exits");
    let stderr = bad.stderr();
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("policy.yaml")
            && stderr.contains("conditionTypes[0].reasons[0].statuses[0]"),
        "{stderr}"
    );
}

#[test]
fn invalid_configuration_stops_the_controller_naming_the_field() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "gardener: {project: kyma-dev}\nkubernetes: {defaultVersion: latest}\nproviders:\n  aws:\n    cloudProfile: aws\n    machineImage: {name: gardenlinux, version: \"\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--leader-elect=false",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kubernetes.defaultVersion"), "{stderr}");
    assert!(
        stderr.contains("providers.aws.machineImage.version"),
        "{stderr}"
    );
    // A project override that is no DNS label is named as the flag.
    std::fs::copy(repo().join("docs/config.example.yaml"), &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--gardener-project",
            "Not_A_Label",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--gardener-project"), "{stderr}");
    // A valid configuration gets past validation to the (missing) kubeconfig.
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--kubeconfig",
            "/nonexistent",
        ])
        .env("KIM_METRICS_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
}
