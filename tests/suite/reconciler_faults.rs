//! `kim controller` under injected API faults, deletions and kills mid-provisioning, client
//! deadlines, and the reconciler side of "no secret material anywhere".
//!
//! Every test runs the real kube-runtime Controller (`kim::reconciler::run_with`, or the `kim`
//! binary) over HTTP against `testenv` servers: the control cluster, Gardener (the simulated
//! Gardener stepped in the background) and **one runtime cluster per Runtime**, so "one binding
//! per administrator" is checked per cluster. Every status write goes through the status-model
//! admission hook of `support::reconciler`: a denial, or a write that would need defaulting,
//! fails the test.
//!
//! # Faults
//!
//! A seeded xorshift RNG decides for every API call of the controller whether it fails — 20 % of
//! them — and how: 409 (30 % of the faults), 429 (25 %), 500 (30 %), a hang the client must time
//! out (10 %), or an answer processed only after the client gave up (5 %). Watches get only 429
//! or 500. The decisions are reproducible from the seed; which call gets which depends on
//! scheduling.
//!
//! kube's default client retries 429/503/504 itself, so the control-cluster and Gardener clients
//! are built here with `default_retry = false` and the production request deadline
//! (`kim::reconciler::deadline::build`, 1 s here): every injected fault reaches the controller.
//! The runtime-cluster clients are the controller's own, with their default retry: a 429 there is
//! retried inside the client (counted as injected all the same).
//!
//! A transient error of a `Ready` Runtime is retried without a status write
//! (`Settings::transient_error_grace`); during provisioning it is written (`Pending` with the
//! step's `False` condition, one write per reconcile pass), so writes per Runtime exceed a clean
//! provisioning's 3 by the errors reported on the way (printed as writes "with a False
//! condition").
//!
//! # Tests
//!
//! - under the faults, N Runtimes (two administrators each, every third on Kubernetes 1.32 and
//!   so with a structured-authentication ConfigMap) all reach `Ready`, never `Failed`, with
//!   exactly one Shoot, kubeconfig Secret and binding per administrator each;
//! - under the same faults, Runtimes deleted right after creation, before their Shoot exists,
//!   while Gardener is `Processing` and after their Secret exists leave nothing behind;
//! - the controller aborted at 8 random points and started again: no duplicates, no step taken
//!   back (each Runtime's status writes only move forward, never `Ready` → `Pending`);
//! - the first status writes lost until Gardener has finished the Shoot: the next pass, which
//!   finds every step done, still writes a transition the model allows and the Runtime gets
//!   `Ready`;
//! - kubeconfigs with a marker, a token and a private key, taken through the error paths, never
//!   reach logs, Events, statuses or `/metrics`;
//! - request deadlines: a reused connection, a hung Gardener call (the Shoot create), a request
//!   held unpolled, an idle watch (`kim::reconciler::deadline`); Event creates answered 500 or
//!   403 are sent again.
//!
//! # Environment
//!
//! - `KIM_FAULTS_N`: Runtimes per test, default 40 (30–50 s for the file in a debug build on 2
//!   shared cores; `KIM_FAULTS_N=100` took 60–150 s).
//! - `KIM_FAULTS_SEED`: seed of the fault and kill-point RNGs (default `0x6b696d2d6661756c`).
//! - `KIM_FAULTS_GRACE_SECONDS`: the controllers' transient-error grace (default 60 s); `0`
//!   writes every transient error of a `Ready` Runtime at once. With the grace a `Ready` →
//!   `Pending` flip fails the test. Measured at N = 40 with three seeds: 3.9–4.2 status writes
//!   per Runtime with the grace, 3.9–4.3 and no flip either without it (a `Ready` Runtime sends
//!   next to no request until its resync: it reads from the watch caches and its administrators
//!   are synced per generation).
//!
//! The fault tests reconcile 32 Runtimes in parallel to keep the run short. Figures are printed
//! with `eprintln!` (`cargo test --test suite reconciler_faults -- --nocapture`).

use crate::support::reconciler::*;
use base64::Engine as _;
use kim::api::Runtime;
use kim::reconciler::Settings;
use kim::testing::reconciler::binding_name;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::{
    AdmissionDecision, FaultAction, FaultRule, Gvr, RequestInfo, ServerConfig, ServerHandle,
    UserInfo, Verb, XorShift,
};

/// Runtimes per test by default; `KIM_FAULTS_N=100` runs the figure (see the header).
const DEFAULT_N: usize = 40;
/// Share of the controller's API calls that fail.
const RATE: f64 = 0.2;
/// Read timeout of the controller's clients in the fault tests.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Runtimes reconciled in parallel in the fault tests.
const CONCURRENCY: u16 = 32;
/// Period of the simulated Gardener's steps (each step reads every Shoot: the main CPU cost of
/// these tests after the runtime-cluster clients, so not too often).
const STEP: Duration = Duration::from_millis(100);
/// Deadline of every wait on all Runtimes: 30 s plus 1 s per Runtime (debug build, 2 shared
/// cores, the other tests of this file running alongside).
fn limit() -> Duration {
    Duration::from_secs(30 + n_runtimes() as u64)
}

fn n_runtimes() -> usize {
    std::env::var("KIM_FAULTS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_N)
}

/// `KIM_FAULTS_GRACE_SECONDS`: `Settings::transient_error_grace` of the fault tests' controllers
/// (default: the production default, 60 s); `0` writes every transient error at once, as before
/// the grace existed.
fn grace() -> Option<Duration> {
    std::env::var("KIM_FAULTS_GRACE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
}

fn seed() -> u64 {
    std::env::var("KIM_FAULTS_SEED")
        .ok()
        .and_then(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(0x6b69_6d2d_6661_756c)
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

/// The random fault injector shared by all servers of a test.
struct Faults {
    rng: Mutex<XorShift>,
    rate: f64,
    on: AtomicBool,
    /// Calls eligible for a fault, per cluster.
    seen: Mutex<BTreeMap<&'static str, u64>>,
    /// Faults injected, per (cluster, kind).
    hits: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl Faults {
    fn new(seed: u64, rate: f64) -> Arc<Faults> {
        Arc::new(Faults {
            rng: Mutex::new(XorShift::new(seed)),
            rate,
            on: AtomicBool::new(true),
            seen: Mutex::new(BTreeMap::new()),
            hits: Mutex::new(BTreeMap::new()),
        })
    }

    /// Injects faults into the calls `server` gets (only those of `user`, if given).
    fn install(self: &Arc<Self>, server: &ServerHandle, cluster: &'static str, user: Option<&str>) {
        let f = self.clone();
        let user = user.map(String::from);
        server.set_fault_fn(move |req| {
            if user.as_ref().is_some_and(|u| *u != req.user.username) {
                return None;
            }
            f.decide(cluster, req)
        });
    }

    fn decide(&self, cluster: &'static str, req: &RequestInfo) -> Option<FaultAction> {
        let verb = req.verb?;
        if !self.on.load(Ordering::SeqCst) {
            return None;
        }
        *self.seen.lock().unwrap().entry(cluster).or_default() += 1;
        let (hit, x) = {
            let mut rng = self.rng.lock().unwrap();
            (rng.next_f64() < self.rate, rng.next_f64())
        };
        if !hit {
            return None;
        }
        let (kind, action) = if verb == Verb::Watch {
            if x < 0.5 {
                ("429", FaultAction::fail(429))
            } else {
                ("500", FaultAction::fail(500))
            }
        } else if x < 0.30 {
            ("409", FaultAction::fail(409))
        } else if x < 0.55 {
            ("429", FaultAction::fail(429))
        } else if x < 0.85 {
            ("500", FaultAction::fail(500))
        } else if x < 0.95 {
            ("hang", FaultAction::Hang)
        } else {
            (
                "late",
                FaultAction::Delay(CLIENT_TIMEOUT + Duration::from_millis(500)),
            )
        };
        *self
            .hits
            .lock()
            .unwrap()
            .entry((cluster, kind))
            .or_default() += 1;
        Some(action)
    }

    fn off(&self) {
        self.on.store(false, Ordering::SeqCst);
    }

    fn total(&self) -> u64 {
        self.hits.lock().unwrap().values().sum()
    }

    fn summary(&self) -> String {
        let seen = self.seen.lock().unwrap().clone();
        let hits = self.hits.lock().unwrap().clone();
        seen.iter()
            .map(|(cluster, calls)| {
                let kinds: Vec<String> = hits
                    .iter()
                    .filter(|((c, _), _)| c == cluster)
                    .map(|((_, k), n)| format!("{k}: {n}"))
                    .collect();
                let total: u64 = hits
                    .iter()
                    .filter(|((c, _), _)| c == cluster)
                    .map(|(_, n)| n)
                    .sum();
                format!(
                    "{cluster}: {total} of {calls} calls ({:.1} %) [{}]",
                    100.0 * total as f64 / (*calls).max(1) as f64,
                    kinds.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

// ---------------------------------------------------------------------------------------------
// Runtimes, runtime clusters, controller settings
// ---------------------------------------------------------------------------------------------

/// `n` Runtimes built from the samples in turn, with unique names, Shoot names and runtime
/// ids, a second administrator each, and Kubernetes 1.32 (structured-authentication ConfigMap)
/// for every third.
fn runtimes(prefix: &str, n: usize) -> Vec<Runtime> {
    (0..n)
        .map(|i| {
            let mut rt = sample(SAMPLE_FILES[i % SAMPLE_FILES.len()]);
            let name = format!("{prefix}-{i:03}");
            rt.metadata.name = Some(name.clone());
            rt.metadata.namespace = Some(NS.to_string());
            let labels = rt.metadata.labels.get_or_insert_with(Default::default);
            labels.insert("kyma-project.io/runtime-id".into(), runtime_id(&name));
            labels.insert("kyma-project.io/shoot-name".into(), name.clone());
            rt.spec.shoot.name = name.clone();
            if i % 3 == 1 {
                rt.spec
                    .shoot
                    .kubernetes
                    .get_or_insert_with(Default::default)
                    .version = Some("1.32.1".into());
            }
            rt.spec
                .security
                .administrators
                .push(format!("owner-{i}@myorg.com"));
            rt
        })
        .collect()
}

fn runtime_id(name: &str) -> String {
    format!("rid-{name}")
}

fn name_of(rt: &Runtime) -> String {
    rt.metadata.name.clone().expect("name")
}

fn secret_of(rt: &Runtime) -> String {
    format!("kubeconfig-{}", runtime_id(&name_of(rt)))
}

/// Controller settings whose clients see every injected fault: no built-in retry, a read
/// timeout for hung calls; a shorter runtime-cluster timeout; more Runtimes in parallel.
fn fault_settings(env: &Env) -> Settings {
    let client = |mut c: kube::Config| {
        c.default_retry = false;
        kim::reconciler::deadline::build(c, CLIENT_TIMEOUT).expect("client")
    };
    let mut s = env.settings();
    s.kcp = client(env.controller_kube_config());
    s.garden = client(env.garden.kube_config(None));
    s.runtime_timeout = CLIENT_TIMEOUT;
    s.concurrency = CONCURRENCY;
    if let Some(grace) = grace() {
        s.transient_error_grace = grace;
    }
    s
}

/// Settings of the restarted controllers: the default clients, more Runtimes in parallel.
fn restart_settings(env: &Env) -> Settings {
    let mut s = env.settings();
    s.concurrency = CONCURRENCY;
    if let Some(grace) = grace() {
        s.transient_error_grace = grace;
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Waiting and checks
// ---------------------------------------------------------------------------------------------

/// Runtime name → `status.state` ("" without one) of every stored Runtime.
fn states(env: &Env) -> BTreeMap<String, String> {
    env.kcp
        .list(&Gvr::runtimes(), Some(NS))
        .iter()
        .map(|r| {
            (
                r["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                r.pointer("/status/state")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Counts per state, and the Runtimes not in `want` (at most 10 listed).
fn state_report(env: &Env, want: &str) -> String {
    let st = states(env);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in st.values() {
        *counts.entry(s.as_str()).or_default() += 1;
    }
    let others: Vec<String> = st
        .iter()
        .filter(|(_, s)| s.as_str() != want)
        .take(10)
        .map(|(n, _)| {
            let writes: Vec<String> = env.writes_of(n).iter().map(Write::short).collect();
            format!("{n}:\n    {}", writes.join("\n    "))
        })
        .collect();
    format!(
        "states: {counts:?}\nfindings: {:?}\nnot {want}:\n  {}",
        env.findings.lock().unwrap(),
        others.join("\n  ")
    )
}

/// Waits until every Runtime is `Ready` and no status write came for 2 s (longer than a
/// client timeout plus a late answer).
async fn settle_ready(env: &Env, n: usize) {
    let mut count = env.writes.lock().unwrap().len();
    let mut since = Instant::now();
    env.wait_with(
        "all Runtimes Ready and no status write for 2 s",
        limit(),
        |s| {
            let now = env.writes.lock().unwrap().len();
            if now != count {
                count = now;
                since = Instant::now();
            }
            all_ready(s, n) && since.elapsed() >= Duration::from_secs(2)
        },
        || state_report(env, "Ready"),
    )
    .await;
}

/// Whether the `n` Runtimes (no more, no fewer) were all `Ready` at this point.
fn all_ready(s: &Seen, n: usize) -> bool {
    s.names().count() == n && s.names().all(|name| s.state(name) == Some("Ready"))
}

/// Whether the `n` Runtimes (no more, no fewer) are all `Ready` now.
fn all_ready_now(env: &Env, n: usize) -> bool {
    let st = states(env);
    st.len() == n && st.values().all(|s| s == "Ready")
}

/// No status write with state `Failed`; nothing the status model denied or had to default.
fn assert_model_clean_and_never_failed(env: &Env, metrics: &[Arc<kim::reconciler::Metrics>]) {
    let failed: Vec<String> = env
        .writes()
        .iter()
        .filter(|w| w.state == "Failed")
        .map(|w| format!("{}: {}", w.name, w.short()))
        .collect();
    assert!(
        failed.is_empty(),
        "status writes with state Failed: {failed:#?}"
    );
    let findings = env.findings.lock().unwrap().clone();
    assert!(findings.is_empty(), "status model findings: {findings:#?}");
    let denied: u64 = metrics.iter().map(|m| m.status_denials()).sum();
    assert_eq!(denied, 0, "writes the controller's own model check denied");
}

/// Exactly one Shoot per Runtime (named after it, annotated with its runtime id, no
/// `generateName`), and nothing else in the Gardener store.
fn assert_one_shoot_each(env: &Env, rts: &[Runtime]) {
    let shoots = env.garden.list(&Gvr::shoots(), None);
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for s in &shoots {
        assert!(
            s["metadata"].get("generateName").is_none(),
            "a Shoot with generateName: {}",
            s["metadata"]
        );
        let name = s["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            s["metadata"]["annotations"]["infrastructuremanager.kyma-project.io/runtime-id"],
            runtime_id(&name).as_str(),
            "Shoot {name} belongs to its Runtime"
        );
        *by_name.entry(name).or_default() += 1;
    }
    let want: BTreeMap<String, usize> =
        rts.iter().map(|r| (r.spec.shoot.name.clone(), 1)).collect();
    assert_eq!(by_name, want, "exactly one Shoot per Runtime");
}

/// Exactly one kubeconfig Secret per Runtime and no other Secret in the namespace.
fn assert_one_secret_each(env: &Env, rts: &[Runtime]) {
    let got: BTreeSet<String> = env
        .kcp
        .list(&Gvr::secrets(), Some(NS))
        .iter()
        .map(|s| {
            s["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let want: BTreeSet<String> = rts.iter().map(secret_of).collect();
    assert_eq!(got, want, "exactly one kubeconfig Secret per Runtime");
}

/// In every runtime cluster: exactly one binding per administrator of its Runtime, nothing else.
fn assert_one_binding_per_admin(clusters: &HashMap<String, ServerHandle>, rts: &[Runtime]) {
    for rt in rts {
        let server = &clusters[&rt.spec.shoot.name];
        let mut got: Vec<(String, String)> = server
            .list(&Gvr::cluster_role_bindings(), None)
            .iter()
            .map(|b| {
                (
                    b["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    b["subjects"][0]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        got.sort();
        let mut want: Vec<(String, String)> = rt
            .spec
            .security
            .administrators
            .iter()
            .map(|a| (binding_name(a), a.clone()))
            .collect();
        want.sort();
        assert_eq!(
            got,
            want,
            "bindings of {}: exactly one per administrator",
            name_of(rt)
        );
    }
}

/// Successful creates of `plural` (main resource) by name, from the request log.
fn creates(server: &ServerHandle, plural: &str) -> usize {
    server.count_requests(|r| r.verb == Some(Verb::Create) && r.is(plural, None) && r.code == 201)
}

/// Ready → not Ready transitions in the status writes: (Runtime, the write after Ready with
/// its conditions' messages).
fn ready_regressions(env: &Env) -> Vec<(String, String)> {
    let mut last: HashMap<String, String> = HashMap::new();
    let mut found = Vec::new();
    for w in env.writes() {
        if let Some(prev) = last.insert(w.name.clone(), w.state.clone())
            && prev == "Ready"
            && w.state != "Ready"
        {
            let messages: Vec<&str> = w.status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["message"].as_str())
                .filter(|m| !m.is_empty())
                .collect();
            found.push((w.name.clone(), format!("{} {messages:?}", w.short())));
        }
    }
    found
}

/// The first `n` requests `server` answered (method, path, query, user, status code), for the
/// report of a stalled run.
fn first_requests(server: &ServerHandle, n: usize) -> String {
    server
        .requests()
        .iter()
        .take(n)
        .map(|r| {
            format!(
                "  {} {}?{} [{}] -> {}",
                r.method, r.path, r.query, r.user, r.code
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn error_counts(metrics: &kim::reconciler::Metrics) -> String {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("kim_controller_reconcile_errors_total{"))
        .map(|l| l.trim_start_matches("kim_controller_reconcile_errors_total"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Item 6: faults
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_reach_ready_under_random_api_faults() {
    let n = n_runtimes();
    let env = Env::without_controller().await;
    let rts = runtimes("flt", n);
    let clusters = env.runtime_clusters(&rts).await;
    let faults = Faults::new(seed(), RATE);
    faults.install(&env.kcp, "kcp", Some(CONTROLLER_USER));
    faults.install(&env.garden, "garden", None);
    for server in clusters.values() {
        faults.install(server, "runtime", None);
    }
    let started = Instant::now();
    let controller = env.spawn(fault_settings(&env));
    let metrics = controller.metrics.clone();
    for rt in &rts {
        env.create(rt).await;
    }
    let stepper = env.sim.run_every(STEP);

    let names: Vec<String> = rts.iter().map(name_of).collect();
    env.wait_with(
        "every Runtime to reach Ready under faults",
        limit(),
        |_| {
            let writes = env.writes.lock().unwrap();
            let ready: HashSet<&str> = writes
                .iter()
                .filter(|w| w.state == "Ready")
                .map(|w| w.name.as_str())
                .collect();
            names.iter().all(|n| ready.contains(n.as_str()))
        },
        || {
            format!(
                "{}\nfaults: {}\ncontroller: {} reconciles, errors {}, finished: {}\nfirst kcp requests:\n{}\nfirst garden requests:\n{}",
                state_report(&env, "Ready"),
                faults.summary(),
                metrics.reconciles(),
                error_counts(&metrics),
                controller.task_finished(),
                first_requests(&env.kcp, 12),
                first_requests(&env.garden, 12),
            )
        },
    )
    .await;
    let reached = started.elapsed();
    env.wait_with(
        "all Runtimes Ready at the same time, faults still on",
        limit(),
        |s| all_ready(s, n),
        || {
            format!(
                "{}\nfaults: {}\ncontroller: {} reconciles, errors {}, finished: {}",
                state_report(&env, "Ready"),
                faults.summary(),
                metrics.reconciles(),
                error_counts(&metrics),
                controller.task_finished(),
            )
        },
    )
    .await;
    let under_faults = started.elapsed();
    faults.off();
    let injected = faults.total();
    let summary = faults.summary();
    // Calls that failed just before the faults were switched off are retried: wait for quiet.
    settle_ready(&env, n).await;
    stepper.abort();
    controller.stop().await;

    assert_model_clean_and_never_failed(&env, std::slice::from_ref(&metrics));
    assert!(all_ready_now(&env, n), "{}", state_report(&env, "Ready"));
    assert_one_shoot_each(&env, &rts);
    assert_one_secret_each(&env, &rts);
    assert_one_binding_per_admin(&clusters, &rts);
    let writes = env.writes().len();
    // Writes with a condition False: the transient errors written during provisioning.
    let error_writes = env
        .writes()
        .iter()
        .filter(|w| w.conditions.iter().any(|(_, s, _)| s == "False"))
        .count();
    let binding_creates: usize = clusters
        .values()
        .map(|s| creates(s, "clusterrolebindings"))
        .sum();
    eprintln!(
        "faults: {n} Runtimes, seed {:#x}, rate {RATE}: every one Ready after {:.1} s, all Ready at once after {:.1} s (total {:.1} s); \
         {injected} faults injected ({summary}); {writes} status writes ({:.1} per Runtime; {error_writes} with a False condition), 0 Failed, 0 denied; \
         {} Ready→Pending regressions (e.g. {:?}); {} reconciles, errors {}; Shoot creates 201: {}, Secret creates 201: {}, binding creates 201: {binding_creates}",
        seed(),
        reached.as_secs_f64(),
        under_faults.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        writes as f64 / n as f64,
        ready_regressions(&env).len(),
        ready_regressions(&env).first(),
        metrics.reconciles(),
        error_counts(&metrics),
        creates(&env.garden, "shoots"),
        creates(&env.kcp, "secrets"),
    );
    if grace().is_none_or(|g| !g.is_zero()) {
        assert_eq!(
            ready_regressions(&env),
            Vec::<(String, String)>::new(),
            "a transient error flipped a Ready Runtime within the transient-error grace"
        );
    }
    let hits = faults.hits.lock().unwrap().clone();
    for cluster in ["kcp", "garden", "runtime"] {
        let n: u64 = hits
            .iter()
            .filter(|((c, _), _)| *c == cluster)
            .map(|(_, n)| n)
            .sum();
        assert!(n > 0, "faults were injected into the {cluster} cluster");
    }
    for kind in ["409", "429", "500", "hang", "late"] {
        let n: u64 = hits
            .iter()
            .filter(|((_, k), _)| *k == kind)
            .map(|(_, n)| n)
            .sum();
        assert!(n > 0, "{kind} faults were injected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_deleted_mid_provisioning_leave_nothing_behind() {
    let n = n_runtimes().max(4);
    let env = Env::without_controller().await;
    let rts = runtimes("del", n);
    let clusters = env.runtime_clusters(&rts).await;
    let faults = Faults::new(seed() ^ 0xde1e7e, RATE);
    faults.install(&env.kcp, "kcp", Some(CONTROLLER_USER));
    faults.install(&env.garden, "garden", None);
    for server in clusters.values() {
        faults.install(server, "runtime", None);
    }
    // Four groups, by index: 0 deleted right after creation; 1 deleted before its Shoot exists
    // (Shoot creation held by Gardener's admission); 2 deleted while Gardener is Processing;
    // 3 deleted after the kubeconfig Secret exists (bindings held in its runtime cluster).
    let group = |g: usize| -> Vec<String> {
        rts.iter()
            .enumerate()
            .filter(|(i, _)| i % 4 == g)
            .map(|(_, r)| name_of(r))
            .collect()
    };
    let (g0, g1, g2, g3) = (group(0), group(1), group(2), group(3));
    let held: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(g1.iter().cloned().collect()));
    {
        let held = held.clone();
        env.garden.set_admission(move |req| {
            if req.gvr == Gvr::shoots()
                && req.verb == Verb::Create
                && req.subresource.is_none()
                && held.lock().unwrap().contains(&req.name)
            {
                AdmissionDecision::Deny {
                    code: 500,
                    message: "held by the test: Shoot creation blocked".into(),
                }
            } else {
                AdmissionDecision::Allow
            }
        });
    }
    for name in &g3 {
        clusters[name]
            .add_fault(FaultRule::new(FaultAction::fail(500)).resource("clusterrolebindings"));
    }
    let started = Instant::now();
    let controller = env.spawn(fault_settings(&env));
    let metrics = controller.metrics.clone();
    for rt in &rts {
        env.create(rt).await;
        let name = name_of(rt);
        if g0.contains(&name) {
            env.delete(&name).await;
        }
    }
    let report = || format!("{}\nfaults: {}", state_report(&env, ""), faults.summary());

    // Group 1: Pending with Provisioned=False/GardenerErr, finalizer on, no Shoot.
    env.wait_with(
        "group 1 blocked before its Shoot, groups 2 and 3 with a Shoot",
        limit(),
        |s| {
            g1.iter().all(|n| {
                s.condition(n, "Provisioned")
                    .is_some_and(|(st, r, _)| st == "False" && r == "GardenerErr")
            }) && g2.iter().chain(&g3).all(|n| env.shoot(n).is_some())
        },
        report,
    )
    .await;
    for name in &g1 {
        assert!(env.shoot(name).is_none(), "{name}: no Shoot yet");
        let rt = env.runtime_json(name).expect("Runtime");
        assert_eq!(
            rt["metadata"]["finalizers"][0],
            kim::status::table::FINALIZER
        );
        env.delete(name).await;
    }
    held.lock().unwrap().clear();

    // Group 2: one Gardener step → Create Processing; deleted once the status shows it.
    env.sim.step();
    env.wait_with(
        "group 2 with Create/Processing in its status",
        limit(),
        |s| {
            g2.iter().all(|n| {
                s.runtime_json(n).is_some_and(|r| {
                    r.pointer("/status/shootLastOperation/type") == Some(&Value::from("Create"))
                        && r.pointer("/status/shootLastOperation/state")
                            == Some(&Value::from("Processing"))
                })
            })
        },
        report,
    )
    .await;
    for name in &g2 {
        env.delete(name).await;
    }

    // Group 3: Gardener finishes; deleted once the kubeconfig Secret exists.
    let stepper = env.sim.run_every(STEP);
    let by_name: HashMap<String, &Runtime> = rts.iter().map(|r| (name_of(r), r)).collect();
    env.wait_with(
        "group 3 with its kubeconfig Secret",
        limit(),
        |_| {
            g3.iter().all(|n| {
                env.kcp
                    .get(&Gvr::secrets(), Some(NS), &secret_of(by_name[n]))
                    .is_some()
            })
        },
        report,
    )
    .await;
    for name in &g3 {
        assert_ne!(
            env.state(name).as_deref(),
            Some("Ready"),
            "{name} held before Ready"
        );
        env.delete(name).await;
    }

    let gone = env
        .wait_with(
            "every Runtime gone",
            limit(),
            |s| s.names().next().is_none(),
            report,
        )
        .await;
    let total = started.elapsed();
    faults.off();
    let summary = faults.summary();
    stepper.abort();
    controller.stop().await;

    assert!(
        env.garden.list(&Gvr::shoots(), None).is_empty(),
        "no Shoot left"
    );
    assert!(
        env.kcp.list(&Gvr::secrets(), Some(NS)).is_empty(),
        "no Secret left: {:?}",
        env.kcp.list(&Gvr::secrets(), Some(NS))
    );
    assert!(
        env.garden
            .list(&Gvr::new("", "v1", "configmaps"), Some(GARDEN_NS))
            .is_empty(),
        "no structured-authentication ConfigMap left"
    );
    assert_model_clean_and_never_failed(&env, std::slice::from_ref(&metrics));
    // Runtimes of a group whose Shoot existed (the controller asked to delete it).
    let had_shoot = |g: &[String]| -> usize {
        g.iter()
            .filter(|n| {
                env.garden.count_requests(|r| {
                    r.verb == Some(Verb::Delete)
                        && r.is("shoots", None)
                        && r.name.as_deref() == Some(n.as_str())
                }) > 0
            })
            .count()
    };
    let shoots_created = creates(&env.garden, "shoots");
    let config_maps = env.garden.count_requests(|r| {
        r.is("configmaps", None) && r.verb == Some(Verb::Patch) && r.code < 300
    });
    eprintln!(
        "deletions: {n} Runtimes deleted mid-provisioning (seed {:#x}; {} right after creation, of which {} got a Shoot; {} before their Shoot existed; {} while Gardener was Processing; {} after their Secret existed): \
         all gone {:.1} s after the last deletion, {:.1} s in all; {shoots_created} Shoots created and deleted, {config_maps} ConfigMap applies; nothing left; \
         faults injected: {} ({summary})",
        seed() ^ 0xde1e7e,
        g0.len(),
        had_shoot(&g0),
        g1.len(),
        g2.len(),
        g3.len(),
        gone.as_secs_f64(),
        total.as_secs_f64(),
        faults.total(),
    );
    assert!(
        shoots_created <= n,
        "at most one Shoot created per Runtime: {shoots_created} creates for {n} Runtimes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_killed_and_restarted_mid_flow_resumes_without_duplicates() {
    const KILLS: usize = 8;
    let n = n_runtimes();
    let env = Env::without_controller().await;
    let rts = runtimes("rst", n);
    let clusters = env.runtime_clusters(&rts).await;
    let mut rng = XorShift::new(seed() ^ 0x0c0ffee);
    let stepper = env.sim.run_every(STEP);
    let started = Instant::now();
    let mut metrics = Vec::new();
    let mut kill_points = Vec::new();
    let batch = n.div_ceil(KILLS);
    for k in 0..KILLS {
        let controller = env.spawn(restart_settings(&env));
        metrics.push(controller.metrics.clone());
        for rt in rts.iter().skip(k * batch).take(batch) {
            env.create(rt).await;
        }
        // The kill point: a random moment 100–800 ms into this controller's life.
        let life = Duration::from_millis(100 + (rng.next_f64() * 700.0) as u64);
        tokio::time::sleep(life).await;
        let st = states(&env);
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for s in st.values() {
            *counts.entry(s.clone()).or_default() += 1;
        }
        kill_points.push(format!(
            "{}ms/{} reconciles/{:?}",
            life.as_millis(),
            controller.metrics.reconciles(),
            counts
        ));
        controller.abort().await;
    }
    let last = env.spawn(restart_settings(&env));
    metrics.push(last.metrics.clone());
    let ready = env
        .wait_with(
            "all Runtimes Ready after the restarts",
            limit(),
            |s| all_ready(s, n),
            || state_report(&env, "Ready"),
        )
        .await;
    stepper.abort();
    last.stop().await;

    assert_model_clean_and_never_failed(&env, &metrics);
    assert_one_shoot_each(&env, &rts);
    assert_one_secret_each(&env, &rts);
    assert_one_binding_per_admin(&clusters, &rts);
    // No step is repeated as if new: a restarted controller goes on from the status its
    // predecessor wrote, so each Runtime's writes only move forward (accepted, Gardener's
    // operation running, Shoot done, Ready), and none goes back from Ready (no fault is injected
    // here, so nothing may flip it).
    for rt in &rts {
        let name = name_of(rt);
        let writes = env.writes_of(&name);
        let ranks: Vec<u8> = writes.iter().map(progress).collect();
        assert!(
            ranks.windows(2).all(|p| p[0] <= p[1]),
            "{name}: a step taken back after a restart (progress {ranks:?}): {:#?}",
            shorts(&writes)
        );
    }
    assert_eq!(
        ready_regressions(&env),
        Vec::<(String, String)>::new(),
        "Ready → not Ready without any fault injected"
    );
    let writes = env.writes().len();
    eprintln!(
        "restarts: {n} Runtimes, {KILLS} abrupt kills (seed {:#x}; life/reconciles/states at each kill: {}); all Ready {:.1} s after the last restart, {:.1} s in all; \
         {writes} status writes ({:.1} per Runtime), 0 denied; Shoot creates 201: {}, Secret creates 201: {}; reconciles per controller: {:?}; \
         Ready→Pending regressions (no fault injected here): {:?}",
        seed() ^ 0x0c0ffee,
        kill_points.join(", "),
        ready.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        writes as f64 / n as f64,
        creates(&env.garden, "shoots"),
        creates(&env.kcp, "secrets"),
        metrics.iter().map(|m| m.reconciles()).collect::<Vec<_>>(),
        ready_regressions(&env),
    );
}

/// A pass whose status write is lost (here: refused with 500 until Gardener has finished the
/// Shoot; in production a timeout or a controller killed between the Shoot create and the write)
/// leaves a Runtime without status whose Shoot exists. The next pass finds the Shoot done and
/// completes every step at once; its one status write must still be a transition the model
/// allows (none → `Pending` → `Ready`, never none → `Ready`), or the Runtime is stuck with every
/// write denied. The faults of `runtimes_reach_ready_under_random_api_faults` hit this by chance
/// (a status write failing, then the retry after Gardener finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_first_status_write_does_not_leave_the_runtime_stuck() {
    let env = Env::start().await;
    let rts = runtimes("lost", 1);
    let name = name_of(&rts[0]);
    let _clusters = env.runtime_clusters(&rts).await;
    env.kcp.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Update)
            .resource("runtimes")
            .subresource("status")
            .user(CONTROLLER_USER),
    );
    env.create(&rts[0]).await;
    let refused = || {
        env.kcp.count_requests(|r| {
            r.verb == Some(Verb::Update) && r.is("runtimes", Some("status")) && r.code == 500
        })
    };
    env.wait_with(
        "the Shoot created and the status write refused",
        TIMEOUT,
        |_| env.shoot(&name).is_some() && refused() >= 1,
        || format!("{} status writes refused", refused()),
    )
    .await;
    env.step_until("the Shoot's Create operation succeeded", |s| {
        s.env.shoot(&name).is_some_and(|shoot| {
            shoot.pointer("/status/lastOperation/state") == Some(&Value::from("Succeeded"))
        })
    })
    .await;
    assert_eq!(env.state(&name), None, "no status written yet");
    env.kcp.clear_faults();
    let metrics = env.metrics();
    env.wait_with(
        "Ready",
        TIMEOUT,
        |s| s.state(&name) == Some("Ready"),
        || {
            format!(
                "{} status writes refused; {} denied by the controller's model check",
                refused(),
                metrics.status_denials()
            )
        },
    )
    .await;
    env.assert_model_clean();
    let writes = env.writes_of(&name);
    assert_eq!(
        writes.first().map(|w| w.state.as_str()),
        Some("Pending"),
        "the first status is Pending: {:#?}",
        shorts(&writes)
    );
}

/// How far a status write has got in a provisioning: 0 accepted (`Provisioned` `Initialised`),
/// 1 Shoot created (`Provisioned=Unknown/Pending`, no Gardener operation yet), 2 Gardener's
/// operation copied, 3 `Provisioned=True`, 4 `Ready`.
fn progress(w: &Write) -> u8 {
    let provisioned = w
        .conditions
        .iter()
        .find(|(t, _, _)| t == "Provisioned")
        .map(|(_, s, r)| (s.as_str(), r.as_str()));
    if w.state == "Ready" {
        4
    } else if matches!(provisioned, Some(("True", _))) {
        3
    } else if w.last_op.is_some() {
        2
    } else if matches!(provisioned, Some((_, "Initialised")) | None) {
        0
    } else {
        1
    }
}

// ---------------------------------------------------------------------------------------------
// Timeouts of the controller's clients
// ---------------------------------------------------------------------------------------------

/// A runtime-cluster call answered well within `Settings::runtime_timeout` succeeds, also on
/// a pooled connection that sat idle before it: the timeout counts from the request, not from
/// when the connection went idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_cluster_calls_get_their_whole_timeout_on_a_reused_connection() {
    let env = Env::start_with(Options {
        start_controller: false,
        resync: Duration::from_millis(500),
        ..Options::default()
    })
    .await;
    let rts = runtimes("idle", 1);
    let name = name_of(&rts[0]);
    let clusters = env.runtime_clusters(&rts).await;
    let cluster = &clusters[&name];
    let mut settings = env.settings();
    settings.runtime_timeout = Duration::from_secs(1);
    let controller = env.spawn(settings);
    env.create(&rts[0]).await;
    env.step_until("Ready", |s| s.state(&name) == Some("Ready"))
        .await;
    let ready_writes = env.writes_of(&name).len();
    // From now on every binding list is answered after 0.6 s: within the 1 s timeout. A no-op
    // resync every 0.5 s lists the bindings again on the pooled connection.
    cluster.add_fault(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(600)))
            .verb(Verb::List)
            .resource("clusterrolebindings"),
    );
    let lists = |s: &ServerHandle| {
        s.count_requests(|r| r.verb == Some(Verb::List) && r.is("clusterrolebindings", None))
    };
    let before = lists(cluster);
    env.wait_with(
        "six more binding lists",
        Duration::from_secs(30),
        |_| lists(cluster) >= before + 6,
        || format!("{} lists", lists(cluster) - before),
    )
    .await;
    controller.stop().await;
    let after: Vec<String> = env.writes_of(&name)[ready_writes..]
        .iter()
        .map(|w| {
            let messages: Vec<&str> = w.status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["message"].as_str())
                .filter(|m| !m.is_empty())
                .collect();
            format!("{} {messages:?}", w.short())
        })
        .collect();
    eprintln!(
        "reused connection: {} binding lists answered in 0.6 s each (timeout 1 s), {} status writes after Ready: {after:#?}",
        lists(cluster) - before,
        after.len()
    );
    assert!(
        after.is_empty(),
        "a call answered within its timeout failed, and the Ready Runtime went Pending: {after:#?}"
    );
}

/// `kim controller` (the binary, with the clients it builds itself) gets past a Gardener call
/// that never returns: the call times out, the failure is written, and the Runtime is retried.
/// The hung call is the Shoot create, the first Gardener request of a provisioning (the Shoot is
/// read from the controller's watch cache, so no Shoot GET precedes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_gets_past_a_hung_gardener_call() {
    let env = Env::without_controller().await;
    let rts = runtimes("hang", 1);
    let name = name_of(&rts[0]);
    let _clusters = env.runtime_clusters(&rts).await;
    // The first create of the Shoot never gets an answer (and is never carried out).
    env.garden.add_fault(
        FaultRule::new(FaultAction::Hang)
            .verb(Verb::Create)
            .resource("shoots")
            .main_resource()
            .times(1),
    );
    let mut kim = KimProcess::start(&env, &["--request-timeout-seconds", "2"]);
    let stepper = env.sim.run_every(STEP);
    env.create(&rts[0]).await;
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    while env.state(&name).as_deref() != Some("Ready") && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stepper.abort();
    let ready = env.state(&name).as_deref() == Some("Ready");
    // The hung create is answered only when the server shuts down: not in the log yet.
    let answered = env
        .garden
        .count_requests(|r| r.verb == Some(Verb::Create) && r.is("shoots", None));
    let shoot_gets = env
        .garden
        .count_requests(|r| r.verb == Some(Verb::Get) && r.is("shoots", None));
    let (stdout, stderr) = kim.stop();
    let writes = env.writes_of(&name);
    eprintln!(
        "hung Gardener call: Ready = {ready} after {:.1} s; Shoot creates answered: {answered}, Shoot GETs: {shoot_gets}; writes: {:#?}",
        start.elapsed().as_secs_f64(),
        shorts(&writes)
    );
    assert!(
        ready,
        "the Runtime is stuck behind a Gardener call that never returns (no deadline on the \
         controller's clients)\nwrites: {:#?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        shorts(&writes)
    );
    assert!(
        stdout.contains("request timeout"),
        "the hung call failed with the request deadline:\n{stdout}"
    );
    // The timeout was the create's, reported as such before the retry succeeded.
    let timed_out = writes.iter().any(|w| {
        w.status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Provisioned"
                    && c["status"] == "False"
                    && c["reason"] == "GardenerErr"
                    && c["message"].as_str().is_some_and(|m| {
                        m.contains("creating Shoot") && m.contains("request timeout")
                    })
            })
    });
    assert!(
        timed_out,
        "a Provisioned=False/GardenerErr write names the timed-out Shoot create: {:#?}",
        writes.iter().map(|w| &w.status).collect::<Vec<_>>()
    );
    assert_eq!(answered, 1, "the retried create was answered, once");
    // What this test used to hang, the Shoot GET of every reconcile, is no longer sent: the
    // Shoot comes from the watch cache (a GET only for an update or after a 409 on create).
    assert_eq!(shoot_gets, 0, "no Shoot GET in a provisioning");
    assert_eq!(
        env.garden.list(&Gvr::shoots(), None).len(),
        1,
        "exactly one Shoot"
    );
}

/// A request whose future is held without being polled for longer than the request timeout
/// still gets the whole timeout once it is polled (its clock starts when it is sent), and so
/// does its body, read well after its answer arrived. kube-runtime's Controller holds its
/// watchers' requests like this: after an error from one watcher it stops polling all of them
/// for the trigger backoff (0.8 s and more). Before the fix the clock started when the client
/// service was called, so the request another watcher had made in the same poll ran out unsent
/// during the backoff; its error started the next backoff, during which the first watcher's
/// retry ran out in turn, and so on forever: the stall of
/// `runtimes_reach_ready_under_random_api_faults` (1 kcp call, 1 Gardener call, then none).
///
/// The deadline layer of the controller's clients (`kim::reconciler::client`) runs over a
/// service whose answer and body frames the test hands over itself, so that what happens first
/// is decided by the test, not by how fast a loaded machine answers an HTTP request (the same
/// test over HTTP with a 400 ms deadline failed when the answer took longer under load). The
/// deadline's own firing is ordered against an outer timer of three times the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_unpolled_past_its_timeout_still_gets_its_whole_timeout() {
    use futures::FutureExt as _;
    use http_body_util::BodyExt as _;
    use kim::reconciler::deadline::RequestTimedOut;
    use kim::testing::reconciler::RequestTimeoutLayer;
    use tower::{Layer as _, Service as _};
    const TIMEOUT: Duration = Duration::from_millis(400);
    type Frames = std::pin::Pin<
        Box<
            dyn futures::Stream<
                    Item = Result<http_body::Frame<axum::body::Bytes>, std::convert::Infallible>,
                > + Send,
        >,
    >;
    type Body = http_body_util::StreamBody<Frames>;
    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// The answer of its one call comes when the test sends it.
    struct Answering(Option<tokio::sync::oneshot::Receiver<http::Response<Body>>>);
    impl tower::Service<http::Request<kube::client::Body>> for Answering {
        type Response = http::Response<Body>;
        type Error = BoxError;
        type Future = futures::future::BoxFuture<'static, Result<Self::Response, BoxError>>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), BoxError>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<kube::client::Body>) -> Self::Future {
            let answer = self.0.take().expect("one call");
            async move { Ok(answer.await?) }.boxed()
        }
    }
    /// A body whose frames come from `rx`.
    fn body(rx: tokio::sync::mpsc::Receiver<&'static str>) -> Body {
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            let chunk = rx.recv().await?;
            Some((
                Ok(http_body::Frame::data(axum::body::Bytes::from(chunk))),
                rx,
            ))
        });
        http_body_util::StreamBody::new(Box::pin(frames) as Frames)
    }
    let request = || {
        http::Request::get("/apis/infrastructuremanager.kyma-project.io/v1/runtimes")
            .body(kube::client::Body::empty())
            .expect("request")
    };
    let timed_out =
        |e: &BoxError| e.downcast_ref::<RequestTimedOut>() == Some(&RequestTimedOut(TIMEOUT));

    // Called, then held for three timeouts, then polled: the clock starts at that first poll,
    // and an answer that comes after it, within the timeout, is taken.
    let (answer, answered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(answered)));
    let held = service.call(request());
    tokio::time::sleep(3 * TIMEOUT).await;
    let mut held = std::pin::pin!(held);
    if let Some(early) = held.as_mut().now_or_never() {
        panic!(
            "a request held unpolled failed with its deadline: {:?}",
            early.err()
        );
    }
    let (frames, frames_rx) = tokio::sync::mpsc::channel(4);
    answer
        .send(http::Response::new(body(frames_rx)))
        .ok()
        .expect("the request is waiting");
    let response = held.await.expect("answered after its first poll");

    // Its body, whose frames arrived, read three timeouts later: delivered.
    frames.send("all of it").await.unwrap();
    drop(frames);
    tokio::time::sleep(3 * TIMEOUT).await;
    let read = response.into_body().collect().await;
    match read {
        Ok(b) => assert_eq!(b.to_bytes(), "all of it"),
        Err(e) => panic!("a body read late failed with the deadline: {e}"),
    }

    // The deadline still holds for a request that is polled and never answered, and for a
    // body whose frames never come: each fails with it before an outer timer of three times
    // the timeout runs out.
    let (_never, unanswered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(unanswered)));
    let started = Instant::now();
    let hung = tokio::time::timeout(3 * TIMEOUT, service.call(request())).await;
    let took = started.elapsed();
    let Err(err) = hung.expect("the deadline fires first") else {
        panic!("a hung request was answered");
    };
    assert!(
        timed_out(&err),
        "the hung request failed with the deadline: {err}"
    );
    assert!(
        took >= TIMEOUT,
        "the hung request failed after {took:?} (timeout {TIMEOUT:?})"
    );
    let (answer, answered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(answered)));
    let (_silent, silent_rx) = tokio::sync::mpsc::channel(1);
    answer
        .send(http::Response::new(body(silent_rx)))
        .ok()
        .unwrap();
    let response = service.call(request()).await.expect("answered");
    let read = tokio::time::timeout(3 * TIMEOUT, response.into_body().collect()).await;
    let err = read
        .expect("the deadline fires first")
        .expect_err("a silent body fails");
    assert!(
        timed_out(&err),
        "the silent body failed with the deadline: {err}"
    );
}

/// Waits until the controller of `metrics` has started no reconcile for 1 s (the reconciles a
/// write triggered have settled), counted from its reconcile counter.
async fn no_reconcile_for_a_second(env: &Env, metrics: &kim::reconciler::Metrics, when: &str) {
    let reconciles = || metrics.reconciles();
    let mut last = (reconciles(), Instant::now());
    env.wait_with(
        &format!("no reconcile for 1 s {when}"),
        Duration::from_secs(20),
        |_| {
            let now = reconciles();
            if now != last.0 {
                last = (now, Instant::now());
            }
            last.1.elapsed() >= Duration::from_secs(1)
        },
        || format!("{} reconciles", reconciles()),
    )
    .await;
}

/// Watches that see no event for five request timeouts are not cut by the deadline of the
/// controller's clients (only non-watch answers must be complete within it): neither the
/// Runtime watch nor the Shoot watch is reopened (no new watch or list), and both still deliver
/// an event afterwards (the resync is 10 min, so only a watch can bring the change). A reconcile
/// reads the Shoot from the watch cache, so the reconciles are counted by the controller's
/// metrics, not by Shoot GETs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watches_outlive_the_request_timeout() {
    const DEADLINE: Duration = Duration::from_secs(1);
    let env = Env::without_controller().await;
    let rts = runtimes("watch", 1);
    let name = name_of(&rts[0]);
    let clusters = env.runtime_clusters(&rts).await;
    let mut settings = env.settings();
    settings.kcp = kim::reconciler::deadline::build(env.controller_kube_config(), DEADLINE)
        .expect("kcp client");
    settings.garden =
        kim::reconciler::deadline::build(env.garden.kube_config(None), DEADLINE).expect("client");
    settings.runtime_timeout = DEADLINE;
    let controller = env.spawn(settings);
    env.create(&rts[0]).await;
    env.step_until("Ready", |s| s.state(&name) == Some("Ready"))
        .await;
    let watches = |s: &ServerHandle, plural: &str| {
        s.count_requests(|r| r.verb == Some(Verb::Watch) && r.is(plural, None))
    };
    let lists = |s: &ServerHandle, plural: &str| {
        s.count_requests(|r| r.verb == Some(Verb::List) && r.is(plural, None))
    };
    let counts = || {
        [
            watches(&env.kcp, "runtimes"),
            lists(&env.kcp, "runtimes"),
            watches(&env.garden, "shoots"),
            lists(&env.garden, "shoots"),
        ]
    };
    let metrics = controller.metrics.clone();
    let reconciles = || metrics.reconciles();
    // Let the reconciles that the Ready write and the Secret and Shoot events triggered finish
    // (no reconcile for 1 s), then stay idle: Gardener is not stepped, nothing is written.
    no_reconcile_for_a_second(&env, &metrics, "after Ready").await;
    let before = counts();
    let quiet = reconciles();
    tokio::time::sleep(5 * DEADLINE).await;
    let idle = counts();
    assert_eq!(
        idle, before,
        "watches (and lists) of Runtimes and Shoots [watch, list, watch, list] reopened while idle"
    );
    assert_eq!(reconciles(), quiet, "nothing was reconciled while idle");

    // The Runtime watch still delivers: a new administrator is bound (no resync in 10 min).
    let edited = env
        .edit(&name, |rt| {
            rt.spec
                .security
                .administrators
                .push("late-admin@myorg.com".into())
        })
        .await;
    let generation = Value::from(edited.metadata.generation.expect("generation"));
    let cluster = &clusters[&rt_shoot(&rts[0])];
    let bound = |c: &ServerHandle| {
        c.get(
            &Gvr::cluster_role_bindings(),
            None,
            &binding_name("late-admin@myorg.com"),
        )
        .is_some()
    };
    env.wait_with(
        "the new administrator bound (Runtime watch event)",
        Duration::from_secs(20),
        |_| bound(cluster),
        || shorts(&env.writes_of(&name)).join("\n"),
    )
    .await;
    env.step_until("Ready again, for the edited generation", |s| {
        s.state(&name) == Some("Ready")
            && s.runtime_json(&name).is_some_and(|r| {
                r.pointer("/status/conditions/0/observedGeneration") == Some(&generation)
            })
    })
    .await;
    // The Shoot watch still delivers: an annotation on the Shoot makes the controller reconcile
    // its Runtime. First the reconciles of the update settle (no reconcile for 1 s).
    no_reconcile_for_a_second(&env, &metrics, "after Ready again").await;
    let settled = reconciles();
    env.garden
        .modify(&Gvr::shoots(), Some(GARDEN_NS), &rt_shoot(&rts[0]), |s| {
            s["metadata"]["annotations"]["test.kim/poke"] = Value::from("1");
        })
        .expect("annotate the Shoot");
    env.wait_with(
        "a reconcile caused by the Shoot event",
        Duration::from_secs(20),
        |_| reconciles() > settled,
        || format!("{} reconciles", reconciles()),
    )
    .await;
    let after = counts();
    controller.stop().await;
    eprintln!(
        "idle watches: request deadline {DEADLINE:?}, idle {:?}; [Runtime watches, Runtime lists, Shoot watches, Shoot lists] before {before:?}, after idle {idle:?}, after two events {after:?}",
        5 * DEADLINE
    );
    assert_eq!(
        after, before,
        "the events came over the watches opened before the idle time"
    );
    env.assert_model_clean();
}

fn rt_shoot(rt: &Runtime) -> String {
    rt.spec.shoot.name.clone()
}

// ---------------------------------------------------------------------------------------------
// The `kim` binary
// ---------------------------------------------------------------------------------------------

/// `kim controller` run as a process against the environment ([`Env::controller_process`],
/// JSON logs at `debug`), its stdout and stderr captured.
struct KimProcess {
    process: testenv::process::Process,
    _dir: tempfile::TempDir,
}

impl KimProcess {
    fn start(env: &Env, extra: &[&str]) -> KimProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        KimProcess {
            process: env.controller_process(dir.path(), false, extra, "debug"),
            _dir: dir,
        }
    }

    /// The metrics address it logged at start-up.
    async fn metrics_addr(&mut self) -> std::net::SocketAddr {
        let addr = self.process.logged("metrics_addr", TIMEOUT).await;
        addr.unwrap_or_else(|e| panic!("kim controller: {e}"))
            .parse()
            .expect("metrics address")
    }

    /// SIGTERM, wait (at most 10 s, then SIGKILL); returns (stdout, stderr).
    fn stop(&mut self) -> (String, String) {
        self.process.terminate(Duration::from_secs(10))
    }
}

/// `GET /metrics` over plain HTTP/1.0.
async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    assert!(
        buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200"),
        "{buf}"
    );
    buf
}

// ---------------------------------------------------------------------------------------------
// Item 7: no secret material in logs, events, status messages or metrics
// ---------------------------------------------------------------------------------------------

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig for `url` with a bearer token, a client certificate and key, and `marker` as
/// the context's namespace (a string found nowhere else).
fn secret_kubeconfig(
    url: &str,
    token: &str,
    marker: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: shoot\n  cluster:\n    server: {url}\n\
         contexts:\n- name: shoot\n  context:\n    cluster: shoot\n    user: shoot-admin\n    namespace: {marker}\n\
         current-context: shoot\nusers:\n- name: shoot-admin\n  user:\n    token: {token}\n\
         \x20   client-certificate-data: {}\n    client-key-data: {}\n",
        b64(cert_pem),
        b64(key_pem)
    )
}

/// 32-character pieces of `s` at every 4th position from 0 (base64 stays aligned there): any
/// copy of `s`, whole or cut at a group boundary, contains one of them.
fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    (0..chars.len().saturating_sub(32))
        .step_by(64)
        .map(|i| chars[i..i + 32].iter().collect())
        .collect()
}

/// Four Runtimes whose kubeconfigs carry secret material, each on an error path first:
/// 0: its runtime cluster rejects the token (401) until the test registers it;
/// 1: the kubeconfig Secret cannot be written (500) until the test lifts the fault;
/// 2: the kubeconfig is no valid YAML (stays failing);
/// 3: the client key is no key (PEM of garbage).
struct SecretScenario {
    rts: Vec<Runtime>,
    clusters: HashMap<String, ServerHandle>,
    tokens: Vec<String>,
    /// (what, secret string) that must appear nowhere.
    needles: Vec<(String, String)>,
}

impl SecretScenario {
    async fn new(env: &Env) -> SecretScenario {
        let rts = runtimes("sec", 4);
        let run = format!(
            "{:016x}",
            XorShift::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            )
            .next_u64()
        );
        let certs =
            kim::testing::webhook::devcerts::generate("kim-leak-test", &["localhost"]).unwrap();
        let garbage_key = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            b64(&format!("garbage-private-key-material-{run}-not-a-key"))
        );
        let mut needles: Vec<(String, String)> = Vec::new();
        let mut kubeconfigs = HashMap::new();
        let mut clusters = HashMap::new();
        let mut tokens = Vec::new();
        for (i, rt) in rts.iter().enumerate() {
            let shoot = rt.spec.shoot.name.clone();
            let token = format!("rt-bearer-token-{i}-{run}");
            let marker = format!("kubeconfig-marker-{i}-{run}");
            let server = testenv::start(ServerConfig::default().name(&shoot))
                .await
                .expect("runtime cluster");
            if i != 0 {
                server.add_user(&token, UserInfo::new("shoot-admin", &["system:masters"]));
            }
            let key = if i == 3 { &garbage_key } else { &certs.key_pem };
            let mut kubeconfig =
                secret_kubeconfig(server.url(), &token, &marker, &certs.cert_pem, key);
            if i == 2 {
                kubeconfig.push_str("preferences: {colors: [unterminated\n");
            }
            needles.push((format!("{shoot}: bearer token"), token.clone()));
            needles.push((format!("{shoot}: bearer token, base64"), b64(&token)));
            needles.push((format!("{shoot}: kubeconfig marker"), marker.clone()));
            for line in key
                .lines()
                .filter(|l| !l.starts_with("-----") && l.len() >= 16)
            {
                needles.push((format!("{shoot}: private key line"), line.to_string()));
            }
            for p in pieces(&b64(key)) {
                needles.push((format!("{shoot}: client-key-data"), p));
            }
            for p in pieces(&b64(&kubeconfig)) {
                needles.push((format!("{shoot}: kubeconfig, base64"), p));
            }
            kubeconfigs.insert(shoot.clone(), kubeconfig);
            clusters.insert(shoot, server);
            tokens.push(token);
        }
        env.garden.set_admin_kubeconfig(move |req| {
            kubeconfigs.get(&req.name).cloned().unwrap_or_default()
        });
        SecretScenario {
            rts,
            clusters,
            tokens,
            needles,
        }
    }

    fn name(&self, i: usize) -> String {
        name_of(&self.rts[i])
    }

    /// Runs the Runtimes through their error paths, lifts the first two, waits for Ready, then
    /// deletes everything. Returns the Runtimes as stored before the deletion and the first
    /// one's kubeconfig Secret (where the secret material legitimately is).
    async fn run(&self, env: &Env) -> (Vec<Value>, Value) {
        let limit = Duration::from_secs(40);
        let report = || state_report(env, "Ready");
        let false_cond = |s: &Seen, n: &str, t: &str, r: &str| {
            s.condition(n, t)
                .is_some_and(|(st, reason, _)| st == "False" && reason == r)
        };
        // 1: the Secret cannot be written.
        env.kcp.add_fault(
            FaultRule::new(FaultAction::fail(500))
                .verb(Verb::Create)
                .resource("secrets")
                .user(CONTROLLER_USER),
        );
        env.create(&self.rts[1]).await;
        let n1 = self.name(1);
        env.wait_with(
            "the Secret write failure",
            limit,
            |s| false_cond(s, &n1, "KubeconfigReady", "KubernetesErr"),
            report,
        )
        .await;
        env.kcp.clear_faults();
        // 0, 2, 3.
        for i in [0, 2, 3] {
            env.create(&self.rts[i]).await;
        }
        let (n0, n2, n3) = (self.name(0), self.name(2), self.name(3));
        env.wait_with(
            "the runtime-cluster errors",
            limit,
            |s| {
                false_cond(s, &n0, "Configured", "ConfigurationError")
                    && false_cond(s, &n2, "Configured", "ConfigurationError")
                    && s.runtime_json(&n3).is_some_and(|r| {
                        r["status"]["conditions"]
                            .as_array()
                            .is_some_and(|cs| cs.iter().any(|c| c["status"] == "False"))
                            || r["status"]["state"] == "Ready"
                    })
                    && s.state(&n1) == Some("Ready")
            },
            report,
        )
        .await;
        // 0: the runtime cluster learns the token.
        self.clusters[&n0].add_user(
            &self.tokens[0],
            UserInfo::new("shoot-admin", &["system:masters"]),
        );
        env.wait_with(
            "the first Runtime Ready",
            limit,
            |s| s.state(&n0) == Some("Ready"),
            report,
        )
        .await;
        let snapshot: Vec<Value> = (0..4)
            .filter_map(|i| env.runtime_json(&self.name(i)))
            .collect();
        let secret = env
            .kcp
            .get(&Gvr::secrets(), Some(NS), &secret_of(&self.rts[0]))
            .expect("the first Runtime's kubeconfig Secret");
        for i in 0..4 {
            env.delete(&self.name(i)).await;
        }
        env.wait_with(
            "every Runtime gone",
            limit,
            |s| s.names().next().is_none(),
            report,
        )
        .await;
        (snapshot, secret)
    }

    /// The search works: the needles of the first Runtime's kubeconfig are found in its
    /// kubeconfig Secret.
    fn assert_needles_found_in(&self, secret: &Value) {
        let text = serde_json::to_string(secret).unwrap();
        let shoot = &self.rts[0].spec.shoot.name;
        let found = self
            .needles
            .iter()
            .filter(|(what, n)| what.starts_with(shoot.as_str()) && text.contains(n.as_str()))
            .count();
        assert!(
            found >= 3,
            "the kubeconfig's base64 pieces are found in its Secret ({found})"
        );
    }
}

/// Everything but the logs: all status writes, all condition messages, the stored Runtimes,
/// all Events, and the metrics text.
fn emitted(env: &Env, snapshot: &[Value], metrics: String) -> Vec<(String, String)> {
    let writes: Vec<Value> = env.writes().into_iter().map(|w| w.status).collect();
    let messages: Vec<String> = writes
        .iter()
        .chain(snapshot.iter().map(|r| &r["status"]))
        .flat_map(|s| s["conditions"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["message"].as_str().map(String::from))
        .collect();
    let mut events = env
        .kcp
        .list(&Gvr::new("events.k8s.io", "v1", "events"), None);
    events.extend(env.kcp.list(&Gvr::new("", "v1", "events"), None));
    vec![
        (
            "status writes".into(),
            serde_json::to_string(&writes).unwrap(),
        ),
        ("condition messages".into(), messages.join("\n")),
        (
            "stored Runtimes".into(),
            serde_json::to_string(snapshot).unwrap(),
        ),
        ("events".into(), serde_json::to_string(&events).unwrap()),
        ("metrics".into(), metrics),
    ]
}

/// Asserts that no needle is in any haystack, and that the haystacks hold what they should
/// (the error paths were taken and captured).
fn assert_no_secret_material(haystacks: &[(String, String)], needles: &[(String, String)]) {
    let mut leaks = Vec::new();
    for (where_, text) in haystacks {
        for (what, needle) in needles {
            if let Some(at) = text.find(needle.as_str()) {
                let from = text[..at]
                    .char_indices()
                    .rev()
                    .nth(120)
                    .map_or(0, |(i, _)| i);
                let to = (at + needle.len() + 80).min(text.len());
                let to = (to..=text.len())
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(text.len());
                leaks.push(format!("{what} in {where_}: …{}…", &text[from..to]));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "secret material found:\n{}",
        leaks.join("\n")
    );
    let all = |name: &str| {
        haystacks
            .iter()
            .filter(|(w, _)| w == name)
            .map(|(_, t)| t.as_str())
            .collect::<String>()
    };
    let messages = all("condition messages");
    for expected in ["Unauthorized", "injected fault (500)", "cannot be parsed"] {
        assert!(
            messages.contains(expected),
            "the error path with {expected:?} was captured in the status messages:\n{messages}"
        );
    }
    let events = all("events");
    assert!(
        events.contains("\"Warning\""),
        "Warning events were captured"
    );
    assert!(
        all("metrics").contains("kim_controller_status_writes_total"),
        "the metrics were captured"
    );
}

/// The in-process controller with a tracing subscriber that writes every event (TRACE, all
/// targets, text and JSON) to a buffer; the test runs on one thread so that every task the
/// controller spawns logs there.
#[test]
fn no_secret_material_in_logs_events_status_or_metrics() {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    use tracing_subscriber::layer::SubscriberExt as _;
    let logs = Buffer::default();
    let (text, json) = (logs.clone(), logs.clone());
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::TRACE)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || text.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || json.clone()),
        );
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let env = Env::without_controller().await;
        let scenario = SecretScenario::new(&env).await;
        let controller = env.spawn(env.settings());
        let metrics = controller.metrics.clone();
        let server = kim::reconciler::metrics::serve("127.0.0.1:0".parse().unwrap(), metrics)
            .await
            .unwrap();
        let stepper = env.sim.run_every(STEP);
        let (snapshot, secret) = scenario.run(&env).await;
        scenario.assert_needles_found_in(&secret);
        stepper.abort();
        let metrics_text = scrape(server.addr).await;
        server.stop();
        controller.stop().await;
        let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
        let mut haystacks = emitted(&env, &snapshot, metrics_text);
        for expected in ["status written", "reconcile failed", "kubeconfig Secret written"] {
            assert!(logs.contains(expected), "the logs hold {expected:?}");
        }
        let sizes: Vec<String> = haystacks
            .iter()
            .map(|(w, t)| format!("{w}: {} B", t.len()))
            .collect();
        haystacks.push(("logs".into(), logs.clone()));
        assert_no_secret_material(&haystacks, &scenario.needles);
        eprintln!(
            "secrets (in-process): {} needles searched in {} B of logs (TRACE, {} lines), {}; none found; {:.1} s",
            scenario.needles.len(),
            logs.len(),
            logs.lines().count(),
            sizes.join(", "),
            started.elapsed().as_secs_f64()
        );
    });
}

/// The same with the `kim` binary: its stdout and stderr (JSON logs, `RUST_LOG=debug`) and its
/// `/metrics` endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_emits_no_secret_material() {
    let started = Instant::now();
    let env = Env::without_controller().await;
    let scenario = SecretScenario::new(&env).await;
    let mut kim = KimProcess::start(&env, &[]);
    let addr = kim.metrics_addr().await;
    let stepper = env.sim.run_every(STEP);
    let (snapshot, secret) = scenario.run(&env).await;
    scenario.assert_needles_found_in(&secret);
    stepper.abort();
    let metrics_text = scrape(addr).await;
    let (stdout, stderr) = kim.stop();
    for expected in [
        "status written",
        "reconcile failed",
        "kubeconfig Secret written",
    ] {
        assert!(
            stdout.contains(expected),
            "stdout holds {expected:?}:\n{stdout}"
        );
    }
    let mut haystacks = emitted(&env, &snapshot, metrics_text);
    haystacks.push(("stdout".into(), stdout.clone()));
    haystacks.push(("stderr".into(), stderr.clone()));
    assert_no_secret_material(&haystacks, &scenario.needles);
    eprintln!(
        "secrets (kim binary): {} needles searched in {} B of stdout ({} lines), {} B of stderr, {} B of events, {} B of metrics; none found; {:.1} s",
        scenario.needles.len(),
        stdout.len(),
        stdout.lines().count(),
        stderr.len(),
        haystacks[3].1.len(),
        haystacks[4].1.len(),
        started.elapsed().as_secs_f64()
    );
}

/// `(action, reason)` of the Events the controller publishes for Runtime `name`, from the
/// versions of it the control cluster committed, in order: `(Reconcile, <state>)` when the state
/// turns `Ready`, `Failed` or `Terminating`, and `(<type>, <reason>)` when a condition turns
/// `False` or changes its reason while `False` (docs/reconciler.md, "Events for what a user acts
/// on"). Progress (`Pending`, a condition `Unknown` or `True`) has no Event.
fn published_transitions(env: &Env, name: &str) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let mut state_before = String::new();
    let mut before: Vec<Cond> = Vec::new();
    for c in env.journal.changes() {
        if c.gvr != Gvr::runtimes() || c.name() != name {
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let state = s(&c.object["status"]["state"]);
        if state != state_before && ["Ready", "Failed", "Terminating"].contains(&state.as_str()) {
            events.push(("Reconcile".to_string(), state.clone()));
        }
        let now: Vec<Cond> = c.object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (s(&c["type"]), s(&c["status"]), s(&c["reason"])))
            .collect();
        for (t, st, r) in &now {
            if st != "False" {
                continue;
            }
            let same = before
                .iter()
                .any(|(bt, bs, br)| bt == t && bs == st && br == r);
            if !same {
                events.push((t.clone(), r.clone()));
            }
        }
        state_before = state;
        before = now;
    }
    events
}

/// An Event whose create fails transiently is sent again: with the first three Event creates
/// answered 500 (as a restarting kube-apiserver or etcd answers), every Event of a provisioning
/// (a `Warning` for the kubeconfig Secret that could not be written at first, then `Ready`) is
/// still stored. Each Event used to be tried once: the Events of the seconds a control-plane
/// restart takes were lost (`real_faults` logged `cannot publish event` for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_create_fails_transiently_is_sent_again() {
    event_creates_answered(500).await;
}

/// As [`an_event_whose_create_fails_transiently_is_sent_again`] with 403: a kube-apiserver
/// that has just started answers 403 until its RBAC cache is loaded (`real_faults` lost an
/// Event to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_refused_with_403_is_sent_again() {
    event_creates_answered(403).await;
}

/// The first three Event creates answered `code`, the first kubeconfig Secret create 500 (so
/// the provisioning publishes two Events: `KubeconfigReady` turning `False`, then `Ready`);
/// every Event is still stored.
async fn event_creates_answered(code: u16) {
    let env = Env::start().await;
    env.kcp.add_fault(
        FaultRule::new(FaultAction::fail(code))
            .verb(Verb::Create)
            .resource("events")
            .times(3),
    );
    env.kcp.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Create)
            .resource("secrets")
            .user(CONTROLLER_USER)
            .times(1),
    );
    let rts = runtimes("evt-retry", 1);
    let name = name_of(&rts[0]);
    let _clusters = env.runtime_clusters(&rts).await;
    env.create(&rts[0]).await;
    env.step_until(&format!("{name} Ready"), |s| {
        s.state(&name) == Some("Ready")
    })
    .await;
    let mut expected = published_transitions(&env, &name);
    expected.sort();
    assert_eq!(
        expected,
        [("KubeconfigReady", "KubernetesErr"), ("Reconcile", "Ready")]
            .map(|(a, r)| (a.to_string(), r.to_string())),
        "the transitions users act on: the Secret write failure, then Ready; status writes: {:#?}",
        shorts(&env.writes_of(&name))
    );
    let events = Gvr::new("events.k8s.io", "v1", "events");
    let stored = || {
        let mut got: Vec<(String, String)> = env
            .kcp
            .list(&events, Some(NS))
            .iter()
            .filter(|e| e["regarding"]["name"] == name.as_str())
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("action"), s("reason"))
            })
            .collect();
        got.sort();
        got
    };
    // Retries come 0.5 s, 1 s, 2 s after a failure: well within 20 s.
    let all = crate::support::eventually(Duration::from_secs(20), || {
        let done = stored() == expected;
        async move { done.then_some(()) }
    })
    .await;
    let creates = env
        .kcp
        .count_requests(|r| r.verb == Some(Verb::Create) && r.is("events", None));
    eprintln!(
        "event retry: {} Events stored for {} transitions, {creates} creates (3 answered {code})",
        stored().len(),
        expected.len()
    );
    assert!(
        all.is_some(),
        "an Event per transition users act on: expected {expected:?}, stored {:?}",
        stored()
    );
    assert!(
        creates >= stored().len() + 3,
        "the three faults fired: {creates} creates"
    );
}
