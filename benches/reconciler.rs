//! Reconciler benchmark: the real `kim controller` binary (bench profile, its own process, so its
//! `VmHWM` and CPU time are its own) against three `testenv` servers in this process — control
//! cluster, Gardener with `testenv::gardener::GardenerSim`, one runtime cluster — measuring:
//!
//! - Shoot `lastOperation: Create/Succeeded` → the Runtime's `Ready` write, Runtimes provisioned
//!   one at a time (target ≤ 1 s; KIM polls every 60 s);
//! - status writes and API calls per provisioning (≤ 6 writes) and per no-op reconcile (0 writes);
//! - N Runtimes provisioned at once: total time, peak RSS (≤ 200 MiB at 10 000), then a restarted
//!   controller's full no-op resync with the simulator stopped (≤ 10 s, 0 writes);
//! - the webhook's latency through `testenv::WebhookStage` in the 1 000 pass.
//!
//! Every admin kubeconfig points at the one runtime cluster and all Runtimes share one
//! administrator. Environment variables and figures: BENCHMARKS.md, "Reconciler benchmark". The
//! targets are printed as met / NOT met; only a broken set-up stops the run.

#[path = "support/procinfo.rs"]
mod procinfo;

use anyhow::{Context, anyhow, bail, ensure};
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::gardener::{GardenerConfig, GardenerSim};
use testenv::{
    AdmissionDecision, AdmissionRequest, Gvr, RequestRecord, ServerConfig, ServerHandle, UserInfo,
    Verb, WebhookConfigurations, WebhookStage,
};

const NS: &str = "kcp-system";
const GARDEN_NS: &str = "garden-kyma-dev";
const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";
const CONTROLLER_TOKEN: &str = "kim-controller-token";
const SHOOT_ADMIN_TOKEN: &str = "shoot-admin-token";

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(bench())
}

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    sizes: Vec<usize>,
    latency_runs: usize,
    step: Duration,
    concurrency: Option<u16>,
    timeout: Duration,
    history: usize,
    webhook: bool,
    webhook_size: usize,
    runtime_ca: bool,
    kim_rust_log: Option<String>,
}

fn env_parse<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|e| anyhow!("{name}={v:?}: {e}")),
        _ => Ok(default),
    }
}

impl Config {
    fn from_env() -> anyhow::Result<Config> {
        let sizes = match std::env::var("RECONCILER_BENCH_SIZES") {
            Ok(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<usize>().map_err(|e| anyhow!("{s:?}: {e}")))
                .collect::<anyhow::Result<Vec<_>>>()
                .context("RECONCILER_BENCH_SIZES")?,
            Err(_) => vec![1000, 10_000],
        };
        ensure!(
            sizes.iter().all(|&n| n > 0),
            "RECONCILER_BENCH_SIZES: sizes must be > 0"
        );
        let concurrency = match std::env::var("RECONCILER_BENCH_CONCURRENCY") {
            Ok(v) if !v.trim().is_empty() => Some(
                v.trim()
                    .parse()
                    .with_context(|| format!("RECONCILER_BENCH_CONCURRENCY={v:?}"))?,
            ),
            _ => None,
        };
        Ok(Config {
            sizes,
            latency_runs: env_parse("RECONCILER_BENCH_LATENCY_RUNS", 5)?,
            step: Duration::from_millis(env_parse("RECONCILER_BENCH_STEP_MS", 500)?),
            concurrency,
            timeout: Duration::from_secs(env_parse("RECONCILER_BENCH_TIMEOUT_SECS", 3600)?),
            history: env_parse("RECONCILER_BENCH_HISTORY", 100_000)?,
            webhook: env_parse("RECONCILER_BENCH_WEBHOOK", 1u8)? != 0,
            webhook_size: env_parse("RECONCILER_BENCH_WEBHOOK_SIZE", 1000)?,
            runtime_ca: env_parse("RECONCILER_BENCH_RUNTIME_CA", 1u8)? != 0,
            kim_rust_log: std::env::var("RECONCILER_BENCH_KIM_RUST_LOG")
                .ok()
                .filter(|v| !v.is_empty()),
        })
    }
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// Counting: every request of each server (through a fault closure that never injects), and
// every status write the control cluster admits (through its admission hook).

#[derive(Default)]
struct ServerCounts {
    /// Every request but watches.
    calls: AtomicU64,
    watches: AtomicU64,
    lists: AtomicU64,
}

impl ServerCounts {
    fn install(server: &ServerHandle) -> Arc<ServerCounts> {
        let counts = Arc::new(ServerCounts::default());
        let c = counts.clone();
        server.set_fault_fn(move |req| {
            match req.verb {
                Some(Verb::Watch) => c.watches.fetch_add(1, Ordering::Relaxed),
                Some(Verb::List) => {
                    c.lists.fetch_add(1, Ordering::Relaxed);
                    c.calls.fetch_add(1, Ordering::Relaxed)
                }
                _ => c.calls.fetch_add(1, Ordering::Relaxed),
            };
            None
        });
        counts
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// What the control cluster's admission hook saw.
#[derive(Default)]
struct Admitted {
    /// Status writes admitted, per Runtime.
    writes: HashMap<String, u32>,
    /// First admitted status write with `state: Ready`, per Runtime.
    ready_at: HashMap<String, Instant>,
    total_writes: u64,
}

/// Latencies of the admission stage (the real webhook over HTTPS) on `runtimes/status` writes.
#[derive(Default)]
struct StageTimes {
    /// Whole stage per status write (mutating + validating call), µs.
    per_write_us: Vec<f64>,
    /// Denied status writes (should stay 0).
    denied: u64,
}

fn install_admission(
    kcp: &ServerHandle,
    admitted: Arc<Mutex<Admitted>>,
    stage: Option<(WebhookStage, Arc<Mutex<StageTimes>>)>,
) {
    kcp.set_admission_async(move |req: AdmissionRequest| {
        let admitted = admitted.clone();
        let stage = stage.clone();
        async move {
            let is_status = req.gvr == Gvr::runtimes()
                && req.subresource.as_deref() == Some("status")
                && req.object.is_some();
            let name = req.name.clone();
            let ready = req
                .object
                .as_ref()
                .and_then(|o| o.pointer("/status/state"))
                .and_then(Value::as_str)
                == Some("Ready");
            let decision = match stage {
                Some((stage, times)) => {
                    let started = Instant::now();
                    let d = stage.admit(req).await;
                    if is_status {
                        let mut t = times.lock().unwrap();
                        t.per_write_us.push(started.elapsed().as_secs_f64() * 1e6);
                        if matches!(d, AdmissionDecision::Deny { .. }) {
                            t.denied += 1;
                        }
                    }
                    d
                }
                None => AdmissionDecision::Allow,
            };
            if is_status && !matches!(decision, AdmissionDecision::Deny { .. }) {
                let now = Instant::now();
                let mut a = admitted.lock().unwrap();
                a.total_writes += 1;
                *a.writes.entry(name.clone()).or_default() += 1;
                if ready {
                    a.ready_at.entry(name).or_insert(now);
                }
            }
            decision
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The clusters

struct Clusters {
    kcp: ServerHandle,
    garden: ServerHandle,
    runtime: ServerHandle,
    sim: GardenerSim,
    counts: [Arc<ServerCounts>; 3],
    admitted: Arc<Mutex<Admitted>>,
    stage_times: Arc<Mutex<StageTimes>>,
    /// Shoot name → when the step that made its Create operation `Succeeded` ended.
    succeeded_at: Arc<Mutex<HashMap<String, Instant>>>,
    /// Shoots whose Create has not succeeded yet.
    pending: Arc<Mutex<HashSet<String>>>,
    /// Wall time of each simulator step, µs.
    step_us: Arc<Mutex<Vec<f64>>>,
    stepper: Option<tokio::task::JoinHandle<()>>,
    stop_stepper: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
    kcp_kubeconfig: PathBuf,
    garden_kubeconfig: PathBuf,
}

impl Clusters {
    async fn start(cfg: &Config, log_requests: bool) -> anyhow::Result<Clusters> {
        let log_limit = if log_requests { usize::MAX } else { 0 };
        let base = || {
            ServerConfig::default()
                .history_limit(cfg.history)
                .request_log_limit(log_limit)
        };
        let kcp = testenv::start(
            base()
                .name("kcp")
                .user(CONTROLLER_TOKEN, UserInfo::new(CONTROLLER_USER, &[])),
        )
        .await
        .context("kcp server")?;
        let garden = testenv::start(base().name("garden"))
            .await
            .context("garden server")?;
        let runtime = testenv::start(base().name("runtime").user(
            SHOOT_ADMIN_TOKEN,
            UserInfo::new("shoot-admin", &["system:masters"]),
        ))
        .await
        .context("runtime server")?;
        let sim = GardenerSim::new(&garden, GardenerConfig::default());
        let mut kubeconfig = runtime.kubeconfig_yaml(Some(SHOOT_ADMIN_TOKEN));
        if cfg.runtime_ca {
            // A Gardener admin kubeconfig carries the cluster's CA; with one, kube builds the
            // client's TLS roots from it instead of loading the OS trust store per client.
            let ca = rcgen::generate_simple_self_signed(vec!["api.runtime.invalid".to_string()])
                .context("CA for the runtime kubeconfig")?;
            let data = base64::engine::general_purpose::STANDARD.encode(ca.cert.pem());
            kubeconfig = kubeconfig.replacen(
                "    server: ",
                &format!("    certificate-authority-data: {data}\n    server: "),
                1,
            );
        }
        garden.set_admin_kubeconfig(move |_| kubeconfig.clone());
        let counts = [
            ServerCounts::install(&kcp),
            ServerCounts::install(&garden),
            ServerCounts::install(&runtime),
        ];
        let admitted = Arc::new(Mutex::new(Admitted::default()));
        install_admission(&kcp, admitted.clone(), None);
        let dir = tempfile::tempdir().context("tempdir")?;
        let kcp_kubeconfig = dir.path().join("kcp.kubeconfig");
        let garden_kubeconfig = dir.path().join("garden.kubeconfig");
        std::fs::write(&kcp_kubeconfig, kcp.kubeconfig_yaml(Some(CONTROLLER_TOKEN)))?;
        std::fs::write(&garden_kubeconfig, garden.kubeconfig_yaml(None))?;
        let mut clusters = Clusters {
            kcp,
            garden,
            runtime,
            sim,
            counts,
            admitted,
            stage_times: Arc::default(),
            succeeded_at: Arc::default(),
            pending: Arc::default(),
            step_us: Arc::default(),
            stepper: None,
            stop_stepper: Arc::default(),
            _dir: dir,
            kcp_kubeconfig,
            garden_kubeconfig,
        };
        clusters.start_stepper(cfg.step);
        Ok(clusters)
    }

    /// Steps the simulated Gardener every `interval`; after each step, notes the Shoots whose
    /// Create operation has succeeded (time = end of that step).
    fn start_stepper(&mut self, interval: Duration) {
        let sim = self.sim.clone();
        let garden = self.garden.clone();
        let pending = self.pending.clone();
        let succeeded = self.succeeded_at.clone();
        let step_us = self.step_us.clone();
        let stop = self.stop_stepper.clone();
        self.stepper = Some(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let (sim, garden, pending, succeeded) = (
                    sim.clone(),
                    garden.clone(),
                    pending.clone(),
                    succeeded.clone(),
                );
                let took = tokio::task::spawn_blocking(move || {
                    let started = Instant::now();
                    sim.step();
                    let ended = Instant::now();
                    let names: Vec<String> = pending.lock().unwrap().iter().cloned().collect();
                    let mut done = Vec::new();
                    for name in names {
                        let Some(shoot) = garden.get(&Gvr::shoots(), Some(GARDEN_NS), &name) else {
                            continue;
                        };
                        let op = shoot.pointer("/status/lastOperation");
                        let ty = op.and_then(|o| o.get("type")).and_then(Value::as_str);
                        let st = op.and_then(|o| o.get("state")).and_then(Value::as_str);
                        if ty == Some("Create") && st == Some("Succeeded") {
                            done.push(name);
                        }
                    }
                    if !done.is_empty() {
                        let mut p = pending.lock().unwrap();
                        let mut s = succeeded.lock().unwrap();
                        for name in done {
                            p.remove(&name);
                            s.insert(name, ended);
                        }
                    }
                    ended - started
                })
                .await
                .unwrap_or_default();
                step_us.lock().unwrap().push(took.as_secs_f64() * 1e6);
            }
        }));
    }

    /// Creates Runtimes directly in the store (no HTTP), as a burst.
    fn create_runtimes(&self, template: &Value, names: &[Ident]) -> anyhow::Result<()> {
        {
            let mut p = self.pending.lock().unwrap();
            for id in names {
                p.insert(id.shoot.clone());
            }
        }
        for id in names {
            self.kcp
                .put(&Gvr::runtimes(), runtime_object(template, id))
                .map_err(|e| anyhow!("creating Runtime {}: {e:?}", id.runtime))?;
        }
        Ok(())
    }

    fn ready_count(&self) -> usize {
        self.admitted.lock().unwrap().ready_at.len()
    }

    fn calls(&self) -> [u64; 3] {
        [
            self.counts[0].calls(),
            self.counts[1].calls(),
            self.counts[2].calls(),
        ]
    }

    fn total_writes(&self) -> u64 {
        self.admitted.lock().unwrap().total_writes
    }

    fn kim_controller(&self, cfg: &Config) -> anyhow::Result<KimProc> {
        let mut args: Vec<String> = vec![
            "controller".into(),
            "--kubeconfig".into(),
            self.kcp_kubeconfig.display().to_string(),
            "--gardener-kubeconfig".into(),
            self.garden_kubeconfig.display().to_string(),
            "--config".into(),
            manifest_dir()
                .join("docs/config.example.yaml")
                .display()
                .to_string(),
            "--namespace".into(),
            NS.into(),
            "--leader-elect=false".into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--log-format".into(),
            "json".into(),
        ];
        if let Some(c) = cfg.concurrency {
            args.push("--concurrency".into());
            args.push(c.to_string());
        }
        KimProc::spawn(&args, cfg.kim_rust_log.as_deref())
    }

    /// Stops stepping the simulated Gardener (a step lists and compares every Shoot, which
    /// costs the harness CPU even when nothing changes).
    async fn stop_stepping(&mut self) {
        self.stop_stepper.store(true, Ordering::Relaxed);
        if let Some(h) = self.stepper.take() {
            h.abort();
            let _ = h.await;
        }
    }

    async fn shutdown(mut self) {
        self.stop_stepping().await;
        self.kcp.shutdown();
        self.garden.shutdown();
        self.runtime.shutdown();
    }
}

/// Names of one Runtime.
#[derive(Clone)]
struct Ident {
    runtime: String,
    runtime_id: String,
    shoot: String,
}

fn ident(prefix: &str, i: usize) -> Ident {
    Ident {
        runtime: format!("{prefix}-{i:05}"),
        runtime_id: format!("rid-{prefix}-{i:05}"),
        shoot: format!("{prefix}{i:05}"),
    }
}

/// The `aws-minimal` sample with this Runtime's names.
fn runtime_object(template: &Value, id: &Ident) -> Value {
    let mut o = template.clone();
    o["metadata"]["name"] = json!(id.runtime);
    o["metadata"]["namespace"] = json!(NS);
    let labels = &mut o["metadata"]["labels"];
    labels["kyma-project.io/runtime-id"] = json!(id.runtime_id);
    labels["kyma-project.io/shoot-name"] = json!(id.shoot);
    o["spec"]["shoot"]["name"] = json!(id.shoot);
    o
}

fn load_template() -> anyhow::Result<Value> {
    let path = manifest_dir().join("samples/runtimes/aws-minimal.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value = serde_saphyr::from_str(&text).context("aws-minimal.yaml")?;
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The `kim` processes

struct KimProc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    lines: Arc<AtomicU64>,
    /// Warnings and errors the controller logged (see [`tally_key`]).
    warnings: Tally,
    stderr: Arc<Mutex<String>>,
}

/// `WARN`/`ERROR` log lines of the controller by message and error, the error's digits
/// replaced by `#` (so that the names of Runtimes and Shoots fall together).
type Tally = Arc<Mutex<HashMap<String, u64>>>;

/// The key of a JSON log line in the [`Tally`], if it is a warning or an error.
fn tally_key(line: &str) -> Option<String> {
    if !line.contains("\"WARN\"") && !line.contains("\"ERROR\"") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    let level = v["level"].as_str()?;
    if level != "WARN" && level != "ERROR" {
        return None;
    }
    let message = v["message"].as_str().unwrap_or("");
    let error = v["error"].as_str().unwrap_or("");
    let mut error: String = error
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    while error.contains("##") {
        error = error.replace("##", "#");
    }
    Some(format!("{level} {message}: {error}"))
}

/// Keeps the first 64 KiB of a pipe (start-up lines), counts lines, tallies warnings and
/// errors (when given a [`Tally`]), drops the rest.
fn drain(
    mut r: Box<dyn Read + Send>,
    keep: Arc<Mutex<String>>,
    lines: Arc<AtomicU64>,
    tally: Option<Tally>,
) {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 65536];
        let mut partial = Vec::new();
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            lines.fetch_add(
                chunk[..n].iter().filter(|&&b| b == b'\n').count() as u64,
                Ordering::Relaxed,
            );
            if let Some(tally) = &tally {
                partial.extend_from_slice(&chunk[..n]);
                let end = partial
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let mut t = tally.lock().unwrap();
                for line in String::from_utf8_lossy(&partial[..end]).lines() {
                    if let Some(key) = tally_key(line) {
                        *t.entry(key).or_default() += 1;
                    }
                }
                partial.drain(..end);
            }
            let mut k = keep.lock().unwrap();
            if k.len() < 65536 {
                k.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        }
    });
}

/// The `top` most frequent entries of a tally, as `count× key` lines.
fn top(tally: &Tally, top: usize) -> Vec<String> {
    let t = tally.lock().unwrap();
    let mut v: Vec<(&String, &u64)> = t.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.into_iter()
        .take(top)
        .map(|(k, n)| format!("{n}× {}", k.chars().take(300).collect::<String>()))
        .collect()
}

impl KimProc {
    fn spawn(args: &[String], rust_log: Option<&str>) -> anyhow::Result<KimProc> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
        cmd.args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(l) = rust_log {
            cmd.env("RUST_LOG", l);
        }
        let mut child = cmd.spawn().context("spawn kim")?;
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let lines = Arc::new(AtomicU64::new(0));
        let warnings = Tally::default();
        drain(
            Box::new(child.stdout.take().context("stdout")?),
            stdout.clone(),
            lines.clone(),
            Some(warnings.clone()),
        );
        drain(
            Box::new(child.stderr.take().context("stderr")?),
            stderr.clone(),
            Arc::default(),
            None,
        );
        Ok(KimProc {
            child,
            stdout,
            lines,
            warnings,
            stderr,
        })
    }

    /// A string field of the first JSON log line on stdout that has it (waits up to 60 s).
    async fn logged(&mut self, field: &str) -> anyhow::Result<String> {
        let start = Instant::now();
        loop {
            let found = self.stdout.lock().unwrap().lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                v[field].as_str().map(String::from)
            });
            if let Some(v) = found {
                return Ok(v);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "kim exited ({status}) before logging {field}:\n{}\n{}",
                    self.stdout.lock().unwrap(),
                    self.stderr.lock().unwrap()
                );
            }
            ensure!(
                start.elapsed() < Duration::from_secs(60),
                "kim logged no {field} within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// SIGTERM, then wait (at most 30 s, then SIGKILL).
    fn stop(&mut self) {
        testenv::capture::terminate(&mut self.child, Duration::from_secs(30));
    }
}

impl Drop for KimProc {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET /metrics` over plain HTTP/1.0; the value of each unlabelled sample.
async fn scrape(addr: SocketAddr) -> anyhow::Result<HashMap<String, f64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .context("metrics")?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    ensure!(buf.contains(" 200 "), "metrics answered: {buf}");
    Ok(buf
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains('{'))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect())
}

/// Every sample of a labelled metric: `(labels, value)`, e.g. `("kind=\"api\"", 3)`.
async fn labelled(addr: SocketAddr, name: &str) -> Vec<(String, u64)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return Vec::new();
    };
    if s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .is_err()
    {
        return Vec::new();
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf).await;
    let prefix = format!("{name}{{");
    buf.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels.to_string(), value.parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// `kind` → count of `kim_controller_reconcile_errors_total`, and the controller's most
/// frequent logged warnings/errors, for the report.
async fn print_errors(addr: SocketAddr, kim: &KimProc) {
    let kinds = labelled(addr, "kim_controller_reconcile_errors_total").await;
    let kinds: Vec<String> = kinds
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    println!(
        "   reconcile errors by kind: {}",
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        }
    );
    for line in top(&kim.warnings, 10) {
        println!("     logged: {line}");
    }
}

/// Sum of every sample of a labelled metric.
async fn labelled_sum(addr: SocketAddr, name: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    if s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .is_err()
    {
        return 0;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf).await;
    buf.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn metric(addr: SocketAddr, name: &str) -> f64 {
    scrape(addr)
        .await
        .ok()
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// Statistics

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// One line of the final targets table.
struct Target {
    what: String,
    wanted: String,
    measured: String,
    met: Option<bool>,
}

fn target(targets: &mut Vec<Target>, what: &str, wanted: &str, measured: String, met: bool) {
    targets.push(Target {
        what: what.into(),
        wanted: wanted.into(),
        measured,
        met: Some(met),
    });
}

// ---------------------------------------------------------------------------------------------
// Phases

/// Waits until `check` holds, printing `progress` every 10 s; fails after `timeout`.
async fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> bool,
    mut progress: impl FnMut() -> String,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last = Instant::now();
    while !check() {
        ensure!(
            start.elapsed() < timeout,
            "timed out after {:?} waiting for {what}: {}",
            timeout,
            progress()
        );
        if last.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "   … {what}: {:.0} s, {}",
                start.elapsed().as_secs_f64(),
                progress()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(start.elapsed())
}

/// Waits until the admitted status writes did not change for `quiet`.
async fn settle(c: &Clusters, quiet: Duration) {
    let mut last = (c.total_writes(), c.calls());
    let mut since = Instant::now();
    let start = Instant::now();
    while since.elapsed() < quiet && start.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = (c.total_writes(), c.calls());
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

const CLUSTERS: [&str; 3] = ["control", "gardener", "runtime"];

/// `verb resource[/sub]` of a logged request, for the per-provisioning breakdown.
fn call_kind(r: &RequestRecord) -> String {
    let verb = r.verb.map(|v| v.as_str()).unwrap_or("get");
    let res = r.resource.as_deref().unwrap_or(r.path.as_str());
    match &r.subresource {
        Some(s) => format!("{verb} {res}/{s}"),
        None => format!("{verb} {res}"),
    }
}

fn breakdown(servers: &[&ServerHandle; 3], skip: &[usize; 3]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (i, s) in servers.iter().enumerate() {
        for r in s.requests().iter().skip(skip[i]) {
            if r.verb == Some(Verb::Watch) {
                continue;
            }
            *out.entry(format!("{}: {}", CLUSTERS[i], call_kind(r)))
                .or_default() += 1;
        }
    }
    out
}

/// Phase 1: Runtimes provisioned one at a time: Succeeded → Ready latency, writes and calls
/// per provisioning; then a restart of the controller: writes and calls per no-op reconcile.
async fn latency_phase(
    cfg: &Config,
    template: &Value,
    targets: &mut Vec<Target>,
) -> anyhow::Result<()> {
    let runs = cfg.latency_runs.max(1);
    println!(
        "== 1. one Runtime at a time ({runs} Runtimes, Gardener step every {} ms)",
        cfg.step.as_millis()
    );
    let c = Clusters::start(cfg, true).await?;
    let mut kim = c.kim_controller(cfg)?;
    let metrics_addr: SocketAddr = kim.logged("metrics_addr").await?.parse()?;
    // Let the controller's initial lists and watches through before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    let mut writes = Vec::new();
    let mut calls: Vec<[u64; 3]> = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let servers = [&c.kcp, &c.garden, &c.runtime];
    for i in 0..runs {
        let id = ident("lat", i);
        settle(&c, Duration::from_millis(300)).await;
        let before = c.calls();
        let skip = [
            c.kcp.requests().len(),
            c.garden.requests().len(),
            c.runtime.requests().len(),
        ];
        c.create_runtimes(template, std::slice::from_ref(&id))?;
        let name = id.runtime.clone();
        let admitted = c.admitted.clone();
        wait_until(
            &format!("{name} Ready"),
            cfg.timeout,
            || admitted.lock().unwrap().ready_at.contains_key(&name),
            || format!("{} status writes", c.total_writes()),
        )
        .await?;
        settle(&c, Duration::from_millis(500)).await;
        let after = c.calls();
        let ready = c.admitted.lock().unwrap().ready_at[&name];
        let succeeded = c
            .succeeded_at
            .lock()
            .unwrap()
            .get(&id.shoot)
            .copied()
            .context("Ready before the Shoot succeeded?")?;
        let latency = ready.saturating_duration_since(succeeded);
        let n = c.admitted.lock().unwrap().writes[&name];
        println!(
            "   {name}: Succeeded → Ready {:>7.1} ms, {n} status writes, API calls control {} / gardener {} / runtime {}",
            latency.as_secs_f64() * 1e3,
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        );
        latencies.push(latency.as_secs_f64() * 1e3);
        writes.push(n);
        calls.push([
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2],
        ]);
        for (k, v) in breakdown(&servers, &skip) {
            *kinds.entry(k).or_default() += v;
        }
    }
    let reconciles = metric(metrics_addr, "kim_controller_reconciles_total").await;
    println!(
        "   controller: {reconciles} reconciles for {runs} provisionings; VmHWM {:.1} MiB",
        procinfo::memory_mib(kim.pid())
            .map(|m| m.0)
            .unwrap_or(f64::NAN)
    );
    println!(
        "   API calls by kind (all {runs} provisionings, watches excluded; mean per provisioning):"
    );
    for (k, v) in &kinds {
        println!("     {k:<48} {v:>4}  ({:.1})", *v as f64 / runs as f64);
    }
    let lat = sorted(latencies);
    let max_writes = writes.iter().copied().max().unwrap_or(0);
    let total_calls: Vec<u64> = calls.iter().map(|c| c.iter().sum()).collect();
    println!(
        "   Succeeded → Ready: p50 {:.1} ms, max {:.1} ms; status writes per provisioning: {:?}; API calls per provisioning: {:?}",
        percentile(&lat, 50.0),
        lat.last().copied().unwrap_or(f64::NAN),
        writes,
        total_calls
    );
    target(
        targets,
        "Shoot Succeeded → Runtime Ready (max of runs)",
        "≤ 1 s",
        format!("{:.1} ms", lat.last().copied().unwrap_or(f64::NAN)),
        lat.last().is_some_and(|&m| m <= 1000.0),
    );
    target(
        targets,
        "status writes per provisioning (max)",
        "≤ 6",
        format!("{max_writes}"),
        max_writes <= 6,
    );
    targets.push(Target {
        what: "API calls per provisioning (all clusters)".into(),
        wanted: "(reported)".into(),
        measured: format!(
            "{}–{}",
            total_calls.iter().min().unwrap_or(&0),
            total_calls.iter().max().unwrap_or(&0)
        ),
        met: None,
    });

    // No-op reconcile of every Ready Runtime: restart the controller.
    kim.stop();
    settle(&c, Duration::from_millis(300)).await;
    let before_writes = c.total_writes();
    let before = c.calls();
    let skip = [
        c.kcp.requests().len(),
        c.garden.requests().len(),
        c.runtime.requests().len(),
    ];
    let mut kim = c.kim_controller(cfg)?;
    let metrics_addr: SocketAddr = kim.logged("metrics_addr").await?.parse()?;
    let start = Instant::now();
    loop {
        if metric(metrics_addr, "kim_controller_reconciles_total").await >= runs as f64 {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "no-op resync did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle(&c, Duration::from_millis(1000)).await;
    let reconciles = metric(metrics_addr, "kim_controller_reconciles_total").await;
    let writes = c.total_writes() - before_writes;
    let after = c.calls();
    let kinds = breakdown(&servers, &skip);
    println!(
        "   no-op reconcile after a restart: {reconciles} reconciles of {runs} Ready Runtimes, {writes} status writes, API calls control {} / gardener {} / runtime {} (including the controller's start-up lists)",
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2]
    );
    for (k, v) in &kinds {
        println!("     {k:<48} {v:>4}");
    }
    target(
        targets,
        "status writes on a no-op resync",
        "0",
        format!("{writes}"),
        writes == 0,
    );
    kim.stop();
    c.shutdown().await;
    Ok(())
}

/// Drains the admission stage's log (it keeps whole reviews) into per-call latencies.
fn drain_stage(stage: &WebhookStage, per_call_us: &Mutex<Vec<f64>>) {
    let calls = stage.calls();
    stage.clear_log();
    per_call_us
        .lock()
        .unwrap()
        .extend(calls.iter().map(|c| c.took.as_secs_f64() * 1e6));
}

/// Phase 2: N Runtimes at once.
async fn scale_phase(
    cfg: &Config,
    template: &Value,
    n: usize,
    webhook: Option<&Webhook>,
    targets: &mut Vec<Target>,
) -> anyhow::Result<()> {
    println!(
        "== 2. {n} Runtimes created at once (Gardener step every {} ms{})",
        cfg.step.as_millis(),
        if webhook.is_some() {
            ", admission stage → kim webhook on every control-cluster write"
        } else {
            ""
        }
    );
    let mut c = Clusters::start(cfg, false).await?;
    let per_call_us = Arc::new(Mutex::new(Vec::new()));
    let mut drainer = None;
    if let Some(w) = webhook {
        let stage = WebhookStage::new(w.configs.clone(), w.addr);
        install_admission(
            &c.kcp,
            c.admitted.clone(),
            Some((stage.clone(), c.stage_times.clone())),
        );
        let per_call = per_call_us.clone();
        drainer = Some((
            stage.clone(),
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    drain_stage(&stage, &per_call);
                }
            }),
        ));
    }
    let mut kim = c.kim_controller(cfg)?;
    let metrics_addr: SocketAddr = kim.logged("metrics_addr").await?.parse()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (hwm_idle, _) = procinfo::memory_mib(kim.pid()).unwrap_or((f64::NAN, f64::NAN));
    let ids: Vec<Ident> = (0..n).map(|i| ident("rt", i)).collect();
    let cpu0 = (
        procinfo::cpu_secs(kim.pid()).unwrap_or(0.0),
        procinfo::self_cpu_secs(),
    );
    let t0 = Instant::now();
    c.create_runtimes(template, &ids)?;
    let created = t0.elapsed();
    println!(
        "   {n} Runtimes stored in {:.2} s; load average {}",
        created.as_secs_f64(),
        procinfo::loadavg()
    );
    let pid = kim.pid();
    let mut peak_seen = 0.0f64;
    let total = wait_until(
        &format!("{n} Runtimes Ready"),
        cfg.timeout,
        || c.ready_count() >= n,
        || {
            let mem = procinfo::memory_mib(pid).unwrap_or((f64::NAN, f64::NAN));
            peak_seen = peak_seen.max(mem.0);
            format!(
                "{} Ready, {} Shoots succeeded, {} status writes, controller RSS {:.1} MiB (peak {:.1}), load {}",
                c.ready_count(),
                c.succeeded_at.lock().unwrap().len(),
                c.total_writes(),
                mem.1,
                mem.0,
                procinfo::loadavg()
            )
        },
    )
    .await?
        + created;
    let cpu1 = (
        procinfo::cpu_secs(kim.pid()).unwrap_or(0.0),
        procinfo::self_cpu_secs(),
    );
    settle(&c, Duration::from_secs(2)).await;
    let (hwm, rss) = procinfo::memory_mib(kim.pid()).unwrap_or((f64::NAN, f64::NAN));
    let calls = c.calls();
    let writes = c.total_writes();
    let (lat, wmin, wmax) = {
        let a = c.admitted.lock().unwrap();
        let s = c.succeeded_at.lock().unwrap();
        let lat: Vec<f64> = ids
            .iter()
            .filter_map(|id| {
                let r = a.ready_at.get(&id.runtime)?;
                let s = s.get(&id.shoot)?;
                Some(r.saturating_duration_since(*s).as_secs_f64() * 1e3)
            })
            .collect();
        let w: Vec<u32> = ids
            .iter()
            .map(|id| a.writes.get(&id.runtime).copied().unwrap_or(0))
            .collect();
        (
            sorted(lat),
            w.iter().copied().min().unwrap_or(0),
            w.iter().copied().max().unwrap_or(0),
        )
    };
    let steps = sorted(c.step_us.lock().unwrap().clone());
    let reconciles = metric(metrics_addr, "kim_controller_reconciles_total").await;
    let errors = labelled_sum(metrics_addr, "kim_controller_reconcile_errors_total").await;
    let log_lines = kim.lines.load(Ordering::Relaxed);
    println!(
        "   all {n} Ready after {:.1} s ({:.1} Runtimes/s); load average {}",
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        procinfo::loadavg()
    );
    println!(
        "   status writes: {writes} ({:.2} per Runtime, min {wmin}, max {wmax}); API calls (watches excluded): control {} / gardener {} / runtime {} = {:.1} per Runtime",
        writes as f64 / n as f64,
        calls[0],
        calls[1],
        calls[2],
        calls.iter().sum::<u64>() as f64 / n as f64
    );
    println!(
        "   controller: {reconciles} reconciles ({:.2} per Runtime), {errors} reconcile errors, {log_lines} log lines, CPU {:.1} s; VmHWM {hwm:.1} MiB, VmRSS now {rss:.1} MiB",
        reconciles / n as f64,
        cpu1.0 - cpu0.0
    );
    println!(
        "   controller memory: VmHWM {hwm_idle:.1} MiB idle before the burst, {hwm:.1} MiB after: {:.1} KiB per Runtime",
        (hwm - hwm_idle) * 1024.0 / n as f64
    );
    print_errors(metrics_addr, &kim).await;
    println!(
        "   bench process (3 API servers + simulator{}): CPU {:.1} s",
        if webhook.is_some() { " + stage" } else { "" },
        cpu1.1 - cpu0.1
    );
    println!(
        "   Shoot Succeeded → Runtime Ready under this load: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (simulator step p50 {:.1} ms, max {:.1} ms; times from the end of the step)",
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        lat.last().copied().unwrap_or(f64::NAN),
        percentile(&steps, 50.0) / 1e3,
        steps.last().copied().unwrap_or(f64::NAN) / 1e3
    );
    targets.push(Target {
        what: format!("{n}: total time to all Ready"),
        wanted: "(reported)".into(),
        measured: format!("{:.1} s", total.as_secs_f64()),
        met: None,
    });
    if n >= 10_000 {
        target(
            targets,
            &format!("{n}: controller peak RSS"),
            "≤ 200 MiB",
            format!("{hwm:.1} MiB"),
            hwm <= 200.0,
        );
    } else {
        targets.push(Target {
            what: format!("{n}: controller peak RSS"),
            wanted: "(≤ 200 MiB at 10 000)".into(),
            measured: format!("{hwm:.1} MiB"),
            met: None,
        });
    }
    target(
        targets,
        &format!("{n}: status writes per provisioning (max)"),
        "≤ 6",
        format!("{wmax}"),
        wmax <= 6,
    );

    if let Some((stage, task)) = drainer.take() {
        task.abort();
        drain_stage(&stage, &per_call_us);
        let per_call = sorted(per_call_us.lock().unwrap().clone());
        let (per_write, denied) = {
            let t = c.stage_times.lock().unwrap();
            (sorted(t.per_write_us.clone()), t.denied)
        };
        println!(
            "   webhook calls seen by the admission stage: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; per runtimes/status write (mutate + validate): {} writes, p50 {:.2} ms, p99 {:.2} ms; {denied} denied",
            per_call.len(),
            percentile(&per_call, 50.0) / 1e3,
            percentile(&per_call, 99.0) / 1e3,
            per_call.last().copied().unwrap_or(f64::NAN) / 1e3,
            per_write.len(),
            percentile(&per_write, 50.0) / 1e3,
            percentile(&per_write, 99.0) / 1e3,
        );
        targets.push(Target {
            what: format!("{n}: webhook latency per call (stage)"),
            wanted: "p50/p99 (reported)".into(),
            measured: format!(
                "{:.2} / {:.2} ms",
                percentile(&per_call, 50.0) / 1e3,
                percentile(&per_call, 99.0) / 1e3
            ),
            met: None,
        });
    }

    // Full no-op resync: restart the controller with all N Ready. Every Shoot is done: the
    // simulator stops, so that its steps do not compete with the controller for the CPU.
    c.stop_stepping().await;
    kim.stop();
    settle(&c, Duration::from_secs(1)).await;
    let before_writes = c.total_writes();
    let before = c.calls();
    let shoot_gets: Arc<Mutex<HashSet<String>>> = Arc::default();
    {
        // Every reconcile starts by reading its Shoot: the set of Shoots read tells which
        // Runtimes have been reconciled.
        let counts = c.counts[1].clone();
        let gets = shoot_gets.clone();
        c.garden.set_fault_fn(move |req| {
            match req.verb {
                Some(Verb::Watch) => counts.watches.fetch_add(1, Ordering::Relaxed),
                _ => counts.calls.fetch_add(1, Ordering::Relaxed),
            };
            if req.verb == Some(Verb::Get)
                && req.gvr.as_ref() == Some(&Gvr::shoots())
                && req.subresource.is_none()
                && let Some(name) = &req.name
            {
                gets.lock().unwrap().insert(name.clone());
            }
            None
        });
    }
    let t0 = Instant::now();
    let cpu0 = procinfo::self_cpu_secs();
    let mut kim = c.kim_controller(cfg)?;
    let metrics_addr: SocketAddr = kim.logged("metrics_addr").await?.parse()?;
    let up = t0.elapsed();
    let pid = kim.pid();
    let mut last = Instant::now();
    loop {
        let reconciled = metric(metrics_addr, "kim_controller_reconciles_total").await;
        let read = shoot_gets.lock().unwrap().len();
        if reconciled >= n as f64 && read >= n {
            break;
        }
        let progress = || {
            format!(
                "{read} Shoots read, {reconciled} reconciles, controller RSS {:.1} MiB",
                procinfo::memory_mib(pid).map(|m| m.1).unwrap_or(f64::NAN)
            )
        };
        ensure!(
            t0.elapsed() < cfg.timeout,
            "timed out waiting for a no-op reconcile of all {n}: {}",
            progress()
        );
        if last.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "   … no-op resync: {:.0} s, {}",
                t0.elapsed().as_secs_f64(),
                progress()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resync = t0.elapsed();
    let cpu_kim = procinfo::cpu_secs(kim.pid()).unwrap_or(0.0);
    let cpu_bench = procinfo::self_cpu_secs() - cpu0;
    settle(&c, Duration::from_secs(2)).await;
    let (hwm2, _) = procinfo::memory_mib(kim.pid()).unwrap_or((f64::NAN, f64::NAN));
    let writes = c.total_writes() - before_writes;
    let after = c.calls();
    let reconciles = metric(metrics_addr, "kim_controller_reconciles_total").await;
    let sent = metric(metrics_addr, "kim_controller_status_writes_total").await;
    println!(
        "   full no-op resync (controller restarted, all {n} Ready): every Runtime reconciled after {:.2} s (process start → metrics up {:.2} s); {reconciles} reconciles; {writes} status writes admitted ({sent} sent); API calls control {} / gardener {} / runtime {} = {:.2} per Runtime; controller CPU {cpu_kim:.1} s, bench CPU {cpu_bench:.1} s; controller VmHWM {hwm2:.1} MiB",
        resync.as_secs_f64(),
        up.as_secs_f64(),
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        (after.iter().sum::<u64>() - before.iter().sum::<u64>()) as f64 / n as f64
    );
    print_errors(metrics_addr, &kim).await;
    target(
        targets,
        &format!("{n}: full no-op resync"),
        "≤ 10 s",
        format!("{:.2} s", resync.as_secs_f64()),
        resync <= Duration::from_secs(10),
    );
    target(
        targets,
        &format!("{n}: status writes on the no-op resync"),
        "0",
        format!("{writes}"),
        writes == 0,
    );
    kim.stop();
    c.shutdown().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The webhook for the admission stage

/// `kim webhook` with certificates made by `certs/gen-certs.sh` for a copy of `manifests/`,
/// and the webhook configurations of that copy's static-ca overlay.
struct Webhook {
    proc: KimProc,
    addr: SocketAddr,
    configs: WebhookConfigurations,
    _dir: tempfile::TempDir,
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

async fn start_webhook() -> anyhow::Result<Webhook> {
    let dir = tempfile::tempdir()?;
    copy_dir(
        &manifest_dir().join("manifests"),
        &dir.path().join("manifests"),
    )?;
    let out = dir.path().join("out");
    let overlay = dir.path().join("manifests/overlays/static-ca");
    let generated = Command::new("bash")
        .arg(manifest_dir().join("certs/gen-certs.sh"))
        .arg("--out")
        .arg(&out)
        .arg("--overlay")
        .arg(&overlay)
        .stdin(Stdio::null())
        .output()
        .context("running certs/gen-certs.sh")?;
    ensure!(
        generated.status.success(),
        "certs/gen-certs.sh failed: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let configs = WebhookConfigurations::from_kustomization(&overlay)
        .map_err(|e| anyhow!("webhook configurations: {e:?}"))?;
    let args: Vec<String> = vec![
        "webhook".into(),
        "--cert-dir".into(),
        out.display().to_string(),
        "--addr".into(),
        "127.0.0.1:0".into(),
        "--metrics-addr".into(),
        "127.0.0.1:0".into(),
        "--log-format".into(),
        "json".into(),
    ];
    let mut proc = KimProc::spawn(&args, None)?;
    let addr = proc.logged("addr").await?.parse()?;
    Ok(Webhook {
        proc,
        addr,
        configs,
        _dir: dir,
    })
}

// ---------------------------------------------------------------------------------------------

async fn bench() -> anyhow::Result<()> {
    let cfg = Config::from_env()?;
    let template = load_template()?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("== kim reconciler benchmark");
    println!(
        "   {cores} cores; load average at start {}; controller: {} (--concurrency {}, RUST_LOG {})",
        procinfo::loadavg(),
        env!("CARGO_BIN_EXE_kim"),
        cfg.concurrency
            .map(|c| c.to_string())
            .unwrap_or_else(|| "default".into()),
        cfg.kim_rust_log.as_deref().unwrap_or("unset (info)")
    );
    let mut targets = Vec::new();
    latency_phase(&cfg, &template, &mut targets).await?;
    for &n in &cfg.sizes {
        let webhook = if cfg.webhook && n == cfg.webhook_size {
            match start_webhook().await {
                Ok(w) => Some(w),
                Err(e) => {
                    println!("   (no admission stage: {e:#})");
                    None
                }
            }
        } else {
            None
        };
        scale_phase(&cfg, &template, n, webhook.as_ref(), &mut targets).await?;
        if let Some(mut w) = webhook {
            w.proc.stop();
        }
    }
    if !cfg.sizes.contains(&cfg.webhook_size) || !cfg.webhook {
        targets.push(Target {
            what: "webhook latency during the 1 000 run".into(),
            wanted: "p50/p99 (reported)".into(),
            measured: "not run (RECONCILER_BENCH_WEBHOOK=0 or size not run)".into(),
            met: None,
        });
    }
    println!();
    println!("== targets; {cores} cores shared by the servers, the simulator and the controller");
    for t in &targets {
        println!(
            "{:<48} {:>22} {:>22}  {}",
            t.what,
            t.wanted,
            t.measured,
            t.met.map(verdict).unwrap_or("")
        );
    }
    println!("load average at end {}", procinfo::loadavg());
    Ok(())
}
