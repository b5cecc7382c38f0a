//! What the tests of `kim controller` on the real servers (`real_failures`, `real_adversarial`,
//! `real_api_faults`, `real_deadlines_and_secrets`, `real_ops`) share: one [`RealEnv`] handed
//! from test to test ([`SharedEnv`]), a watch that keeps every version it delivers ([`Recorder`]), one test's
//! controller with a watch of the Runtimes started before it ([`Run`]), and the readers of the
//! status the tests expect ([`row`], [`short`], [`w`]).

use super::real::NS;
use super::real_controller::*;
use super::reconciler::GARDEN_NS;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kim::status::{CondStatus, State};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use testenv::gardenlet::Operation;
use testenv::process::Process;

// ---- the environment the tests share ----

/// What a module adds to its [`RealEnv`] when it starts (`X`, e.g. a test admission webhook
/// recording writes), run on the environment's own runtime.
pub type Setup<X> = for<'a> fn(&'a RealEnv) -> Pin<Box<dyn Future<Output = X> + Send + 'a>>;

/// One [`RealEnv`] for the tests of one module (a `static` there), with what the module's
/// [`Setup`] added (`X`, [`Turn::extra`]): started by the first test's [`SharedEnv::turn`], used
/// by one test at a time, stopped when the last of the module's `tests` drops its [`Turn`].
pub struct SharedEnv<X: 'static = ()> {
    /// How many tests the module has.
    tests: usize,
    /// The name of the thread the environment's runtime runs on.
    thread: &'static str,
    setup: Setup<X>,
    slot: tokio::sync::Mutex<Slot<X>>,
}

/// The environment, and what it needs to be handed from test to test.
struct Shared<X> {
    /// First fields: dropped before the runtime their tasks run on.
    env: RealEnv,
    extra: X,
    /// The rules of the controller's Role ([`ROLE`]) and of [`GARDEN_ROLE`] as installed
    /// (restored before each test).
    rules: Vec<PolicyRule>,
    garden_rules: Vec<PolicyRule>,
    /// Where the gardenlet (and every task the environment spawned) runs: the tests' own
    /// runtimes end with each test.
    _runtime: tokio::runtime::Runtime,
}

/// The shared environment, once started, and how many tests have finished with it.
struct Slot<X> {
    shared: Option<Arc<Shared<X>>>,
    /// Stops the webhook process and removes the kubeconfig directory when this process exits
    /// without the last test having stopped the environment (a filtered run): its standard
    /// input is a pipe from this process, and it acts on end of file. The control planes stop
    /// the same way on their own.
    watchdog: Option<std::process::Child>,
    finished: usize,
}

/// One test's use of the shared environment: the others wait until it is dropped.
pub struct Turn<X: Send + Sync + 'static = ()> {
    slot: tokio::sync::MutexGuard<'static, Slot<X>>,
    tests: usize,
    shared: Option<Arc<Shared<X>>>,
}

impl<X: Send + Sync> Turn<X> {
    /// What the module's [`Setup`] added to the environment.
    pub fn extra(&self) -> &X {
        &self.shared.as_ref().expect("the environment").extra
    }
}

impl<X: Send + Sync> std::ops::Deref for Turn<X> {
    type Target = RealEnv;
    fn deref(&self) -> &RealEnv {
        &self.shared.as_ref().expect("the environment").env
    }
}

impl<X: Send + Sync> Drop for Turn<X> {
    fn drop(&mut self) {
        let mine = self.shared.take();
        self.slot.finished += 1;
        if self.slot.finished < self.tests {
            return;
        }
        // The last test: stop everything (the watchdog first, so that it cannot signal a
        // process id that has been reused).
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

impl SharedEnv {
    /// The environment of a module with `tests` tests, its runtime on a thread named `thread`;
    /// nothing starts before the first [`SharedEnv::turn`].
    pub const fn new(tests: usize, thread: &'static str) -> SharedEnv {
        SharedEnv::with_setup(tests, thread, no_setup)
    }
}

fn no_setup(_: &RealEnv) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(async {})
}

impl<X: Send + Sync + 'static> SharedEnv<X> {
    /// [`SharedEnv::new`] with `setup` run once the environment has started.
    pub const fn with_setup(tests: usize, thread: &'static str, setup: Setup<X>) -> SharedEnv<X> {
        SharedEnv {
            tests,
            thread,
            setup,
            slot: tokio::sync::Mutex::const_new(Slot {
                shared: None,
                watchdog: None,
                finished: 0,
            }),
        }
    }

    /// Waits for the turn of the calling test, starting the environment if no test did yet,
    /// and undoes what an earlier test may have left behind when it failed half-way: the
    /// gardenlet paused, the module's own objects (`reset`), the controller's or the garden
    /// user's Role changed (restored as installed, then waited for until the access the tests
    /// take away is granted again).
    pub async fn turn(&'static self, reset: impl AsyncFnOnce(&RealEnv)) -> Turn<X> {
        let mut slot = self.slot.lock().await;
        let shared = match &slot.shared {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(start_shared(self.thread, self.setup).await);
                slot.watchdog = Some(watchdog(&s.env));
                slot.shared = Some(s.clone());
                s
            }
        };
        let env = &shared.env;
        env.gardenlet.resume();
        reset(env).await;
        if env.role_rules(ROLE).await != shared.rules {
            env.set_role_rules(ROLE, &shared.rules).await;
            env.wait_access(&secret_get(), true).await;
            env.wait_access(&runtime_list(), true).await;
        }
        if env.role_rules((GARDEN_NS, GARDEN_ROLE)).await != shared.garden_rules {
            env.set_role_rules((GARDEN_NS, GARDEN_ROLE), &shared.garden_rules)
                .await;
            wait_garden_access(env, "list", true).await;
        }
        Turn {
            slot,
            tests: self.tests,
            shared: Some(shared),
        }
    }
}

async fn start_shared<X: Send + 'static>(thread: &'static str, setup: Setup<X>) -> Shared<X> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(thread)
            .enable_all()
            .build()
            .expect("a runtime for the shared environment");
        let (env, extra) = runtime.block_on(async {
            let env = RealEnv::start().await;
            let extra = setup(&env).await;
            (env, extra)
        });
        // Not taken (the test is gone): dropped here, off every runtime.
        let _ = tx.send((runtime, env, extra));
    });
    let (runtime, env, extra) = rx
        .await
        .expect("the shared environment did not start (its panic is printed above)");
    let rules = env.role_rules(ROLE).await;
    let garden_rules = env.role_rules((GARDEN_NS, GARDEN_ROLE)).await;
    Shared {
        env,
        extra,
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

/// The controller's `get` of Secrets in the Runtimes' namespace.
pub fn secret_get() -> Access<'static> {
    Access {
        verb: "get",
        group: "",
        resource: "secrets",
        namespace: NS,
        name: None,
    }
}

/// The controller's `list` of Runtimes.
pub fn runtime_list() -> Access<'static> {
    Access {
        verb: "list",
        group: "infrastructuremanager.kyma-project.io",
        resource: "runtimes",
        namespace: NS,
        name: None,
    }
}

/// Waits until the garden user may (`allowed`) or may not `verb` Shoots in the project
/// namespace.
pub async fn wait_garden_access(env: &RealEnv, verb: &str, allowed: bool) {
    let client = env.garden_client().await;
    let access = Access {
        verb,
        group: "core.gardener.cloud",
        resource: "shoots",
        namespace: GARDEN_NS,
        name: None,
    };
    let seen = crate::support::eventually(LIMIT, || {
        let client = client.clone();
        async move { (Kcp::can(&client, &access).await == allowed).then_some(()) }
    })
    .await;
    assert!(
        seen.is_some(),
        "{GARDEN_USER} {verb} shoots: not {} within {LIMIT:?}",
        if allowed { "allowed" } else { "forbidden" }
    );
}

// ---- the status the tests expect ----

/// `(type, reason)` of a row of the status table (`kim::status::table::REASONS`), as the
/// reconciler writes it, from the table's `types` and `reasons`; panics naming the pair when
/// the table has no such row, so that a pair the table does not pair fails here, not as a
/// wait that never ends.
pub fn row(condition_type: &str, reason: &str) -> (&'static str, &'static str) {
    let r = kim::status::table::REASONS
        .iter()
        .find(|r| r.condition_type == condition_type && r.reason == reason)
        .unwrap_or_else(|| panic!("the status table has no {condition_type}/{reason}"));
    (r.condition_type, r.reason)
}

/// `status.state` of a Runtime.
pub fn state(o: &DynamicObject) -> Option<&str> {
    o.data["status"]["state"].as_str()
}

/// Whether the Runtime's `status.state` is `s`.
pub fn is(o: &DynamicObject, s: State) -> bool {
    state(o) == Some(s.as_str())
}

/// The condition of type `t`, if any (the model allows one per type).
pub fn condition<'a>(o: &'a DynamicObject, t: &str) -> Option<&'a Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// Whether the Runtime has condition `(type, reason)` ([`row`]) with `status`.
pub fn has_condition(o: &DynamicObject, (t, r): (&str, &str), status: CondStatus) -> bool {
    condition(o, t).is_some_and(|c| c["reason"] == r && c["status"] == status.as_str())
}

/// The message of the condition of type `t`; empty if there is none.
pub fn message<'a>(o: &'a DynamicObject, t: &str) -> &'a str {
    condition(o, t)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
}

/// A status as the assertions compare it: state, conditions (`Type=Status/Reason`, in stored
/// order) and Gardener's last operation (`type/state`).
pub fn short(o: &DynamicObject) -> String {
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

/// The expected [`short`] of a write: state `s`, `conditions` as `((type, reason), status)`
/// in stored order, Gardener's last operation `op` as `(type, state)`.
pub fn w(
    s: State,
    conditions: &[((&str, &str), CondStatus)],
    op: Option<(Operation, &str)>,
) -> String {
    let conditions: Vec<String> = conditions
        .iter()
        .map(|((t, r), st)| format!("{t}={}/{r}", st.as_str()))
        .collect();
    let op = op.map_or("-".into(), |(o, st)| format!("{}/{st}", o.as_str()));
    format!("{} [{}] op {op}", s.as_str(), conditions.join(", "))
}

/// A Runtime version as the failure messages show it: name, generation and [`short`].
pub fn summary(o: &DynamicObject) -> String {
    format!(
        "{} gen {:?} {}",
        o.name_any(),
        o.metadata.generation,
        short(o)
    )
}

// ---- watch histories ----

/// One event of a watch, as delivered.
#[derive(Clone, Debug)]
pub enum Seen<K> {
    /// Added, modified, or listed (after the watch had to list again).
    Applied(K),
    Deleted(K),
}

impl<K> Seen<K> {
    /// The object of the event.
    pub fn object(&self) -> &K {
        match self {
            Seen::Applied(o) | Seen::Deleted(o) => o,
        }
    }

    /// The object of an [`Seen::Applied`].
    pub fn applied(&self) -> Option<&K> {
        match self {
            Seen::Applied(o) => Some(o),
            Seen::Deleted(_) => None,
        }
    }
}

/// Every version of the objects one watch delivered, in order (the watch resumes, listing
/// again if it must, after an error: a version passed over meanwhile is missing, the latest
/// is not). The watch stops when this is dropped.
pub struct Recorder<K> {
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
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching `api` and returns once the first list is in; panics if it is not
    /// within [`LIMIT`].
    pub async fn start(api: Api<K>, config: watcher::Config) -> Recorder<K> {
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

    /// How many events were delivered so far (a mark for [`Recorder::since`]).
    pub fn len(&self) -> usize {
        self.seen.borrow().len()
    }

    /// The events delivered from `mark` on.
    pub fn since(&self, mark: usize) -> Vec<Seen<K>> {
        self.seen.borrow()[mark..].to_vec()
    }

    /// Waits (at most [`LIMIT`]) until `f` returns `Some` for the events so far; panics with
    /// `what` and `context()`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        f: impl FnMut(&[Seen<K>]) -> Option<T>,
        context: impl FnOnce() -> String,
    ) -> T {
        self.wait_for_within(LIMIT, what, f, context).await
    }

    /// [`Recorder::wait_for`] with a limit of its own, for a state whose time grows with the
    /// machine's load (many Runtimes under faults).
    pub async fn wait_for_within<T>(
        &self,
        limit: Duration,
        what: &str,
        mut f: impl FnMut(&[Seen<K>]) -> Option<T>,
        context: impl FnOnce() -> String,
    ) -> T {
        let mut rx = self.seen.clone();
        let mut out = None;
        let waited = tokio::time::timeout(
            limit,
            rx.wait_for(|h| {
                out = f(h);
                out.is_some()
            }),
        )
        .await;
        match (waited, out) {
            (Ok(Ok(_)), Some(v)) => v,
            _ => panic!("{what}: not within {limit:?}\n{}", context()),
        }
    }

    /// Waits until the watch has delivered object `name` as it is stored now (a quorum read):
    /// every change made before this call is in the history then.
    pub async fn caught_up(&self, name: &str, context: impl FnOnce() -> String) {
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
pub struct Run<'a> {
    pub env: &'a RealEnv,
    pub controller: Process,
    /// Where the controller serves `/metrics` (`host:port`).
    pub metrics_addr: String,
    pub runtimes: Recorder<DynamicObject>,
    /// The webhook's denials before the controller started.
    denied_before: u64,
}

impl<'a> Run<'a> {
    /// Starts recording the Runtimes, then `kim controller` as deployed.
    pub async fn start(env: &'a RealEnv) -> Run<'a> {
        Run::start_with(env, &[]).await
    }

    /// [`Run::start`] with `extra` flags after the usual ones.
    pub async fn start_with(env: &'a RealEnv, extra: &[&str]) -> Run<'a> {
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

    /// The Runtime versions recorded and the controller's output, for a failure message.
    pub fn context(&self) -> String {
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
    pub async fn version(
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

    /// Waits until Runtime `name` is `Ready` (a version from `mark` on); returns its position.
    pub async fn ready(&self, name: &str, mark: usize) -> (usize, DynamicObject) {
        self.version(name, mark, "Ready", |o| is(o, State::Ready))
            .await
    }

    /// The versions of Runtime `name` recorded from `mark` on, up to its state as stored now.
    pub async fn versions_since(&self, name: &str, mark: usize) -> Vec<DynamicObject> {
        self.runtimes.caught_up(name, || self.context()).await;
        self.runtimes
            .since(mark)
            .iter()
            .filter_map(Seen::applied)
            .filter(|o| o.name_any() == name)
            .cloned()
            .collect()
    }

    /// Asserts that Runtime `name` stayed `Ready` from `mark` on, up to now.
    pub async fn stayed_ready(&self, name: &str, mark: usize) {
        let versions = self.versions_since(name, mark).await;
        let all_ready = versions.iter().all(|o| is(o, State::Ready));
        assert!(
            all_ready,
            "Runtime {name} did not stay Ready: {:#?}",
            versions.iter().map(summary).collect::<Vec<_>>()
        );
    }

    /// Deletes Runtime `name` (as the admin) and waits until it is gone (released by the
    /// controller).
    pub async fn delete(&self, name: &str) {
        let rt = self
            .env
            .runtimes()
            .await
            .get(name)
            .await
            .expect("the Runtime");
        self.delete_version(name, &rt).await;
    }

    /// Deletes Runtime `name`, read as `rt`, and waits until the watch delivers its deletion.
    async fn delete_version(&self, name: &str, rt: &DynamicObject) {
        match self
            .env
            .runtimes()
            .await
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            // Released since it was read (it was being deleted already).
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting Runtime {name}: {e}"),
        }
        let uid = rt.uid().unwrap_or_default();
        self.runtimes
            .wait_for(
                &format!("Runtime {name} gone"),
                |h| {
                    h.iter()
                        .any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_deref() == Some(uid.as_str())))
                        .then_some(())
                },
                || self.context(),
            )
            .await;
    }

    /// A counter (or the sum of a labelled family) of the controller's `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        metric(&self.metrics_addr, name).await
    }

    /// Waits until `f(metric(name))` holds (a counter: it only grows); panics with `what`.
    pub async fn metric_reaches(&self, name: &str, what: &str, f: impl Fn(f64) -> bool) -> f64 {
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

    /// Waits until the reconcile of Runtime `name` that runs now (if any) has ended and the
    /// watch has delivered what it wrote: the test triggers one more (an annotation, no new
    /// generation), which runs after it (kube-runtime runs one reconcile of a Runtime at a
    /// time), and waits for `kim_controller_reconciles_total` to move (it counts a reconcile
    /// when it ends; the test's Runtimes are idle otherwise).
    pub async fn settle(&self, name: &str) {
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

    /// Deletes Runtimes `names` (as the admin; one already gone is not) and waits until they
    /// are gone, and checks that their Shoots are gone; then stops the controller (SIGTERM: it
    /// releases the Lease) and checks that neither the webhook nor the controller's own check
    /// denied any of its status writes.
    pub async fn finish(self, names: &[&str]) {
        let api = self.env.runtimes().await;
        for name in names {
            if let Some(rt) = api.get_opt(name).await.expect("reading a Runtime") {
                self.delete_version(name, &rt).await;
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
    pub async fn stop(mut self, clean: bool) {
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

/// The answers of kim's webhook process on `path` (`/validate`, `/mutate`) with `decision`
/// (`allowed`, `denied`) so far.
pub async fn webhook_count(env: &RealEnv, path: &str, decision: &str) -> u64 {
    env.stack
        .webhook
        .as_ref()
        .expect("the webhook runs")
        .count(path, decision)
        .await
}

/// `kim_controller_status_writes_total` of the controller at `addr`; panics if it does not
/// export it.
pub async fn status_writes(addr: &str) -> u64 {
    let text = scrape(addr).await;
    text.lines()
        .find_map(|l| l.strip_prefix("kim_controller_status_writes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kim_controller_status_writes_total in:\n{text}"))
}

/// The `/metrics` text of the controller at `addr`.
async fn scrape(addr: &str) -> String {
    reqwest::Client::builder()
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
        .expect("the metrics")
}

/// The sum of the samples of metric family `name` (any labels) on `/metrics` at `addr`; 0 if
/// it has none yet.
pub async fn metric(addr: &str, name: &str) -> f64 {
    sum_samples(&scrape(addr).await, name, |_| true)
}

/// The sum of the samples of `name` in the Prometheus text `text` whose label set (`{…}`, or
/// empty) `labels` accepts.
pub fn sum_samples(text: &str, name: &str, labels: impl Fn(&str) -> bool) -> f64 {
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

// ---- the objects around a Runtime ----

/// The kubeconfig Secret of the Runtime with runtime ID `name`.
pub fn secret_name(name: &str) -> String {
    format!("kubeconfig-{name}")
}

/// The Secrets of the Runtimes' namespace, as the admin.
pub async fn secrets(env: &RealEnv) -> Api<Secret> {
    Api::namespaced(env.stack.cp.admin().await, NS)
}
