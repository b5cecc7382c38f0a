//! Failure paths of `kim controller` on the real servers ([`RealEnv`]: kube-apiserver and etcd
//! with kim's CRD, `manifests/base` and the real `kim webhook`; gardener-apiserver aggregated
//! behind the same kube-apiserver; the simulated gardenlet with a real runtime cluster per
//! Shoot) and the real `kim controller` binary, as its ServiceAccount and garden user with the
//! shipped RBAC: conversion errors, terminal and retryable Gardener failures, API errors, a
//! `Failed` Runtime fixed by a spec change, Runtimes without spec, structured authentication,
//! transient errors of a `Ready` Runtime and their grace, a failed initial list, and a status
//! the model denies.
//!
//! Each fault is made where it happens in production:
//! - Gardener's error codes: the gardenlet's scripts (`Create` `Failed` with
//!   `ERR_INFRA_UNAUTHORIZED` or `ERR_INFRA_QUOTA_EXCEEDED`);
//! - Gardener API errors (500 on the Shoot's creation): a test admission webhook on
//!   gardener-apiserver denying with `status.code: 500` ([`RealEnv::hold_shoot_writes`]);
//! - a status write's Conflict: a test admission webhook on kube-apiserver denying the
//!   controller's `runtimes/status` writes with 409 ([`install_admission_hook`]);
//! - runtime-cluster errors: the Shoot's runtime cluster's kube-apiserver killed (connection
//!   refused) and started again, during provisioning (the gardenlet's `Create Succeeded` held in
//!   admission until it is down) and while the Runtime is `Ready`;
//! - a 403 on a `Ready` Runtime's resync: the shipped Role without `get` on Secrets;
//! - a failed initial list: the controller started while gardener-apiserver is killed (the
//!   aggregator answers 503), and while the Role lacks `list` on Runtimes (403);
//! - a stored status the model denies: written by the admin while kim's webhook configurations
//!   are removed;
//! - a Kubernetes version raised out of band, a spec removed, a second binding: admin writes.
//!
//! Tests wait for what happened: a watch of the Runtimes (every version in order), the
//! gardenlet's history, the controller's output and its counters (which only grow). Every
//! status write the controller sent passed the real webhook (none denied) and none was denied
//! by its own check, except where the test is about that check.
//!
//! The tests share one environment ([`turn`]): started by the first, used by one test at a time
//! (each starts a controller of its own, and stops it, releasing the Lease), stopped after the
//! last. Each test names its Runtimes (and so Shoots, Secrets and runtime clusters) on its own.

use crate::support::real::NS;
use crate::support::real_controller::*;
use crate::support::reconciler::GARDEN_NS;
use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kim::status::{CondStatus, State};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use testenv::gardener::{Outcome, ShootScript};
use testenv::gardenlet::{Event as Did, Operation};
use testenv::process::Process;

// ---- the environment the tests share ----

/// How many tests this module has: the shared environment stops after the last of them.
const TESTS: usize = 18;

struct Shared {
    /// First field: dropped before the runtime its gardenlet runs on.
    env: RealEnv,
    /// The rules of the controller's Role and of [`GARDEN_ROLE`] as installed (restored
    /// before each test).
    rules: Vec<PolicyRule>,
    garden_rules: Vec<PolicyRule>,
    _runtime: tokio::runtime::Runtime,
}

struct Slot {
    shared: Option<Arc<Shared>>,
    /// Stops the webhook process and removes the kubeconfig directory when this process exits
    /// without the last test having stopped the environment (a filtered run).
    watchdog: Option<std::process::Child>,
    finished: usize,
}

static SLOT: tokio::sync::Mutex<Slot> = tokio::sync::Mutex::const_new(Slot {
    shared: None,
    watchdog: None,
    finished: 0,
});

/// One test's use of the shared environment: the others wait until it is dropped.
struct Turn {
    slot: tokio::sync::MutexGuard<'static, Slot>,
    shared: Option<Arc<Shared>>,
}

impl std::ops::Deref for Turn {
    type Target = RealEnv;
    fn deref(&self) -> &RealEnv {
        &self.shared.as_ref().expect("the environment").env
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mine = self.shared.take();
        self.slot.finished += 1;
        if self.slot.finished < TESTS {
            return;
        }
        if let Some(mut w) = self.slot.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        drop(mine);
        if let Some(shared) = self.slot.shared.take().and_then(Arc::into_inner) {
            // A runtime cannot be dropped on one of another runtime's threads.
            let _ = std::thread::spawn(move || drop(shared)).join();
        }
    }
}

/// Waits for the turn of the calling test, starting the environment if no test did yet, and
/// undoes what an earlier test may have left behind when it failed half-way: the gardenlet
/// paused, a Role changed.
async fn turn() -> Turn {
    let mut slot = SLOT.lock().await;
    let shared = match &slot.shared {
        Some(s) => s.clone(),
        None => {
            let s = Arc::new(start_shared().await);
            slot.watchdog = Some(watchdog(&s.env));
            slot.shared = Some(s.clone());
            s
        }
    };
    let env = &shared.env;
    env.gardenlet.resume();
    remove_denied(env).await;
    if env.role_rules(ROLE).await != shared.rules {
        env.set_role_rules(ROLE, &shared.rules).await;
        env.wait_access(&secret_get(), true).await;
        env.wait_access(&runtime_list(), true).await;
    }
    if env.role_rules((GARDEN_NS, GARDEN_ROLE)).await != shared.garden_rules {
        env.set_role_rules((GARDEN_NS, GARDEN_ROLE), &shared.garden_rules)
            .await;
    }
    Turn {
        slot,
        shared: Some(shared),
    }
}

async fn start_shared() -> Shared {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("real-failures-env")
            .enable_all()
            .build()
            .expect("a runtime for the shared environment");
        let env = runtime.block_on(RealEnv::start());
        let _ = tx.send((runtime, env));
    });
    let (runtime, env) = rx
        .await
        .expect("the shared environment did not start (its panic is printed above)");
    let rules = env.role_rules(ROLE).await;
    let garden_rules = env.role_rules((GARDEN_NS, GARDEN_ROLE)).await;
    Shared {
        env,
        rules,
        garden_rules,
        _runtime: runtime,
    }
}

fn watchdog(env: &RealEnv) -> std::process::Child {
    let webhook = env
        .stack
        .webhook
        .as_ref()
        .expect("the webhook runs")
        .proc
        .id();
    std::process::Command::new("sh")
        .args([
            "-c",
            r#"cat >/dev/null; kill -TERM "$1" 2>/dev/null; rm -rf "$2""#,
            "kim-test-watchdog",
            &webhook.to_string(),
        ])
        .arg(env.dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the watchdog")
}

// ---- the status the tests expect ----

/// `(type, reason)` of a row of the status table (`kim::status::table::REASONS`); panics
/// naming the pair when the table has no such row, so that a rename in the table fails here.
fn row(condition_type: &str, reason: &str) -> (&'static str, &'static str) {
    let r = kim::status::table::REASONS
        .iter()
        .find(|r| r.condition_type == condition_type && r.reason == reason)
        .unwrap_or_else(|| panic!("the status table has no {condition_type}/{reason}"));
    (r.condition_type, r.reason)
}

fn state(o: &DynamicObject) -> Option<&str> {
    o.data["status"]["state"].as_str()
}

fn is(o: &DynamicObject, s: State) -> bool {
    state(o) == Some(s.as_str())
}

fn has_condition(o: &DynamicObject, (t, r): (&str, &str), status: CondStatus) -> bool {
    condition(o, t).is_some_and(|c| c["reason"] == r && c["status"] == status.as_str())
}

/// The condition of type `t`, if any.
fn condition<'a>(o: &'a DynamicObject, t: &str) -> Option<&'a Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn message<'a>(o: &'a DynamicObject, t: &str) -> &'a str {
    condition(o, t)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
}

/// A status as the assertions compare it: state, conditions (`Type=Status/Reason`, in stored
/// order) and Gardener's last operation (`type/state`).
fn short(o: &DynamicObject) -> String {
    let s = &o.data["status"];
    let conditions: Vec<String> = s["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}/{}",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let op = &s["shootLastOperation"];
    let op = match (op["type"].as_str(), op["state"].as_str()) {
        (Some(t), Some(st)) => format!("{t}/{st}"),
        _ => "-".into(),
    };
    format!(
        "{} [{}] op {op}",
        state(o).unwrap_or("-"),
        conditions.join(", ")
    )
}

/// The expected [`short`] of a write.
fn w(s: State, conditions: &[((&str, &str), CondStatus)], op: Option<(Operation, &str)>) -> String {
    let conditions: Vec<String> = conditions
        .iter()
        .map(|((t, r), st)| format!("{t}={}/{r}", st.as_str()))
        .collect();
    let op = op.map_or("-".into(), |(o, st)| format!("{}/{st}", o.as_str()));
    format!("{} [{}] op {op}", s.as_str(), conditions.join(", "))
}

/// The status writes among `versions` of one Runtime: each version whose status differs from
/// the one before (a version without status, or with the same status, is a metadata change).
fn writes(versions: &[DynamicObject]) -> Vec<DynamicObject> {
    let mut out: Vec<DynamicObject> = Vec::new();
    let mut last = Value::Null;
    for o in versions {
        let s = o.data.get("status").cloned().unwrap_or(Value::Null);
        if !s.is_null() && s != last {
            out.push(o.clone());
        }
        last = s;
    }
    out
}

/// A [`short`] without Gardener's operation.
fn without_op(short: &str) -> String {
    short.split(" op ").next().unwrap_or_default().to_string()
}

fn shorts(versions: &[DynamicObject]) -> Vec<String> {
    versions.iter().map(short).collect()
}

/// A Runtime version as the failure messages show it.
fn summary(o: &DynamicObject) -> String {
    format!(
        "{} gen {:?} {}",
        o.name_any(),
        o.metadata.generation,
        short(o)
    )
}

fn never_failed(versions: &[DynamicObject]) {
    assert!(
        !versions.iter().any(|o| is(o, State::Failed)),
        "a transient error must never produce Failed: {:#?}",
        shorts(&writes(versions))
    );
}

// ---- watch histories ----

#[derive(Clone, Debug)]
enum Seen<K> {
    Applied(K),
    Deleted(K),
}

impl<K> Seen<K> {
    fn object(&self) -> &K {
        match self {
            Seen::Applied(o) | Seen::Deleted(o) => o,
        }
    }

    fn applied(&self) -> Option<&K> {
        match self {
            Seen::Applied(o) => Some(o),
            Seen::Deleted(_) => None,
        }
    }
}

/// Every version of the objects one watch delivered, in order (the watch resumes, listing
/// again if it must, after an error: a version passed over meanwhile is missing, the latest
/// is not).
struct Recorder<K> {
    api: Api<K>,
    seen: tokio::sync::watch::Receiver<Vec<Seen<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Recorder<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    async fn start(api: Api<K>, config: watcher::Config) -> Recorder<K> {
        let (tx, seen) = tokio::sync::watch::channel(Vec::new());
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let stream = watcher(api.clone(), config);
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut stream = std::pin::pin!(stream.default_backoff());
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        tx.send_modify(|h| h.push(Seen::Applied(o)))
                    }
                    Ok(watcher::Event::Delete(o)) => tx.send_modify(|h| h.push(Seen::Deleted(o))),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(l) = listed_tx.take() {
                            let _ = l.send(());
                        }
                    }
                    Ok(watcher::Event::Init) | Err(_) => {}
                }
            }
        });
        tokio::time::timeout(LIMIT, listed)
            .await
            .unwrap_or_else(|_| panic!("no first list of the recorder's watch within {LIMIT:?}"))
            .expect("the recorder's watch");
        Recorder { api, seen, task }
    }

    fn len(&self) -> usize {
        self.seen.borrow().len()
    }

    fn since(&self, mark: usize) -> Vec<Seen<K>> {
        self.seen.borrow()[mark..].to_vec()
    }

    async fn wait_for<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&[Seen<K>]) -> Option<T>,
        context: impl FnOnce() -> String,
    ) -> T {
        let mut rx = self.seen.clone();
        let mut out = None;
        let waited = tokio::time::timeout(
            LIMIT,
            rx.wait_for(|h| {
                out = f(h);
                out.is_some()
            }),
        )
        .await;
        match (waited, out) {
            (Ok(Ok(_)), Some(v)) => v,
            _ => panic!("{what}: not within {LIMIT:?}\n{}", context()),
        }
    }

    /// Waits until the watch has delivered object `name` as it is stored now (a quorum read).
    async fn caught_up(&self, name: &str, context: impl FnOnce() -> String) {
        let now = self
            .api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("reading {name}: {e}"));
        let rv = now.meta().resource_version.clone();
        self.wait_for(
            &format!("{name} at resourceVersion {rv:?} delivered"),
            |h| {
                h.iter()
                    .any(|s| {
                        s.object().name_any() == name && s.object().meta().resource_version == rv
                    })
                    .then_some(())
            },
            context,
        )
        .await;
    }
}

// ---- one test's controller ----

/// The controller of one test, with a watch of the Runtimes started before it.
struct Run<'a> {
    env: &'a RealEnv,
    controller: Process,
    metrics_addr: String,
    runtimes: Recorder<DynamicObject>,
    denied_before: u64,
}

impl<'a> Run<'a> {
    /// Starts recording the Runtimes, then `kim controller` as deployed with `extra` flags.
    async fn start(env: &'a RealEnv, extra: &[&str]) -> Run<'a> {
        let runtimes = Recorder::start(env.runtimes().await, watcher::Config::default()).await;
        let denied_before = webhook_count(env, "/validate", "denied").await;
        let mut controller = env.spawn_controller_with("info,kim=debug", extra);
        let metrics_addr = controller
            .logged("metrics_addr", LIMIT)
            .await
            .unwrap_or_else(|e| panic!("kim controller: {e}"));
        Run {
            env,
            controller,
            metrics_addr,
            runtimes,
            denied_before,
        }
    }

    fn context(&self) -> String {
        let versions: Vec<String> = self
            .runtimes
            .since(0)
            .iter()
            .map(|s| match s {
                Seen::Applied(o) => summary(o),
                Seen::Deleted(o) => format!("{} deleted", o.name_any()),
            })
            .collect();
        format!(
            "Runtime versions seen:\n  {}\ncontroller stdout:\n{}\nstderr:\n{}",
            versions.join("\n  "),
            self.controller.stdout(),
            self.controller.stderr()
        )
    }

    /// The first version of Runtime `name` recorded from `mark` on for which `f` holds, and its
    /// position in the history.
    async fn version(
        &self,
        name: &str,
        mark: usize,
        what: &str,
        f: impl Fn(&DynamicObject) -> bool,
    ) -> (usize, DynamicObject) {
        self.runtimes
            .wait_for(
                &format!("Runtime {name} {what}"),
                |h| {
                    h.iter()
                        .enumerate()
                        .skip(mark)
                        .filter_map(|(i, s)| Some((i, s.applied()?)))
                        .find(|(_, o)| o.name_any() == name && f(o))
                        .map(|(i, o)| (i, o.clone()))
                },
                || self.context(),
            )
            .await
    }

    async fn ready(&self, name: &str, mark: usize) -> (usize, DynamicObject) {
        self.version(name, mark, "Ready", |o| is(o, State::Ready))
            .await
    }

    /// The versions of Runtime `name` recorded from `mark` on, up to its state as stored now.
    async fn versions_since(&self, name: &str, mark: usize) -> Vec<DynamicObject> {
        self.runtimes.caught_up(name, || self.context()).await;
        self.runtimes
            .since(mark)
            .iter()
            .filter_map(Seen::applied)
            .filter(|o| o.name_any() == name)
            .cloned()
            .collect()
    }

    /// Waits until Runtime `uid` is deleted (released by the controller).
    async fn gone(&self, name: &str, uid: &str) {
        self.runtimes
            .wait_for(
                &format!("Runtime {name} gone"),
                |h| {
                    h.iter()
                        .any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_deref() == Some(uid)))
                        .then_some(())
                },
                || self.context(),
            )
            .await;
    }

    /// Deletes Runtime `name` (as the admin) and waits until it is gone.
    async fn delete(&self, name: &str) {
        let api = self.env.runtimes().await;
        let rt = api.get(name).await.expect("the Runtime");
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete the Runtime");
        self.gone(name, &rt.uid().unwrap_or_default()).await;
    }

    /// A counter (or the sum of a labelled family) of the controller's `/metrics`.
    async fn metric(&self, name: &str) -> f64 {
        metric(&self.metrics_addr, name).await
    }

    /// Waits until `f(metric(name))` holds (a counter: it only grows).
    async fn metric_reaches(&self, name: &str, what: &str, f: impl Fn(f64) -> bool) -> f64 {
        let addr = self.metrics_addr.clone();
        let seen = crate::support::eventually(LIMIT, || {
            let addr = addr.clone();
            let v = async move { metric(&addr, name).await };
            let f = &f;
            async move { Some(v.await).filter(|v| f(*v)) }
        })
        .await;
        seen.unwrap_or_else(|| panic!("{what}: not within {LIMIT:?}\n{}", self.context()))
    }

    /// Waits until one more reconcile of Runtime `name` has run to its end, and the watch has
    /// delivered what it wrote: the test triggers one (an annotation, no new generation), and
    /// waits for `kim_controller_reconciles_total` to move past it.
    async fn settle(&self, name: &str) {
        static TOUCHES: AtomicUsize = AtomicUsize::new(0);
        let touch = TOUCHES.fetch_add(1, Ordering::Relaxed);
        let before = self.metric("kim_controller_reconciles_total").await;
        let patch =
            json!({"metadata": {"annotations": {"example.com/touched": touch.to_string()}}});
        self.env
            .runtimes()
            .await
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotate the Runtime");
        self.metric_reaches(
            "kim_controller_reconciles_total",
            "a reconcile after the annotation",
            |v| v > before,
        )
        .await;
        self.runtimes.caught_up(name, || self.context()).await;
    }

    /// Deletes Runtimes `names` and waits until they are gone, with their Shoots; then stops
    /// the controller (SIGTERM: it releases the Lease) and checks that neither the webhook nor
    /// the controller's own check denied any of its status writes.
    async fn finish(self, names: &[&str]) {
        for name in names {
            if self
                .env
                .runtimes()
                .await
                .get_opt(name)
                .await
                .expect("reading a Runtime")
                .is_some()
            {
                self.delete(name).await;
            }
            assert!(
                self.env.shoot(name).await.is_none(),
                "the Shoot of {name} is gone once the Runtime is"
            );
        }
        self.stop(true).await;
    }

    /// Stops the controller and asserts that kim's webhook denied none of its status writes;
    /// with `clean`, also that its own check denied none (no such log line).
    async fn stop(mut self, clean: bool) {
        let denied = webhook_count(self.env, "/validate", "denied").await - self.denied_before;
        let (out, err) = self.controller.terminate(Duration::from_secs(20));
        assert_eq!(
            denied, 0,
            "the webhook denied {denied} status writes\ncontroller stdout:\n{out}\nstderr:\n{err}"
        );
        for needle in ["status write denied", "StatusWriteDenied"] {
            assert!(
                !clean || !out.contains(needle) && !err.contains(needle),
                "the controller logged {needle:?}:\n{out}\n{err}"
            );
        }
    }
}

async fn webhook_count(env: &RealEnv, path: &str, decision: &str) -> u64 {
    env.stack
        .webhook
        .as_ref()
        .expect("the webhook runs")
        .count(path, decision)
        .await
}

/// The sum of the samples of metric family `name` (any labels) on `/metrics` at `addr`; 0 if
/// it has none yet.
async fn metric(addr: &str, name: &str) -> f64 {
    let text = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("scrape the controller's /metrics")
        .text()
        .await
        .expect("the metrics");
    sum_samples(&text, name, |_| true)
}

/// The sum of the samples of `name` whose label set (`{…}`, or empty) `labels` accepts.
fn sum_samples(text: &str, name: &str, labels: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (set, value) = if rest.starts_with('{') {
                let end = rest.find('}')?;
                (&rest[..=end], &rest[end + 1..])
            } else if rest.starts_with(' ') {
                ("", rest)
            } else {
                return None;
            };
            labels(set).then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// kube-apiserver's answers with `code` to writes of `runtimes/status` so far
/// (`apiserver_request_total`, every verb).
async fn runtime_status_answers(env: &RealEnv, code: u16) -> f64 {
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
    let code = format!("code=\"{code}\"");
    sum_samples(&text, "apiserver_request_total", |l| {
        l.contains(&code)
            && l.contains("resource=\"runtimes\"")
            && l.contains("subresource=\"status\"")
    })
}

// ---- the objects around a Runtime ----

/// Creates `samples/runtimes/<file>` as `name` with Shoot name and runtime ID `name` and the
/// fixtures' binding of its provider, after `edit`; as the admin, no status.
async fn create(env: &RealEnv, file: &str, name: &str, edit: impl FnOnce(&mut Value)) {
    env.stack
        .create_sample(file, name, |obj| {
            obj["metadata"]["labels"][kim::api::LABEL_RUNTIME_ID] = json!(name);
            obj["metadata"]["labels"][kim::api::LABEL_SHOOT_NAME] = json!(name);
            obj["spec"]["shoot"]["name"] = json!(name);
            let provider = obj["spec"]["shoot"]["provider"]["type"]
                .as_str()
                .unwrap_or("aws")
                .to_string();
            obj["spec"]["shoot"]["secretBindingName"] = json!(format!("hyperscaler-{provider}"));
            edit(obj);
        })
        .await;
}

/// Patches Runtime `name` as the admin (a JSON merge patch).
async fn patch(env: &RealEnv, name: &str, patch: Value) -> DynamicObject {
    env.runtimes()
        .await
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching Runtime {name}: {e}"))
}

/// Waits until an Event of `type_`/`reason` regarding Runtime `name` is stored.
async fn wait_event(env: &RealEnv, name: &str, type_: &str, reason: &str, note: &str) {
    let events: Api<K8sEvent> = Api::namespaced(env.stack.cp.admin().await, NS);
    let seen = crate::support::eventually(LIMIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some(type_)
                        && e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.note.as_deref().unwrap_or_default().contains(note)
                })
                .then_some(())
        }
    })
    .await;
    assert!(
        seen.is_some(),
        "no {type_} Event {reason} for Runtime {name} (note containing {note:?}) within {LIMIT:?}"
    );
}

fn secret_name(name: &str) -> String {
    format!("kubeconfig-{name}")
}

async fn secrets(env: &RealEnv) -> Api<Secret> {
    Api::namespaced(env.stack.cp.admin().await, NS)
}

async fn garden_config_maps(env: &RealEnv) -> Api<ConfigMap> {
    Api::namespaced(env.stack.cp.admin().await, GARDEN_NS)
}

fn structured_auth_config_map(name: &str) -> String {
    format!("structured-auth-config-{name}")
}

/// The controller's `get` of Secrets in the Runtimes' namespace.
fn secret_get() -> Access<'static> {
    Access {
        verb: "get",
        group: "",
        resource: "secrets",
        namespace: NS,
        name: None,
    }
}

/// The controller's `list` of Runtimes.
fn runtime_list() -> Access<'static> {
    Access {
        verb: "list",
        group: "infrastructuremanager.kyma-project.io",
        resource: "runtimes",
        namespace: NS,
        name: None,
    }
}

/// The shipped Role of the controller with `verb` removed from the rule on `resource`.
async fn role_without(env: &RealEnv, resource: &str, verbs: &[&str]) -> Vec<PolicyRule> {
    let rules = env.role_rules(ROLE).await;
    let without: Vec<PolicyRule> = rules
        .iter()
        .cloned()
        .map(|mut r| {
            if r.resources.iter().flatten().any(|res| res == resource) {
                r.verbs.retain(|v| !verbs.contains(&v.as_str()));
            }
            r
        })
        .collect();
    assert_ne!(without, rules, "the Role grants {verbs:?} on {resource}");
    without
}

/// Decoded JSON log lines of the controller (level, message and fields as text).
fn log_lines(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(v)) => v
                .iter()
                .filter(|(k, _)| *k != "timestamp")
                .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), String::from)))
                .collect::<Vec<_>>()
                .join(" "),
            _ => l.to_string(),
        })
        .collect()
}

/// How many of the controller's log lines say its watch `what` (`Runtimes`, `Shoots`) failed.
fn failed_watches(out: &str, what: &str) -> usize {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "watch failed; retrying with backoff" && v["watch"] == what)
        .count()
}

/// The next write `hold` holds; panics naming `what`, with the Runtimes and the controller's
/// output, if none comes.
async fn held(hold: &mut ShootWriteHold, run: &Run<'_>, what: &str) -> HeldShootWrite {
    tokio::select! {
        w = hold.next(what) => w,
        () = tokio::time::sleep(LIMIT - Duration::from_secs(5)) => {
            panic!("{what}: no such write held\n{}", run.context())
        }
    }
}

/// Runs a blocking control-plane command (kill, start) off the async worker.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// gardener-apiserver killed; started again when dropped (also when the test fails).
struct GardenerDown<'a> {
    env: &'a RealEnv,
    up: bool,
}

impl<'a> GardenerDown<'a> {
    fn kill(env: &'a RealEnv) -> Self {
        blocking(|| env.stack.cp.kill_gardener()).expect("kill gardener-apiserver");
        GardenerDown { env, up: false }
    }

    fn start(&mut self) -> Duration {
        self.up = true;
        blocking(|| self.env.stack.cp.start_gardener()).expect("start gardener-apiserver")
    }
}

impl Drop for GardenerDown<'_> {
    fn drop(&mut self) {
        if !self.up {
            let _ = blocking(|| self.env.stack.cp.start_gardener());
        }
    }
}

// ---- the tests ----

/// A Runtime whose region has no audit-log tenant is `Failed` with
/// `Provisioned=False/AuditLogErr` and KIM's message naming the region; no Shoot is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_without_audit_log_tenant_fails_with_audit_log_err_as_kim() {
    let env = turn().await;
    let name = "f-auditlog";
    let run = Run::start(&env, &[]).await;
    create(&env, "aws-minimal.yaml", name, |o| {
        o["spec"]["shoot"]["region"] = json!("ap-south-1");
    })
    .await;
    let audit_log = row("Provisioned", "AuditLogErr");
    let (_, failed) = run
        .version(name, 0, "Failed with AuditLogErr", |o| {
            is(o, State::Failed) && has_condition(o, audit_log, CondStatus::False)
        })
        .await;
    let message = message(&failed, audit_log.0);
    assert!(
        message.starts_with("Failed to configure audit logs: spec.shoot.region: ")
            && message.contains("ap-south-1"),
        "KIM's message, naming the region: {message}"
    );
    assert!(env.shoot(name).await.is_none(), "no Shoot created");
    run.finish(&[name]).await;
}

/// A Runtime without its region label fails with one status write (`Failed`,
/// `Provisioned=False/ConversionErr` naming the label) and a Warning Event, without a Shoot;
/// once the label is set, it goes on: `Pending` once its Shoot is created, then `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_error_fails_without_a_shoot_and_recovers_when_fixed() {
    let env = turn().await;
    let name = "f-conversion";
    let label = "kyma-project.io/region";
    let run = Run::start(&env, &[]).await;
    let mut value = Value::Null;
    create(&env, "aws-minimal.yaml", name, |o| {
        value = o["metadata"]["labels"][label].take();
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(label);
    })
    .await;
    assert!(value.is_string(), "the sample has the label {label}");
    let conversion = row("Provisioned", "ConversionErr");
    let (_, failed) = run
        .version(name, 0, "Failed with ConversionErr", |o| {
            is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
        })
        .await;
    let text = message(&failed, conversion.0);
    assert!(text.contains(label), "the message names the label: {text}");
    wait_event(&env, name, "Warning", conversion.1, "").await;
    assert!(env.shoot(name).await.is_none(), "no Shoot created");
    // One write: the pass accepts the Runtime (`Initialised`, merged away) and fails it.
    let before_fix = writes(&run.versions_since(name, 0).await);
    assert_eq!(
        shorts(&before_fix),
        [w(State::Failed, &[(conversion, CondStatus::False)], None)]
    );
    let mark = run.runtimes.len();
    patch(&env, name, json!({"metadata": {"labels": {label: value}}})).await;
    run.ready(name, mark).await;
    let all = writes(&run.versions_since(name, 0).await);
    let after = all[before_fix.len()..].to_vec();
    assert_eq!(
        shorts(&after).first(),
        Some(&w(
            State::Pending,
            &[(row("Provisioned", "Pending"), CondStatus::Unknown)],
            None
        )),
        "Failed → Pending once the Shoot is created: {:#?}",
        shorts(&after)
    );
    run.finish(&[name]).await;
}

/// A `Failed` Runtime that never got a Shoot is released at once when deleted (its finalizer
/// removed), without a status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_without_shoot_is_released_at_once() {
    let env = turn().await;
    let name = "f-noshoot";
    let run = Run::start(&env, &[]).await;
    create(&env, "aws-trial.yaml", name, |o| {
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kyma-project.io/broker-plan-id");
    })
    .await;
    let conversion = row("Provisioned", "ConversionErr");
    run.version(name, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    let versions = run.versions_since(name, 0).await;
    let now = versions.last().expect("a version");
    assert_eq!(
        now.metadata.finalizers.as_deref(),
        Some(&[kim::status::table::FINALIZER.to_string()][..])
    );
    let written = writes(&versions).len();
    run.delete(name).await;
    let all = run
        .runtimes
        .since(0)
        .iter()
        .filter_map(Seen::applied)
        .filter(|o| o.name_any() == name)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(
        writes(&all).len(),
        written,
        "released without a status write: {:#?}",
        shorts(&writes(&all))
    );
    assert!(env.shoot(name).await.is_none(), "no Shoot");
    run.finish(&[]).await;
}

/// A terminal Gardener code (`ERR_INFRA_UNAUTHORIZED`) fails the Runtime (`CreationErr` with
/// Gardener's code, the last errors and operation copied) and is not retried; a spec change (a
/// new credentials binding) is: the Shoot is updated, the Runtime `Pending` again with the
/// failed operation, then `Ready` on the new credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_and_a_spec_fix_recovers() {
    let env = turn().await;
    let name = "f-unauth";
    let code = "ERR_INFRA_UNAUTHORIZED";
    env.gardenlet
        .set_script(name, ShootScript::create_fails(&[code]));
    let run = Run::start(&env, &[]).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (_, failed) = run
        .version(name, 0, "Failed", |o| is(o, State::Failed))
        .await;
    let creation = row("Provisioned", "CreationErr");
    assert!(
        has_condition(&failed, creation, CondStatus::False),
        "{}",
        summary(&failed)
    );
    assert!(
        message(&failed, creation.0).contains(code),
        "{}",
        summary(&failed)
    );
    assert_eq!(
        failed.data["status"]["shootLastErrors"][0]["codes"][0],
        code
    );
    assert_eq!(
        failed.data["status"]["shootLastOperation"]["state"],
        "Failed"
    );
    // Terminal: a further reconcile asks Gardener for nothing.
    run.settle(name).await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.metadata.generation,
        Some(1),
        "no retry of a terminal failure"
    );
    assert!(
        shoot
            .annotations()
            .get(testenv::gardener::OPERATION_ANNOTATION)
            .is_none(),
        "no retry of a terminal failure"
    );
    assert!(is(
        &run.versions_since(name, 0).await.pop().unwrap(),
        State::Failed
    ));
    // New credentials: a second binding of the provider, as an operator adds one.
    let fixed = "f-fixed-credentials";
    let bindings: Api<DynamicObject> = Api::namespaced_with(
        env.stack.cp.admin().await,
        GARDEN_NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "security.gardener.cloud",
            "v1alpha1",
            "CredentialsBinding",
        )),
    );
    let mut binding = bindings
        .get("hyperscaler-aws")
        .await
        .expect("the aws binding");
    binding.metadata = kube::api::ObjectMeta {
        name: Some(fixed.into()),
        namespace: Some(GARDEN_NS.into()),
        ..Default::default()
    };
    match bindings.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the binding {fixed}: {e}"),
    }
    // Gardener held: the controller's first write after the change is made before Gardener
    // takes the new generation.
    env.gardenlet.pause();
    let mark = run.runtimes.len();
    patch(
        &env,
        name,
        json!({"spec": {"shoot": {"secretBindingName": fixed}}}),
    )
    .await;
    let processing = row("Provisioned", "Processing");
    let (_, first) = run
        .version(name, mark, "Pending after the spec change", |o| {
            !is(o, State::Failed) && o.data.get("status").is_some()
        })
        .await;
    assert_eq!(
        short(&first),
        w(
            State::Pending,
            &[(processing, CondStatus::Unknown)],
            Some((Operation::Create, "Failed"))
        ),
        "{}",
        run.context()
    );
    env.gardenlet.resume();
    let (_, ready) = run.ready(name, mark).await;
    assert_eq!(
        condition(&ready, "Provisioned").map(|c| c["reason"].clone()),
        Some(json!(row("Provisioned", "ShootCreationCompleted").1))
    );
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(shoot.data["spec"]["credentialsBindingName"], fixed);
    run.finish(&[name]).await;
}

/// A retryable Gardener code (`ERR_INFRA_QUOTA_EXCEEDED`) keeps the Runtime `Pending`
/// (`Provisioned=Unknown/Pending` with Gardener's code, the failed operation copied), the
/// controller asks Gardener to retry (the Shoot's generation 2), and the Runtime is `Ready`;
/// never `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_exceeded_stays_pending_and_recovers() {
    let env = turn().await;
    let name = "f-quota";
    let code = "ERR_INFRA_QUOTA_EXCEEDED";
    env.gardenlet.set_script(
        name,
        ShootScript::default().then_create(Outcome::failed(&[code])),
    );
    let run = Run::start(&env, &[]).await;
    create(&env, "azure-fremium.yaml", name, |_| {}).await;
    let pending = row("Provisioned", "Pending");
    let (_, reported) = run
        .version(name, 0, "the quota error reported", |o| {
            message(o, pending.0).contains(code)
        })
        .await;
    assert!(
        is(&reported, State::Pending) && has_condition(&reported, pending, CondStatus::Unknown),
        "{}",
        summary(&reported)
    );
    run.ready(name, 0).await;
    let versions = run.versions_since(name, 0).await;
    never_failed(&versions);
    assert!(
        writes(&versions).iter().any(|o| is(o, State::Pending)
            && o.data["status"]["shootLastOperation"]["state"] == "Failed"),
        "the failed operation was copied while Pending: {:#?}",
        shorts(&writes(&versions))
    );
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.metadata.generation,
        Some(2),
        "the Shoot was annotated for a retry (gardener-apiserver's new generation)"
    );
    run.finish(&[name]).await;
}

/// Two of the controller's status writes answered 409 Conflict (a test admission webhook on
/// kube-apiserver): retried, with no other conflict (the controller's writes stay on top of
/// its cache) and no extra or different status: at most the provisioning's three writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_on_a_status_write_is_retried() {
    let env = turn().await;
    let name = "f-conflict";
    let denied = Arc::new(AtomicUsize::new(0));
    let hook = {
        let denied = denied.clone();
        install_admission_hook(
            env.stack.cp.admin().await,
            "conflict-on-status",
            json!([{"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                    "resources": ["runtimes/status"], "operations": ["UPDATE"]}]),
            move |request| {
                if request["name"] == name
                    && denied
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                            (n < 2).then_some(n + 1)
                        })
                        .is_ok()
                {
                    Admission::Deny {
                        code: 409,
                        message: "the object has been modified; please apply your changes to \
                                  the latest version and try again"
                            .into(),
                    }
                } else {
                    Admission::Allow
                }
            },
        )
        .await
    };
    let conflicts_before = runtime_status_answers(&env, 409).await;
    let run = Run::start(&env, &[]).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    run.ready(name, 0).await;
    let conflicts = runtime_status_answers(&env, 409).await - conflicts_before;
    hook.remove().await;
    assert_eq!(
        denied.load(Ordering::SeqCst),
        2,
        "both conflicts were answered"
    );
    assert_eq!(conflicts, 2.0, "the injected conflicts were hit, no other");
    let versions = run.versions_since(name, 0).await;
    let written = shorts(&writes(&versions));
    // The first write's state and conditions; Gardener's operation is wherever the gardenlet
    // is by then (the conflicts cost the controller time).
    assert_eq!(
        written.first().map(|s| without_op(s)),
        Some(&w(
            State::Pending,
            &[(row("Provisioned", "Pending"), CondStatus::Unknown)],
            None
        ))
        .map(|s| without_op(s)),
        "{written:#?}"
    );
    assert!(written.len() <= 3, "{written:#?}");
    assert_eq!(
        written.last(),
        Some(&w(
            State::Ready,
            &[
                (
                    row("Provisioned", "ShootCreationCompleted"),
                    CondStatus::True
                ),
                (
                    row("KubeconfigReady", "KubeconfigCreated"),
                    CondStatus::True
                ),
                (
                    row("Configured", "AdministratorsConfigured"),
                    CondStatus::True
                ),
            ],
            Some((Operation::Create, "Succeeded"))
        ))
    );
    never_failed(&versions);
    run.finish(&[name]).await;
}

/// The Shoot's creation answered 500 twice by gardener-apiserver (a test admission webhook):
/// `Pending` with `Provisioned=False/GardenerErr`, retried, `Ready`, one Shoot created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_api_errors_are_retried_with_gardener_err() {
    let env = turn().await;
    let name = "f-garden-500";
    let run = Run::start(&env, &[]).await;
    let mut hold = env.hold_shoot_writes(name, "shoots", &["CREATE"]).await;
    create(&env, "aws-trial.yaml", name, |_| {}).await;
    for attempt in ["first", "second"] {
        held(
            &mut hold,
            &run,
            &format!("the {attempt} creation of the Shoot"),
        )
        .await
        .answer(Admission::Deny {
            code: 500,
            message: "etcdserver: request timed out".into(),
        });
    }
    held(&mut hold, &run, "the third creation of the Shoot")
        .await
        .answer(Admission::Allow);
    hold.remove().await;
    let gardener = row("Provisioned", "GardenerErr");
    run.version(name, 0, "Pending with GardenerErr", |o| {
        is(o, State::Pending) && has_condition(o, gardener, CondStatus::False)
    })
    .await;
    run.ready(name, 0).await;
    never_failed(&run.versions_since(name, 0).await);
    let creates = env
        .gardenlet
        .history()
        .of(name)
        .iter()
        .filter(|e| **e == Did::Started(Operation::Create))
        .count();
    assert_eq!(creates, 1, "one Shoot, created once");
    run.finish(&[name]).await;
}

/// The Shoot's new runtime cluster does not answer when the controller first binds the
/// administrators there (its kube-apiserver killed before Gardener says the Shoot is created):
/// `Configured=False/ConfigurationError`, retried, and `Ready` once the cluster is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_cluster_errors_are_retried_with_configuration_error() {
    let env = turn().await;
    let name = "f-rt-down";
    let run = Run::start(&env, &[]).await;
    let mut hold = env
        .hold_shoot_writes(name, "shoots/status", &["UPDATE"])
        .await;
    create(&env, "azure.yaml", name, |_| {}).await;
    let cluster = loop {
        let write = held(&mut hold, &run, "the gardenlet's Create Succeeded").await;
        let op = &write.request["object"]["status"]["lastOperation"];
        if op["type"] == "Create" && op["state"] == "Succeeded" {
            let cluster = env
                .gardenlet
                .cluster(name)
                .await
                .expect("the runtime cluster");
            blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
            write.answer(Admission::Allow);
            break cluster;
        }
        write.answer(Admission::Allow);
    };
    hold.remove().await;
    let configuration = row("Configured", "ConfigurationError");
    run.version(name, 0, "Configured=False/ConfigurationError", |o| {
        has_condition(o, configuration, CondStatus::False)
    })
    .await;
    blocking(|| cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    run.ready(name, 0).await;
    never_failed(&run.versions_since(name, 0).await);
    run.finish(&[name]).await;
}

/// A Runtime on Kubernetes 1.32+ gets the structured-authentication ConfigMap (main and
/// additional OIDC issuers) in the project namespace, named by its Shoot; it is deleted with
/// the Runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_authentication_config_map_lives_and_dies_with_the_shoot() {
    let env = turn().await;
    let name = "f-sauth";
    let run = Run::start(&env, &[]).await;
    create(&env, "aws.yaml", name, |o| {
        o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
    })
    .await;
    run.ready(name, 0).await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.data["spec"]["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]["configMapName"],
        structured_auth_config_map(name)
    );
    let cm = garden_config_maps(&env)
        .await
        .get(&structured_auth_config_map(name))
        .await
        .expect("the ConfigMap");
    let content: Value = serde_json::from_str(
        cm.data
            .as_ref()
            .and_then(|d| d.get("config.yaml"))
            .expect("config.yaml"),
    )
    .expect("JSON");
    assert_eq!(content["kind"], "AuthenticationConfiguration");
    assert_eq!(
        content["jwt"].as_array().map(Vec::len),
        Some(2),
        "main + additional"
    );
    run.delete(name).await;
    assert!(
        garden_config_maps(&env)
            .await
            .get_opt(&structured_auth_config_map(name))
            .await
            .expect("reading the ConfigMap")
            .is_none(),
        "the ConfigMap is gone with the Runtime"
    );
    run.finish(&[name]).await;
}

/// A Shoot's Kubernetes version raised out of band (Gardener's auto-update, an operator: here
/// the admin, after adding 1.29.3 to the CloudProfile) is kept when the Runtime's spec changes:
/// the update does not downgrade (gardener-apiserver would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_never_downgrades_kubernetes() {
    let env = turn().await;
    let name = "f-nodowngrade";
    let raised = "1.29.3";
    let run = Run::start(&env, &[]).await;
    create(&env, "aws.yaml", name, |_| {}).await; // Kubernetes 1.28.7
    run.ready(name, 0).await;
    let admin = env.stack.cp.admin().await;
    let profiles: Api<DynamicObject> = Api::all_with(
        admin,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "core.gardener.cloud",
            "v1beta1",
            "CloudProfile",
        )),
    );
    let aws = profiles.get("aws").await.expect("the aws CloudProfile");
    let offered = aws.data["spec"]["kubernetes"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .any(|v| v["version"] == raised);
    if !offered {
        let add = json!([{"op": "add", "path": "/spec/kubernetes/versions/-",
                          "value": {"version": raised}}]);
        profiles
            .patch(
                "aws",
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(add).unwrap()),
            )
            .await
            .expect("add the version to the CloudProfile");
    }
    // gardener-apiserver validates against its informer's CloudProfile: taken once it sees it.
    let shoots = env.shoots().await;
    let raise = json!({"spec": {"kubernetes": {"version": raised}}});
    let accepted = crate::support::eventually(LIMIT, || {
        let shoots = shoots.clone();
        let raise = raise.clone();
        async move {
            match shoots
                .patch(name, &PatchParams::default(), &Patch::Merge(&raise))
                .await
            {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => None,
                Err(e) => panic!("raising the Shoot's version: {e}"),
            }
        }
    })
    .await;
    assert!(
        accepted.is_some(),
        "the raised version was not accepted within {LIMIT:?}"
    );
    let rt = env.runtimes().await.get(name).await.expect("the Runtime");
    let mut workers = rt.data["spec"]["shoot"]["provider"]["workers"].clone();
    let max = workers[0]["maximum"].as_i64().expect("maximum");
    workers[0]["maximum"] = json!(max + 1);
    let generation = patch(
        &env,
        name,
        json!({"spec": {"shoot": {"provider": {"workers": workers}}}}),
    )
    .await
    .metadata
    .generation
    .expect("a generation");
    let completed = row("Provisioned", "ConfigurationCompleted");
    let at = ready_at_generation(generation);
    run.version(name, 0, "Ready with the update", |o| {
        at(Some(o)) && has_condition(o, completed, CondStatus::True)
    })
    .await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot
            .annotations()
            .get("infrastructuremanager.kyma-project.io/runtime-generation")
            .map(String::as_str),
        Some(generation.to_string().as_str())
    );
    assert_eq!(
        shoot.data["spec"]["kubernetes"]["version"], raised,
        "not downgraded"
    );
    assert_eq!(
        shoot.data["spec"]["provider"]["workers"][0]["maximum"],
        max + 1
    );
    never_failed(&run.versions_since(name, 0).await);
    run.finish(&[name]).await;
}

/// Flags of the controllers of the resync tests: a resync every second, no runtime-cluster
/// client kept (each administrators' sync reads the kubeconfig Secret and connects anew), and
/// `grace` seconds before a transient error of a `Ready` Runtime is written.
fn resync_flags(grace: &'static str) -> [&'static str; 6] {
    [
        "--resync-seconds",
        "1",
        "--runtime-client-cache",
        "0",
        "--transient-error-grace-seconds",
        grace,
    ]
}

/// A `Ready` Runtime stays `Ready` through transient errors of its resyncs — its runtime
/// cluster's kube-apiserver down (killed: connection refused) for less than the grace, then
/// back: each failed reconcile is counted and retried, none is written (no `Ready` →
/// `Pending` → `Ready` flip for a blip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_of_a_ready_runtime_are_retried_without_status_writes() {
    let env = turn().await;
    let name = "f-blip";
    let run = Run::start(&env, &resync_flags("60")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    run.settle(name).await;
    let writes_before = run.metric("kim_controller_status_writes_total").await;
    let errors_before = run.metric("kim_controller_reconcile_errors_total").await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
    let errors = run
        .metric_reaches(
            "kim_controller_reconcile_errors_total",
            "two failed resyncs",
            |v| v >= errors_before + 2.0,
        )
        .await;
    blocking(|| cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    // Complete resyncs after the cluster is back: the error counter stops, reconciles go on.
    let reconciles = run.metric("kim_controller_reconciles_total").await;
    run.metric_reaches(
        "kim_controller_reconciles_total",
        "two reconciles after the cluster is back",
        |v| v >= reconciles + 2.0,
    )
    .await;
    run.settle(name).await;
    let versions = run.versions_since(name, ready_at).await;
    assert!(
        versions.iter().all(|o| is(o, State::Ready)),
        "transient errors of a Ready Runtime were written: {:#?}",
        shorts(&writes(&versions))
    );
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        writes_before,
        "no status write"
    );
    println!(
        "Ready Runtime under transient errors: {} failed reconciles, 0 status writes",
        errors - errors_before
    );
    run.finish(&[name]).await;
}

/// A transient error of a `Ready` Runtime that lasts longer than the grace (its runtime
/// cluster's kube-apiserver down) is reported as the spec says for the step (`Pending`,
/// `Configured=False/ConfigurationError`), not before the grace; `Ready` again once the
/// cluster is back. Exactly these two writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_transient_error_of_a_ready_runtime_is_reported_after_the_grace() {
    const GRACE: Duration = Duration::from_secs(3);
    let env = turn().await;
    let name = "f-lasting";
    let run = Run::start(&env, &resync_flags("3")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    let start = Instant::now();
    blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
    let down = Down {
        cluster: &cluster,
        up: false,
    };
    let reported = lasting_error_is_reported(&run, name, ready_at, start, GRACE, down).await;
    println!(
        "lasting transient error of a Ready Runtime: reported after {:.1} s (grace {GRACE:?})",
        reported.as_secs_f64()
    );
    run.finish(&[name]).await;
}

/// A runtime cluster's kube-apiserver killed; started again when dropped.
struct Down<'a> {
    cluster: &'a testenv::controlplane::ControlPlane,
    up: bool,
}

impl Down<'_> {
    fn start(&mut self) {
        self.up = true;
        blocking(|| self.cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    }
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if !self.up {
            let _ = blocking(|| self.cluster.start_apiserver());
        }
    }
}

/// What ends a lasting error: the runtime cluster started again, or the Role restored.
trait Ends {
    async fn end(self);
}

impl Ends for Down<'_> {
    async fn end(mut self) {
        self.start();
    }
}

/// The Role restored to `rules`.
struct Restore<'a>(&'a RealEnv, Vec<PolicyRule>);

impl Ends for Restore<'_> {
    async fn end(self) {
        self.0.set_role_rules(ROLE, &self.1).await;
        self.0.wait_access(&secret_get(), true).await;
    }
}

/// Waits until the lasting error that began at `start` is written (`Pending`,
/// `Configured=False/ConfigurationError`, not before `grace`), ends it, waits for `Ready`, and
/// checks the writes from `ready_at` on: exactly those two. Returns how long the report took.
async fn lasting_error_is_reported(
    run: &Run<'_>,
    name: &str,
    ready_at: usize,
    start: Instant,
    grace: Duration,
    ends: impl Ends,
) -> Duration {
    let configuration = row("Configured", "ConfigurationError");
    let (at, _) = run
        .version(name, ready_at, "Pending with ConfigurationError", |o| {
            is(o, State::Pending) && has_condition(o, configuration, CondStatus::False)
        })
        .await;
    let reported = start.elapsed();
    assert!(
        reported >= grace,
        "reported after {reported:?}, before the grace {grace:?}"
    );
    ends.end().await;
    run.ready(name, at).await;
    let versions = run.versions_since(name, ready_at).await;
    let after: Vec<String> = shorts(&writes(&versions)).into_iter().skip(1).collect();
    let done = (
        row("Provisioned", "ShootCreationCompleted"),
        CondStatus::True,
    );
    let kubeconfig = (
        row("KubeconfigReady", "KubeconfigCreated"),
        CondStatus::True,
    );
    let op = Some((Operation::Create, "Succeeded"));
    assert_eq!(
        after,
        [
            w(
                State::Pending,
                &[done, kubeconfig, (configuration, CondStatus::False)],
                op
            ),
            w(
                State::Ready,
                &[
                    done,
                    kubeconfig,
                    (
                        row("Configured", "AdministratorsConfigured"),
                        CondStatus::True
                    )
                ],
                op
            ),
        ],
        "{}",
        run.context()
    );
    never_failed(&versions);
    reported
}

/// A 403 on a `Ready` Runtime's resync — what a kube-apiserver that has just started answers
/// until its RBAC cache is loaded, or a Role being rolled out — is retried without a status
/// write, like a transient error; one that lasts past the grace (a missing RBAC rule) is
/// reported as the step's failure, and the Runtime is `Ready` again once the 403s stop. The
/// read that meets it is the kubeconfig Secret's GET, made at each resync's administrators'
/// sync when no runtime-cluster client is kept (`--runtime-client-cache 0`); the 403 is the
/// shipped Role without `get` on Secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_resync_of_a_ready_runtime_waits_for_the_grace_before_it_is_written() {
    const GRACE: Duration = Duration::from_secs(3);
    let env = turn().await;
    let name = "f-forbidden";
    let rules = env.role_rules(ROLE).await;
    let without_get = role_without(&env, "secrets", &["get"]).await;
    let phrase = secret_get().forbidden_phrase();
    // A burst shorter than the grace (60 s): two failed resyncs, nothing written.
    let run = Run::start(&env, &resync_flags("60")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    run.settle(name).await;
    let writes_before = run.metric("kim_controller_status_writes_total").await;
    let errors_before = run.metric("kim_controller_reconcile_errors_total").await;
    env.set_role_rules(ROLE, &without_get).await;
    env.wait_access(&secret_get(), false).await;
    run.metric_reaches(
        "kim_controller_reconcile_errors_total",
        "two forbidden resyncs",
        |v| v >= errors_before + 2.0,
    )
    .await;
    assert!(
        log_lines(&run.controller.stdout())
            .iter()
            .any(|l| l.contains(&phrase)),
        "the controller met the 403 ({phrase})\n{}",
        run.context()
    );
    env.set_role_rules(ROLE, &rules).await;
    env.wait_access(&secret_get(), true).await;
    let reconciles = run.metric("kim_controller_reconciles_total").await;
    run.metric_reaches(
        "kim_controller_reconciles_total",
        "two reconciles after the 403s",
        |v| v >= reconciles + 2.0,
    )
    .await;
    run.settle(name).await;
    let versions = run.versions_since(name, ready_at).await;
    assert!(
        versions.iter().all(|o| is(o, State::Ready)),
        "a 403 of a Ready Runtime's resync was written at once: {:#?}",
        shorts(&writes(&versions))
    );
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        writes_before,
        "no status write"
    );
    run.stop(true).await;
    // A 403 that lasts past the grace (3 s) is reported.
    let run = Run::start(&env, &resync_flags("3")).await;
    run.settle(name).await;
    let ready_at = run.runtimes.len() - 1;
    let start = Instant::now();
    env.set_role_rules(ROLE, &without_get).await;
    let reported =
        lasting_error_is_reported(&run, name, ready_at, start, GRACE, Restore(&env, rules)).await;
    println!(
        "lasting 403 of a Ready Runtime: reported after {:.1} s (grace {GRACE:?})",
        reported.as_secs_f64()
    );
    run.finish(&[name]).await;
}

/// The controller's first list of Shoots fails (started while gardener-apiserver is down: the
/// aggregator answers 503), and its first list of Runtimes fails (the Role without `list` on
/// Runtimes, nor `watch`, which a streaming first list is: 403): each is retried with backoff and the Runtime is provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_initial_list_is_retried() {
    let env = turn().await;
    // Shoots.
    let name = "f-list-shoots";
    let mut down = GardenerDown::kill(&env);
    let mut run = Run::start(&env, &[]).await;
    run.controller
        .wait_output(LIMIT, |out, _| {
            (failed_watches(out, "Shoots") >= 1).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("a failed Shoot list: {e}"));
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let took = down.start();
    println!("gardener-apiserver back after {took:?}");
    run.ready(name, 0).await;
    run.finish(&[name]).await;
    // Runtimes.
    let name = "f-list-rts";
    let rules = env.role_rules(ROLE).await;
    // With streaming lists the first list is a watch (`sendInitialEvents`): both refused.
    env.set_role_rules(
        ROLE,
        &role_without(&env, "runtimes", &["list", "watch"]).await,
    )
    .await;
    env.wait_access(&runtime_list(), false).await;
    env.wait_access(
        &Access {
            verb: "watch",
            ..runtime_list()
        },
        false,
    )
    .await;
    let mut run = Run::start(&env, &[]).await;
    run.controller
        .wait_output(LIMIT, |out, _| {
            (failed_watches(out, "Runtimes") >= 1).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("a failed Runtime list: {e}"));
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    env.set_role_rules(ROLE, &rules).await;
    env.wait_access(&runtime_list(), true).await;
    run.ready(name, 0).await;
    run.finish(&[name]).await;
}

/// The controller's own pre-write check (`kim::reconciler::status::check`, the webhook's
/// evaluation run before every status write): a Runtime whose stored status is `Terminating`
/// although it is not being deleted (written by the admin while kim's webhook configurations
/// were removed) can only get writes the model denies. The controller sends none of them: no
/// status write reaches kube-apiserver (kim's webhooks judge none), the stored status stays,
/// each denial is counted (`kim_controller_status_denied_total`, reconcile errors of kind
/// `denied`) and the Runtime gets a Warning Event `StatusWriteDenied` naming the broken rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_model_denies_is_never_sent() {
    let env = turn().await;
    let name = DENIED;
    let admin = env.stack.cp.admin().await;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let config_name = "kim-runtime-status";
    let mut v = validating
        .get(config_name)
        .await
        .expect("kim's validating webhook");
    let mut m = mutating
        .get(config_name)
        .await
        .expect("kim's mutating webhook");
    for meta in [&mut v.metadata, &mut m.metadata] {
        *meta = kube::api::ObjectMeta {
            name: meta.name.clone(),
            labels: meta.labels.clone(),
            ..Default::default()
        };
    }
    validating
        .delete(config_name, &DeleteParams::default())
        .await
        .expect("remove kim's validating webhook");
    mutating
        .delete(config_name, &DeleteParams::default())
        .await
        .expect("remove kim's mutating webhook");
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let status = json!({
        "state": "Terminating",
        "conditions": [{
            "type": "Deprovisioned", "status": "Unknown", "reason": "GardenerShootDeleted",
            "message": "deleting", "lastTransitionTime": "2026-11-02T00:00:10Z",
            "observedGeneration": 1
        }]
    });
    let runtimes = env.runtimes().await;
    // kube-apiserver drops the configurations from its cache a moment after their deletion.
    let stored = crate::support::eventually(LIMIT, || {
        let (runtimes, status) = (runtimes.clone(), status.clone());
        async move {
            runtimes
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .ok()
        }
    })
    .await
    .expect("the status stored past admission");
    assert_eq!(stored.data["status"]["state"], "Terminating");
    validating
        .create(&PostParams::default(), &v)
        .await
        .expect("restore kim's validating webhook");
    mutating
        .create(&PostParams::default(), &m)
        .await
        .expect("restore kim's mutating webhook");
    env.stack.wait_until_judged().await;
    let reviews_before = reviews(&env).await;
    let run = Run::start(&env, &[]).await;
    let addr = run.metrics_addr.clone();
    let denied_errors = || {
        let addr = addr.clone();
        async move {
            let text = reqwest::get(format!("http://{addr}/metrics"))
                .await
                .expect("scrape")
                .text()
                .await
                .expect("metrics");
            sum_samples(&text, "kim_controller_reconcile_errors_total", |l| {
                l.contains("kind=\"denied\"")
            })
        }
    };
    // A denial is counted when the write is refused, its reconcile's error when the reconcile
    // returns: both are waited for.
    run.metric_reaches(
        "kim_controller_status_denied_total",
        "two denied status writes",
        |v| v >= 2.0,
    )
    .await;
    let errors = crate::support::eventually(LIMIT, || {
        let f = denied_errors();
        async move { Some(f.await).filter(|v| *v >= 2.0) }
    })
    .await;
    assert!(
        errors.is_some(),
        "two reconciles failed by the denials\n{}",
        run.context()
    );
    wait_event(
        &env,
        name,
        "Warning",
        "StatusWriteDenied",
        "[transition] status.state: transition Terminating -> Pending",
    )
    .await;
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        0.0,
        "no status write sent"
    );
    assert_eq!(
        reviews(&env).await,
        reviews_before,
        "no status write reached kube-apiserver (kim's webhooks judged one)"
    );
    let now = run
        .versions_since(name, 0)
        .await
        .pop()
        .expect("the Runtime");
    assert_eq!(
        now.data["status"], stored.data["status"],
        "the stored status stays"
    );
    run.stop(false).await;
    remove_denied(&env).await;
}

/// The Runtime of [`a_status_the_model_denies_is_never_sent`] (no controller can delete it:
/// every status it would write is denied) and its Shoot, if any, deleted as the admin.
const DENIED: &str = "f-denied";

async fn remove_denied(env: &RealEnv) {
    env.force_delete(DENIED).await;
    if env.shoot(DENIED).await.is_some() {
        let shoots = env.shoots().await;
        let confirm =
            json!({"metadata": {"annotations": {testenv::gardener::CONFIRM_DELETION: "true"}}});
        shoots
            .patch(DENIED, &PatchParams::default(), &Patch::Merge(&confirm))
            .await
            .expect("confirm the Shoot's deletion");
        shoots
            .delete(DENIED, &DeleteParams::default())
            .await
            .expect("delete the Shoot");
    }
}

/// Every answer kim's webhook process gave so far (`/validate` and `/mutate`).
async fn reviews(env: &RealEnv) -> u64 {
    let mut n = 0;
    for (path, decision) in [
        ("/validate", "allowed"),
        ("/validate", "denied"),
        ("/mutate", "allowed"),
        ("/mutate", "denied"),
    ] {
        n += webhook_count(env, path, decision).await;
    }
    n
}

/// Creates a Runtime `name` from `aws-trial.yaml` without `spec` (the CRD, like KIM's, does
/// not require one), with runtime ID `runtime_id`.
async fn create_without_spec(env: &RealEnv, name: &str, runtime_id: &str) {
    env.stack
        .create_sample("aws-trial.yaml", name, |obj| {
            obj.as_object_mut().unwrap().remove("spec");
            obj["metadata"]["labels"][kim::api::LABEL_RUNTIME_ID] = json!(runtime_id);
        })
        .await;
}

/// A Runtime without `spec` stored next to a good Runtime: the good one is provisioned; the one
/// without spec is `Failed` with `Provisioned=False/ConversionErr` naming the missing field (and
/// a Warning Event) in one write, gets no Shoot, is never given a spec, and is released when
/// deleted; the good one's Shoot stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_spec_fails_alone_and_is_released() {
    let env = turn().await;
    let (good, bare) = ("f-good", "f-nospec");
    let run = Run::start(&env, &[]).await;
    create_without_spec(&env, bare, bare).await;
    create(&env, "aws-minimal.yaml", good, |_| {}).await;
    let (ready_at, _) = run.ready(good, 0).await;
    let conversion = row("Provisioned", "ConversionErr");
    let (_, failed) = run
        .version(bare, 0, "Failed with ConversionErr", |o| {
            is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
        })
        .await;
    let text = message(&failed, conversion.0);
    assert!(
        text.contains("spec") && text.contains("required"),
        "the message names the missing field: {text}"
    );
    wait_event(&env, bare, "Warning", conversion.1, "").await;
    let versions = run.versions_since(bare, 0).await;
    assert!(
        versions.iter().all(|o| o.data.get("spec").is_none()),
        "the controller's writes give it no spec"
    );
    assert_eq!(
        shorts(&writes(&versions)),
        [w(State::Failed, &[(conversion, CondStatus::False)], None)]
    );
    assert!(
        env.shoot(bare).await.is_none(),
        "no Shoot for the Runtime without spec"
    );
    run.delete(bare).await;
    let shoot = env
        .shoot(good)
        .await
        .expect("the good Runtime's Shoot stays");
    assert!(shoot.metadata.deletion_timestamp.is_none());
    let since = run.versions_since(good, ready_at).await;
    assert!(
        since.iter().all(|o| is(o, State::Ready)),
        "{:#?}",
        shorts(&since)
    );
    run.finish(&[good]).await;
}

/// A provisioned Runtime whose spec is removed (the CRD allows it) is `Failed` with
/// `Provisioned=False/ConversionErr`, its Shoot kept; deleting it then deletes the Shoot it no
/// longer names (found by the runtime ID), the kubeconfig Secret and the
/// structured-authentication ConfigMap: nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_whose_spec_is_removed_fails_and_its_deletion_leaves_nothing() {
    let env = turn().await;
    let name = "f-specgone";
    let run = Run::start(&env, &[]).await;
    create(&env, "aws.yaml", name, |o| {
        o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
    })
    .await;
    run.ready(name, 0).await;
    let config_maps = garden_config_maps(&env).await;
    let secrets = secrets(&env).await;
    assert!(
        config_maps
            .get_opt(&structured_auth_config_map(name))
            .await
            .unwrap()
            .is_some()
    );
    assert!(secrets.get_opt(&secret_name(name)).await.unwrap().is_some());
    let remove = json!([{"op": "remove", "path": "/spec"}]);
    env.runtimes()
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
        )
        .await
        .expect("remove the spec");
    let conversion = row("Provisioned", "ConversionErr");
    run.version(name, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    let shoot = env.shoot(name).await.expect("the Shoot is kept");
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "the Shoot is kept"
    );
    run.delete(name).await;
    assert!(env.shoot(name).await.is_none(), "no Shoot left");
    assert!(
        secrets.get_opt(&secret_name(name)).await.unwrap().is_none(),
        "no kubeconfig Secret left"
    );
    assert!(
        config_maps
            .get_opt(&structured_auth_config_map(name))
            .await
            .unwrap()
            .is_none(),
        "no structured-authentication ConfigMap left"
    );
    run.finish(&[]).await;
}

/// Deleting a Runtime without spec never deletes a Shoot another Runtime names, even one that
/// carries the same runtime ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_runtime_without_spec_spares_the_shoot_another_runtime_names() {
    let env = turn().await;
    let (name, bare) = ("f-spared", "f-spared-nospec");
    let run = Run::start(&env, &[]).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    create_without_spec(&env, bare, name).await;
    let conversion = row("Provisioned", "ConversionErr");
    run.version(bare, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    run.delete(bare).await;
    let shoot = env.shoot(name).await.expect("the other Runtime's Shoot");
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "not being deleted: {:?}",
        shoot.metadata
    );
    let since = run.versions_since(name, ready_at).await;
    assert!(
        since.iter().all(|o| is(o, State::Ready)),
        "{:#?}",
        shorts(&since)
    );
    run.finish(&[name]).await;
}
