//! A webhook rollout under load, on the real control plane: two `kim webhook` replicas behind
//! HAProxy ([`crate::haproxy`]), registered with kim's shipped webhook configurations
//! (`failurePolicy: Fail`, pointed at HAProxy the way envtest points them at a local server),
//! and paced status writes (merge patches on `/status`, as KIM and kim's controller send them)
//! through kube-apiserver while [`Fault`]s happen one after the other: a rolling restart with
//! SIGTERM and `--shutdown-delay-seconds`, a certificate renewal by kubelet's symlink swap,
//! a SIGKILL.
//!
//! What [`run`] reports comes from three sides: the client (every write's result and latency
//! from its scheduled send), kube-apiserver's `/metrics` (webhook calls, rejections, fail-open
//! counts, before and after) and each replica's `kim_webhook_requests_total` (scraped every
//! 200 ms and once more when it stops, summed over every process that served).
//!
//! [`Options::cpu`] puts each replica in a cgroup with a CPU quota ([`crate::cgroup`]), as a
//! pod's `limits.cpu` does, and [`Options::webhook_args`] passes flags to every replica: the
//! overload benchmark (`benches/overload.rs`) runs the same load against replicas slower than
//! kube-apiserver can call them.

use crate::cgroup::CpuGroup;
use crate::controlplane::{ControlPlane, WebhookCerts, point_webhooks_at};
use crate::haproxy::{Backend, Haproxy};
use crate::process::Process;
use crate::tls::KubeletDir;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What happens to the replicas during the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Each replica in turn: SIGTERM, HAProxy marks it down (readiness 503 during the shutdown
    /// delay), it exits, a new process starts on the same ports, HAProxy marks it up.
    RollingRestart,
    /// A new serving certificate from the same CA swapped in as kubelet updates a Secret
    /// volume; done once both replicas present it on new connections.
    RotateCertificate,
    /// SIGKILL one replica (no drain), then start it again.
    KillOne,
}

/// The run's parameters.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `kim` binary.
    pub kim: PathBuf,
    /// Status writes per second (open loop).
    pub rate: f64,
    /// Seconds of load; the faults are spread evenly over it.
    pub seconds: f64,
    /// Runtimes the writes go round.
    pub runtimes: usize,
    /// `--shutdown-delay-seconds` of the replicas.
    pub shutdown_delay_secs: u64,
    /// HAProxy's health-check interval (a replica is out after two failed checks).
    pub health_check: Duration,
    /// The faults, in order.
    pub faults: Vec<Fault>,
    /// A CPU quota for each replica (each its own cgroup), `None` for none.
    pub cpu: Option<CpuLimit>,
    /// Flags added to every replica's `kim webhook` command line.
    pub webhook_args: Vec<String>,
}

/// A CFS quota: `quota_us` of CPU time every `period_us` (what `limits.cpu` sets: `10m` is
/// 1 000 µs per 100 000 µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuLimit {
    /// `cpu.cfs_period_us`, 1 000 ..= 1 000 000.
    pub period_us: u64,
    /// `cpu.cfs_quota_us`, at least 1 000.
    pub quota_us: u64,
}

/// One failed write: when (since the load started) and what the client got.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Scheduled send time of the write, since the load started.
    pub at: Duration,
    /// The client's error.
    pub message: String,
}

/// What happened.
#[derive(Debug, Default)]
pub struct Report {
    /// Writes sent.
    pub sent: u64,
    /// Writes that succeeded.
    pub ok: u64,
    /// The others.
    pub failed: Vec<Failure>,
    /// Latency of each successful write from its scheduled send, sorted.
    pub latencies: Vec<Duration>,
    /// What was done when, since the load started.
    pub events: Vec<(Duration, String)>,
    /// kube-apiserver's admission webhook counters over the load (difference of `/metrics`):
    /// series name with labels → increase.
    pub apiserver: BTreeMap<String, f64>,
    /// Answers of kim's replicas over the load, by `path`, `decision` and `code`
    /// (`"/validate allowed 200"`), summed over every process.
    pub kim: BTreeMap<String, f64>,
    /// The highest `kim_webhook_requests_in_flight` seen per replica slot (scraped every
    /// 200 ms, so a lower bound of the true peak).
    pub in_flight_max: BTreeMap<String, i64>,
    /// Per CPU-limited replica slot: `cpu.stat`'s periods, throttled periods and throttled
    /// time (ns) over the load.
    pub throttling: BTreeMap<String, (u64, u64, u64)>,
    /// `/proc/loadavg` when the load started and when it ended.
    pub load_average: (String, String),
}

impl Report {
    /// The `q` quantile (0..=1) of the latencies.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i]
    }

    /// The sum of the apiserver counters whose series starts with `prefix` and carries every
    /// label of `labels` (`name="value"` strings).
    pub fn apiserver_sum(&self, prefix: &str, labels: &[&str]) -> f64 {
        self.apiserver
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && labels.iter().all(|l| k.contains(l)))
            .map(|(_, v)| v)
            .sum()
    }
}

const NS: &str = "kcp-system";

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_addr() -> Result<SocketAddr, String> {
    let port = crate::controlplane::free_port().map_err(|e| format!("a free port: {e}"))?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// One replica slot: fixed ports, the process serving them now.
struct Replica {
    name: String,
    addr: SocketAddr,
    metrics: SocketAddr,
    // Dropped (killed) before its cgroup is removed.
    process: Option<Process>,
    cgroup: Option<CpuGroup>,
}

/// Starts the stopped replica `r` again on its ports, as its next incarnation (so the scraper
/// keeps the last counts of the process before), and waits until HAProxy sends to it.
async fn start_again(
    r: &mut Replica,
    opts: &Options,
    cert_dir: &Path,
    lb: &Haproxy,
    incarnations: &Mutex<BTreeMap<String, u32>>,
    events: &mut Vec<(Duration, String)>,
    load_start: Instant,
) -> Result<(), String> {
    *incarnations
        .lock()
        .unwrap()
        .get_mut(&r.name)
        .ok_or("unknown replica")? += 1;
    r.start(
        &opts.kim,
        cert_dir,
        opts.shutdown_delay_secs,
        &opts.webhook_args,
    )?;
    lb.wait_server(&r.name, true, Duration::from_secs(60))
        .await?;
    events.push((load_start.elapsed(), format!("{} back in haproxy", r.name)));
    Ok(())
}

/// The answers a replica counted, by `path`/`decision`/`code`.
fn kim_counts(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("kim_webhook_requests_in_flight ") {
            out.insert(IN_FLIGHT.to_string(), v.trim().parse().unwrap_or(0.0));
            continue;
        }
        let Some(rest) = line.strip_prefix("kim_webhook_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .trim_matches('"')
                .to_string()
        };
        *out.entry(format!(
            "{} {} {}",
            get("path"),
            get("decision"),
            get("code")
        ))
        .or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// The key [`kim_counts`] files the in-flight gauge under (not a count: left out of sums).
const IN_FLIGHT: &str = "in_flight";

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

async fn scrape(addr: SocketAddr) -> Option<String> {
    let r = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .ok()?;
    r.text().await.ok()
}

/// Each write's scheduled send time and its latency or error.
type Results = Arc<Mutex<Vec<(Instant, Result<Duration, String>)>>>;

/// The last counts seen of each process that served: `(slot, incarnation)` → counts.
type Seen = Arc<Mutex<BTreeMap<(String, u32), BTreeMap<String, f64>>>>;

impl Replica {
    fn start(
        &mut self,
        kim: &Path,
        cert_dir: &Path,
        delay: u64,
        extra: &[String],
    ) -> Result<(), String> {
        let mut cmd = Command::new(kim);
        cmd.args(["webhook", "--addr"])
            .arg(self.addr.to_string())
            .arg("--metrics-addr")
            .arg(self.metrics.to_string())
            .arg("--cert-dir")
            .arg(cert_dir)
            .args(["--log-format", "json", "--shutdown-delay-seconds"])
            .arg(delay.to_string())
            .args(extra)
            .env("RUST_LOG", "warn");
        let process = Process::spawn(&mut cmd).map_err(|e| format!("kim: {e}"))?;
        if let Some(group) = &self.cgroup {
            group.add(process.id())?;
        }
        self.process = Some(process);
        Ok(())
    }
}

async fn wait_ready(metrics: SocketAddr, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    loop {
        if let Ok(r) = client.get(format!("http://{metrics}/readyz")).send().await
            && r.status() == 200
        {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(format!("{metrics}/readyz not 200 within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn apply(client: &kube::Client, doc: &Value) -> Result<(), String> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let plural = match kind {
        "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
        _ => "mutatingwebhookconfigurations",
    };
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    );
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            name,
            &PatchParams::apply("kim-rollout").force(),
            &Patch::Apply(doc),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("{kind} {name}: {e}"))
}

/// kube-apiserver's webhook admission counters.
async fn apiserver_counters(client: &kube::Client) -> Result<BTreeMap<String, f64>, String> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = client.request_text(req).await.map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let interesting = [
            "apiserver_admission_webhook_request_total{",
            "apiserver_admission_webhook_rejection_count{",
            "apiserver_admission_webhook_fail_open_count{",
            "apiserver_admission_webhook_admission_duration_seconds_",
        ];
        if !interesting.iter().any(|p| line.starts_with(p)) {
            continue;
        }
        if let Some((series, value)) = line.rsplit_once(' ') {
            out.insert(series.to_string(), value.parse().unwrap_or(0.0));
        }
    }
    Ok(out)
}

/// A status write as KIM sends it: a merge patch of `status` with the whole conditions list.
fn status_patch(n: u64) -> Value {
    json!({"status": {
        "state": "Pending",
        "conditions": [{
            "type": "Provisioned", "status": "Unknown", "reason": "Pending",
            "message": format!("write {n}"), "lastTransitionTime": "2026-12-01T00:00:00Z",
        }],
    }})
}

/// Runs the scenario (see the module docs).
///
/// # Errors
/// A broken set-up: the control plane, haproxy or a replica does not start, or a replica does
/// not come back; the message says which. Failed writes are not errors: they are the report.
pub async fn run(opts: &Options) -> Result<Report, String> {
    let cp = ControlPlane::start().map_err(|e| format!("control plane: {e}"))?;
    cp.create_namespace(NS).await;
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml"))
        .map_err(|e| format!("manifests/crd.yaml: {e}"))?;
    cp.install_crds(&crd).await.map_err(|e| e.to_string())?;
    let admin = cp.admin().await;
    let runtimes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &runtime_resource());
    let sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml"))
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    for i in 0..opts.runtimes {
        let mut o = sample.clone();
        o["metadata"]["name"] = json!(format!("rt-{i}"));
        o["metadata"]["namespace"] = json!(NS);
        let o: DynamicObject = serde_json::from_value(o).map_err(|e| e.to_string())?;
        runtimes
            .create(&PostParams::default(), &o)
            .await
            .map_err(|e| format!("create rt-{i}: {e}"))?;
    }

    // Certificates as a mounted Secret: both replicas read the same volume.
    let certs = WebhookCerts::generate();
    let (cert, key) = certs.reissue();
    let mut volume = KubeletDir::new(&cert, &key);
    let mut replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|n| {
            let cgroup = match opts.cpu {
                Some(l) => Some(CpuGroup::new(
                    &format!("kim-rollout-{}-{n}", std::process::id()),
                    l.period_us,
                    l.quota_us,
                )?),
                None => None,
            };
            Ok(Replica {
                name: n.to_string(),
                addr: free_addr()?,
                metrics: free_addr()?,
                process: None,
                cgroup,
            })
        })
        .collect::<Result<_, String>>()?;
    let mut incarnation: BTreeMap<String, u32> = BTreeMap::new();
    for r in &mut replicas {
        r.start(
            &opts.kim,
            volume.path(),
            opts.shutdown_delay_secs,
            &opts.webhook_args,
        )?;
        incarnation.insert(r.name.clone(), 0);
        wait_ready(r.metrics, Duration::from_secs(60)).await?;
    }
    let lb = Haproxy::start(
        &replicas
            .iter()
            .map(|r| Backend {
                name: r.name.clone(),
                addr: r.addr,
                health: r.metrics,
            })
            .collect::<Vec<_>>(),
        opts.health_check,
    )
    .await?;
    for r in &replicas {
        lb.wait_server(&r.name, true, Duration::from_secs(10))
            .await?;
    }
    let text = std::fs::read_to_string(repo().join("manifests/base/webhook-configurations.yaml"))
        .map_err(|e| e.to_string())?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
    for mut d in docs.into_iter().filter(|d| !d.is_null()) {
        point_webhooks_at(&mut d, lb.addr, &certs.ca_pem);
        apply(&admin, &d).await?;
    }
    // In effect once a write is refused by the validating webhook (Ready with no condition).
    let started = Instant::now();
    loop {
        let r = runtimes
            .patch_status(
                "rt-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"state": "Ready"}})),
            )
            .await;
        match r {
            Err(kube::Error::Api(s)) if s.message.contains("runtime-status.validate") => break,
            Ok(_) => {
                // Stored before the configuration took effect: put back a status the next
                // probe can fail on.
                let _ = runtimes
                    .patch_status(
                        "rt-0",
                        &PatchParams::default(),
                        &Patch::Merge(status_patch(0)),
                    )
                    .await;
            }
            Err(_) => {}
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the webhooks did not take effect within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Scrape every replica every 200 ms.
    let seen: Seen = Arc::new(Mutex::new(BTreeMap::new()));
    let before_kim: BTreeMap<String, f64> = {
        let mut sum = BTreeMap::new();
        for r in &replicas {
            for (k, v) in kim_counts(&scrape(r.metrics).await.unwrap_or_default()) {
                *sum.entry(k).or_insert(0.0) += v;
            }
        }
        sum
    };
    let before_api = apiserver_counters(&admin).await?;
    let before_throttling: BTreeMap<String, (u64, u64, u64)> = replicas
        .iter()
        .filter_map(|r| Some((r.name.clone(), r.cgroup.as_ref()?.throttling())))
        .collect();
    let load_average_start = load_average();

    // The load: open loop, each write spawned at its scheduled time.
    let load_start = Instant::now();
    let results: Results = Arc::default();
    let period = Duration::from_secs_f64(1.0 / opts.rate);
    let total = (opts.rate * opts.seconds).round() as u64;
    let load = {
        let (runtimes, results, n_rt) = (runtimes.clone(), results.clone(), opts.runtimes);
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for n in 0..total {
                let due = load_start + period * n as u32;
                tokio::time::sleep_until(due.into()).await;
                let (api, results) = (runtimes.clone(), results.clone());
                tasks.push(tokio::spawn(async move {
                    let name = format!("rt-{}", n as usize % n_rt);
                    let r = api
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(status_patch(n)),
                        )
                        .await;
                    let out = match r {
                        Ok(_) => Ok(due.elapsed()),
                        Err(e) => Err(e.to_string()),
                    };
                    results.lock().unwrap().push((due, out));
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    };
    let in_flight_max: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let scraper = {
        let seen = seen.clone();
        let in_flight_max = in_flight_max.clone();
        let slots: Vec<(String, SocketAddr)> = replicas
            .iter()
            .map(|r| (r.name.clone(), r.metrics))
            .collect();
        let inc = Arc::new(Mutex::new(incarnation.clone()));
        let inc2 = inc.clone();
        let handle = tokio::spawn(async move {
            loop {
                for (name, addr) in &slots {
                    if let Some(text) = scrape(*addr).await {
                        let i = inc2.lock().unwrap()[name];
                        let counts = kim_counts(&text);
                        let now = counts.get(IN_FLIGHT).copied().unwrap_or(0.0) as i64;
                        let mut max = in_flight_max.lock().unwrap();
                        let m = max.entry(name.clone()).or_insert(0);
                        *m = (*m).max(now);
                        seen.lock().unwrap().insert((name.clone(), i), counts);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        (handle, inc)
    };

    let mut events = Vec::new();
    let n_faults = opts.faults.len() as f64;
    for (i, fault) in opts.faults.iter().enumerate() {
        let at = Duration::from_secs_f64(opts.seconds * (i as f64 + 1.0) / (n_faults + 1.0));
        tokio::time::sleep_until((load_start + at).into()).await;
        match fault {
            Fault::RollingRestart => {
                for r in &mut replicas {
                    events.push((load_start.elapsed(), format!("SIGTERM {}", r.name)));
                    let p = r.process.as_mut().ok_or("no process")?;
                    p.signal("TERM");
                    lb.wait_server(&r.name, false, Duration::from_secs(10))
                        .await?;
                    events.push((load_start.elapsed(), format!("{} out of haproxy", r.name)));
                    // Its last counts, while it still serves /metrics.
                    while p.exited().is_none() {
                        if let Some(text) = scrape(r.metrics).await {
                            let i = scraper.1.lock().unwrap()[&r.name];
                            seen.lock()
                                .unwrap()
                                .insert((r.name.clone(), i), kim_counts(&text));
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    events.push((load_start.elapsed(), format!("{} exited", r.name)));
                    start_again(
                        r,
                        opts,
                        volume.path(),
                        &lb,
                        &scraper.1,
                        &mut events,
                        load_start,
                    )
                    .await?;
                }
            }
            Fault::RotateCertificate => {
                let (cert, key) = certs.reissue();
                let new_der = crate::tls::der_of(&cert);
                volume.swap(&cert, &key);
                events.push((load_start.elapsed(), "certificate swapped".into()));
                for r in &replicas {
                    let probe = crate::tls::builder(&[certs.ca_pem.as_str()], r.addr, true)
                        .pool_max_idle_per_host(0)
                        .build()
                        .map_err(|e| e.to_string())?;
                    let since = Instant::now();
                    loop {
                        if let Ok(resp) =
                            probe.get(crate::tls::url(r.addr, "/healthz")).send().await
                            && crate::tls::peer_cert(&resp) == new_der
                        {
                            break;
                        }
                        if since.elapsed() > Duration::from_secs(30) {
                            return Err(format!(
                                "{} did not serve the new certificate within 30 s",
                                r.name
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    events.push((
                        load_start.elapsed(),
                        format!("{} serves the new certificate", r.name),
                    ));
                }
            }
            Fault::KillOne => {
                let r = replicas.last_mut().ok_or("no replica")?;
                let p = r.process.as_mut().ok_or("no process")?;
                p.kill();
                events.push((load_start.elapsed(), format!("SIGKILL {}", r.name)));
                lb.wait_server(&r.name, false, Duration::from_secs(10))
                    .await?;
                events.push((load_start.elapsed(), format!("{} out of haproxy", r.name)));
                start_again(
                    r,
                    opts,
                    volume.path(),
                    &lb,
                    &scraper.1,
                    &mut events,
                    load_start,
                )
                .await?;
            }
        }
    }
    load.await.map_err(|e| e.to_string())?;
    // A last scrape of the replicas serving now, then stop the scraper.
    for r in &replicas {
        if let Some(text) = scrape(r.metrics).await {
            let i = scraper.1.lock().unwrap()[&r.name];
            seen.lock()
                .unwrap()
                .insert((r.name.clone(), i), kim_counts(&text));
        }
    }
    scraper.0.abort();
    let after_api = apiserver_counters(&admin).await?;
    let load_average_end = load_average();

    let mut report = Report {
        events,
        load_average: (load_average_start, load_average_end),
        ..Report::default()
    };
    for r in &replicas {
        if let (Some(g), Some(b)) = (&r.cgroup, before_throttling.get(&r.name)) {
            let a = g.throttling();
            report
                .throttling
                .insert(r.name.clone(), (a.0 - b.0, a.1 - b.1, a.2 - b.2));
        }
    }
    report.in_flight_max = in_flight_max.lock().unwrap().clone();
    for (due, r) in results.lock().unwrap().drain(..) {
        report.sent += 1;
        match r {
            Ok(l) => {
                report.ok += 1;
                report.latencies.push(l);
            }
            Err(message) => report.failed.push(Failure {
                at: due.saturating_duration_since(load_start),
                message,
            }),
        }
    }
    report.latencies.sort();
    report.failed.sort_by_key(|f| f.at);
    for (k, v) in &after_api {
        let d = v - before_api.get(k).copied().unwrap_or(0.0);
        if d != 0.0 {
            report.apiserver.insert(k.clone(), d);
        }
    }
    for counts in seen.lock().unwrap().values() {
        for (k, v) in counts.iter().filter(|(k, _)| *k != IN_FLIGHT) {
            *report.kim.entry(k.clone()).or_insert(0.0) += v;
        }
    }
    for (k, v) in before_kim.into_iter().filter(|(k, _)| k != IN_FLIGHT) {
        *report.kim.entry(k).or_insert(0.0) -= v;
    }
    for r in &mut replicas {
        if let Some(mut p) = r.process.take() {
            p.terminate(Duration::from_secs(10));
        }
    }
    drop(lb);
    Ok(report)
}
