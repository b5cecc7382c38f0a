//! Helpers of the reconciler tests: three in-memory API servers (control cluster, Gardener,
//! runtime cluster) reached over real HTTP, the simulated Gardener, the real kube-runtime
//! Controller of `kim::reconciler`, a status-model hook on every `runtimes/status` write, and
//! waits that read the control cluster's history.
//!
//! # Waiting
//!
//! A Runtime passes through states (Pending with a False condition, an intermediate
//! `shootLastOperation`) that a later write overtakes within milliseconds. The waits here
//! ([`Env::wait`], [`Env::step_until`], [`Env::wait_with`]) therefore never sample the current
//! Runtimes: their check sees the Runtimes as they were after each change the control cluster
//! committed ([`Seen`], replayed from the server's [`testenv::Journal`]), so a state that
//! lasted one write is seen. Each wait reads on from the point of the history where the
//! previous wait of the same [`Env`] was satisfied (the first from the start): a test's waits
//! read the history in order, like a watch, and a state reached between an action and the wait
//! that follows it is not missed, nor one from before the previous wait taken for a new one
//! ("Ready again" is a later `Ready`). What a check reads through
//! [`Seen::env`] (Shoots, Secrets, Events, metrics, request counts) is the current value and
//! must be something that stays once reached (an object that exists until the test deletes it,
//! a count compared with `>=`).
#![allow(dead_code)]

use kim::api::Runtime;
use kim::reconciler::{LeaderElection, Metrics, Settings};
use kim::status::{Facts, Policy};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::gardener::{GardenerConfig, GardenerSim};
use testenv::{AdmissionDecision, EventType, Gvr, Journal, ServerConfig, ServerHandle, UserInfo};

/// Namespace of the Runtimes.
pub const NS: &str = "kcp-system";
/// The Gardener project namespace of `docs/config.example.yaml` (project `kyma-dev`).
pub const GARDEN_NS: &str = "garden-kyma-dev";
/// The controller's user (the default allowed writer).
pub const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";
const CONTROLLER_TOKEN: &str = "kim-controller-token";
const SHOOT_ADMIN_TOKEN: &str = "shoot-admin-token";
/// The files of `samples/runtimes`, in order.
pub const SAMPLE_FILES: [&str; 6] = [
    "aws-minimal.yaml",
    "aws-trial.yaml",
    "aws.yaml",
    "azure-fremium.yaml",
    "azure.yaml",
    "infrastructuremanager_v1_runtime.yaml",
];
/// Generous timeout of every wait.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A condition as recorded: (type, status, reason).
pub type Cond = (String, String, String);

/// One status write seen by the control cluster's admission hook.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// Runtime name.
    pub name: String,
    /// `status.state`.
    pub state: String,
    /// Conditions in order.
    pub conditions: Vec<Cond>,
    /// `shootLastOperation` (type, state), if any.
    pub last_op: Option<(String, String)>,
    /// `provisioningCompleted`.
    pub completed: bool,
    /// The whole status written.
    pub status: Value,
}

impl Write {
    /// `(state, [type status reason …])` in a compact form for comparisons.
    pub fn short(&self) -> String {
        let conds: Vec<String> = self
            .conditions
            .iter()
            .map(|(t, s, r)| format!("{t}={s}/{r}"))
            .collect();
        let op = self
            .last_op
            .as_ref()
            .map(|(t, s)| format!(" op={t}/{s}"))
            .unwrap_or_default();
        let done = if self.completed { " completed" } else { "" };
        format!("{} [{}]{op}{done}", self.state, conds.join(", "))
    }
}

/// Test knobs.
#[derive(Clone)]
pub struct Options {
    /// Resync period of the controller.
    pub resync: Duration,
    /// Gardener retry delay.
    pub gardener_retry_delay: Duration,
    /// Steps of a simulated Gardener operation.
    pub steps: u32,
    /// Leader election (Lease name) for the first controller.
    pub leader_election: bool,
    /// Start a controller at once.
    pub start_controller: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            resync: Duration::from_secs(600),
            gardener_retry_delay: Duration::from_millis(200),
            steps: 3,
            leader_election: false,
            start_controller: true,
        }
    }
}

/// A running controller.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
}

impl Running {
    /// Asks it to stop and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let r = tokio::time::timeout(TIMEOUT, &mut self.task)
            .await
            .expect("controller stops in time");
        r.expect("controller task").expect("controller result");
    }

    /// Whether its task has ended (returned or panicked) without being asked to stop.
    pub fn task_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Kills it abruptly: the task is aborted wherever it is (in-flight reconciles and API
    /// calls are dropped mid-way, nothing is shut down gracefully), as when the process is
    /// killed.
    pub async fn abort(mut self) {
        self.task.abort();
        let joined = (&mut self.task).await;
        if let Err(e) = &joined {
            assert!(e.is_cancelled(), "controller task failed: {e}");
        }
        drop(self.stop.take());
    }
}

/// The three clusters, the simulated Gardener and the controller(s).
pub struct Env {
    /// Control cluster (Runtimes, Secrets, Events, Lease).
    pub kcp: ServerHandle,
    /// Gardener cluster (Shoots).
    pub garden: ServerHandle,
    /// The runtime cluster every admin kubeconfig points at.
    pub runtime: ServerHandle,
    /// The simulated Gardener, stepped by the test.
    pub sim: GardenerSim,
    /// Denials and repairs the status model found on status writes (must stay empty).
    pub findings: Arc<Mutex<Vec<String>>>,
    /// Every status write, in order.
    pub writes: Arc<Mutex<Vec<Write>>>,
    /// Every change the control cluster committed since the start (what the waits read).
    pub journal: Journal,
    /// The journal replayed up to where the last wait was satisfied (where the next starts).
    cursor: Mutex<Replay>,
    /// The first controller.
    pub controller: Option<Running>,
    /// Options used.
    pub options: Options,
}

/// `CARGO_MANIFEST_DIR`.
pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shared Runtime samples.
pub fn samples_dir() -> PathBuf {
    manifest_dir().join("samples/runtimes")
}

/// A Runtime sample by file name.
pub fn sample(file: &str) -> Runtime {
    let text = std::fs::read_to_string(samples_dir().join(file)).expect("sample readable");
    serde_saphyr::from_str(&text).expect("sample parses as a Runtime")
}

/// The example converter configuration.
pub fn config() -> kim::gardener::Config {
    kim::reconciler::load_config(&manifest_dir().join("docs/config.example.yaml"), None)
        .expect("example config loads")
}

fn record(
    findings: &Arc<Mutex<Vec<String>>>,
    writes: &Arc<Mutex<Vec<Write>>>,
    policy: &Policy,
    req: &testenv::AdmissionRequest,
) -> AdmissionDecision {
    if req.gvr != Gvr::runtimes() || req.subresource.as_deref() != Some("status") {
        return AdmissionDecision::Allow;
    }
    let Some(new) = req.object.as_ref() else {
        return AdmissionDecision::Allow;
    };
    let facts = Facts {
        user: req.user.username.clone(),
        groups: req.user.groups.clone(),
        dry_run: req.dry_run,
        now: chrono::Utc::now(),
    };
    let decision = kim::status::evaluate(policy, req.old_object.as_ref(), new, &facts);
    let status = new.get("status").cloned().unwrap_or(Value::Null);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let conditions = status["conditions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| (s(&c["type"]), s(&c["status"]), s(&c["reason"])))
                .collect()
        })
        .unwrap_or_default();
    let last_op = status
        .get("shootLastOperation")
        .map(|o| (s(&o["type"]), s(&o["state"])));
    writes.lock().unwrap().push(Write {
        name: req.name.clone(),
        state: s(&status["state"]),
        conditions,
        last_op,
        completed: status["provisioningCompleted"] == Value::Bool(true),
        status: status.clone(),
    });
    if !decision.violations.allowed() {
        findings.lock().unwrap().push(format!(
            "DENIED write of {}: {}",
            req.name,
            decision.violations.denial_message()
        ));
        return AdmissionDecision::Deny {
            code: decision.violations.denial_code(),
            message: decision.violations.denial_message(),
        };
    }
    if !decision.patch.0.is_empty() {
        findings.lock().unwrap().push(format!(
            "write of {} needed defaulting: {}",
            req.name,
            serde_json::to_string(&decision.patch).unwrap_or_default()
        ));
    }
    AdmissionDecision::Allow
}

impl Env {
    /// Starts the three servers, the simulated Gardener and (by default) a controller.
    pub async fn start() -> Env {
        Env::start_with(Options::default()).await
    }

    /// As [`Env::start`] without a controller (the test starts its own, or runs kim's parts).
    pub async fn without_controller() -> Env {
        Env::start_with(Options {
            start_controller: false,
            ..Options::default()
        })
        .await
    }

    /// As [`Env::start`] with options.
    pub async fn start_with(options: Options) -> Env {
        let _ = rustls::crypto::ring::default_provider().install_default();
        crate::support::logs::init();
        let kcp = testenv::start(
            ServerConfig::default()
                .name("kcp")
                .user(CONTROLLER_TOKEN, UserInfo::new(CONTROLLER_USER, &[])),
        )
        .await
        .expect("kcp server");
        let garden = testenv::start(ServerConfig::default().name("garden"))
            .await
            .expect("garden server");
        let runtime = testenv::start(ServerConfig::default().name("runtime").user(
            SHOOT_ADMIN_TOKEN,
            UserInfo::new("shoot-admin", &["system:masters"]),
        ))
        .await
        .expect("runtime server");
        let sim = GardenerSim::new(
            &garden,
            GardenerConfig {
                steps: options.steps,
                ..GardenerConfig::default()
            },
        );
        let kubeconfig = runtime.kubeconfig_yaml(Some(SHOOT_ADMIN_TOKEN));
        garden.set_admin_kubeconfig(move |_| kubeconfig.clone());
        let journal = kcp.journal();
        let findings = Arc::new(Mutex::new(Vec::new()));
        let writes = Arc::new(Mutex::new(Vec::new()));
        {
            let (f, w) = (findings.clone(), writes.clone());
            let policy = Policy::builtin();
            kcp.set_admission(move |req| record(&f, &w, &policy, req));
        }
        let mut env = Env {
            kcp,
            garden,
            runtime,
            sim,
            findings,
            writes,
            journal,
            cursor: Mutex::new(Replay::default()),
            controller: None,
            options: options.clone(),
        };
        if options.start_controller {
            let mut settings = env.settings();
            if options.leader_election {
                settings.leader_election = Some(env.leader_election("a"));
            }
            env.controller = Some(env.spawn(settings));
        }
        env
    }

    /// Controller settings for this environment (fresh metrics).
    pub fn settings(&self) -> Settings {
        let mut s = Settings::new(
            self.kcp.client_as(Some(CONTROLLER_TOKEN)),
            self.garden.client(),
            config(),
            Policy::builtin(),
        );
        s.namespace = NS.to_string();
        s.user = CONTROLLER_USER.to_string();
        s.resync = self.options.resync;
        s.backoff_min = Duration::from_millis(50);
        s.backoff_max = Duration::from_secs(1);
        s.gardener_retry_delay = self.options.gardener_retry_delay;
        s.runtime_timeout = Duration::from_secs(5);
        s.metrics = Arc::new(Metrics::new());
        s
    }

    /// A `kube::Config` of the control cluster as the controller's user (to build clients with
    /// other timeouts or retries than [`Env::settings`]).
    pub fn controller_kube_config(&self) -> kube::Config {
        self.kcp.kube_config(Some(CONTROLLER_TOKEN))
    }

    /// A kubeconfig (YAML) of the control cluster as the controller's user, for running the
    /// `kim` binary against this environment.
    pub fn controller_kubeconfig_yaml(&self) -> String {
        self.kcp.kubeconfig_yaml(Some(CONTROLLER_TOKEN))
    }

    /// `kim controller` as a process against this environment: kubeconfig files in `dir` for
    /// the control cluster (as the controller's user) and Gardener, the example configuration,
    /// [`testenv::process::kim_controller_args`] with `leader_elect`, then `extra`;
    /// `RUST_LOG=rust_log`.
    pub fn controller_process(
        &self,
        dir: &Path,
        leader_elect: bool,
        extra: &[&str],
        rust_log: &str,
    ) -> testenv::process::Process {
        let kcp = dir.join("kcp.kubeconfig");
        let garden = dir.join("garden.kubeconfig");
        std::fs::write(&kcp, self.controller_kubeconfig_yaml()).unwrap();
        std::fs::write(&garden, self.garden.kubeconfig_yaml(None)).unwrap();
        let config = manifest_dir().join("docs/config.example.yaml");
        let args = testenv::process::kim_controller_args(&kcp, &garden, &config, NS, leader_elect);
        testenv::process::Process::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_kim"))
                .args(args)
                .args(extra)
                .env("RUST_LOG", rust_log),
        )
        .expect("spawn kim controller")
    }

    /// One runtime cluster per Runtime (by Shoot name, each admin token `admin-token-<shoot>`);
    /// the Gardener's `adminkubeconfig` returns a kubeconfig for the Shoot's own cluster (other
    /// Shoots get [`Env::runtime`]), so that Runtimes provisioned side by side do not share
    /// ClusterRoleBindings.
    pub async fn runtime_clusters(&self, rts: &[Runtime]) -> HashMap<String, ServerHandle> {
        let mut clusters = HashMap::new();
        let mut kubeconfigs = HashMap::new();
        for rt in rts {
            let shoot = rt.spec.shoot.name.clone();
            let token = format!("admin-token-{shoot}");
            let server = testenv::start(
                ServerConfig::default()
                    .name(&shoot)
                    .user(&token, UserInfo::new("shoot-admin", &["system:masters"])),
            )
            .await
            .expect("runtime cluster");
            kubeconfigs.insert(shoot.clone(), server.kubeconfig_yaml(Some(&token)));
            clusters.insert(shoot, server);
        }
        let fallback = self.runtime.kubeconfig_yaml(None);
        self.garden.set_admin_kubeconfig(move |req| {
            kubeconfigs
                .get(&req.name)
                .cloned()
                .unwrap_or_else(|| fallback.clone())
        });
        clusters
    }

    /// Leader election on Lease `kim-controller` in `kim-system` with a short duration.
    pub fn leader_election(&self, identity: &str) -> LeaderElection {
        LeaderElection {
            lease_name: "kim-controller".into(),
            namespace: "kim-system".into(),
            identity: identity.into(),
            duration: Duration::from_secs(3),
            grace: Duration::from_secs(1),
        }
    }

    /// Runs a controller with `settings` in the background.
    pub fn spawn(&self, settings: Settings) -> Running {
        let metrics = settings.metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(kim::reconciler::run_with(settings, async move {
            let _ = rx.await;
        }));
        Running {
            stop: Some(tx),
            task,
            metrics,
        }
    }

    /// The first controller's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.controller
            .as_ref()
            .expect("controller")
            .metrics
            .clone()
    }

    /// Runtimes API of the control cluster (as an administrator, not the controller).
    pub fn runtimes(&self) -> Api<Runtime> {
        Api::namespaced(self.kcp.client(), NS)
    }

    /// Creates a Runtime.
    pub async fn create(&self, rt: &Runtime) -> Runtime {
        self.runtimes()
            .create(&PostParams::default(), rt)
            .await
            .expect("create Runtime")
    }

    /// Changes a Runtime's spec/metadata (read, modify, replace; retried on conflicts).
    pub async fn edit(&self, name: &str, f: impl Fn(&mut Runtime)) -> Runtime {
        let api = self.runtimes();
        for _ in 0..20 {
            let mut rt = api.get(name).await.expect("get Runtime");
            f(&mut rt);
            match api.replace(name, &PostParams::default(), &rt).await {
                Ok(r) => return r,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => panic!("replace Runtime {name}: {e}"),
            }
        }
        panic!("replace Runtime {name}: too many conflicts")
    }

    /// Deletes a Runtime.
    pub async fn delete(&self, name: &str) {
        self.runtimes()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete Runtime");
    }

    /// The stored Runtime (JSON), if any.
    pub fn runtime_json(&self, name: &str) -> Option<Value> {
        self.kcp.get(&Gvr::runtimes(), Some(NS), name)
    }

    /// The stored Shoot (JSON), if any.
    pub fn shoot(&self, name: &str) -> Option<Value> {
        self.garden.get(&Gvr::shoots(), Some(GARDEN_NS), name)
    }

    /// `status.state` of a Runtime.
    pub fn state(&self, name: &str) -> Option<String> {
        self.runtime_json(name).and_then(|r| {
            r.pointer("/status/state")
                .and_then(Value::as_str)
                .map(String::from)
        })
    }

    /// The (status, reason, message) of a Runtime's condition.
    pub fn condition(&self, name: &str, ctype: &str) -> Option<(String, String, String)> {
        let rt = self.runtime_json(name)?;
        let conds = rt.pointer("/status/conditions")?.as_array()?;
        let c = conds.iter().find(|c| c["type"] == ctype)?;
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        Some((s("status"), s("reason"), s("message")))
    }

    /// Waits until `check` holds for the Runtimes as they were at some point since the previous
    /// wait (see [Waiting](self)); panics after [`TIMEOUT`] with `what` and the status writes.
    pub async fn wait(&self, what: &str, check: impl FnMut(&Seen) -> bool) {
        self.wait_with(what, TIMEOUT, check, String::new).await;
    }

    /// Waits until Runtime `name` was in `state` with condition `ctype` = (status, reason) in
    /// one write, at some point since the previous wait.
    pub async fn wait_condition(
        &self,
        name: &str,
        state: &str,
        ctype: &str,
        status: &str,
        reason: &str,
    ) {
        let what = format!("{name}: {state} with {ctype}={status}/{reason}");
        self.wait(&what, |s| {
            s.state(name) == Some(state)
                && s.condition(name, ctype)
                    .is_some_and(|(st, r, _)| st == status && r == reason)
        })
        .await;
    }

    /// Waits until Runtime `name` was `Ready` at some point since the previous wait.
    pub async fn wait_ready(&self, name: &str) {
        self.wait(&format!("{name} Ready"), |s| s.state(name) == Some("Ready"))
            .await;
    }

    /// As [`Env::wait`], stepping the simulated Gardener every 20 ms while `check` does not
    /// hold.
    pub async fn step_until(&self, what: &str, check: impl FnMut(&Seen) -> bool) {
        let what = format!("stepping Gardener until {what}");
        let pause = Duration::from_millis(20);
        self.rounds(
            &what,
            TIMEOUT,
            || {
                self.sim.step();
            },
            pause,
            check,
            String::new,
        )
        .await;
    }

    /// The wait behind [`Env::wait`] with a time limit and a report for the panic message
    /// (`report()` is added to `what` and the status writes). Returns how long it took.
    pub async fn wait_with(
        &self,
        what: &str,
        limit: Duration,
        check: impl FnMut(&Seen) -> bool,
        report: impl Fn() -> String,
    ) -> Duration {
        let what = format!("waiting for {what}");
        let pause = Duration::from_millis(10);
        self.rounds(&what, limit, || {}, pause, check, report).await
    }

    /// Evaluates `check` on the Runtimes as they were where the previous wait was satisfied and
    /// after each change committed since, in order, until it holds (and leaves the cursor
    /// there); between rounds calls `step` and waits until the journal grows or `pause` has
    /// passed (for what `check` reads outside the Runtimes).
    async fn rounds(
        &self,
        what: &str,
        limit: Duration,
        mut step: impl FnMut(),
        pause: Duration,
        mut check: impl FnMut(&Seen) -> bool,
        report: impl Fn() -> String,
    ) -> Duration {
        let start = Instant::now();
        let mut replay = self.cursor.lock().unwrap().clone();
        loop {
            if replay.holds(self, &mut check) {
                *self.cursor.lock().unwrap() = replay;
                return start.elapsed();
            }
            if start.elapsed() > limit {
                let writes: Vec<String> = self.writes().iter().map(Write::short).collect();
                panic!(
                    "timed out after {limit:?} {what}\n{}\nstatus writes:\n  {}\nfindings: {:?}",
                    report(),
                    writes.join("\n  "),
                    self.findings.lock().unwrap()
                );
            }
            step();
            tokio::select! {
                _ = self.journal.grown(replay.pos) => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Every status write so far.
    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    /// Status writes of Runtime `name` so far.
    pub fn writes_of(&self, name: &str) -> Vec<Write> {
        self.writes()
            .into_iter()
            .filter(|w| w.name == name)
            .collect()
    }

    /// Asserts the status model found nothing on any write and the controller denied none.
    pub fn assert_model_clean(&self) {
        let f = self.findings.lock().unwrap().clone();
        assert!(f.is_empty(), "status model findings: {f:#?}");
        if let Some(c) = &self.controller {
            assert_eq!(c.metrics.status_denials(), 0, "controller-side denials");
        }
    }

    /// Stops the first controller.
    pub async fn stop(&mut self) {
        if let Some(c) = self.controller.take() {
            c.stop().await;
        }
    }
}

/// Short forms of `writes`.
pub fn shorts(writes: &[Write]) -> Vec<String> {
    writes.iter().map(Write::short).collect()
}

/// `Type=Status/Reason` for expected sequences.
pub fn c(t: &str, s: &str, r: &str) -> String {
    format!("{t}={s}/{r}")
}

/// One expected write in [`Write::short`] form.
pub fn w(state: &str, conds: &[String], op: Option<(&str, &str)>, completed: bool) -> String {
    let op = op.map(|(t, s)| format!(" op={t}/{s}")).unwrap_or_default();
    let done = if completed { " completed" } else { "" };
    format!("{state} [{}]{op}{done}", conds.join(", "))
}

/// The Runtimes of the control cluster at one point of its history, as a wait's check sees
/// them (see [Waiting](self)); everything else through [`Seen::env`].
pub struct Seen<'a> {
    /// The environment, for what is not a Runtime (read as it is now).
    pub env: &'a Env,
    runtimes: &'a BTreeMap<String, Value>,
}

impl Seen<'_> {
    /// Runtime `name` (JSON) at this point, if it existed.
    pub fn runtime_json(&self, name: &str) -> Option<&Value> {
        self.runtimes.get(name)
    }

    /// Its `status.state`.
    pub fn state(&self, name: &str) -> Option<&str> {
        self.runtime_json(name)?.pointer("/status/state")?.as_str()
    }

    /// The (status, reason, message) of its condition `ctype`.
    pub fn condition(&self, name: &str, ctype: &str) -> Option<(String, String, String)> {
        let conds = self
            .runtime_json(name)?
            .pointer("/status/conditions")?
            .as_array()?;
        let c = conds.iter().find(|c| c["type"] == ctype)?;
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        Some((s("status"), s("reason"), s("message")))
    }

    /// Its `status.shootLastOperation` (type, state).
    pub fn last_op(&self, name: &str) -> Option<(String, String)> {
        let op = self
            .runtime_json(name)?
            .pointer("/status/shootLastOperation")?;
        let s = |k: &str| op[k].as_str().unwrap_or_default().to_string();
        Some((s("type"), s("state")))
    }

    /// The names of the Runtimes that existed at this point.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.runtimes.keys().map(String::as_str)
    }
}

/// A replay of the control cluster's journal: the Runtimes of [`NS`] after its first `pos`
/// changes.
#[derive(Clone, Default)]
struct Replay {
    pos: usize,
    runtimes: BTreeMap<String, Value>,
}

impl Replay {
    fn apply(&mut self, change: &testenv::Change) {
        self.pos += 1;
        if change.gvr != Gvr::runtimes() || change.namespace() != Some(NS) {
            return;
        }
        let name = change.name().to_string();
        match change.kind {
            EventType::Deleted => {
                self.runtimes.remove(&name);
            }
            EventType::Added | EventType::Modified => {
                self.runtimes.insert(name, change.object.clone());
            }
        }
    }

    /// Whether `check` holds at `pos` or after any change committed since (stops at the first
    /// where it does).
    fn holds(&mut self, env: &Env, check: &mut impl FnMut(&Seen) -> bool) -> bool {
        let seen = |runtimes: &BTreeMap<String, Value>, check: &mut dyn FnMut(&Seen) -> bool| {
            check(&Seen { env, runtimes })
        };
        if seen(&self.runtimes, check) {
            return true;
        }
        for change in env.journal.since(self.pos) {
            self.apply(&change);
            if seen(&self.runtimes, check) {
                return true;
            }
        }
        false
    }
}
