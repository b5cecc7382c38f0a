//! Faults of kim's API calls, injected where a client meets them: a tower layer on the kube
//! clients the controller runs with ([`client`]), under the request deadline of
//! `kim::reconciler::deadline` as in production, in front of the real servers of a
//! [`RealEnv`]. Each call the layer sees is either passed on, answered by the layer with an
//! error status (as kube-apiserver answers: a `Status` object), held without an answer (the
//! deadline above cuts it), or passed on with its answer dropped (the server did it, the
//! client never learns). What was injected is in [`Faults::injected`], the layer's own log:
//! tests count faults from there.
//!
//! The controller runs in-process ([`InProcess`]: `kim::reconciler::run_with`) with
//! [`settings`] equal to the binary's as the `manifests/base` ServiceAccount and the garden
//! user, so that the test chooses its clients. The Runtimes of the fault tests are made and
//! followed with the helpers at the end ([`create`], [`record_runtime`], [`version`], …).

use super::real::NS;
use super::real_controller::{LIMIT, RealEnv};
use super::real_shared::{Recorder, Seen, state, summary};
use super::reconciler::CONTROLLER_USER;
use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::{Either, Full};
use kim::reconciler::{Metrics, Settings};
use kim::testing::reconciler::RequestTimeoutLayer;
use kube::ResourceExt as _;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{BoxError, Layer, Service};

/// What the layer does with one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Answered by the layer with this HTTP status and a `Status` body; not sent.
    Status(u16),
    /// Never answered and not sent: only the client's deadline ends it.
    Hang,
    /// Sent and answered by the server, the answer dropped: the client's deadline ends it.
    Lost,
}

impl Fault {
    /// `409`, `hang`, `lost`: how summaries name it.
    pub fn label(self) -> String {
        match self {
            Fault::Status(c) => c.to_string(),
            Fault::Hang => "hang".into(),
            Fault::Lost => "lost".into(),
        }
    }
}

/// One call as a rule sees it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    /// The URI's path (`/apis/<group>/<version>/namespaces/<ns>/<resource>/<name>/<sub>`).
    pub path: String,
    /// A watch (`watch=true` in the query).
    pub watch: bool,
}

impl Call {
    /// The resource (plural) and subresource the path names, for a namespaced or cluster-scoped
    /// path of the core or a named group.
    pub fn resource(&self) -> (Option<&str>, Option<&str>) {
        let parts: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        // api/v1/… or apis/<group>/<version>/…
        let rest = match parts.first() {
            Some(&"api") => &parts[parts.len().min(2)..],
            Some(&"apis") => &parts[parts.len().min(3)..],
            _ => return (None, None),
        };
        let rest = match rest {
            ["namespaces", _, r @ ..] if !r.is_empty() => r,
            r => r,
        };
        (rest.first().copied(), rest.get(2).copied())
    }

    /// Whether the call is `method` on `resource` (plural), subresource `sub` (`None`: the
    /// main resource).
    pub fn is(&self, method: &str, resource: &str, sub: Option<&str>) -> bool {
        self.method.as_str() == method && self.resource() == (Some(resource), sub)
    }
}

/// A fault the test placed: for the calls of `cluster` that `select` chooses, `times` times
/// (`None`: until removed).
struct Rule {
    cluster: &'static str,
    select: Box<dyn Fn(&Call) -> bool + Send + Sync>,
    fault: Fault,
    left: Option<usize>,
}

/// Random faults: a share `rate` of the calls, drawn from a seeded generator.
struct Random {
    rng: XorShift,
    rate: f64,
    /// Non-watch faults injected so far: the first ones take each kind in turn (so that every
    /// kind is met once faults are injected at all), then kinds are drawn.
    drawn: usize,
}

/// One injected fault, as the layer's log keeps it.
#[derive(Clone, Debug)]
pub struct Injected {
    pub cluster: &'static str,
    pub fault: Fault,
    pub call: Call,
}

/// The faults of a test: random ones ([`Faults::random`]) and placed ones ([`Faults::rule`]),
/// for every client built with them ([`client`]), each under a cluster name.
#[derive(Default)]
pub struct Faults {
    random: Mutex<Option<Random>>,
    rules: Mutex<Vec<Rule>>,
    /// Calls seen per cluster.
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// Every call seen, in order.
    seen: Mutex<Vec<(&'static str, Call)>>,
    log: Mutex<Vec<Injected>>,
    /// How many faults are in `log`: what [`Faults::wait_for`] waits on.
    logged: tokio::sync::watch::Sender<usize>,
}

/// The kinds of a non-watch random fault, in the order the first ones take, with their share
/// of the draws: 409 30 %, 429 25 %, 500 30 %, hang 10 %, lost 5 %.
const KINDS: [(Fault, f64); 5] = [
    (Fault::Status(409), 0.30),
    (Fault::Status(429), 0.25),
    (Fault::Status(500), 0.30),
    (Fault::Hang, 0.10),
    (Fault::Lost, 0.05),
];

impl Faults {
    /// No fault yet.
    pub fn new() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// From now on, a share `rate` of all calls fails, decided by a xorshift generator seeded
    /// with `seed`: a watch with 429 or 500 (half each), any other call as [`KINDS`] says
    /// (the first five faults one of each kind). Which call gets which fault depends on the
    /// order of the calls, so on scheduling.
    pub fn random(&self, seed: u64, rate: f64) {
        *self.random.lock().unwrap() = Some(Random {
            rng: XorShift::new(seed),
            rate,
            drawn: 0,
        });
    }

    /// Places `fault` on the calls of `cluster` that `select` chooses, `times` times (`None`:
    /// until [`Faults::off`]).
    pub fn rule(
        &self,
        cluster: &'static str,
        fault: Fault,
        times: Option<usize>,
        select: impl Fn(&Call) -> bool + Send + Sync + 'static,
    ) {
        self.rules.lock().unwrap().push(Rule {
            cluster,
            select: Box::new(select),
            fault,
            left: times,
        });
    }

    /// Removes the placed faults ([`Faults::rule`]); random ones go on.
    pub fn clear_rules(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// No more faults: random ones stop and placed ones are removed.
    pub fn off(&self) {
        *self.random.lock().unwrap() = None;
        self.rules.lock().unwrap().clear();
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (at most [`LIMIT`]) until `f` holds of the faults injected so far; panics with
    /// `what` and the summary.
    pub async fn wait_for(&self, what: &str, f: impl Fn(&[Injected]) -> bool) {
        let mut rx = self.logged.subscribe();
        let waited =
            tokio::time::timeout(LIMIT, rx.wait_for(|_| f(&self.log.lock().unwrap()))).await;
        if !matches!(waited, Ok(Ok(_))) {
            panic!("{what}: not within {LIMIT:?}; faults: {}", self.summary());
        }
    }

    /// How many calls of `cluster` seen so far `f` selects (faulted or not).
    pub fn calls_where(&self, cluster: &str, f: impl Fn(&Call) -> bool) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, call)| *c == cluster && f(call))
            .count()
    }

    /// How many faults were injected into `cluster`'s calls with `fault`.
    pub fn count(&self, cluster: &str, fault: Fault) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|i| i.cluster == cluster && i.fault == fault)
            .count()
    }

    /// Calls seen and faults injected, per cluster and kind.
    pub fn summary(&self) -> String {
        let calls = self.calls.lock().unwrap().clone();
        let log = self.log.lock().unwrap();
        calls
            .iter()
            .map(|(cluster, n)| {
                let mut kinds: BTreeMap<Fault, usize> = BTreeMap::new();
                for i in log.iter().filter(|i| i.cluster == *cluster) {
                    *kinds.entry(i.fault).or_default() += 1;
                }
                let total: usize = kinds.values().sum();
                let kinds: Vec<String> = kinds
                    .iter()
                    .map(|(f, n)| format!("{}: {n}", f.label()))
                    .collect();
                format!(
                    "{cluster}: {total} of {n} calls ({:.1} %) [{}]",
                    100.0 * total as f64 / (*n).max(1) as f64,
                    kinds.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The fault for `call` of `cluster`, if any, logged.
    fn decide(&self, cluster: &'static str, call: &Call) -> Option<Fault> {
        *self.calls.lock().unwrap().entry(cluster).or_default() += 1;
        self.seen.lock().unwrap().push((cluster, call.clone()));
        let placed = {
            let mut rules = self.rules.lock().unwrap();
            let hit = rules
                .iter_mut()
                .find(|r| r.cluster == cluster && r.left != Some(0) && (r.select)(call));
            hit.map(|r| {
                if let Some(n) = r.left.as_mut() {
                    *n -= 1;
                }
                r.fault
            })
        };
        let fault = placed.or_else(|| {
            let mut random = self.random.lock().unwrap();
            let r = random.as_mut()?;
            if r.rng.next_f64() >= r.rate {
                return None;
            }
            let x = r.rng.next_f64();
            if call.watch {
                return Some(Fault::Status(if x < 0.5 { 429 } else { 500 }));
            }
            let fault = match KINDS.get(r.drawn) {
                Some((f, _)) => *f,
                None => {
                    let mut acc = 0.0;
                    KINDS
                        .iter()
                        .find(|(_, share)| {
                            acc += share;
                            x < acc
                        })
                        .map_or(Fault::Lost, |(f, _)| *f)
                }
            };
            r.drawn += 1;
            Some(fault)
        })?;
        self.log.lock().unwrap().push(Injected {
            cluster,
            fault,
            call: call.clone(),
        });
        self.logged.send_modify(|n| *n += 1);
        Some(fault)
    }
}

/// A kube client from `config` whose calls meet `faults` as cluster `cluster`, under the
/// request deadline `timeout` of kim's clients (outermost: a hung or lost call fails with it).
/// kube's own retry of 429/503/504 is off, so that every fault reaches the controller.
pub fn client(
    mut config: kube::Config,
    faults: &Arc<Faults>,
    cluster: &'static str,
    timeout: Duration,
) -> kube::Client {
    config.default_retry = false;
    kube::client::ClientBuilder::try_from(config)
        .expect("a client builder")
        .with_layer(&FaultLayer {
            faults: faults.clone(),
            cluster,
        })
        .with_layer(&RequestTimeoutLayer::new(timeout))
        .build()
}

/// The tower layer of [`FaultService`].
#[derive(Clone)]
pub struct FaultLayer {
    faults: Arc<Faults>,
    cluster: &'static str,
}

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            faults: self.faults.clone(),
            cluster: self.cluster,
        }
    }
}

/// A kube client service that injects the faults of [`Faults`].
#[derive(Clone)]
pub struct FaultService<S> {
    inner: S,
    faults: Arc<Faults>,
    cluster: &'static str,
}

impl<S, B> Service<Request<kube::client::Body>> for FaultService<S>
where
    S: Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Either<B, Full<Bytes>>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let call = Call {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
            watch: request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1")),
        };
        match self.faults.decide(self.cluster, &call) {
            None => {
                let answer = self.inner.call(request);
                async move { Ok(answer.await.map_err(Into::into)?.map(Either::Left)) }.boxed()
            }
            Some(Fault::Status(code)) => {
                futures::future::ready(Ok(status_answer(code).map(Either::Right))).boxed()
            }
            Some(Fault::Hang) => futures::future::pending().boxed(),
            Some(Fault::Lost) => {
                let answer = self.inner.call(request);
                async move {
                    let _ = answer.await;
                    futures::future::pending().await
                }
                .boxed()
            }
        }
    }
}

/// An error answer as kube-apiserver gives it: status `code` and a `Status` object.
fn status_answer(code: u16) -> Response<Full<Bytes>> {
    let reason = match code {
        403 => "Forbidden",
        409 => "Conflict",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("injected fault ({code})"),
        "reason": reason, "code": code,
    });
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("an error answer")
}

/// xorshift64*: reproducible draws from a seed.
pub struct XorShift(u64);

impl XorShift {
    /// A generator seeded with `seed` (0 taken as 1).
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ---- the controller in-process ----

/// A `kube::Config` from kubeconfig YAML.
async fn config_of(yaml: &str) -> kube::Config {
    let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube config")
}

/// The control cluster as the controller's ServiceAccount.
pub async fn kcp_config(env: &RealEnv) -> kube::Config {
    config_of(&env.stack.cp.kubeconfig_with_token(&env.token)).await
}

/// The garden as [`super::real_controller::GARDEN_USER`].
pub async fn garden_config(env: &RealEnv) -> kube::Config {
    config_of(&env.stack.cp.kubeconfig(&env.garden_user)).await
}

/// The settings `kim controller` runs with on `env` (its converter configuration, namespace,
/// user, the built-in status policy; no leader election), with clients `kcp` and `garden`.
pub fn settings(env: &RealEnv, kcp: kube::Client, garden: kube::Client) -> Settings {
    let config = kim::reconciler::load_config(&env.config, None).expect("the configuration");
    let mut s = Settings::new(kcp, garden, config, kim::status::Policy::builtin());
    s.namespace = NS.to_string();
    s.user = CONTROLLER_USER.to_string();
    s.metrics = Arc::new(Metrics::new());
    s
}

/// [`settings`] with clients of the control cluster (`kcp`) and Gardener (`garden`) whose
/// calls meet `faults`, under the request deadline `timeout`.
pub async fn faulty_settings(env: &RealEnv, faults: &Arc<Faults>, timeout: Duration) -> Settings {
    let kcp = client(kcp_config(env).await, faults, "kcp", timeout);
    let garden = client(garden_config(env).await, faults, "garden", timeout);
    settings(env, kcp, garden)
}

/// `kim::reconciler::run_with` on a task of the test.
pub struct InProcess {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub metrics: Arc<Metrics>,
}

impl InProcess {
    /// Starts the controller with `settings`.
    pub fn start(settings: Settings) -> InProcess {
        let metrics = settings.metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(kim::reconciler::run_with(settings, async move {
            let _ = rx.await;
        }));
        InProcess {
            stop: Some(tx),
            task,
            metrics,
        }
    }

    /// Whether the controller's task has ended (it must not before [`InProcess::stop`]).
    pub fn finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the controller (its shutdown signal) and waits (at most 30 s) until it returns.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match tokio::time::timeout(Duration::from_secs(30), &mut self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => panic!("the controller failed: {e:#}"),
            Ok(Err(e)) => panic!("the controller's task: {e}"),
            Err(_) => panic!("the controller did not stop within 30 s"),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- the Runtimes of the fault tests and their histories ----

/// A watch of Runtime `name` alone.
pub async fn record_runtime(env: &RealEnv, name: &str) -> Recorder<DynamicObject> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    Recorder::start(env.runtimes().await, config).await
}

/// The versions of a Runtime's history with a status.
pub fn with_status(h: &[Seen<DynamicObject>]) -> Vec<&DynamicObject> {
    h.iter()
        .filter_map(Seen::applied)
        .filter(|o| o.data.get("status").is_some_and(|s| !s.is_null()))
        .collect()
}

/// Deletes Runtime `name` as the admin and waits until `runtimes` saw it gone (the controller
/// released it).
pub async fn delete(env: &RealEnv, runtimes: &Recorder<DynamicObject>, name: &str) {
    env.runtimes()
        .await
        .delete(name, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Runtime {name}: {e}"));
    runtimes
        .wait_for(
            &format!("Runtime {name} gone"),
            |h| {
                h.iter()
                    .any(|s| matches!(s, Seen::Deleted(o) if o.name_any() == name))
                    .then_some(())
            },
            String::new,
        )
        .await;
}

/// Creates `samples/runtimes/<file>` as `name` (Shoot name and runtime ID `name`, the
/// fixtures' binding of its provider), after `edit`; as the admin, no status.
pub async fn create(
    env: &RealEnv,
    file: &str,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) {
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

/// The newest version of each Runtime in a history, by name (deleted ones left out).
pub fn latest(h: &[Seen<DynamicObject>]) -> BTreeMap<String, &DynamicObject> {
    let mut out = BTreeMap::new();
    for s in h {
        match s {
            Seen::Applied(o) => {
                out.insert(o.name_any(), o);
            }
            Seen::Deleted(o) => {
                out.remove(&o.name_any());
            }
        }
    }
    out
}

/// The states of the newest versions, counted, for a failure message.
pub fn state_counts(h: &[Seen<DynamicObject>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for o in latest(h).values() {
        *counts
            .entry(state(o).unwrap_or("-").to_string())
            .or_default() += 1;
    }
    counts
}

/// Waits until `runtimes` delivered a version of Runtime `name` for which `f` holds.
pub async fn version(
    runtimes: &Recorder<DynamicObject>,
    name: &str,
    what: &str,
    f: impl Fn(&DynamicObject) -> bool,
) {
    runtimes
        .wait_for(
            &format!("{name} {what}"),
            |h| {
                h.iter()
                    .filter_map(Seen::applied)
                    .any(|o| o.name_any() == name && f(o))
                    .then_some(())
            },
            || {
                runtimes
                    .since(0)
                    .iter()
                    .filter_map(Seen::applied)
                    .map(summary)
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
        .await
}

/// The label of the administrators' bindings kim makes in a runtime cluster.
pub const BINDING_LABEL: &str = "reconciler.kyma-project.io/managed-by";

/// Force-deletes the Runtimes (named `af-…`) an earlier fault test left behind, its controller
/// gone: the reset of a shared environment's turn.
pub async fn remove_left_runtimes(env: &RealEnv) {
    let left = env
        .runtimes()
        .await
        .list(&kube::api::ListParams::default())
        .await
        .expect("the Runtimes");
    for rt in left
        .items
        .iter()
        .filter(|r| r.name_any().starts_with("af-"))
    {
        env.force_delete(&rt.name_any()).await;
    }
}
