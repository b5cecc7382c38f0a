//! kim on the real control plane: starts etcd and kube-apiserver (`testenv::controlplane`) on
//! loopback and measures three parts in one run.
//!
//! 1. **Admission** (`admission`): paced JSON merge patches on `runtimes/status` (a whole `Ready`
//!    status, one condition message changed per write so that every write is a change), open
//!    loop, each latency from the scheduled send time, in four set-ups switched on the same
//!    server: (a) no admission, (b) the generated ValidatingAdmissionPolicy, (c) kim's webhooks as
//!    shipped pointed at one `kim webhook` process, (d) both. A set-up counts as in force once two
//!    probe writes in a row show it (kim's counters move, a writer the model does not list is
//!    refused or not): kube-apiserver's policy metrics count refusals only, so they cannot tell.
//!    Rounds visit every set-up, in reverse order every other round. Per set-up and rate: client
//!    latencies, CPU per 1 000 writes of every process, and kube-apiserver's own webhook and
//!    admission-step durations.
//! 2. **Controller at scale** (`scale`): kim's CRD and `manifests/base` installed, the controller
//!    as its ServiceAccount with the shipped RBAC, Gardener and one runtime cluster as testenv
//!    servers in this process. N Runtimes created through kube-apiserver are provisioned by a cold
//!    controller; a second cold start with all `Ready` gives the first complete reconcile pass.
//! 3. **`kim audit`** (`audit`): the Runtimes of [`audit_seed`] written through kube-apiserver
//!    and audited under GNU time.
//!
//! Everything shares the machine's cores; the CPU rows say who used them. Environment variables,
//! commands and figures: BENCHMARKS.md, "kim on a real kube-apiserver". The targets are printed as
//! met / NOT met; only a broken set-up (a process that does not start, a set-up that does not come
//! into force, a phase that never ends) stops the run.

#[path = "support/audit_seed.rs"]
mod audit_seed;
#[path = "support/procinfo.rs"]
mod procinfo;

use anyhow::{Context, anyhow, bail, ensure};
use futures::StreamExt;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::controlplane::{ControlPlane, WebhookCerts, point_webhooks_at};
use testenv::gardener::{GardenerConfig, GardenerSim};
use testenv::process::Process;
use testenv::{Gvr, ServerConfig, ServerHandle, UserInfo, Verb};

const NS: &str = "kcp-system";
const GROUP: &str = "infrastructuremanager.kyma-project.io";
const SHOOT_ADMIN_TOKEN: &str = "shoot-admin-token";
/// The Runtime the set-up probes write to (never one of the measured ones).
const PROBE: &str = "bench-probe";
/// A write that takes longer counts as an error.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The rate the targets are judged at (the nearest measured one).
const TARGET_RATE: f64 = 200.0;

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = Config::from_env()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(bench(cfg))
}

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    parts: Vec<String>,
    rates: Vec<f64>,
    secs: Duration,
    warmup: Duration,
    rounds: u32,
    objects: usize,
    sizes: Vec<usize>,
    step: Duration,
    rest: Duration,
    timeout: Duration,
    seed_concurrency: usize,
    audit_runtimes: usize,
    audit_runs: usize,
}

fn env_num(name: &str, default: f64) -> anyhow::Result<f64> {
    match std::env::var(name) {
        Ok(v) => {
            let x: f64 = v.trim().parse().with_context(|| format!("{name}={v:?}"))?;
            ensure!(x >= 0.0 && x.is_finite(), "{name}={v:?}: not a number >= 0");
            Ok(x)
        }
        Err(_) => Ok(default),
    }
}

fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> anyhow::Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    let v = std::env::var(name).unwrap_or_else(|_| default.to_string());
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<T>().map_err(|e| anyhow!("{name}={v:?}: {e}")))
        .collect()
}

impl Config {
    fn from_env() -> anyhow::Result<Config> {
        let secs = |name: &str, d: f64| env_num(name, d).map(Duration::from_secs_f64);
        let cfg = Config {
            parts: env_list("APISERVER_BENCH_PARTS", "admission,scale,audit")?,
            rates: env_list("APISERVER_BENCH_RATES", "50,200,500")?,
            secs: secs("APISERVER_BENCH_SECS", 10.0)?,
            warmup: secs("APISERVER_BENCH_WARMUP_SECS", 2.0)?,
            rounds: (env_num("APISERVER_BENCH_ROUNDS", 2.0)? as u32).max(1),
            objects: (env_num("APISERVER_BENCH_OBJECTS", 100.0)? as usize).max(1),
            sizes: env_list("APISERVER_BENCH_SIZES", "1000,10000")?,
            step: Duration::from_millis(env_num("APISERVER_BENCH_STEP_MS", 500.0)? as u64),
            rest: secs("APISERVER_BENCH_REST_SECS", 10.0)?,
            timeout: secs("APISERVER_BENCH_TIMEOUT_SECS", 3600.0)?,
            seed_concurrency: (env_num("APISERVER_BENCH_SEED_CONCURRENCY", 16.0)? as usize).max(1),
            audit_runtimes: env_num("APISERVER_BENCH_AUDIT_RUNTIMES", 10_000.0)? as usize,
            audit_runs: (env_num("APISERVER_BENCH_AUDIT_RUNS", 3.0)? as usize).max(1),
        };
        ensure!(!cfg.secs.is_zero(), "APISERVER_BENCH_SECS must be > 0");
        ensure!(
            cfg.rates.iter().all(|r| *r >= 1.0),
            "APISERVER_BENCH_RATES must be >= 1"
        );
        for p in &cfg.parts {
            ensure!(
                ["admission", "scale", "audit"].contains(&p.as_str()),
                "APISERVER_BENCH_PARTS: unknown part {p:?}"
            );
        }
        Ok(cfg)
    }

    fn part(&self, name: &str) -> bool {
        self.parts.iter().any(|p| p == name)
    }
}

// ---------------------------------------------------------------------------------------------
// Processes and the machine

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// CPU seconds of the processes of one measurement, in a fixed order.
#[derive(Clone, Copy, Default)]
struct Cpu {
    apiserver: f64,
    etcd: f64,
    kim: f64,
    bench: f64,
}

impl Cpu {
    fn now(cp: &ControlPlane, kim: Option<u32>) -> Cpu {
        let (etcd, api) = cp.pids();
        Cpu {
            apiserver: procinfo::cpu_secs(api).unwrap_or(f64::NAN),
            etcd: procinfo::cpu_secs(etcd).unwrap_or(f64::NAN),
            kim: kim.map_or(0.0, |pid| procinfo::cpu_secs(pid).unwrap_or(f64::NAN)),
            bench: procinfo::cpu_secs(std::process::id()).unwrap_or(f64::NAN),
        }
    }

    fn minus(self, o: Cpu) -> Cpu {
        Cpu {
            apiserver: self.apiserver - o.apiserver,
            etcd: self.etcd - o.etcd,
            kim: self.kim - o.kim,
            bench: self.bench - o.bench,
        }
    }

    fn plus(self, o: Cpu) -> Cpu {
        Cpu {
            apiserver: self.apiserver + o.apiserver,
            etcd: self.etcd + o.etcd,
            kim: self.kim + o.kim,
            bench: self.bench + o.bench,
        }
    }

    fn total(self) -> f64 {
        self.apiserver + self.etcd + self.kim + self.bench
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus text

/// One scrape: value by series (`name{labels}` as printed).
type Metrics = HashMap<String, f64>;

fn parse_metrics(text: &str) -> Metrics {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse::<f64>().ok()?))
        })
        .collect()
}

/// `after − before`, series by series (a series missing before counts from 0).
fn delta(after: &Metrics, before: &Metrics) -> Metrics {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

fn add_into(into: &mut Metrics, m: &Metrics) {
    for (k, v) in m {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// The name and labels of a series.
fn split_series(series: &str) -> (&str, BTreeMap<String, String>) {
    let Some((name, rest)) = series.split_once('{') else {
        return (series, BTreeMap::new());
    };
    let body = rest.strip_suffix('}').unwrap_or(rest);
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_string(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    (name, labels)
}

/// Sum of the series of metric `name` whose labels satisfy `pred`.
fn sum_where(m: &Metrics, name: &str, pred: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
    m.iter()
        .filter_map(|(k, v)| {
            let (n, labels) = split_series(k);
            (n == name && pred(&labels)).then_some(*v)
        })
        .sum()
}

/// A histogram's difference over a pass, summed over the series `pred` selects.
struct Hist {
    count: f64,
    sum: f64,
    /// (upper bound, cumulative count), ascending.
    buckets: Vec<(f64, f64)>,
}

fn hist(m: &Metrics, base: &str, pred: impl Fn(&BTreeMap<String, String>) -> bool) -> Hist {
    let count = sum_where(m, &format!("{base}_count"), &pred);
    let sum = sum_where(m, &format!("{base}_sum"), &pred);
    let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    let bucket = format!("{base}_bucket");
    for (k, v) in m {
        let (n, labels) = split_series(k);
        if n != bucket || !pred(&labels) {
            continue;
        }
        let le = match labels.get("le").map(String::as_str) {
            Some("+Inf") | None => f64::INFINITY,
            Some(x) => x.parse().unwrap_or(f64::INFINITY),
        };
        by_le.entry(le.to_bits()).or_insert((le, 0.0)).1 += v;
    }
    let mut buckets: Vec<(f64, f64)> = by_le.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Hist {
        count,
        sum,
        buckets,
    }
}

impl Hist {
    fn mean_ms(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count * 1e3
        } else {
            f64::NAN
        }
    }

    /// The share of observations at or below `le` seconds (a bucket bound).
    fn share_le(&self, le: f64) -> f64 {
        let below = self
            .buckets
            .iter()
            .find(|(b, _)| (*b - le).abs() < 1e-12)
            .map_or(f64::NAN, |(_, c)| *c);
        if self.count > 0.0 {
            below / self.count
        } else {
            f64::NAN
        }
    }

    /// A quantile by linear interpolation within its bucket, as PromQL's
    /// `histogram_quantile` does (coarse: kube-apiserver's first bucket ends at 5 ms).
    fn quantile_ms(&self, q: f64) -> f64 {
        if self.count <= 0.0 {
            return f64::NAN;
        }
        let rank = q * self.count;
        let mut prev = (0.0, 0.0);
        for &(le, c) in &self.buckets {
            if c >= rank {
                if le.is_infinite() {
                    return prev.0 * 1e3;
                }
                let within = if c > prev.1 {
                    (rank - prev.1) / (c - prev.1)
                } else {
                    0.0
                };
                return (prev.0 + (le - prev.0) * within) * 1e3;
            }
            prev = (le, c);
        }
        f64::NAN
    }
}

/// kube-apiserver's `/metrics`, read as the admin.
struct ApiMetrics {
    http: reqwest::Client,
    url: String,
}

impl ApiMetrics {
    fn new(cp: &ControlPlane) -> anyhow::Result<ApiMetrics> {
        Ok(ApiMetrics {
            http: cp.http_client(cp.admin_cert())?,
            url: format!("{}/metrics", cp.url()),
        })
    }

    async fn scrape(&self) -> anyhow::Result<Metrics> {
        let text = self
            .http
            .get(&self.url)
            .send()
            .await
            .context("kube-apiserver /metrics")?
            .error_for_status()?
            .text()
            .await?;
        Ok(parse_metrics(&text))
    }
}

/// A process's `/metrics` on plain HTTP.
async fn scrape_http(addr: SocketAddr) -> anyhow::Result<Metrics> {
    let text = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()?
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .with_context(|| format!("GET http://{addr}/metrics"))?
        .text()
        .await?;
    Ok(parse_metrics(&text))
}

/// `apiserver_request_total` of resource requests (non-resource ones such as `/metrics` left
/// out), summed by verb.
fn requests_by_verb(m: &Metrics) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let (n, labels) = split_series(k);
        if n != "apiserver_request_total" || labels.get("resource").is_none_or(|r| r.is_empty()) {
            continue;
        }
        *out.entry(labels.get("verb").cloned().unwrap_or_default())
            .or_default() += v;
    }
    out.retain(|_, v| *v > 0.0);
    out
}

/// `apiserver_request_total` of resource requests, by (verb, resource[/subresource]).
fn requests_by_resource(m: &Metrics) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let (n, labels) = split_series(k);
        let resource = labels.get("resource").cloned().unwrap_or_default();
        if n != "apiserver_request_total" || resource.is_empty() {
            continue;
        }
        let sub = labels.get("subresource").cloned().unwrap_or_default();
        let what = if sub.is_empty() {
            resource
        } else {
            format!("{resource}/{sub}")
        };
        *out.entry((labels.get("verb").cloned().unwrap_or_default(), what))
            .or_default() += v;
    }
    out.retain(|_, v| *v > 0.0);
    out
}

fn status_writes(m: &Metrics) -> f64 {
    sum_where(m, "apiserver_request_total", |l| {
        l.get("resource").is_some_and(|r| r == "runtimes")
            && l.get("subresource").is_some_and(|s| s == "status")
            && l.get("verb")
                .is_some_and(|v| v == "PUT" || v == "PATCH" || v == "APPLY")
    })
}

/// Status writes by answer code (`200`, `409`, …).
fn status_writes_by_code(m: &Metrics) -> String {
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in m {
        let (n, l) = split_series(k);
        if n == "apiserver_request_total"
            && l.get("resource").is_some_and(|r| r == "runtimes")
            && l.get("subresource").is_some_and(|s| s == "status")
            && l.get("verb")
                .is_some_and(|v| v == "PUT" || v == "PATCH" || v == "APPLY")
        {
            *by.entry(l.get("code").cloned().unwrap_or_default())
                .or_default() += v;
        }
    }
    by.retain(|_, v| *v > 0.0);
    by.iter()
        .map(|(c, n)| format!("{c}: {n:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn verbs_line(by_verb: &BTreeMap<String, f64>, per: f64) -> String {
    by_verb
        .iter()
        .map(|(v, n)| {
            if per > 0.0 {
                format!("{v} {n:.0} ({:.2}/Runtime)", n / per)
            } else {
                format!("{v} {n:.0}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// Objects on the real server

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Runtime"), "runtimes")
}

/// The cluster-scoped admissionregistration resource of `kind`.
fn admission_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &match kind.to_lowercase() {
            k if k.ends_with('y') => format!("{}ies", &k[..k.len() - 1]),
            k => format!("{k}s"),
        },
    )
}

fn name_of(doc: &Value) -> String {
    doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn apply_doc(client: &kube::Client, doc: &Value) -> anyhow::Result<()> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &admission_resource(kind));
    api.patch(
        &name_of(doc),
        &PatchParams::apply("kim-bench").force(),
        &Patch::Apply(doc),
    )
    .await
    .with_context(|| format!("applying {kind} {}", name_of(doc)))?;
    Ok(())
}

async fn delete_doc(client: &kube::Client, doc: &Value) -> anyhow::Result<()> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &admission_resource(kind));
    match api.delete(&name_of(doc), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(anyhow!("deleting {kind} {}: {e}", name_of(doc))),
    }
}

/// The `aws-minimal` sample as Runtime `name` of `kcp-system` with Shoot name and runtime id
/// `shoot` (no status).
fn runtime_object(template: &Value, name: &str, shoot: &str) -> Value {
    let mut o = template.clone();
    o["metadata"]["name"] = json!(name);
    o["metadata"]["namespace"] = json!(NS);
    let labels = &mut o["metadata"]["labels"];
    labels["kyma-project.io/runtime-id"] = json!(format!("rid-{shoot}"));
    labels["kyma-project.io/shoot-name"] = json!(shoot);
    o["spec"]["shoot"]["name"] = json!(shoot);
    o
}

fn load_template() -> anyhow::Result<Value> {
    let path = audit_seed::samples_dir().join("runtimes/aws-minimal.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).context("aws-minimal.yaml")
}

fn cond(t: &str, s: &str, r: &str, msg: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": msg,
           "lastTransitionTime": "2026-11-02T10:00:00Z", "observedGeneration": 1})
}

/// A `Ready` status as kim's controller writes it; write `n` shows in the first condition's
/// message, so that every write changes the status.
fn ready_status(n: u64) -> Value {
    json!({"state": "Ready", "provisioningCompleted": true, "conditions": [
        cond("Provisioned", "True", "ShootCreationCompleted",
             &format!("Gardener finished creating the Shoot (write {n})")),
        cond("KubeconfigReady", "True", "KubeconfigCreated", "Kubeconfig Secret written"),
        cond("Configured", "True", "AdministratorsConfigured", "Administrators configured"),
    ]})
}

fn status_path(ns: &str, name: &str) -> String {
    format!("/apis/{GROUP}/v1/namespaces/{ns}/runtimes/{name}/status")
}

/// One merge patch on `/status`; the error as text.
async fn patch_status(
    client: &kube::Client,
    ns: &str,
    name: &str,
    status: &Value,
) -> Result<(), String> {
    let body = serde_json::to_vec(&json!({ "status": status })).map_err(|e| e.to_string())?;
    let req = http::Request::patch(status_path(ns, name))
        .header("Content-Type", "application/merge-patch+json")
        .header("Accept", "application/json")
        .body(body)
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(WRITE_TIMEOUT, client.request_text(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) => Err(format!("{} {}", s.code, s.message)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {WRITE_TIMEOUT:?}")),
    }
}

/// Creates `objects` (through kube-apiserver, `concurrency` in flight), then writes the status
/// each carries, if any. Returns the names whose status the server refused, with the first
/// refusal.
async fn seed(
    client: &kube::Client,
    objects: Vec<Value>,
    concurrency: usize,
) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let refused = Arc::new(Mutex::new((Vec::new(), None::<String>)));
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(objects)
        .map(|mut obj| {
            let client = client.clone();
            let refused = refused.clone();
            async move {
                let status = obj.as_object_mut().and_then(|o| o.remove("status"));
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(NS)
                    .to_string();
                let name = name_of(&obj);
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &ns, &runtime_resource());
                let dynamic: DynamicObject = serde_json::from_value(obj)?;
                api.create(&PostParams::default(), &dynamic)
                    .await
                    .with_context(|| format!("creating Runtime {ns}/{name}"))?;
                if let Some(status) = status
                    && let Err(e) = patch_status(&client, &ns, &name, &status).await
                {
                    ensure!(e.starts_with("422"), "status of {ns}/{name}: {e}");
                    let mut r = refused.lock().unwrap();
                    r.0.push(name);
                    r.1.get_or_insert(e);
                }
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for r in results {
        r?;
    }
    let r = std::mem::take(&mut *refused.lock().unwrap());
    Ok(r)
}

async fn create_namespace(cp: &ControlPlane, name: &str) {
    cp.create_namespace(name).await;
}

async fn install_crd(cp: &ControlPlane) -> anyhow::Result<()> {
    let crd =
        std::fs::read_to_string(repo().join("manifests/crd.yaml")).context("manifests/crd.yaml")?;
    cp.install_crds(&crd).await.map_err(|e| anyhow!(e))?;
    Ok(())
}

/// `kim webhook` as a process (its certificates in `certs`), with its addresses.
struct Webhook {
    proc: Process,
    addr: SocketAddr,
    metrics_addr: SocketAddr,
}

impl Webhook {
    async fn start(certs: &WebhookCerts) -> anyhow::Result<Webhook> {
        let mut args = testenv::process::kim_webhook_args(certs.dir.path(), false);
        args.extend(["--log-format".into(), "json".into()]);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
        cmd.args(&args).env_remove("RUST_LOG");
        let mut proc = Process::spawn(&mut cmd).context("spawning kim webhook")?;
        let limit = Duration::from_secs(60);
        let addr = proc.logged("addr", limit).await.map_err(|e| anyhow!(e))?;
        let metrics_addr = proc
            .logged("metrics_addr", limit)
            .await
            .map_err(|e| anyhow!(e))?;
        Ok(Webhook {
            proc,
            addr: addr.parse()?,
            metrics_addr: metrics_addr.parse()?,
        })
    }

    /// Reviews answered on `/mutate` and on `/validate` so far.
    async fn counts(&self) -> anyhow::Result<(f64, f64)> {
        let m = scrape_http(self.metrics_addr).await?;
        let on = |path: &str| {
            sum_where(&m, "kim_webhook_requests_total", |l| {
                l.get("path").is_some_and(|p| p == path)
            })
        };
        Ok((on("/mutate"), on("/validate")))
    }
}

/// What a probe write showed in force.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct InForce {
    vap: bool,
    mutate: bool,
    validate: bool,
}

/// Probe writes to Runtime [`PROBE`] until two in a row show `want` (at most 60 s): one as the
/// admin (kim's `/mutate` and `/validate` counters move when the webhooks are called), one as
/// `mallory` (allowed by RBAC, not an allowed writer of the status model: refused by the
/// policy, else by the validating webhook, else stored; kube-apiserver runs the policies before
/// the validating webhooks). Without `mallory` the policy is not probed (`want.vap` false).
async fn wait_in_force(
    client: &kube::Client,
    mallory: Option<&kube::Client>,
    webhook: &Webhook,
    want: InForce,
    seq: &AtomicU64,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut streak = 0;
    loop {
        let k0 = webhook.counts().await?;
        patch_status(
            client,
            NS,
            PROBE,
            &ready_status(seq.fetch_add(1, Ordering::Relaxed)),
        )
        .await
        .map_err(|e| anyhow!("probe write: {e}"))?;
        let k1 = webhook.counts().await?;
        let vap = match mallory {
            None => false,
            Some(m) => {
                match patch_status(
                    m,
                    NS,
                    PROBE,
                    &ready_status(seq.fetch_add(1, Ordering::Relaxed)),
                )
                .await
                {
                    Ok(()) => false,
                    Err(e) if e.contains("ValidatingAdmissionPolicy") => true,
                    Err(e) if e.contains("runtime-status.validate.kim.kyma-project.io") => false,
                    Err(e) => bail!("probe write as mallory: {e}"),
                }
            }
        };
        let seen = InForce {
            vap,
            mutate: k1.0 > k0.0,
            validate: k1.1 > k0.1,
        };
        streak = if seen == want { streak + 1 } else { 0 };
        if streak >= 2 {
            return Ok(t0.elapsed());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "set-up {want:?} not in force after 60 s; the last probe showed {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A user RBAC lets write Runtimes' status who is not an allowed writer of the status model.
async fn mallory(cp: &ControlPlane) -> anyhow::Result<kube::Client> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let admin = cp.admin().await;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "rules": [{"apiGroups": [GROUP], "resources": ["runtimes", "runtimes/status"],
                   "verbs": ["get", "update", "patch"]}],
    }))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .context("ClusterRole")?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "runtime-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin)
        .create(&PostParams::default(), &binding)
        .await
        .context("ClusterRoleBinding")?;
    Ok(cp.client(&cp.user("mallory", &[])).await)
}

// ---------------------------------------------------------------------------------------------
// Part 1: admission

struct Setup {
    label: &'static str,
    vap: bool,
    hooks: bool,
}

const SETUPS: [Setup; 4] = [
    Setup {
        label: "(a) none",
        vap: false,
        hooks: false,
    },
    Setup {
        label: "(b) VAP",
        vap: true,
        hooks: false,
    },
    Setup {
        label: "(c) webhooks",
        vap: false,
        hooks: true,
    },
    Setup {
        label: "(d) VAP+webhooks",
        vap: true,
        hooks: true,
    },
];

/// One set-up at one rate, pooled over the rounds.
#[derive(Default)]
struct Pass {
    writes: u64,
    errors: u64,
    first_error: Option<String>,
    latencies_ns: Vec<u64>,
    window_s: f64,
    cpu: Cpu,
    metrics: Metrics,
}

impl Pass {
    fn add(&mut self, o: Pass) {
        self.writes += o.writes;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.latencies_ns.extend(o.latencies_ns);
        self.window_s += o.window_s;
        self.cpu = self.cpu.plus(o.cpu);
        add_into(&mut self.metrics, &o.metrics);
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        let lat = &self.latencies_ns;
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1e6
    }

    /// CPU seconds per 1 000 writes.
    fn per_k(&self, cpu: f64) -> f64 {
        cpu / self.writes.max(1) as f64 * 1000.0
    }
}

/// The admission part's control plane, webhook process and objects.
struct AdmissionEnv {
    cp: ControlPlane,
    client: kube::Client,
    api: ApiMetrics,
    _certs: WebhookCerts,
    webhook: Webhook,
    hook_docs: Vec<Value>,
    vap_docs: Vec<Value>,
    names: Vec<String>,
    mallory: kube::Client,
    seq: AtomicU64,
}

impl AdmissionEnv {
    async fn start(cfg: &Config) -> anyhow::Result<AdmissionEnv> {
        let cp = ControlPlane::start().context("control plane")?;
        create_namespace(&cp, NS).await;
        install_crd(&cp).await?;
        let client = cp.admin().await;
        let api = ApiMetrics::new(&cp)?;
        let certs = WebhookCerts::generate();
        let webhook = Webhook::start(&certs).await?;
        let text =
            std::fs::read_to_string(repo().join("manifests/base/webhook-configurations.yaml"))
                .context("manifests/base/webhook-configurations.yaml")?;
        let mut hook_docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).context("webhook configurations")?;
        hook_docs.retain(|d| !d.is_null());
        for d in &mut hook_docs {
            point_webhooks_at(d, webhook.addr, &certs.ca_pem);
        }
        let vap_docs = kim::status::vap::objects(&kim::status::Policy::builtin(), None);
        let template = load_template()?;
        let names: Vec<String> = (0..cfg.objects).map(|i| format!("paced-{i:04}")).collect();
        let objects: Vec<Value> = names
            .iter()
            .map(String::as_str)
            .chain([PROBE])
            .map(|n| {
                let mut o = runtime_object(&template, n, n);
                o["status"] = ready_status(0);
                o
            })
            .collect();
        let (refused, first) = seed(&client, objects, 16).await?;
        ensure!(
            refused.is_empty(),
            "the server refused the first Ready status: {first:?}"
        );
        let mallory = mallory(&cp).await?;
        Ok(AdmissionEnv {
            mallory,
            cp,
            client,
            api,
            _certs: certs,
            webhook,
            hook_docs,
            vap_docs,
            names,
            seq: AtomicU64::new(1),
        })
    }

    /// Installs or removes the policy and the webhook configurations, then waits until a
    /// probe shows the set-up in force.
    async fn configure(&self, s: &Setup) -> anyhow::Result<Duration> {
        for d in &self.vap_docs {
            if s.vap {
                apply_doc(&self.client, d).await?;
            } else {
                delete_doc(&self.client, d).await?;
            }
        }
        for d in &self.hook_docs {
            if s.hooks {
                apply_doc(&self.client, d).await?;
            } else {
                delete_doc(&self.client, d).await?;
            }
        }
        let want = InForce {
            vap: s.vap,
            mutate: s.hooks,
            validate: s.hooks,
        };
        wait_in_force(
            &self.client,
            Some(&self.mallory),
            &self.webhook,
            want,
            &self.seq,
        )
        .await
    }

    /// `secs` of writes at `rate`, open loop; latencies from the scheduled send times.
    async fn paced(&self, rate: f64, secs: Duration) -> anyhow::Result<Pass> {
        let n = (rate * secs.as_secs_f64()).round().max(1.0) as u64;
        let period = Duration::from_secs_f64(1.0 / rate);
        let m0 = self.api.scrape().await?;
        let cpu0 = Cpu::now(&self.cp, Some(self.webhook.proc.id()));
        let start = Instant::now() + Duration::from_millis(20);
        let mut tasks = Vec::with_capacity(n as usize);
        for i in 0..n {
            let due = start + period.mul_f64(i as f64);
            tokio::time::sleep_until(due.into()).await;
            let client = self.client.clone();
            let name = self.names[i as usize % self.names.len()].clone();
            let k = self.seq.fetch_add(1, Ordering::Relaxed);
            tasks.push(tokio::spawn(async move {
                let r = patch_status(&client, NS, &name, &ready_status(k)).await;
                (due.elapsed(), r)
            }));
        }
        let mut pass = Pass::default();
        for t in tasks {
            let (took, r) = t.await.context("write task")?;
            pass.writes += 1;
            pass.latencies_ns.push(took.as_nanos() as u64);
            if let Err(e) = r {
                pass.errors += 1;
                pass.first_error.get_or_insert(e);
            }
        }
        let window = start.elapsed();
        let cpu1 = Cpu::now(&self.cp, Some(self.webhook.proc.id()));
        let m1 = self.api.scrape().await?;
        pass.window_s = window.as_secs_f64();
        pass.cpu = cpu1.minus(cpu0);
        pass.metrics = delta(&m1, &m0);
        Ok(pass)
    }
}

async fn admission_part(cfg: &Config) -> anyhow::Result<()> {
    println!(
        "== 1. admission on runtimes/status: paced merge patches on /status to {} Runtimes, rates {:?}/s, {:.1} s per set-up, rate and round, {} rounds",
        cfg.objects,
        cfg.rates,
        cfg.secs.as_secs_f64(),
        cfg.rounds
    );
    let env = AdmissionEnv::start(cfg).await?;
    println!(
        "   control plane up (kube-apiserver + etcd RSS {} MiB), kim webhook pid {}; load {}",
        env.cp.rss_kib() / 1024,
        env.webhook.proc.id(),
        procinfo::loadavg()
    );
    let mut passes: HashMap<(usize, usize), Pass> = HashMap::new();
    let mut idle = Cpu::default();
    let mut idle_s = 0.0;
    for round in 0..cfg.rounds {
        // The servers' own CPU with no writes (kube-apiserver's controllers, etcd's ticks),
        // subtracted from the per-write figures.
        let window = Duration::from_secs(3);
        let c0 = Cpu::now(&env.cp, Some(env.webhook.proc.id()));
        tokio::time::sleep(window).await;
        idle = idle.plus(Cpu::now(&env.cp, Some(env.webhook.proc.id())).minus(c0));
        idle_s += window.as_secs_f64();
        let order: Vec<usize> = if round % 2 == 0 {
            (0..SETUPS.len()).collect()
        } else {
            (0..SETUPS.len()).rev().collect()
        };
        for s in order {
            let setup = &SETUPS[s];
            let took = env.configure(setup).await?;
            if !cfg.warmup.is_zero() {
                let _ = env.paced(TARGET_RATE, cfg.warmup).await?;
            }
            for (r, &rate) in cfg.rates.iter().enumerate() {
                let p = env.paced(rate, cfg.secs).await?;
                println!(
                    "   round {} {:<17} {rate:>5.0}/s: {} writes, p50 {:.2} ms, p99 {:.2} ms, {} errors (in force after {:.1} s; load {})",
                    round + 1,
                    setup.label,
                    p.writes,
                    p.percentile_unsorted_ms(0.50),
                    p.percentile_unsorted_ms(0.99),
                    p.errors,
                    took.as_secs_f64(),
                    procinfo::loadavg()
                );
                passes.entry((s, r)).or_default().add(p);
            }
        }
    }
    for p in passes.values_mut() {
        p.latencies_ns.sort_unstable();
    }
    let rss = (
        procinfo::rss_mib(env.webhook.proc.id()),
        procinfo::hwm_mib(env.webhook.proc.id()),
    );
    let api_rss = env.cp.rss_kib() as f64 / 1024.0;
    let idle = Cpu {
        apiserver: idle.apiserver / idle_s,
        etcd: idle.etcd / idle_s,
        kim: idle.kim / idle_s,
        bench: idle.bench / idle_s,
    };
    report_admission(cfg, &passes, idle, rss, api_rss);
    drop(env);
    Ok(())
}

impl Pass {
    /// A percentile of an unsorted pass (the per-round progress line).
    fn percentile_unsorted_ms(&self, p: f64) -> f64 {
        let mut lat = self.latencies_ns.clone();
        lat.sort_unstable();
        Pass {
            latencies_ns: lat,
            ..Pass::default()
        }
        .percentile_ms(p)
    }
}

fn num(x: f64, prec: usize) -> String {
    if x.is_finite() {
        format!("{x:.prec$}")
    } else {
        "-".into()
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn report_admission(
    cfg: &Config,
    passes: &HashMap<(usize, usize), Pass>,
    idle: Cpu,
    kim_rss: (f64, f64),
    api_rss: f64,
) {
    let n = cores();
    println!();
    println!(
        "== admission results ({n} cores, {}; load now {})",
        procinfo::cpu_model(),
        procinfo::loadavg()
    );
    let w = 52;
    for (r, &rate) in cfg.rates.iter().enumerate() {
        println!("-- {rate:.0} writes/s");
        print!("{:<w$}", "");
        for s in &SETUPS {
            print!(" {:>17}", s.label);
        }
        println!();
        let row = |name: &str, f: &dyn Fn(&Pass) -> String| {
            print!("{name:<w$}");
            for s in 0..SETUPS.len() {
                print!(" {:>17}", passes.get(&(s, r)).map_or("-".into(), f));
            }
            println!();
        };
        let base = passes.get(&(0, r));
        row("writes (errors)", &|p| {
            format!("{} ({})", p.writes, p.errors)
        });
        row("writes/s achieved", &|p| {
            num(p.writes as f64 / p.window_s, 0)
        });
        for (name, q) in [
            ("client p50 ms", 0.50),
            ("client p99 ms", 0.99),
            ("client p99.9 ms", 0.999),
            ("client max ms", 1.0),
        ] {
            row(name, &|p| num(p.percentile_ms(q), 2));
        }
        row("added p50 / p99 vs (a), ms", &|p| match base {
            Some(b) => format!(
                "{} / {}",
                num(p.percentile_ms(0.5) - b.percentile_ms(0.5), 2),
                num(p.percentile_ms(0.99) - b.percentile_ms(0.99), 2)
            ),
            None => "-".into(),
        });
        row("CPU s / 1 000 writes: kube-apiserver", &|p| {
            num(p.per_k(p.cpu.apiserver), 3)
        });
        row("  kube-apiserver less its idle CPU", &|p| {
            num(p.per_k(p.cpu.apiserver - idle.apiserver * p.window_s), 3)
        });
        row("                      etcd", &|p| {
            num(p.per_k(p.cpu.etcd), 3)
        });
        row("                      kim webhook", &|p| {
            num(p.per_k(p.cpu.kim), 3)
        });
        row("                      this process (client)", &|p| {
            num(p.per_k(p.cpu.bench), 3)
        });
        row(&format!("cores busy, all four (of {n}) %"), &|p| {
            num(p.cpu.total() / p.window_s * 100.0, 0)
        });
        let update = |l: &BTreeMap<String, String>, ty: &str| {
            l.get("operation").is_some_and(|o| o == "UPDATE")
                && l.get("type").is_some_and(|t| t == ty)
        };
        for (label, ty) in [("mutating", "admit"), ("validating", "validating")] {
            row(
                &format!("apiserver webhook {label}: calls/write, mean ms"),
                &|p| {
                    let h = hist(
                        &p.metrics,
                        "apiserver_admission_webhook_admission_duration_seconds",
                        |l| update(l, ty),
                    );
                    if h.count == 0.0 {
                        "0".into()
                    } else {
                        format!(
                            "{:.2}, {}",
                            h.count / p.writes.max(1) as f64,
                            num(h.mean_ms(), 2)
                        )
                    }
                },
            );
            row(
                &format!("apiserver webhook {label}: ≤ 5 ms %, p99 ms"),
                &|p| {
                    let h = hist(
                        &p.metrics,
                        "apiserver_admission_webhook_admission_duration_seconds",
                        |l| update(l, ty),
                    );
                    if h.count == 0.0 {
                        "-".into()
                    } else {
                        format!(
                            "{}, {}",
                            num(h.share_le(0.005) * 100.0, 1),
                            num(h.quantile_ms(0.99), 1)
                        )
                    }
                },
            );
        }
        for (label, ty) in [("admit", "admit"), ("validate", "validate")] {
            row(
                &format!("apiserver step {label}: mean ms, ≤ 5 ms %"),
                &|p| {
                    let h = hist(
                        &p.metrics,
                        "apiserver_admission_step_admission_duration_seconds",
                        |l| update(l, ty),
                    );
                    format!(
                        "{}, {}",
                        num(h.mean_ms(), 3),
                        num(h.share_le(0.005) * 100.0, 1)
                    )
                },
            );
        }
        for (s, setup) in SETUPS.iter().enumerate() {
            if let Some(p) = passes.get(&(s, r))
                && let Some(e) = &p.first_error
            {
                println!("   {} first error: {e}", setup.label);
            }
        }
    }
    println!(
        "idle CPU (no writes, {} windows of 3 s): kube-apiserver {:.1} ms/s, etcd {:.1} ms/s, kim {:.1} ms/s, this process {:.1} ms/s",
        cfg.rounds,
        idle.apiserver * 1e3,
        idle.etcd * 1e3,
        idle.kim * 1e3,
        idle.bench * 1e3
    );
    println!(
        "kim webhook RSS after all passes: VmRSS {:.1} MiB, VmHWM {:.1} MiB; kube-apiserver + etcd RSS {api_rss:.0} MiB",
        kim_rss.0, kim_rss.1
    );

    // Targets, at the measured rate nearest to 200/s.
    let Some((r, &rate)) = cfg.rates.iter().enumerate().min_by(|a, b| {
        (a.1 - TARGET_RATE)
            .abs()
            .total_cmp(&(b.1 - TARGET_RATE).abs())
    }) else {
        return;
    };
    let (Some(a), Some(b), Some(c)) = (
        passes.get(&(0, r)),
        passes.get(&(1, r)),
        passes.get(&(2, r)),
    ) else {
        return;
    };
    println!();
    println!("== admission targets ({n} cores; at {rate:.0} writes/s)");
    println!(
        "{:<60} {:>10} {:>10}  verdict",
        "target", "wanted", "measured"
    );
    let target = |what: &str, wanted: &str, measured: f64, met: bool| {
        println!("{what:<60} {wanted:>10} {measured:>10.3}  {}", verdict(met));
    };
    let add50 = c.percentile_ms(0.5) - a.percentile_ms(0.5);
    let add99 = c.percentile_ms(0.99) - a.percentile_ms(0.99);
    let vap99 = b.percentile_ms(0.99) - a.percentile_ms(0.99);
    target("kim's added p50 (c) − (a), ms", "<= 1", add50, add50 <= 1.0);
    target("kim's added p99 (c) − (a), ms", "<= 3", add99, add99 <= 3.0);
    let net = |p: &Pass| p.cpu.apiserver - idle.apiserver * p.window_s;
    let share = c.cpu.kim / net(c);
    target(
        "kim CPU ÷ kube-apiserver CPU (less idle) per write in (c)",
        "<= 0.05",
        share,
        share <= 0.05,
    );
    let ratio = add99 / vap99;
    target(
        "(c)'s added p99 ÷ (b)'s added p99",
        "<= 3",
        ratio,
        add99 <= 3.0 * vap99.max(0.0),
    );
    println!(
        "   (b)'s added p99 {} ms; kube-apiserver CPU per write (less idle) in (a) {} ms, in (c) {} ms; kim {} ms",
        num(vap99, 3),
        num(net(a) / a.writes.max(1) as f64 * 1e3, 3),
        num(net(c) / c.writes.max(1) as f64 * 1e3, 3),
        num(c.cpu.kim / c.writes.max(1) as f64 * 1e3, 3),
    );
    let errors: u64 = passes.values().map(|p| p.errors).sum();
    target("errors, all passes", "0", errors as f64, errors == 0);
}

// ---------------------------------------------------------------------------------------------
// Part 2: the controller at scale

/// The simulated Gardener and the runtime cluster, in this process.
struct Garden {
    garden: ServerHandle,
    runtime: ServerHandle,
    stop: Arc<AtomicBool>,
    stepper: Option<tokio::task::JoinHandle<()>>,
    shoot_gets: Arc<Mutex<HashSet<String>>>,
}

impl Garden {
    async fn start(step: Duration) -> anyhow::Result<Garden> {
        let base = || ServerConfig::default().history_limit(100_000);
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
        // A Gardener admin kubeconfig carries the cluster's CA.
        let ca = rcgen::generate_simple_self_signed(vec!["api.runtime.invalid".to_string()])
            .context("CA for the runtime kubeconfig")?;
        let data =
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca.cert.pem());
        let kubeconfig = runtime.kubeconfig_yaml(Some(SHOOT_ADMIN_TOKEN)).replacen(
            "    server: ",
            &format!("    certificate-authority-data: {data}\n    server: "),
            1,
        );
        garden.set_admin_kubeconfig(move |_| kubeconfig.clone());
        // Every reconcile starts by reading its Shoot: the set of Shoots read tells which
        // Runtimes were reconciled.
        let shoot_gets: Arc<Mutex<HashSet<String>>> = Arc::default();
        {
            let gets = shoot_gets.clone();
            garden.set_fault_fn(move |req| {
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
        let stop: Arc<AtomicBool> = Arc::default();
        let stepper = {
            let (sim, stop) = (sim.clone(), stop.clone());
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(step);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    ticker.tick().await;
                    let sim = sim.clone();
                    let _ = tokio::task::spawn_blocking(move || sim.step()).await;
                }
            })
        };
        Ok(Garden {
            garden,
            runtime,
            stop,
            stepper: Some(stepper),
            shoot_gets,
        })
    }

    async fn stop_stepping(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.stepper.take() {
            h.abort();
            let _ = h.await;
        }
    }
}

/// `kim controller` as a process, output captured.
struct Controller {
    proc: Process,
    metrics_addr: SocketAddr,
}

impl Controller {
    async fn start(dir: &Path) -> anyhow::Result<Controller> {
        let args = testenv::process::kim_controller_args(
            &dir.join("kcp.kubeconfig"),
            &dir.join("garden.kubeconfig"),
            &repo().join("docs/config.example.yaml"),
            NS,
            false,
        );
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
        cmd.args(args)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG");
        let mut proc = Process::spawn(&mut cmd).context("spawning kim controller")?;
        let addr = proc
            .logged("metrics_addr", Duration::from_secs(60))
            .await
            .map_err(|e| anyhow!(e))?;
        Ok(Controller {
            proc,
            metrics_addr: addr.parse()?,
        })
    }

    fn pid(&self) -> u32 {
        self.proc.id()
    }

    async fn metrics(&self) -> anyhow::Result<Metrics> {
        scrape_http(self.metrics_addr).await
    }

    /// Warnings and errors it logged, by message (at most `top`).
    fn warnings(&self, top: usize) -> Vec<String> {
        let mut by: HashMap<String, u64> = HashMap::new();
        for l in self.proc.stdout().lines() {
            let Ok(v) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            let level = v["level"].as_str().unwrap_or_default();
            if level == "WARN" || level == "ERROR" {
                let msg = v["message"].as_str().unwrap_or_default();
                let err: String = v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .take(200)
                    .collect();
                *by.entry(format!("{level} {msg}: {err}")).or_default() += 1;
            }
        }
        let mut v: Vec<(String, u64)> = by.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v.into_iter()
            .take(top)
            .map(|(k, n)| format!("{n}× {k}"))
            .collect()
    }

    fn stop(&mut self) {
        self.proc.terminate(Duration::from_secs(30));
    }
}

fn metric(m: &Metrics, name: &str) -> f64 {
    sum_where(m, name, |_| true)
}

async fn scale_part(cfg: &Config, n: usize) -> anyhow::Result<()> {
    println!(
        "== 2. controller at scale: {n} Runtimes in etcd, kim controller started cold (Gardener step every {} ms)",
        cfg.step.as_millis()
    );
    let t_setup = Instant::now();
    let cp = ControlPlane::start().context("control plane")?;
    create_namespace(&cp, NS).await;
    install_crd(&cp).await?;
    let certs = WebhookCerts::generate();
    let webhook = Webhook::start(&certs).await?;
    let installed = cp
        .install_kustomize(&repo().join("manifests/base"), webhook.addr, &certs.ca_pem)
        .await
        .map_err(|e| anyhow!("installing manifests/base: {e}"))?;
    let admin = cp.admin().await;
    let api = ApiMetrics::new(&cp)?;
    let template = load_template()?;
    // The probe Runtime tells when the webhooks are in force; it is deleted before the
    // controller starts (it has no Shoot).
    // Its first status is `Pending`: the webhooks are in force already, and `Ready` may only
    // follow `Pending`.
    let mut probe = runtime_object(&template, PROBE, PROBE);
    probe["status"] = json!({"state": "Pending", "conditions": [
        cond("Provisioned", "Unknown", "Pending", "Shoot creation pending")]});
    seed(&admin, vec![probe], 1).await?;
    let seq = AtomicU64::new(1);
    wait_in_force(
        &admin,
        None,
        &webhook,
        InForce {
            vap: false,
            mutate: true,
            validate: true,
        },
        &seq,
    )
    .await?;
    let runtimes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &runtime_resource());
    runtimes
        .delete(PROBE, &DeleteParams::default())
        .await
        .context("deleting the probe")?;
    let token = cp
        .service_account_token("kim-system", "kim-controller")
        .await;
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("kcp.kubeconfig"),
        cp.kubeconfig_with_token(&token),
    )?;
    let mut garden = Garden::start(cfg.step).await?;
    std::fs::write(
        dir.path().join("garden.kubeconfig"),
        garden.garden.kubeconfig_yaml(None),
    )?;
    println!(
        "   control plane, manifests/base ({} objects applied, {} skipped), kim webhook and Gardener up in {:.1} s",
        installed.applied.len(),
        installed.skipped.len(),
        t_setup.elapsed().as_secs_f64()
    );

    // N Runtimes through kube-apiserver.
    let t0 = Instant::now();
    let objects: Vec<Value> = (0..n)
        .map(|i| runtime_object(&template, &format!("rt-{i:05}"), &format!("rt{i:05}")))
        .collect();
    seed(&admin, objects, cfg.seed_concurrency).await?;
    println!(
        "   {n} Runtimes created through kube-apiserver in {:.1} s ({:.0}/s); load {}",
        t0.elapsed().as_secs_f64(),
        n as f64 / t0.elapsed().as_secs_f64(),
        procinfo::loadavg()
    );

    // Provisioning: the controller started cold with N new Runtimes.
    let m0 = api.scrape().await?;
    let cpu0 = Cpu::now(&cp, Some(webhook.proc.id()));
    let t0 = Instant::now();
    let mut ctl = Controller::start(dir.path()).await?;
    let ctl_cpu0 = procinfo::cpu_secs(ctl.pid()).unwrap_or(f64::NAN);
    let mut last = Instant::now();
    loop {
        let m = ctl.metrics().await?;
        let ready = sum_where(&m, "kim_controller_runtimes", |l| {
            l.get("state").is_some_and(|s| s == "Ready")
        });
        if ready >= n as f64 {
            break;
        }
        ensure!(
            t0.elapsed() < cfg.timeout,
            "{n} Runtimes not Ready after {:?}: {ready} Ready",
            cfg.timeout
        );
        if last.elapsed() >= Duration::from_secs(15) {
            eprintln!(
                "   … provisioning: {:.0} s, {ready} Ready, controller RSS {:.1} MiB, load {}",
                t0.elapsed().as_secs_f64(),
                procinfo::rss_mib(ctl.pid()),
                procinfo::loadavg()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let provisioned = t0.elapsed();
    let cpu1 = Cpu::now(&cp, Some(webhook.proc.id())).minus(cpu0);
    let ctl_cpu = procinfo::cpu_secs(ctl.pid()).unwrap_or(f64::NAN) - ctl_cpu0;
    let m1 = api.scrape().await?;
    let d = delta(&m1, &m0);
    let km = ctl.metrics().await?;
    println!(
        "   provisioning pass: all {n} Ready {:.1} s after the cold start ({:.0} Runtimes/s); controller VmHWM {:.1} MiB, CPU {ctl_cpu:.1} s; kube-apiserver CPU {:.1} s, etcd {:.1} s, kim webhook {:.1} s, this process {:.1} s; {} reconcile errors",
        provisioned.as_secs_f64(),
        n as f64 / provisioned.as_secs_f64(),
        procinfo::hwm_mib(ctl.pid()),
        cpu1.apiserver,
        cpu1.etcd,
        cpu1.kim,
        cpu1.bench,
        metric(&km, "kim_controller_reconcile_errors_total"),
    );
    println!(
        "   provisioning, kube-apiserver requests: {} = {:.0}/s; status writes {:.2} per Runtime (answers {})",
        verbs_line(&requests_by_verb(&d), n as f64),
        requests_by_verb(&d).values().sum::<f64>() / provisioned.as_secs_f64(),
        status_writes(&d) / n as f64,
        status_writes_by_code(&d)
    );
    for w in ctl.warnings(5) {
        println!("     {w}");
    }

    // The first complete reconcile pass of a controller started cold with all N Ready.
    garden.stop_stepping().await;
    ctl.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rest0 = api.scrape().await?;
    tokio::time::sleep(cfg.rest).await;
    let rest1 = api.scrape().await?;
    let idle = requests_by_verb(&delta(&rest1, &rest0));
    garden.shoot_gets.lock().unwrap().clear();
    let m0 = api.scrape().await?;
    let cpu0 = Cpu::now(&cp, Some(webhook.proc.id()));
    let t0 = Instant::now();
    let ctl = Controller::start(dir.path()).await?;
    let up = t0.elapsed();
    let mut last = Instant::now();
    loop {
        let m = ctl.metrics().await?;
        let reconciled = metric(&m, "kim_controller_reconciles_total");
        let read = garden.shoot_gets.lock().unwrap().len();
        if reconciled >= n as f64 && read >= n {
            break;
        }
        ensure!(
            t0.elapsed() < cfg.timeout,
            "no complete reconcile pass after {:?}: {reconciled} reconciles, {read} Shoots read",
            cfg.timeout
        );
        if last.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "   … reconcile pass: {:.0} s, {reconciled} reconciles, {read} Shoots read",
                t0.elapsed().as_secs_f64()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pass = t0.elapsed();
    let cpu_pass = Cpu::now(&cp, Some(webhook.proc.id())).minus(cpu0);
    let ctl_cpu = procinfo::cpu_secs(ctl.pid()).unwrap_or(f64::NAN);
    let hwm_pass = procinfo::hwm_mib(ctl.pid());
    let m1 = api.scrape().await?;
    tokio::time::sleep(cfg.rest).await;
    let m2 = api.scrape().await?;
    let hwm_rest = procinfo::hwm_mib(ctl.pid());
    let rss_rest = procinfo::rss_mib(ctl.pid());
    let km = ctl.metrics().await?;
    let in_pass = delta(&m1, &m0);
    let at_rest = delta(&m2, &m1);
    let pass_verbs = requests_by_verb(&in_pass);
    let rest_verbs = requests_by_verb(&at_rest);
    let writes = status_writes(&in_pass) + status_writes(&at_rest);
    println!(
        "   first complete reconcile pass (cold start, all {n} Ready): {:.2} s (process start → metrics up {:.2} s); {} reconciles, {} status writes sent by kim, {writes} received by kube-apiserver ({:.3} per Runtime)",
        pass.as_secs_f64(),
        up.as_secs_f64(),
        metric(&km, "kim_controller_reconciles_total"),
        metric(&km, "kim_controller_status_writes_total"),
        writes / n as f64
    );
    println!(
        "   controller VmHWM {hwm_pass:.1} MiB after the pass, {hwm_rest:.1} MiB after {:.0} s at rest (VmRSS {rss_rest:.1} MiB); CPU in the pass: controller {ctl_cpu:.1} s, kube-apiserver {:.1} s, etcd {:.1} s, this process {:.1} s; kube-apiserver + etcd RSS {} MiB",
        cfg.rest.as_secs_f64(),
        cpu_pass.apiserver,
        cpu_pass.etcd,
        cpu_pass.bench,
        cp.rss_kib() / 1024
    );
    println!(
        "   kube-apiserver requests in the pass: {} = {:.1}/s",
        verbs_line(&pass_verbs, n as f64),
        pass_verbs.values().sum::<f64>() / pass.as_secs_f64()
    );
    println!(
        "   … at rest ({:.0} s after the pass): {} = {:.2}/s; before the cold start, no controller: {} = {:.2}/s",
        cfg.rest.as_secs_f64(),
        verbs_line(&rest_verbs, 0.0),
        rest_verbs.values().sum::<f64>() / cfg.rest.as_secs_f64(),
        verbs_line(&idle, 0.0),
        idle.values().sum::<f64>() / cfg.rest.as_secs_f64()
    );
    for ((verb, what), count) in requests_by_resource(&in_pass) {
        println!("     in the pass: {verb:<7} {what:<40} {count:.0}");
    }
    for w in ctl.warnings(5) {
        println!("     {w}");
    }
    let mut ctl = ctl;
    ctl.stop();
    garden.garden.shutdown();
    garden.runtime.shutdown();
    drop(webhook);
    drop(cp);
    println!(
        "   the {n} run took {:.0} s in all",
        t_setup.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Part 3: kim audit

async fn audit_part(cfg: &Config) -> anyhow::Result<()> {
    let n = cfg.audit_runtimes;
    println!("== 3. kim audit -A -o json, {n} Runtimes on kube-apiserver");
    let time = Path::new("/usr/bin/time");
    ensure!(
        time.exists(),
        "/usr/bin/time (GNU time) is needed for the peak RSS: apt-get install time"
    );
    let cp = ControlPlane::start().context("control plane")?;
    create_namespace(&cp, "kcp-system").await;
    create_namespace(&cp, "kyma-dev").await;
    install_crd(&cp).await?;
    let admin = cp.admin().await;
    let api = ApiMetrics::new(&cp)?;
    let specs = audit_seed::sample_specs()?;
    let statuses = audit_seed::seed_statuses()?;
    let mut broken = HashSet::new();
    let objects: Vec<Value> = (0..n)
        .map(|i| {
            let (obj, is_broken) = audit_seed::runtime(i, &specs, &statuses);
            if is_broken {
                broken.insert(name_of(&obj));
            }
            obj
        })
        .collect();
    let t0 = Instant::now();
    let (refused, first) = seed(&admin, objects, cfg.seed_concurrency).await?;
    println!(
        "   seeded in {:.1} s; the CRD schema refused {} statuses (stored without status; first: {})",
        t0.elapsed().as_secs_f64(),
        refused.len(),
        first.as_deref().unwrap_or("-")
    );
    for r in &refused {
        broken.remove(r);
    }
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig(cp.admin_cert()))?;
    let mut results = Vec::new();
    for run in 1..=cfg.audit_runs {
        let stats = dir.path().join("time.txt");
        let m0 = api.scrape().await?;
        let load = procinfo::loadavg();
        let t0 = Instant::now();
        let mut cmd = Command::new(time);
        cmd.arg("-f")
            .arg("%M %U %S")
            .arg("-o")
            .arg(&stats)
            .arg(env!("CARGO_BIN_EXE_kim"))
            .args(["audit", "-A", "-o", "json", "--kubeconfig"])
            .arg(&kubeconfig)
            .env_remove("KUBECONFIG");
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await?
            .context("running kim audit")?;
        let wall = t0.elapsed().as_secs_f64();
        let m1 = api.scrape().await?;
        let d = delta(&m1, &m0);
        let lists = sum_where(&d, "apiserver_request_total", |l| {
            l.get("verb").is_some_and(|v| v == "LIST")
                && l.get("resource").is_some_and(|r| r == "runtimes")
        });
        let code = out.status.code();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let counted = doc["summary"]["runtimes"].as_u64().unwrap_or(0);
        let reported: HashSet<String> = doc["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        ensure!(
            counted == n as u64,
            "kim audit exited {code:?} and counted {counted} of {n} Runtimes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&stats)?;
        let f: Vec<f64> = text
            .lines()
            .last()
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        ensure!(f.len() == 3, "/usr/bin/time output: {text}");
        println!(
            "   run {run}: exit {code:?}, wall {wall:.2} s, peak RSS {:.1} MiB, CPU {:.2} s user + {:.2} s sys, {lists} list requests, {} Runtimes reported (expected {}{}), stdout {:.1} MiB; load before {load}",
            f[0] / 1024.0,
            f[1],
            f[2],
            reported.len(),
            broken.len(),
            if reported == broken {
                ", the same ones"
            } else {
                ", NOT the same ones"
            },
            out.stdout.len() as f64 / (1024.0 * 1024.0)
        );
        results.push((wall, f[0] / 1024.0, f[1] + f[2], lists));
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((wall, rss, cpu, lists)) = results.get(results.len() / 2) {
        println!(
            "   median of {}: wall {wall:.2} s, peak RSS {rss:.1} MiB, CPU {cpu:.2} s, {lists} list requests; kube-apiserver + etcd RSS {} MiB; load {}",
            cfg.audit_runs,
            cp.rss_kib() / 1024,
            procinfo::loadavg()
        );
    }
    drop(cp);
    Ok(())
}

// ---------------------------------------------------------------------------------------------

async fn bench(cfg: Config) -> anyhow::Result<()> {
    let t0 = Instant::now();
    println!(
        "kim on a real kube-apiserver: {} cores ({}), load {}",
        cores(),
        procinfo::cpu_model(),
        procinfo::loadavg()
    );
    if cfg.part("admission") {
        admission_part(&cfg).await?;
    }
    if cfg.part("scale") {
        for &n in &cfg.sizes {
            scale_part(&cfg, n).await?;
        }
    }
    if cfg.part("audit") && cfg.audit_runtimes > 0 {
        audit_part(&cfg).await?;
    }
    println!(
        "done in {:.0} s; load {}",
        t0.elapsed().as_secs_f64(),
        procinfo::loadavg()
    );
    if !cfg.part("admission") && !cfg.part("scale") && !cfg.part("audit") {
        bail!("APISERVER_BENCH_PARTS names no part");
    }
    Ok(())
}
