//! kim on the real control plane: starts etcd and kube-apiserver (`testenv::controlplane`) on
//! loopback and measures three parts in one run.
//!
//! 1. **Admission** (`admission`): paced JSON merge patches on `runtimes/status` (a whole `Ready`
//!    status, one condition message changed per write so that every write is a change), open
//!    loop, each latency from the scheduled send time, in five set-ups switched on the same
//!    server: (a) no admission, (b) the generated ValidatingAdmissionPolicy, (c) kim's webhooks as
//!    shipped pointed at one `kim webhook` process, (d) both, (e) the same webhook configurations
//!    pointed at the null webhook ([`null_webhook`]: kim's server code, certificates and TLS and
//!    HTTP settings, a handler that answers `allowed: true` without reading the object), the
//!    price of a call itself. A set-up counts as in force once two probe writes in a row show it
//!    (kim's or the null webhook's counters move, a writer the model does not list is refused or
//!    not): kube-apiserver's policy metrics count refusals only, so they cannot tell. Rounds visit
//!    every set-up, in reverse order every other round; each starts with a warm-up at the lowest
//!    rate. Per set-up and rate: client latencies, CPU per 1 000 writes of every process, the
//!    webhook process's CPU per call (its threads' nanoseconds on CPU, `/proc/<pid>/task/*/
//!    schedstat`), kube-apiserver's connections to it (and sockets it opened during the pass:
//!    TLS handshakes), the HTTP version of the calls, and kube-apiserver's own webhook and
//!    admission-step durations. Each round also runs a **paired pass**: the same rate in all,
//!    the writes going in turn to three namespaces ([`PAIRED_NS`]), one matched by no webhook,
//!    one by kim's and one by the null webhook's configurations (as shipped plus a
//!    `namespaceSelector`), so that the three are measured under the same load at the same
//!    moments (the machine is shared). kim's webhooks are judged against the null webhook's, in
//!    the set-ups and in the paired pass, at the measured rate nearest to 30 writes/s (below
//!    what kube-apiserver sustains here): added p50 and p99 over no webhook at most 1.1 times
//!    the null webhook's, kim's CPU per call at most twice its CPU per review in the webhook
//!    bench.
//! 2. **Controller at scale** (`scale`): kim's CRD and `manifests/base` installed, the controller
//!    as its ServiceAccount with the shipped RBAC; the real Gardener API (gardener-apiserver
//!    aggregated behind the same kube-apiserver, `testenv::garden`'s fixtures: project
//!    `kyma-dev`, CloudProfiles, credentials), the controller's garden user a client
//!    certificate with a Role in `garden-kyma-dev`; the simulated gardenlet
//!    (`testenv::gardenlet`) takes each Shoot to `Create Succeeded` as soon as it sees it, all
//!    Shoots handed one real runtime cluster (kube-apiserver and etcd). N Runtimes created
//!    through kube-apiserver are provisioned by a cold controller; a second cold start with
//!    all `Ready` is the cold no-op pass, done when the controller's
//!    `kim_controller_reconciles_total` reaches N (it may read Shoots from a watch cache, so no
//!    Shoot GET marks it). With `APISERVER_BENCH_KIM_BASELINE` (an earlier `kim` binary) each N
//!    runs twice, the baseline's controller first, then this build's, each on a fresh control
//!    plane with the same N (the webhook is this build's in both). The controller's requests
//!    are counted by the servers, by verb and resource: each of its three identities (the
//!    ServiceAccount on kube-apiserver, the garden user on the Gardener API, the Shoot
//!    administrators' groups on the runtime cluster) gets FlowSchemas of its own
//!    ([`flow_counts`]). Per provisioned Runtime: kube-apiserver's requests from every client
//!    by verb and resource and its 409 answers (`apiserver_request_total`), the controller's
//!    share of them, its requests to Gardener and to the runtime cluster, gardener-apiserver's
//!    requests from every client (its own `apiserver_request_total`), kube-apiserver CPU (also
//!    less its CPU in a window with no controller), time to all `Ready`, Shoot `Succeeded` →
//!    Runtime `Ready` per Runtime (the gardenlet's history and a watch, as this process saw
//!    them), the gardenlet's progress and step errors, controller CPU and VmHWM/VmRSS;
//!    provisioning counts until the controller's requests stop after the last `Ready`. Of the
//!    pass: its time, the controller's per-object GETs on kube-apiserver and Gardener, Shoot
//!    GETs, writes in a window at rest. At the end a markdown table per N, baseline | this
//!    build, with the targets: ≤ 8 controller requests per provisioned Runtime, no 409, the
//!    pass ≤ 5 s with no per-object GET and the controller's peak RSS ≤ 150 MiB (both judged at
//!    10 000 only), all `Ready` 2× faster or kube-apiserver CPU per Runtime (less idle) halved
//!    against the baseline.
//! 3. **`kim audit`** (`audit`): the Runtimes of [`audit_seed`] written through kube-apiserver
//!    and audited by the real `kim audit -A -o json` (more arguments from
//!    `APISERVER_BENCH_AUDIT_ARGS`) under GNU time, several times: wall time, peak RSS, CPU,
//!    list requests (`apiserver_request_total`), the exit code, whether the report names every
//!    broken Runtime once, stdout size, the first run's stderr.
//!
//! Everything shares the machine's cores; the CPU rows say who used them. Environment variables,
//! commands and figures: BENCHMARKS.md, "kim on a real kube-apiserver". The targets are printed as
//! met / NOT met; only a broken set-up (a process that does not start, a set-up that does not come
//! into force, a phase that never ends) stops the run.

#[path = "support/audit_seed.rs"]
mod audit_seed;
#[path = "support/flow_counts.rs"]
mod flow_counts;
#[path = "support/null_webhook.rs"]
mod null_webhook;
#[path = "support/procinfo.rs"]
mod procinfo;

use anyhow::{Context, anyhow, bail, ensure};
use flow_counts::{ByResource, FlowCounter};
use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane, Options, WebhookCerts, point_webhooks_at};
use testenv::gardenlet::{ADMINS_GROUPS, Clusters, Event, Gardenlet, GardenletConfig, Operation};
use testenv::process::Process;

const NS: &str = "kcp-system";
const GROUP: &str = "infrastructuremanager.kyma-project.io";
/// The Runtime the set-up probes write to (never one of the measured ones).
const PROBE: &str = "bench-probe";
/// A write that takes longer counts as an error.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the cold no-op pass polls the controller's `/metrics` for its reconcile count.
const PASS_POLL: Duration = Duration::from_millis(250);
/// The rate the targets are judged at (the nearest measured one).
const TARGET_RATE: f64 = 200.0;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == null_webhook::SERVE_NULL) {
        let dir = args.get(i + 1).context("--serve-null DIR")?;
        return null_webhook::serve(Path::new(dir));
    }
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
    rest: Duration,
    timeout: Duration,
    seed_concurrency: usize,
    audit_runtimes: usize,
    audit_runs: usize,
    /// More arguments of `kim audit` (`APISERVER_BENCH_AUDIT_ARGS`, split at white space).
    audit_args: Vec<String>,
    /// An earlier `kim` binary whose controller the scale part runs before this build's.
    kim_baseline: Option<PathBuf>,
    /// `RUST_LOG` of the controllers of the scale part (unset: their default, `info`).
    controller_rust_log: Option<String>,
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
            rest: secs("APISERVER_BENCH_REST_SECS", 10.0)?,
            timeout: secs("APISERVER_BENCH_TIMEOUT_SECS", 3600.0)?,
            seed_concurrency: (env_num("APISERVER_BENCH_SEED_CONCURRENCY", 16.0)? as usize).max(1),
            audit_runtimes: env_num("APISERVER_BENCH_AUDIT_RUNTIMES", 10_000.0)? as usize,
            audit_runs: (env_num("APISERVER_BENCH_AUDIT_RUNS", 3.0)? as usize).max(1),
            audit_args: std::env::var("APISERVER_BENCH_AUDIT_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
            kim_baseline: std::env::var_os("APISERVER_BENCH_KIM_BASELINE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            controller_rust_log: std::env::var("APISERVER_BENCH_CONTROLLER_RUST_LOG")
                .ok()
                .filter(|v| !v.is_empty()),
        };
        if let Some(b) = &cfg.kim_baseline {
            ensure!(
                b.is_file(),
                "APISERVER_BENCH_KIM_BASELINE={}: no such file",
                b.display()
            );
        }
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
        Ok(parse_metrics(
            &flow_counts::metrics_text(&self.http, &self.url).await?,
        ))
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
    if by_verb.values().all(|n| *n == 0.0) {
        return "none".into();
    }
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
    /// For the null webhook: a client of its `GET /counts` (it has no kim metrics).
    null: Option<reqwest::Client>,
}

impl Webhook {
    async fn start(certs: &WebhookCerts) -> anyhow::Result<Webhook> {
        let mut args = testenv::process::kim_webhook_args(certs.dir.path(), false);
        args.extend(["--log-format".into(), "json".into()]);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
        cmd.args(&args).env_remove("RUST_LOG");
        let proc = Process::spawn(&mut cmd).context("spawning kim webhook")?;
        Webhook::started(proc, None).await
    }

    /// The null webhook ([`null_webhook`]): this binary re-executed, with the certificates of
    /// `certs`, the environment and log format of [`Webhook::start`].
    async fn start_null(certs: &WebhookCerts) -> anyhow::Result<Webhook> {
        let mut cmd = Command::new(std::env::current_exe().context("this bench's binary")?);
        cmd.arg(null_webhook::SERVE_NULL)
            .arg(certs.dir.path())
            .env_remove("RUST_LOG");
        let proc = Process::spawn(&mut cmd).context("spawning the null webhook")?;
        // No idle connection kept: the webhook's connections are kube-apiserver's only.
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .tls_certs_only([reqwest::Certificate::from_pem(certs.ca_pem.as_bytes())?])
            .timeout(Duration::from_secs(30))
            .build()?;
        Webhook::started(proc, Some(client)).await
    }

    /// Waits for the start-up line with the addresses.
    async fn started(mut proc: Process, null: Option<reqwest::Client>) -> anyhow::Result<Webhook> {
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
            null,
        })
    }

    /// Reviews answered on `/mutate` and on `/validate` so far.
    async fn counts(&self) -> anyhow::Result<(f64, f64)> {
        if self.null.is_some() {
            let c = self.null_counts().await?;
            return Ok((c["mutate"], c["validate"]));
        }
        let m = scrape_http(self.metrics_addr).await?;
        let on = |path: &str| {
            sum_where(&m, "kim_webhook_requests_total", |l| {
                l.get("path").is_some_and(|p| p == path)
            })
        };
        Ok((on("/mutate"), on("/validate")))
    }

    /// The null webhook's `GET /counts` (`validate`, `mutate`, `http1`, `http2`); empty for
    /// kim.
    async fn null_counts(&self) -> anyhow::Result<BTreeMap<String, f64>> {
        let Some(client) = &self.null else {
            return Ok(BTreeMap::new());
        };
        let url = format!("https://{}/counts", self.addr);
        client
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?
            .error_for_status()?
            .json()
            .await
            .with_context(|| format!("GET {url}"))
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
    wait_in_force_all(client, mallory, &[(webhook, want)], seq).await
}

/// [`wait_in_force`] with several webhook processes, each of which must show its own `want`
/// (the same `vap` in each).
async fn wait_in_force_all(
    client: &kube::Client,
    mallory: Option<&kube::Client>,
    hooks: &[(&Webhook, InForce)],
    seq: &AtomicU64,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut streak = 0;
    loop {
        let mut k0 = Vec::with_capacity(hooks.len());
        for (webhook, _) in hooks {
            k0.push(webhook.counts().await?);
        }
        patch_status(
            client,
            NS,
            PROBE,
            &ready_status(seq.fetch_add(1, Ordering::Relaxed)),
        )
        .await
        .map_err(|e| anyhow!("probe write: {e}"))?;
        let mut k1 = Vec::with_capacity(hooks.len());
        for (webhook, _) in hooks {
            k1.push(webhook.counts().await?);
        }
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
        let seen: Vec<InForce> = k0
            .iter()
            .zip(&k1)
            .map(|(k0, k1)| InForce {
                vap,
                mutate: k1.0 > k0.0,
                validate: k1.1 > k0.1,
            })
            .collect();
        let want: Vec<InForce> = hooks.iter().map(|(_, w)| *w).collect();
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

/// Which webhook process a set-up's webhook configurations point at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hooks {
    None,
    /// `kim webhook`.
    Kim,
    /// The null webhook ([`null_webhook`]): kim's transport, a handler that does nothing.
    Null,
}

struct Setup {
    label: &'static str,
    vap: bool,
    hooks: Hooks,
}

const SETUPS: [Setup; 5] = [
    Setup {
        label: "(a) none",
        vap: false,
        hooks: Hooks::None,
    },
    Setup {
        label: "(b) VAP",
        vap: true,
        hooks: Hooks::None,
    },
    Setup {
        label: "(c) webhooks",
        vap: false,
        hooks: Hooks::Kim,
    },
    Setup {
        label: "(d) VAP+webhooks",
        vap: true,
        hooks: Hooks::Kim,
    },
    Setup {
        label: "(e) null webhooks",
        vap: false,
        hooks: Hooks::Null,
    },
];

/// Indexes of (a), (c) and (e) in [`SETUPS`].
const NONE: usize = 0;
const KIM: usize = 2;
const NULL: usize = 4;

/// The rate kim's webhooks are judged against the null webhook's at (the nearest measured
/// one): below the ~67 writes/s at which kube-apiserver saturates the two cores here, so that
/// the added latency is the call's, not a queue's.
const NULL_RATE: f64 = 30.0;

/// kim's server CPU per review in the webhook bench, µs (BENCHMARKS.md, "Webhook benchmark",
/// 2026-12-02: medians 49.2–52.3 µs over both hooks and two runs): a call from kube-apiserver
/// should cost kim at most twice that.
const REVIEW_CPU_US: f64 = 50.0;

/// The namespaces of the paired pass, whose writes go round robin to one Runtime in each: the
/// first is matched by no webhook, the second by kim's, the third by the null webhook's (each
/// configuration as shipped plus a `namespaceSelector` on its namespace).
const PAIRED_NS: [&str; 3] = ["bench-none", "bench-kim", "bench-null"];
/// How the paired pass's three targets are labelled.
const PAIRED: [&str; 3] = ["(a) none", "(c) kim", "(e) null"];

/// How often a pass samples the webhook process's sockets.
const CONN_SAMPLE: Duration = Duration::from_millis(50);

/// The TCP connections kube-apiserver had open to the set-up's webhook process in one pass.
#[derive(Clone, Copy, Default)]
struct Conns {
    /// kube-apiserver's connections at the start and at the end of the pass.
    at_start: usize,
    at_end: usize,
    /// Sockets the process opened during the pass (sampled every [`CONN_SAMPLE`]): each a
    /// connection accepted, so a TLS handshake.
    new: usize,
}

/// One set-up at one rate, pooled over the rounds.
#[derive(Default)]
struct Pass {
    writes: u64,
    errors: u64,
    first_error: Option<String>,
    latencies_ns: Vec<u64>,
    window_s: f64,
    cpu: Cpu,
    /// CPU seconds of kim's and of the null webhook's threads
    /// ([`procinfo::threads_cpu_secs`]: nanoseconds, where [`Cpu`] counts clock ticks).
    hook_cpu: (f64, f64),
    metrics: Metrics,
    /// Per round, for set-ups with webhooks.
    conns: Vec<Conns>,
    /// Calls the null webhook answered over HTTP/1.1 and over HTTP/2, and their body bytes.
    null_http: (f64, f64),
    null_bytes: f64,
    /// kim's `kim_webhook_request_duration_seconds`: sum (seconds) and count.
    kim_handler: (f64, f64),
    /// The set-up's webhooks are the null webhook's.
    on_null: bool,
    /// Calls to the set-up's webhook process (both hooks).
    hook_calls: f64,
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
        self.hook_cpu.0 += o.hook_cpu.0;
        self.hook_cpu.1 += o.hook_cpu.1;
        add_into(&mut self.metrics, &o.metrics);
        self.conns.extend(o.conns);
        self.null_http.0 += o.null_http.0;
        self.null_http.1 += o.null_http.1;
        self.null_bytes += o.null_bytes;
        self.kim_handler.0 += o.kim_handler.0;
        self.kim_handler.1 += o.kim_handler.1;
        self.on_null |= o.on_null;
        self.hook_calls += o.hook_calls;
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

/// kube-apiserver's calls to the webhooks (mutating and validating) in `m`.
fn webhook_calls(m: &Metrics) -> f64 {
    hist(
        m,
        "apiserver_admission_webhook_admission_duration_seconds",
        |l| l.get("operation").is_some_and(|o| o == "UPDATE"),
    )
    .count
}

/// A webhook configuration `doc` for the paired pass: each webhook matches namespace `ns` only
/// (`namespaceSelector`); with `prefix`, the configuration and its webhooks are renamed
/// `<prefix>-<name>` and `<prefix>.<name>` (so that it can be installed beside kim's and
/// kube-apiserver's metrics tell them apart). Nothing else changes.
fn paired_doc(doc: &Value, ns: &str, prefix: Option<&str>) -> Value {
    let mut d = doc.clone();
    if let Some(p) = prefix {
        d["metadata"]["name"] = json!(format!("{p}-{}", name_of(doc)));
    }
    for hook in d["webhooks"].as_array_mut().into_iter().flatten() {
        hook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
        if let Some(p) = prefix {
            hook["name"] = json!(format!("{p}.{}", hook["name"].as_str().unwrap_or_default()));
        }
    }
    d
}

/// The admission part's control plane, webhook processes and objects.
struct AdmissionEnv {
    cp: ControlPlane,
    client: kube::Client,
    api: ApiMetrics,
    _certs: WebhookCerts,
    webhook: Webhook,
    null: Webhook,
    /// kim's webhook configurations, pointed at `webhook`.
    hook_docs: Vec<Value>,
    /// The same configurations pointed at `null`.
    null_docs: Vec<Value>,
    /// The paired pass's configurations: kim's on [`PAIRED_NS`]`[1]`, the null webhook's (other
    /// names) on [`PAIRED_NS`]`[2]`.
    paired_docs: Vec<Value>,
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
        let null = Webhook::start_null(&certs).await?;
        let text =
            std::fs::read_to_string(repo().join("manifests/base/webhook-configurations.yaml"))
                .context("manifests/base/webhook-configurations.yaml")?;
        let mut hook_docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).context("webhook configurations")?;
        hook_docs.retain(|d| !d.is_null());
        let mut null_docs = hook_docs.clone();
        for d in &mut hook_docs {
            point_webhooks_at(d, webhook.addr, &certs.ca_pem);
        }
        for d in &mut null_docs {
            point_webhooks_at(d, null.addr, &certs.ca_pem);
        }
        let paired_docs: Vec<Value> = hook_docs
            .iter()
            .map(|d| paired_doc(d, PAIRED_NS[1], None))
            .chain(
                null_docs
                    .iter()
                    .map(|d| paired_doc(d, PAIRED_NS[2], Some("null"))),
            )
            .collect();
        let vap_docs = kim::status::vap::objects(&kim::status::Policy::builtin());
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
        let mut objects = objects;
        for ns in PAIRED_NS {
            create_namespace(&cp, ns).await;
            objects.extend(names.iter().map(String::as_str).chain([PROBE]).map(|n| {
                let mut o = runtime_object(&template, n, n);
                o["metadata"]["namespace"] = json!(ns);
                o["status"] = ready_status(0);
                o
            }));
        }
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
            null,
            hook_docs,
            null_docs,
            paired_docs,
            vap_docs,
            names,
            seq: AtomicU64::new(1),
        })
    }

    /// kim's `kim_webhook_request_duration_seconds` so far: sum (seconds) and count.
    async fn kim_handler(&self) -> anyhow::Result<(f64, f64)> {
        let m = scrape_http(self.webhook.metrics_addr).await?;
        let all = |_: &BTreeMap<String, String>| true;
        Ok((
            sum_where(&m, "kim_webhook_request_duration_seconds_sum", all),
            sum_where(&m, "kim_webhook_request_duration_seconds_count", all),
        ))
    }

    /// CPU seconds of kim's and of the null webhook's threads so far.
    fn hook_cpu(&self) -> (f64, f64) {
        let of = |w: &Webhook| procinfo::threads_cpu_secs(w.proc.id()).unwrap_or(f64::NAN);
        (of(&self.webhook), of(&self.null))
    }

    /// The paired pass's set-up: no policy, kim's webhooks on [`PAIRED_NS`]`[1]`, the null
    /// webhook's on [`PAIRED_NS`]`[2]`; waits until two probe rounds in a row (one write to
    /// [`PROBE`] in each namespace) show each write reach exactly its webhook process.
    async fn configure_paired(&self) -> anyhow::Result<Duration> {
        for d in &self.vap_docs {
            delete_doc(&self.client, d).await?;
        }
        for d in &self.paired_docs {
            apply_doc(&self.client, d).await?;
        }
        let t0 = Instant::now();
        let mut streak = 0;
        loop {
            let mut as_wanted = true;
            for (i, ns) in PAIRED_NS.iter().enumerate() {
                let k0 = (self.webhook.counts().await?, self.null.counts().await?);
                patch_status(
                    &self.client,
                    ns,
                    PROBE,
                    &ready_status(self.seq.fetch_add(1, Ordering::Relaxed)),
                )
                .await
                .map_err(|e| anyhow!("probe write in {ns}: {e}"))?;
                let k1 = (self.webhook.counts().await?, self.null.counts().await?);
                let both = |a: (f64, f64), b: (f64, f64)| b.0 > a.0 && b.1 > a.1;
                let none = |a: (f64, f64), b: (f64, f64)| b == a;
                as_wanted &= match i {
                    0 => none(k0.0, k1.0) && none(k0.1, k1.1),
                    1 => both(k0.0, k1.0) && none(k0.1, k1.1),
                    _ => none(k0.0, k1.0) && both(k0.1, k1.1),
                };
            }
            streak = if as_wanted { streak + 1 } else { 0 };
            if streak >= 2 {
                return Ok(t0.elapsed());
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "the paired set-up is not in force after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `secs` of writes at `rate` in all, open loop, round robin over [`PAIRED_NS`]: one pass
    /// per namespace, each with its share of the writes, its latencies and the CPU and calls
    /// of its webhook process (none, kim, the null webhook); kube-apiserver's metrics and the
    /// other processes' CPU go to the first.
    async fn paced_paired(&self, rate: f64, secs: Duration) -> anyhow::Result<[Pass; 3]> {
        let n = (rate * secs.as_secs_f64()).round().max(3.0) as u64;
        let period = Duration::from_secs_f64(1.0 / rate);
        let m0 = self.api.scrape().await?;
        let kim0 = self.webhook.counts().await?;
        let null0 = self.null.counts().await?;
        let hooks0 = self.hook_cpu();
        let cpu0 = Cpu::now(&self.cp, Some(self.webhook.proc.id()));
        let start = Instant::now() + Duration::from_millis(20);
        let mut tasks = Vec::with_capacity(n as usize);
        for i in 0..n {
            let due = start + period.mul_f64(i as f64);
            tokio::time::sleep_until(due.into()).await;
            let client = self.client.clone();
            let target = (i % 3) as usize;
            let name = self.names[(i / 3) as usize % self.names.len()].clone();
            let k = self.seq.fetch_add(1, Ordering::Relaxed);
            tasks.push(tokio::spawn(async move {
                let r = patch_status(&client, PAIRED_NS[target], &name, &ready_status(k)).await;
                (target, due.elapsed(), r)
            }));
        }
        let mut passes: [Pass; 3] = Default::default();
        for t in tasks {
            let (target, took, r) = t.await.context("write task")?;
            let pass = &mut passes[target];
            pass.writes += 1;
            pass.latencies_ns.push(took.as_nanos() as u64);
            if let Err(e) = r {
                pass.errors += 1;
                pass.first_error.get_or_insert(e);
            }
        }
        let window = start.elapsed().as_secs_f64();
        let cpu1 = Cpu::now(&self.cp, Some(self.webhook.proc.id()));
        let hooks1 = self.hook_cpu();
        let kim1 = self.webhook.counts().await?;
        let null1 = self.null.counts().await?;
        let m1 = self.api.scrape().await?;
        for p in &mut passes {
            p.window_s = window;
        }
        passes[0].cpu = cpu1.minus(cpu0);
        passes[0].metrics = delta(&m1, &m0);
        passes[1].hook_cpu.0 = hooks1.0 - hooks0.0;
        passes[1].hook_calls = (kim1.0 - kim0.0) + (kim1.1 - kim0.1);
        passes[2].hook_cpu.1 = hooks1.1 - hooks0.1;
        passes[2].hook_calls = (null1.0 - null0.0) + (null1.1 - null0.1);
        passes[2].on_null = true;
        Ok(passes)
    }

    /// The webhook process of `s`, if any.
    fn hook_of(&self, s: &Setup) -> Option<&Webhook> {
        match s.hooks {
            Hooks::None => None,
            Hooks::Kim => Some(&self.webhook),
            Hooks::Null => Some(&self.null),
        }
    }

    /// Installs or removes the policy and the webhook configurations (kim's and the null
    /// webhook's have the same names: applying one replaces the other), then waits until a
    /// probe shows the set-up in force.
    async fn configure(&self, s: &Setup) -> anyhow::Result<Duration> {
        // The paired pass's null webhook configuration (its kim one has kim's names).
        for d in self
            .paired_docs
            .iter()
            .filter(|d| name_of(d) != name_of(&self.hook_docs[0]))
        {
            delete_doc(&self.client, d).await?;
        }
        for d in &self.vap_docs {
            if s.vap {
                apply_doc(&self.client, d).await?;
            } else {
                delete_doc(&self.client, d).await?;
            }
        }
        let docs = match s.hooks {
            Hooks::None | Hooks::Kim => &self.hook_docs,
            Hooks::Null => &self.null_docs,
        };
        for d in docs {
            if s.hooks == Hooks::None {
                delete_doc(&self.client, d).await?;
            } else {
                apply_doc(&self.client, d).await?;
            }
        }
        let want = |on: bool| InForce {
            vap: s.vap,
            mutate: on,
            validate: on,
        };
        wait_in_force_all(
            &self.client,
            Some(&self.mallory),
            &[
                (&self.webhook, want(s.hooks == Hooks::Kim)),
                (&self.null, want(s.hooks == Hooks::Null)),
            ],
            &self.seq,
        )
        .await
    }

    /// `secs` of writes at `rate`, open loop; latencies from the scheduled send times. The
    /// connections of `hook` (the set-up's webhook process) are sampled meanwhile.
    async fn paced(
        &self,
        rate: f64,
        secs: Duration,
        hook: Option<&Webhook>,
    ) -> anyhow::Result<Pass> {
        let n = (rate * secs.as_secs_f64()).round().max(1.0) as u64;
        let period = Duration::from_secs_f64(1.0 / rate);
        let m0 = self.api.scrape().await?;
        let h0 = self.null.null_counts().await?;
        let k0 = self.kim_handler().await?;
        let hooks0 = self.hook_cpu();
        let cpu0 = Cpu::now(&self.cp, Some(self.webhook.proc.id()));
        // Connections: kube-apiserver's at the start (its peers), then every socket of the
        // webhook process seen until the writes end: a socket not open at the start is a
        // connection accepted meanwhile.
        let port = hook.map(|h| h.addr.port());
        let first = port.map(procinfo::established_peers).unwrap_or_default();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = hook.map(|h| {
            let (stop, pid) = (stop.clone(), h.proc.id());
            tokio::spawn(async move {
                let first = procinfo::socket_inodes(pid);
                let mut seen = first.clone();
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(CONN_SAMPLE).await;
                    seen.extend(procinfo::socket_inodes(pid));
                }
                seen.difference(&first).count()
            })
        });
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
        let hooks1 = self.hook_cpu();
        stop.store(true, Ordering::Relaxed);
        if let (Some(port), Some(sampler)) = (port, sampler) {
            pass.conns.push(Conns {
                at_start: first.len(),
                at_end: procinfo::established_peers(port).len(),
                new: sampler.await.context("connection sampler")?,
            });
        }
        let h1 = self.null.null_counts().await?;
        let k1 = self.kim_handler().await?;
        pass.kim_handler = (k1.0 - k0.0, k1.1 - k0.1);
        let m1 = self.api.scrape().await?;
        pass.window_s = window.as_secs_f64();
        pass.cpu = cpu1.minus(cpu0);
        pass.hook_cpu = (hooks1.0 - hooks0.0, hooks1.1 - hooks0.1);
        pass.metrics = delta(&m1, &m0);
        let moved = |k: &str| h1.get(k).copied().unwrap_or(0.0) - h0.get(k).copied().unwrap_or(0.0);
        pass.null_http = (moved("http1"), moved("http2"));
        pass.null_bytes = moved("bytes");
        pass.on_null = hook.is_some_and(|h| h.null.is_some());
        pass.hook_calls = if hook.is_some() {
            webhook_calls(&pass.metrics)
        } else {
            0.0
        };
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
        "   control plane up (kube-apiserver + etcd RSS {} MiB), kim webhook pid {}, null webhook pid {}; load {}",
        env.cp.rss_kib() / 1024,
        env.webhook.proc.id(),
        env.null.proc.id(),
        procinfo::loadavg()
    );
    // The warm-up runs at the lowest measured rate: a rate kube-apiserver does not sustain
    // would leave a queue behind for the pass that follows.
    let warmup_rate = cfg.rates.iter().copied().fold(f64::INFINITY, f64::min);
    let mut passes: HashMap<(usize, usize), Pass> = HashMap::new();
    // The paired pass by rate: none, kim, null.
    let mut paired: HashMap<usize, [Pass; 3]> = HashMap::new();
    let mut idle = Cpu::default();
    let mut idle_hooks = (0.0, 0.0);
    let mut idle_s = 0.0;
    for round in 0..cfg.rounds {
        // The servers' own CPU with no writes (kube-apiserver's controllers, etcd's ticks),
        // subtracted from the per-write figures.
        let window = Duration::from_secs(3);
        let c0 = Cpu::now(&env.cp, Some(env.webhook.proc.id()));
        let h0 = env.hook_cpu();
        tokio::time::sleep(window).await;
        idle = idle.plus(Cpu::now(&env.cp, Some(env.webhook.proc.id())).minus(c0));
        let h1 = env.hook_cpu();
        idle_hooks.0 += h1.0 - h0.0;
        idle_hooks.1 += h1.1 - h0.1;
        idle_s += window.as_secs_f64();
        // The set-ups, then the paired pass (index `SETUPS.len()`).
        let order: Vec<usize> = if round % 2 == 0 {
            (0..=SETUPS.len()).collect()
        } else {
            (0..=SETUPS.len()).rev().collect()
        };
        for s in order {
            if s == SETUPS.len() {
                let took = env.configure_paired().await?;
                if !cfg.warmup.is_zero() {
                    let _ = env.paced_paired(warmup_rate, cfg.warmup).await?;
                }
                for (r, &rate) in cfg.rates.iter().enumerate() {
                    let ps = env.paced_paired(rate, cfg.secs).await?;
                    println!(
                        "   round {} paired            {rate:>5.0}/s: p50 {} ms, p99 {} ms (none / kim / null), {} errors (in force after {:.1} s; load {})",
                        round + 1,
                        ps.iter()
                            .map(|p| format!("{:.2}", p.percentile_unsorted_ms(0.50)))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        ps.iter()
                            .map(|p| format!("{:.2}", p.percentile_unsorted_ms(0.99)))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        ps.iter().map(|p| p.errors).sum::<u64>(),
                        took.as_secs_f64(),
                        procinfo::loadavg()
                    );
                    let pooled = paired.entry(r).or_default();
                    for (into, p) in pooled.iter_mut().zip(ps) {
                        into.add(p);
                    }
                }
                continue;
            }
            let setup = &SETUPS[s];
            let took = env.configure(setup).await?;
            let hook = env.hook_of(setup);
            if !cfg.warmup.is_zero() {
                let _ = env.paced(warmup_rate, cfg.warmup, hook).await?;
            }
            for (r, &rate) in cfg.rates.iter().enumerate() {
                let p = env.paced(rate, cfg.secs, hook).await?;
                println!(
                    "   round {} {:<17} {rate:>5.0}/s: {} writes, p50 {:.2} ms, p99 {:.2} ms, {} errors{} (in force after {:.1} s; load {})",
                    round + 1,
                    setup.label,
                    p.writes,
                    p.percentile_unsorted_ms(0.50),
                    p.percentile_unsorted_ms(0.99),
                    p.errors,
                    p.conns.first().map_or(String::new(), |c| format!(
                        ", webhook connections {} -> {}, {} new",
                        c.at_start, c.at_end, c.new
                    )),
                    took.as_secs_f64(),
                    procinfo::loadavg()
                );
                passes.entry((s, r)).or_default().add(p);
            }
        }
    }
    for p in passes
        .values_mut()
        .chain(paired.values_mut().flat_map(|ps| ps.iter_mut()))
    {
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
    let idle_hooks = (idle_hooks.0 / idle_s, idle_hooks.1 / idle_s);
    report_admission(cfg, &passes, idle, idle_hooks, rss, api_rss);
    report_paired(cfg, &paired, idle, idle_hooks);
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
    idle_hooks: (f64, f64),
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
        row("                      null webhook", &|p| {
            num(p.per_k(p.hook_cpu.1), 3)
        });
        row("                      this process (client)", &|p| {
            num(p.per_k(p.cpu.bench), 3)
        });
        row(&format!("cores busy, all five (of {n}) %"), &|p| {
            num((p.cpu.total() + p.hook_cpu.1) / p.window_s * 100.0, 0)
        });
        for (name, less_idle) in [
            ("webhook process CPU µs per call", false),
            ("  less its idle CPU", true),
        ] {
            row(name, &|p| match webhook_cpu_us(p, idle_hooks, less_idle) {
                Some(us) => num(us, 1),
                None => "-".into(),
            });
        }
        row("webhook connections per round: start>end+new", &|p| {
            if p.conns.is_empty() {
                return "-".into();
            }
            p.conns
                .iter()
                .map(|c| format!("{}>{}+{}", c.at_start, c.at_end, c.new))
                .collect::<Vec<_>>()
                .join(" ")
        });
        row("null webhook calls over HTTP/1.1 / HTTP/2", &|p| {
            if !p.on_null {
                "-".into()
            } else {
                format!("{} / {}", p.null_http.0, p.null_http.1)
            }
        });
        row("null webhook: review body bytes, mean", &|p| {
            let calls = p.null_http.0 + p.null_http.1;
            if !p.on_null || calls == 0.0 {
                "-".into()
            } else {
                num(p.null_bytes / calls, 0)
            }
        });
        row("kim's own time per call, mean µs (histogram)", &|p| {
            if p.kim_handler.1 == 0.0 {
                "-".into()
            } else {
                num(p.kim_handler.0 / p.kim_handler.1 * 1e6, 1)
            }
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
        "idle CPU (no writes, {} windows of 3 s): kube-apiserver {:.1} ms/s, etcd {:.1} ms/s, kim {:.2} ms/s, null webhook {:.2} ms/s, this process {:.1} ms/s",
        cfg.rounds,
        idle.apiserver * 1e3,
        idle.etcd * 1e3,
        idle_hooks.0 * 1e3,
        idle_hooks.1 * 1e3,
        idle.bench * 1e3
    );
    println!(
        "kim webhook RSS after all passes: VmRSS {:.1} MiB, VmHWM {:.1} MiB; kube-apiserver + etcd RSS {api_rss:.0} MiB",
        kim_rss.0, kim_rss.1
    );

    report_against_null(cfg, passes, idle_hooks);

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

/// CPU µs of the pass's webhook process (kim in (c) and (d), the null webhook in (e)) per call
/// from kube-apiserver, less its idle CPU (`idle_hooks`: kim's and the null webhook's, seconds
/// per second) when `less_idle`; `None` without webhooks or calls.
fn webhook_cpu_us(p: &Pass, idle_hooks: (f64, f64), less_idle: bool) -> Option<f64> {
    let calls = p.hook_calls;
    if calls == 0.0 {
        return None;
    }
    let (cpu, idle) = if p.on_null {
        (p.hook_cpu.1, idle_hooks.1)
    } else {
        (p.hook_cpu.0, idle_hooks.0)
    };
    let cpu = if less_idle {
        cpu - idle * p.window_s
    } else {
        cpu
    };
    Some(cpu / calls * 1e6)
}

/// The measured rate nearest to [`NULL_RATE`], with its index.
fn null_rate(cfg: &Config) -> Option<(usize, f64)> {
    cfg.rates
        .iter()
        .copied()
        .enumerate()
        .min_by(|a, b| (a.1 - NULL_RATE).abs().total_cmp(&(b.1 - NULL_RATE).abs()))
}

/// kim's webhooks, (c), against the null webhook, (e), at the measured rate nearest to
/// [`NULL_RATE`]: added latency over (a) and CPU per call.
fn report_against_null(
    cfg: &Config,
    passes: &HashMap<(usize, usize), Pass>,
    idle_hooks: (f64, f64),
) {
    let Some((r, rate)) = null_rate(cfg) else {
        return;
    };
    let (Some(a), Some(c), Some(e)) = (
        passes.get(&(NONE, r)),
        passes.get(&(KIM, r)),
        passes.get(&(NULL, r)),
    ) else {
        return;
    };
    judge_against_null(
        &format!("set-ups (a), (c), (e) in turn, at {rate:.0} writes/s"),
        [a, c, e],
        idle_hooks,
    );
}

/// Prints the targets of kim's webhooks against the null webhook's for one measure: `[a, c,
/// e]` are the writes with no webhook, with kim's and with the null webhook's.
fn judge_against_null(what: &str, [a, c, e]: [&Pass; 3], idle_hooks: (f64, f64)) {
    println!();
    println!(
        "== kim's webhooks (c) against the null webhooks (e): {what} ({} cores; {} / {} / {} writes in (a) / (c) / (e); load now {})",
        cores(),
        a.writes,
        c.writes,
        e.writes,
        procinfo::loadavg()
    );
    println!(
        "{:<60} {:>10} {:>10}  verdict",
        "target", "wanted", "measured"
    );
    let target = |what: &str, wanted: &str, measured: f64, met: bool| {
        println!(
            "{what:<60} {wanted:>10} {:>10}  {}",
            num(measured, 3),
            verdict(met)
        );
    };
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        let kim = c.percentile_ms(q) - a.percentile_ms(q);
        let null = e.percentile_ms(q) - a.percentile_ms(q);
        println!(
            "   added {name} vs (a): kim {} ms, null {} ms",
            num(kim, 3),
            num(null, 3)
        );
        // A ratio needs a positive denominator; the verdict compares the differences.
        let ratio = if null > 0.0 { kim / null } else { f64::NAN };
        target(
            &format!("kim's added {name} ÷ the null webhook's added {name}"),
            "<= 1.1",
            ratio,
            kim <= 1.1 * null,
        );
    }
    let us = |p: &Pass| webhook_cpu_us(p, idle_hooks, true).unwrap_or(f64::NAN);
    let (kim_us, null_us) = (us(c), us(e));
    println!(
        "   webhook process CPU per call (less idle): kim {} µs, null {} µs, kim − null {} µs (kim's own work)",
        num(kim_us, 1),
        num(null_us, 1),
        num(kim_us - null_us, 1)
    );
    target(
        &format!("kim CPU µs per call ÷ {REVIEW_CPU_US} µs (webhook bench)"),
        "<= 2",
        kim_us / REVIEW_CPU_US,
        kim_us <= 2.0 * REVIEW_CPU_US,
    );
    let errors = a.errors + c.errors + e.errors;
    target("errors in (a), (c), (e)", "0", errors as f64, errors == 0);
}

/// The paired pass: per rate a table (none, kim, null), then the targets against the null
/// webhook at the rate nearest to [`NULL_RATE`].
fn report_paired(
    cfg: &Config,
    paired: &HashMap<usize, [Pass; 3]>,
    idle: Cpu,
    idle_hooks: (f64, f64),
) {
    if paired.is_empty() {
        return;
    }
    println!();
    println!(
        "== paired pass: each write in turn to a namespace with no webhook, kim's, the null webhook's ({})",
        PAIRED_NS.join(", ")
    );
    let w = 52;
    for (r, &rate) in cfg.rates.iter().enumerate() {
        let Some(ps) = paired.get(&r) else {
            continue;
        };
        println!("-- {rate:.0} writes/s in all");
        print!("{:<w$}", "");
        for label in PAIRED {
            print!(" {label:>17}");
        }
        println!();
        let row = |name: &str, f: &dyn Fn(&Pass) -> String| {
            print!("{name:<w$}");
            for p in ps {
                print!(" {:>17}", f(p));
            }
            println!();
        };
        row("writes (errors)", &|p| {
            format!("{} ({})", p.writes, p.errors)
        });
        for (name, q) in [
            ("client p50 ms", 0.50),
            ("client p99 ms", 0.99),
            ("client p99.9 ms", 0.999),
            ("client max ms", 1.0),
        ] {
            row(name, &|p| num(p.percentile_ms(q), 2));
        }
        let base = &ps[0];
        row("added p50 / p99 vs (a), ms", &|p| {
            format!(
                "{} / {}",
                num(p.percentile_ms(0.5) - base.percentile_ms(0.5), 2),
                num(p.percentile_ms(0.99) - base.percentile_ms(0.99), 2)
            )
        });
        row("webhook calls per write", &|p| {
            num(p.hook_calls / p.writes.max(1) as f64, 2)
        });
        row("webhook process CPU µs per call, less idle", &|p| {
            webhook_cpu_us(p, idle_hooks, true).map_or("-".into(), |us| num(us, 1))
        });
        // kube-apiserver's own view of each process's calls (the null webhook's names start
        // with `null.`).
        for (label, ty) in [("mutating", "admit"), ("validating", "validating")] {
            let h = |null: bool| {
                hist(
                    &base.metrics,
                    "apiserver_admission_webhook_admission_duration_seconds",
                    |l| {
                        l.get("type").is_some_and(|t| t == ty)
                            && l.get("operation").is_some_and(|o| o == "UPDATE")
                            && l.get("name").is_some_and(|n| n.starts_with("null.")) == null
                    },
                )
            };
            let cell = |h: Hist| {
                if h.count == 0.0 {
                    "-".into()
                } else {
                    format!("{}, {}", num(h.mean_ms(), 2), num(h.quantile_ms(0.99), 1))
                }
            };
            println!(
                "{:<w$} {:>17} {:>17} {:>17}",
                format!("apiserver webhook {label}: mean, p99 ms"),
                "-",
                cell(h(false)),
                cell(h(true))
            );
        }
        let all: u64 = ps.iter().map(|p| p.writes).sum();
        println!(
            "kube-apiserver CPU per write, all three: {} ms (less idle {} ms); cores busy, all five: {} %",
            num(base.cpu.apiserver / all.max(1) as f64 * 1e3, 3),
            num(
                (base.cpu.apiserver - idle.apiserver * base.window_s) / all.max(1) as f64 * 1e3,
                3
            ),
            num(
                (base.cpu.total() - base.cpu.kim + ps[1].hook_cpu.0 + ps[2].hook_cpu.1)
                    / base.window_s
                    * 100.0,
                0
            )
        );
        for (label, p) in PAIRED.iter().zip(ps) {
            if let Some(e) = &p.first_error {
                println!("   {label} first error: {e}");
            }
        }
    }
    if let Some((r, rate)) = null_rate(cfg)
        && let Some([a, c, e]) = paired.get(&r)
    {
        judge_against_null(
            &format!("paired pass, {rate:.0} writes/s in all"),
            [a, c, e],
            idle_hooks,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2: the controller at scale

/// The N at which the cold no-op pass and the controller's RSS are judged.
const TARGET_N: usize = 10_000;

/// A `kim` binary whose controller the scale part runs.
struct Build {
    /// `baseline` or `this build`: the column of the side-by-side table.
    label: &'static str,
    bin: PathBuf,
}

const BASELINE: &str = "baseline";
const THIS_BUILD: &str = "this build";

/// The builds the scale part runs at each N, in this order: the baseline
/// (`APISERVER_BENCH_KIM_BASELINE`) if given, then this build's `kim`.
fn builds(cfg: &Config) -> Vec<Build> {
    let mut v = Vec::new();
    if let Some(bin) = &cfg.kim_baseline {
        v.push(Build {
            label: BASELINE,
            bin: bin.clone(),
        });
    }
    v.push(Build {
        label: THIS_BUILD,
        bin: PathBuf::from(env!("CARGO_BIN_EXE_kim")),
    });
    v
}

/// The controller's requests to one server by (verb, resource[/subresource]), counted by the
/// server ([`flow_counts`]).
#[derive(Clone, Default)]
struct Counts {
    by: ByResource,
}

impl Counts {
    fn total(&self) -> f64 {
        sum_of(self.by.values())
    }

    /// Creates, updates, patches and deletes.
    fn writes(&self) -> f64 {
        let w = self
            .by
            .iter()
            .filter(|((v, _), _)| {
                ["create", "update", "patch", "delete", "deletecollection"].contains(&v.as_str())
            })
            .map(|(_, n)| n);
        sum_of(w)
    }

    fn by_verb(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((v, _), n) in &self.by {
            *out.entry(v.clone()).or_default() += n;
        }
        out
    }

    /// GETs of one named object (`get`; reading a collection is `list`).
    fn object_gets(&self) -> f64 {
        sum_of(
            self.by
                .iter()
                .filter(|((v, w), _)| v == "get" && w != "non-resource")
                .map(|(_, n)| n),
        )
    }

    /// GETs of a Shoot (no subresource).
    fn shoot_gets(&self) -> f64 {
        self.by
            .get(&("get".to_string(), "shoots".to_string()))
            .copied()
            .unwrap_or(0.0)
    }
}

/// The project whose namespace holds the Shoots (kim's example configuration's).
const GARDEN_NS: &str = "garden-kyma-dev";
/// The garden user the controller runs as on the Gardener API (a client certificate).
const GARDEN_USER: &str = "kim-gardener";

/// What the controller may do in the project namespace (a Role of [`GARDEN_USER`]): Shoots and
/// their admin kubeconfigs, the structured-authentication ConfigMaps, reading the Secrets a
/// Shoot's `spec.resources` names (Gardener admits no reference its author may not `get`).
fn garden_rules() -> Value {
    json!([
        {"apiGroups": ["core.gardener.cloud"], "resources": ["shoots"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": ["core.gardener.cloud"], "resources": ["shoots/adminkubeconfig"],
         "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ])
}

/// One reading of every counter of a [`Garden`].
#[derive(Clone, Default)]
struct Sample {
    /// The controller's requests: to kube-apiserver as its ServiceAccount, to the Gardener API
    /// as [`GARDEN_USER`], to the runtime cluster as a Shoot administrator.
    kcp: ByResource,
    garden: ByResource,
    runtime: ByResource,
    /// gardener-apiserver's own `/metrics` (every client's requests: the controller's, the
    /// gardenlet's, kube-apiserver's).
    gardener: Metrics,
}

/// The requests between two [`Sample`]s.
#[derive(Clone, Default)]
struct Window {
    kcp: Counts,
    garden: Counts,
    runtime: Counts,
    gardener: Metrics,
}

impl Window {
    fn between(after: &Sample, before: &Sample) -> Window {
        let c = |a: &ByResource, b: &ByResource| Counts {
            by: flow_counts::minus(a, b),
        };
        Window {
            kcp: c(&after.kcp, &before.kcp),
            garden: c(&after.garden, &before.garden),
            runtime: c(&after.runtime, &before.runtime),
            gardener: delta(&after.gardener, &before.gardener),
        }
    }

    /// Every request of the controller, on all three servers.
    fn total(&self) -> f64 {
        self.kcp.total() + self.garden.total() + self.runtime.total()
    }
}

/// The real Gardener API (gardener-apiserver aggregated behind the control plane's
/// kube-apiserver, `testenv::garden`'s fixtures installed, [`GARDEN_USER`] granted
/// [`garden_rules`]), the simulated gardenlet with one runtime cluster (kube-apiserver and
/// etcd) handed to every Shoot, and the counters of the controller's requests on each server.
struct Garden {
    /// `Arc`: a task of this process follows its history.
    gardenlet: Arc<Gardenlet>,
    runtime: Arc<ControlPlane>,
    user: ClientCert,
    kcp: FlowCounter,
    garden: FlowCounter,
    runtime_counter: FlowCounter,
    gardener_http: reqwest::Client,
    gardener_url: String,
}

impl Garden {
    /// Sets the Gardener side up on `cp` (started with gardener-apiserver) and starts the
    /// gardenlet and its runtime cluster before any Shoot exists, so that the counters see the
    /// controller's first request to each server.
    async fn start(cp: &ControlPlane) -> anyhow::Result<Garden> {
        let admin = cp.admin().await;
        let project = GARDEN_NS.trim_start_matches("garden-");
        testenv::garden::install_fixtures(&admin, project)
            .await
            .map_err(|e| anyhow!("Gardener fixtures: {e}"))?;
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": GARDEN_USER, "namespace": GARDEN_NS},
            "rules": garden_rules(),
        }))?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": GARDEN_USER, "namespace": GARDEN_NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GARDEN_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": GARDEN_USER}],
        }))?;
        Api::<Role>::namespaced(admin.clone(), GARDEN_NS)
            .create(&PostParams::default(), &role)
            .await
            .context("the garden user's Role")?;
        Api::<RoleBinding>::namespaced(admin.clone(), GARDEN_NS)
            .create(&PostParams::default(), &binding)
            .await
            .context("the garden user's RoleBinding")?;
        let gardenlet = Arc::new(Gardenlet::start(
            admin,
            GardenletConfig::new(GARDEN_NS).clusters(Clusters::Pool(1)),
        ));
        let runtime = gardenlet
            .pool_cluster()
            .await
            .map_err(|e| anyhow!("the runtime cluster: {e}"))?
            .context("a pool gardenlet has a runtime cluster")?;
        let kcp = FlowCounter::install(
            cp,
            "kcp",
            json!([flow_counts::service_account("kim-system", "kim-controller")]),
            "workload-low",
            &["runtimes", "runtimes/status", "events", "leases", "secrets"],
        )
        .await?;
        let garden = FlowCounter::install(
            cp,
            "garden",
            json!([flow_counts::user(GARDEN_USER)]),
            "global-default",
            &["shoots", "shoots/adminkubeconfig", "configmaps"],
        )
        .await?;
        // The admin kubeconfigs Gardener hands out carry one of these groups.
        let runtime_counter = FlowCounter::install(
            &runtime,
            "runtime",
            json!(
                ADMINS_GROUPS
                    .iter()
                    .map(|g| flow_counts::group(g))
                    .collect::<Vec<_>>()
            ),
            "global-default",
            &["clusterrolebindings"],
        )
        .await?;
        Ok(Garden {
            gardenlet,
            runtime,
            user: cp.user(GARDEN_USER, &[]),
            kcp,
            garden,
            runtime_counter,
            gardener_http: cp.http_client(cp.admin_cert())?,
            gardener_url: format!(
                "{}/metrics",
                cp.gardener_url().context("gardener-apiserver's URL")?
            ),
        })
    }

    async fn sample(&self) -> anyhow::Result<Sample> {
        let text = self.kcp.scrape_text().await?;
        let gardener = flow_counts::metrics_text(&self.gardener_http, &self.gardener_url).await?;
        Ok(Sample {
            kcp: self.kcp.read(&text),
            garden: self.garden.read(&text),
            runtime: self.runtime_counter.scrape().await?,
            gardener: parse_metrics(&gardener),
        })
    }

    /// CPU seconds of gardener-apiserver and of the runtime cluster's kube-apiserver.
    fn cpu(&self, cp: &ControlPlane) -> (f64, f64) {
        let secs = |pid: Option<u32>| pid.and_then(procinfo::cpu_secs).unwrap_or(f64::NAN);
        (secs(cp.gardener_pid()), secs(Some(self.runtime.pids().1)))
    }

    /// The gardenlet's `Create`s that succeeded and its step errors so far.
    fn gardenlet_progress(&self) -> (usize, usize) {
        let h = self.gardenlet.history();
        (
            h.count(|r| matches!(r.event, Event::Succeeded(Operation::Create))),
            h.count(|r| matches!(r.event, Event::Error(_))),
        )
    }
}

/// When this process saw each Shoot's `Create` succeed (the gardenlet's history) and each
/// Runtime turn `Ready` (a watch on kube-apiserver), by Shoot name.
struct ReadyTimes {
    succeeded: Arc<Mutex<HashMap<String, Instant>>>,
    ready: Arc<Mutex<HashMap<String, Instant>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ReadyTimes {
    fn follow(gardenlet: Arc<Gardenlet>, runtimes: Api<DynamicObject>) -> ReadyTimes {
        let succeeded: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let ready: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let history = {
            let succeeded = succeeded.clone();
            tokio::spawn(async move {
                let mut seen = 0;
                let _ = gardenlet
                    .wait_for(Duration::from_secs(7 * 24 * 3600), |h| {
                        let now = Instant::now();
                        let mut s = succeeded.lock().unwrap();
                        for r in h.records.iter().skip(seen) {
                            if r.event == Event::Succeeded(Operation::Create) {
                                s.entry(r.shoot.clone()).or_insert(now);
                            }
                        }
                        seen = h.records.len();
                        None::<()>
                    })
                    .await;
            })
        };
        let watch = {
            let ready = ready.clone();
            tokio::spawn(async move {
                let mut events =
                    std::pin::pin!(watcher::watcher(runtimes, watcher::Config::default()));
                while let Some(e) = events.next().await {
                    let (Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o))) = e
                    else {
                        continue;
                    };
                    if o.data["status"]["state"] == "Ready"
                        && let Some(shoot) = o.data["spec"]["shoot"]["name"].as_str()
                    {
                        ready
                            .lock()
                            .unwrap()
                            .entry(shoot.to_string())
                            .or_insert_with(Instant::now);
                    }
                }
            })
        };
        ReadyTimes {
            succeeded,
            ready,
            tasks: vec![history, watch],
        }
    }

    /// Shoot `Succeeded` → Runtime `Ready` per Runtime, seconds, ascending.
    fn latencies(&self) -> Vec<f64> {
        let s = self.succeeded.lock().unwrap();
        let r = self.ready.lock().unwrap();
        let mut v: Vec<f64> = r
            .iter()
            .filter_map(|(shoot, ready)| {
                Some(
                    ready
                        .saturating_duration_since(*s.get(shoot)?)
                        .as_secs_f64(),
                )
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The `q` quantile of ascending `v` (nearest rank), NaN when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// `kim controller` as a process, output captured.
struct Controller {
    proc: Process,
    metrics_addr: SocketAddr,
}

impl Controller {
    /// Starts the controller of binary `bin` with the kubeconfigs in `dir` and `RUST_LOG`
    /// `log` (none: the controller's default).
    async fn start(bin: &Path, dir: &Path, log: Option<&str>) -> anyhow::Result<Controller> {
        let args = testenv::process::kim_controller_args(
            &dir.join("kcp.kubeconfig"),
            &dir.join("garden.kubeconfig"),
            &repo().join("docs/config.example.yaml"),
            NS,
            false,
        );
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG");
        if let Some(log) = log {
            cmd.env("RUST_LOG", log);
        }
        let mut proc = Process::spawn(&mut cmd)
            .with_context(|| format!("spawning {} controller", bin.display()))?;
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

    /// The lines it logged about a status write answered 409 (logged at debug, so only with
    /// `APISERVER_BENCH_CONTROLLER_RUST_LOG=kim=debug`), at most `top`.
    fn conflicts(&self, top: usize) -> Vec<String> {
        self.proc
            .stdout()
            .lines()
            .filter(|l| l.contains("409 Conflict"))
            .take(top)
            .map(str::to_string)
            .collect()
    }

    fn stop(&mut self) {
        self.proc.terminate(Duration::from_secs(30));
    }
}

fn metric(m: &Metrics, name: &str) -> f64 {
    sum_where(m, name, |_| true)
}

/// Resource requests answered 409 Conflict.
fn conflicts(m: &Metrics) -> f64 {
    sum_where(m, "apiserver_request_total", |l| {
        l.get("code").is_some_and(|c| c == "409")
            && l.get("resource").is_some_and(|r| !r.is_empty())
    })
}

/// Resource requests answered 409 Conflict, by resource[/subresource].
fn conflicts_line(m: &Metrics) -> String {
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in m {
        let (name, l) = split_series(k);
        if name != "apiserver_request_total" || l.get("code").is_none_or(|c| c != "409") {
            continue;
        }
        let r = l.get("resource").cloned().unwrap_or_default();
        let what = match l.get("subresource").filter(|s| !s.is_empty()) {
            Some(s) => format!("{r}/{s}"),
            None => r,
        };
        *by.entry(what).or_default() += v;
    }
    by.retain(|_, v| *v > 0.0);
    if by.is_empty() {
        return "none".into();
    }
    by.iter()
        .map(|(w, n)| format!("{w} {n:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn writes_of(by_verb: &BTreeMap<String, f64>) -> f64 {
    sum_of(
        by_verb
            .iter()
            .filter(|(v, _)| ["POST", "PUT", "PATCH", "DELETE", "APPLY"].contains(&v.as_str()))
            .map(|(_, n)| n),
    )
}

/// The sum of `values`; `0.0` when there is none (a float `Iterator::sum` of nothing is `-0.0`,
/// printed `-0`).
fn sum_of<'a>(values: impl IntoIterator<Item = &'a f64>) -> f64 {
    let mut sum = 0.0;
    for v in values {
        sum += v;
    }
    sum
}

/// Prints `(verb, what) → count` a line each, with the count per Runtime.
fn print_by_resource<'a>(
    head: &str,
    rows: impl IntoIterator<Item = (&'a (String, String), &'a f64)>,
    n: usize,
) {
    for ((verb, what), count) in rows {
        if *count > 0.0 {
            println!(
                "     {head}: {verb:<7} {what:<44} {count:>8.0} ({:.3}/Runtime)",
                count / n as f64
            );
        }
    }
}

/// What one build's controller did at one N.
struct ScaleRun {
    label: &'static str,
    n: usize,
    /// The window with no controller before the cold start: its length, kube-apiserver's
    /// requests and the CPU of every process.
    idle_s: f64,
    idle: Metrics,
    idle_cpu: Cpu,
    /// From the cold start until the controller counted all N `Ready`.
    ready_s: f64,
    /// Shoot `Succeeded` → Runtime `Ready` of each Runtime, seconds, ascending.
    ready_latency: Vec<f64>,
    /// The provisioning window: the cold start until all `Ready` and the controller's requests
    /// stopped (at most `APISERVER_BENCH_REST_SECS` more).
    prov_s: f64,
    prov: Metrics,
    prov_cpu: Cpu,
    /// The controller's requests on each server, and gardener-apiserver's from every client.
    prov_win: Window,
    prov_ctl_cpu: f64,
    prov_hwm: f64,
    prov_rss: f64,
    reconcile_errors: f64,
    /// The cold no-op pass: process start until `kim_controller_reconciles_total` ≥ N.
    pass_s: f64,
    pass_up_s: f64,
    /// When the controller had counted its first reconcile (NaN: never seen before the end).
    pass_first_s: f64,
    pass: Metrics,
    pass_cpu: Cpu,
    pass_ctl_cpu: f64,
    pass_win: Window,
    pass_reconciles: f64,
    pass_hwm: f64,
    /// `APISERVER_BENCH_REST_SECS` after the pass.
    rest_s: f64,
    rest: Metrics,
    rest_win: Window,
    rest_hwm: f64,
    rest_rss: f64,
    status_writes_sent: f64,
}

impl ScaleRun {
    fn per(&self, x: f64) -> f64 {
        x / self.n as f64
    }

    /// The controller's requests to kube-apiserver (as its ServiceAccount) while provisioning.
    fn prov_ctl_requests(&self) -> f64 {
        self.prov_win.kcp.total()
    }

    /// kube-apiserver CPU ms per Runtime while provisioning: as measured, and less its CPU with
    /// no controller over the same time.
    fn api_cpu_ms(&self) -> (f64, f64) {
        let raw = self.prov_cpu.apiserver;
        let idle = self.idle_cpu.apiserver / self.idle_s * self.prov_s;
        (self.per(raw) * 1e3, self.per(raw - idle) * 1e3)
    }

    /// The controller's per-object GETs in the cold no-op pass: kube-apiserver's, Gardener's.
    fn pass_gets(&self) -> (f64, f64) {
        (
            self.pass_win.kcp.object_gets(),
            self.pass_win.garden.object_gets(),
        )
    }

    /// The controller's peak RSS (VmHWM), provisioning and pass.
    fn peak_mib(&self) -> f64 {
        self.prov_hwm.max(self.pass_hwm).max(self.rest_hwm)
    }
}

/// Shoot GETs gardener-apiserver served (every client).
fn gardener_shoot_gets(m: &Metrics) -> f64 {
    requests_by_resource(m)
        .get(&("GET".to_string(), "shoots".to_string()))
        .copied()
        .unwrap_or(0.0)
}

/// Waits until the controller's requests (to all three servers) stayed the same for 2 s, at
/// most `limit`: the requests that follow the last `Ready` (an Event, a last write) belong to
/// provisioning.
async fn settle(garden: &Garden, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let zero = Sample::default();
    let count = async || -> anyhow::Result<f64> {
        Ok(Window::between(&garden.sample().await?, &zero).total())
    };
    let mut last = count().await?;
    let mut still = Instant::now();
    while t0.elapsed() < limit && still.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = count().await?;
        if now != last {
            last = now;
            still = Instant::now();
        }
    }
    Ok(())
}

async fn scale_part(cfg: &Config, n: usize, build: &Build) -> anyhow::Result<ScaleRun> {
    let tag = build.label;
    println!(
        "== 2. controller at scale, {tag} ({}): {n} Runtimes in etcd, kim controller started cold (gardener-apiserver, the simulated gardenlet, one runtime cluster)",
        build.bin.display(),
    );
    let t_setup = Instant::now();
    let cp = tokio::task::spawn_blocking(|| {
        ControlPlane::start_with(Options {
            gardener: true,
            ..Options::default()
        })
    })
    .await?
    .context("control plane with gardener-apiserver")?;
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
    let mut template = load_template()?;
    // The fixtures' binding of the provider: the sample's "hyperscaler secret" cannot be an
    // object name, and Gardener admits no Shoot naming a binding that does not exist.
    template["spec"]["shoot"]["secretBindingName"] = json!("hyperscaler-aws");
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
    let garden = Garden::start(&cp).await?;
    std::fs::write(
        dir.path().join("garden.kubeconfig"),
        cp.kubeconfig(&garden.user),
    )?;
    println!(
        "   control plane with gardener-apiserver, manifests/base ({} objects applied, {} skipped), kim webhook (this build), Gardener fixtures, gardenlet and runtime cluster up in {:.1} s",
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

    // kube-apiserver with no controller: its own requests and CPU, subtracted where said.
    let idle_cpu0 = Cpu::now(&cp, Some(webhook.proc.id()));
    let idle0 = api.scrape().await?;
    let t_idle = Instant::now();
    tokio::time::sleep(cfg.rest.max(Duration::from_secs(1))).await;
    let idle1 = api.scrape().await?;
    let idle_s = t_idle.elapsed().as_secs_f64();
    let idle_cpu = Cpu::now(&cp, Some(webhook.proc.id())).minus(idle_cpu0);
    let idle = delta(&idle1, &idle0);

    // Provisioning: the controller started cold with N new Runtimes.
    let times = ReadyTimes::follow(garden.gardenlet.clone(), runtimes.clone());
    let s0 = garden.sample().await?;
    let m0 = api.scrape().await?;
    let cpu0 = Cpu::now(&cp, Some(webhook.proc.id()));
    let (g_cpu0, r_cpu0) = garden.cpu(&cp);
    let t0 = Instant::now();
    let mut ctl =
        Controller::start(&build.bin, dir.path(), cfg.controller_rust_log.as_deref()).await?;
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
            "{tag}: {n} Runtimes not Ready after {:?}: {ready} Ready",
            cfg.timeout
        );
        if last.elapsed() >= Duration::from_secs(15) {
            let (created, errors) = garden.gardenlet_progress();
            eprintln!(
                "   … {tag} provisioning: {:.0} s, {ready} Ready, gardenlet: {created} Shoots created, {errors} step errors; controller RSS {:.1} MiB, load {}",
                t0.elapsed().as_secs_f64(),
                procinfo::rss_mib(ctl.pid()),
                procinfo::loadavg()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let ready_s = t0.elapsed().as_secs_f64();
    let prov_hwm = procinfo::hwm_mib(ctl.pid());
    let prov_rss = procinfo::rss_mib(ctl.pid());
    settle(&garden, cfg.rest).await?;
    let prov_s = t0.elapsed().as_secs_f64();
    let prov_cpu = Cpu::now(&cp, Some(webhook.proc.id())).minus(cpu0);
    let (g_cpu1, r_cpu1) = garden.cpu(&cp);
    let prov_ctl_cpu = procinfo::cpu_secs(ctl.pid()).unwrap_or(f64::NAN) - ctl_cpu0;
    let m1 = api.scrape().await?;
    let s1 = garden.sample().await?;
    let prov_win = Window::between(&s1, &s0);
    let prov = delta(&m1, &m0);
    let ready_latency = times.latencies();
    times.stop();
    let km = ctl.metrics().await?;
    let reconcile_errors = metric(&km, "kim_controller_reconcile_errors_total");
    let by_verb = requests_by_verb(&prov);
    let total: f64 = sum_of(by_verb.values());
    let ctl_req = prov_win.kcp.total();
    println!(
        "   {tag} provisioning: all {n} Ready {ready_s:.1} s after the cold start ({:.1} Runtimes/s; the requests settled at {prov_s:.1} s); controller CPU {prov_ctl_cpu:.1} s, VmHWM {prov_hwm:.1} MiB, VmRSS {prov_rss:.1} MiB; {reconcile_errors} reconcile errors",
        n as f64 / ready_s,
    );
    println!(
        "   {tag} Shoot Succeeded → Runtime Ready ({} Runtimes): p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
        ready_latency.len(),
        num(quantile(&ready_latency, 0.5) * 1e3, 1),
        num(quantile(&ready_latency, 0.9) * 1e3, 1),
        num(quantile(&ready_latency, 0.99) * 1e3, 1),
        num(quantile(&ready_latency, 1.0) * 1e3, 1),
    );
    let (created, errors) = garden.gardenlet_progress();
    let first_error = garden
        .gardenlet
        .history()
        .records
        .iter()
        .find_map(|r| match &r.event {
            Event::Error(e) => Some(format!("{}: {e}", r.shoot)),
            _ => None,
        });
    println!(
        "   {tag} gardenlet: {created} Shoot Creates succeeded, {errors} step errors (first: {})",
        first_error.as_deref().unwrap_or("-")
    );
    println!(
        "   {tag} provisioning, CPU: kube-apiserver {:.1} s = {:.1} ms/Runtime ({:.1} ms/Runtime less its {:.1} ms/s with no controller), etcd {:.1} s, kim webhook {:.1} s, this process (with the gardenlet) {:.1} s, gardener-apiserver {:.1} s, the runtime cluster's kube-apiserver {:.1} s",
        prov_cpu.apiserver,
        n_ms(prov_cpu.apiserver, n),
        n_ms(prov_cpu.apiserver - idle_cpu.apiserver / idle_s * prov_s, n),
        idle_cpu.apiserver / idle_s * 1e3,
        prov_cpu.etcd,
        prov_cpu.kim,
        prov_cpu.bench,
        g_cpu1 - g_cpu0,
        r_cpu1 - r_cpu0,
    );
    println!(
        "   {tag} provisioning, kube-apiserver requests (every client): {total:.0} = {:.2}/Runtime ({}), {:.0}/s; the controller's (its ServiceAccount's FlowSchemas): {ctl_req:.0} = {:.2}/Runtime ({}); 409 answers {:.0} = {:.3}/Runtime ({}); status writes {:.2}/Runtime (answers {})",
        total / n as f64,
        verbs_line(&by_verb, n as f64),
        total / prov_s,
        ctl_req / n as f64,
        verbs_line(&prov_win.kcp.by_verb(), n as f64),
        conflicts(&prov),
        conflicts(&prov) / n as f64,
        conflicts_line(&prov),
        status_writes(&prov) / n as f64,
        status_writes_by_code(&prov)
    );
    print_by_resource("kube-apiserver", &requests_by_resource(&prov), n);
    print_by_resource("kube-apiserver, the controller's", &prov_win.kcp.by, n);
    println!(
        "   {tag} provisioning, the controller's Gardener requests: {:.0} = {:.2}/Runtime ({}); runtime cluster: {:.0} = {:.2}/Runtime ({})",
        prov_win.garden.total(),
        prov_win.garden.total() / n as f64,
        verbs_line(&prov_win.garden.by_verb(), n as f64),
        prov_win.runtime.total(),
        prov_win.runtime.total() / n as f64,
        verbs_line(&prov_win.runtime.by_verb(), n as f64),
    );
    print_by_resource("Gardener", &prov_win.garden.by, n);
    print_by_resource("runtime cluster", &prov_win.runtime.by, n);
    print_by_resource(
        "gardener-apiserver, every client",
        &requests_by_resource(&prov_win.gardener),
        n,
    );
    for w in ctl.warnings(5) {
        println!("     {w}");
    }
    for c in ctl.conflicts(10) {
        println!("     {c}");
    }

    // The first complete reconcile pass of a controller started cold with all N Ready. It
    // reads Shoots from a watch cache or with GETs: done when it counted N reconciles.
    garden.gardenlet.pause();
    ctl.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s0 = garden.sample().await?;
    let m0 = api.scrape().await?;
    let cpu0 = Cpu::now(&cp, Some(webhook.proc.id()));
    let t0 = Instant::now();
    let ctl = Controller::start(&build.bin, dir.path(), cfg.controller_rust_log.as_deref()).await?;
    let pass_up_s = t0.elapsed().as_secs_f64();
    let mut pass_first_s = f64::NAN;
    let mut last = Instant::now();
    loop {
        let m = ctl.metrics().await?;
        let reconciled = metric(&m, "kim_controller_reconciles_total");
        if reconciled > 0.0 && pass_first_s.is_nan() {
            pass_first_s = t0.elapsed().as_secs_f64();
        }
        if reconciled >= n as f64 {
            break;
        }
        ensure!(
            t0.elapsed() < cfg.timeout,
            "{tag}: no complete reconcile pass after {:?}: {reconciled} reconciles",
            cfg.timeout
        );
        if last.elapsed() >= Duration::from_secs(10) {
            let now = Window::between(&garden.sample().await?, &s0);
            eprintln!(
                "   … {tag} reconcile pass: {:.0} s, {reconciled} reconciles, {:.0} Shoot GETs",
                t0.elapsed().as_secs_f64(),
                now.garden.shoot_gets()
            );
            last = Instant::now();
        }
        // Each scrape makes the controller encode every per-Runtime series (three per Runtime,
        // a few MiB of text at 10 000) and competes with the pass for the two cores: polled
        // every 250 ms, the pass's time is known to a quarter of a second.
        tokio::time::sleep(PASS_POLL).await;
    }
    let pass_s = t0.elapsed().as_secs_f64();
    let pass_cpu = Cpu::now(&cp, Some(webhook.proc.id())).minus(cpu0);
    let pass_ctl_cpu = procinfo::cpu_secs(ctl.pid()).unwrap_or(f64::NAN);
    let pass_hwm = procinfo::hwm_mib(ctl.pid());
    let m1 = api.scrape().await?;
    let s1 = garden.sample().await?;
    let pass_win = Window::between(&s1, &s0);
    let km = ctl.metrics().await?;
    let t_rest = Instant::now();
    tokio::time::sleep(cfg.rest).await;
    let m2 = api.scrape().await?;
    let s2 = garden.sample().await?;
    let rest_s = t_rest.elapsed().as_secs_f64();
    let rest_win = Window::between(&s2, &s1);
    let rest_hwm = procinfo::hwm_mib(ctl.pid());
    let rest_rss = procinfo::rss_mib(ctl.pid());
    let km_rest = ctl.metrics().await?;
    let pass = delta(&m1, &m0);
    let rest = delta(&m2, &m1);
    let pass_verbs = requests_by_verb(&pass);
    let rest_verbs = requests_by_verb(&rest);
    let idle_verbs = requests_by_verb(&idle);
    let pass_reconciles = metric(&km, "kim_controller_reconciles_total");
    let rest_reconciles = metric(&km_rest, "kim_controller_reconciles_total") - pass_reconciles;
    let reconcile_time = hist(&km, "kim_controller_reconcile_duration_seconds", |_| true);
    let status_writes_sent = metric(&km_rest, "kim_controller_status_writes_total");
    let writes = status_writes(&pass) + status_writes(&rest);
    println!(
        "   {tag} cold no-op pass (all {n} Ready): {pass_s:.2} s (process start → metrics up {pass_up_s:.2} s, first reconcile counted {pass_first_s:.2} s); {pass_reconciles} reconciles (mean {} ms, {} over 1 s), {rest_reconciles} more at rest; the controller's per-object GETs {:.0} on kube-apiserver + {:.0} on Gardener = {:.3}/Runtime; Shoot GETs {:.0} (gardener-apiserver, every client: {:.0}); {} status writes sent by kim, {writes} received by kube-apiserver in the pass and {:.0} s after",
        num(reconcile_time.mean_ms(), 2),
        reconcile_time.count - reconcile_time.share_le(1.0) * reconcile_time.count,
        pass_win.kcp.object_gets(),
        pass_win.garden.object_gets(),
        (pass_win.kcp.object_gets() + pass_win.garden.object_gets()) / n as f64,
        pass_win.garden.shoot_gets(),
        gardener_shoot_gets(&pass_win.gardener),
        status_writes_sent,
        rest_s,
    );
    println!(
        "   {tag} controller VmHWM {pass_hwm:.1} MiB after the pass, {rest_hwm:.1} MiB after {rest_s:.0} s at rest (VmRSS {rest_rss:.1} MiB); CPU in the pass: controller {pass_ctl_cpu:.1} s, kube-apiserver {:.1} s, etcd {:.1} s, this process {:.1} s; kube-apiserver + etcd + gardener-apiserver RSS {} MiB",
        pass_cpu.apiserver,
        pass_cpu.etcd,
        pass_cpu.bench,
        cp.rss_kib() / 1024
    );
    println!(
        "   {tag} kube-apiserver requests in the pass (every client): {} = {:.1}/s; the controller's: kube-apiserver {}; Gardener: {}",
        verbs_line(&pass_verbs, n as f64),
        sum_of(pass_verbs.values()) / pass_s,
        verbs_line(&pass_win.kcp.by_verb(), n as f64),
        verbs_line(&pass_win.garden.by_verb(), n as f64),
    );
    println!(
        "   {tag} at rest ({rest_s:.0} s after the pass): kube-apiserver {} = {:.2}/s, {:.0} writes; the controller's Gardener requests {} ({:.0} writes); before the cold start, no controller: {} = {:.2}/s",
        verbs_line(&rest_verbs, 0.0),
        sum_of(rest_verbs.values()) / rest_s,
        writes_of(&rest_verbs),
        verbs_line(&rest_win.garden.by_verb(), 0.0),
        rest_win.garden.writes(),
        verbs_line(&idle_verbs, 0.0),
        sum_of(idle_verbs.values()) / idle_s
    );
    print_by_resource(
        "in the pass, kube-apiserver",
        &requests_by_resource(&pass),
        n,
    );
    print_by_resource("in the pass, Gardener", &pass_win.garden.by, n);
    print_by_resource("at rest, kube-apiserver", &requests_by_resource(&rest), n);
    print_by_resource("at rest, Gardener", &rest_win.garden.by, n);
    for w in ctl.warnings(5) {
        println!("     {w}");
    }
    let mut ctl = ctl;
    ctl.stop();
    // The gardenlet (and its runtime cluster) before the control plane it watches.
    drop(garden);
    drop(webhook);
    tokio::task::spawn_blocking(move || drop(cp)).await?;
    println!(
        "   the {tag} run at {n} took {:.0} s in all",
        t_setup.elapsed().as_secs_f64()
    );
    Ok(ScaleRun {
        label: build.label,
        n,
        idle_s,
        idle,
        idle_cpu,
        ready_s,
        ready_latency,
        prov_s,
        prov,
        prov_cpu,
        prov_win,
        prov_ctl_cpu,
        prov_hwm,
        prov_rss,
        reconcile_errors,
        pass_s,
        pass_up_s,
        pass_first_s,
        pass,
        pass_cpu,
        pass_ctl_cpu,
        pass_win,
        pass_reconciles,
        pass_hwm,
        rest_s,
        rest,
        rest_win,
        rest_hwm,
        rest_rss,
        status_writes_sent,
    })
}

/// `secs` of CPU per Runtime, in ms.
fn n_ms(secs: f64, n: usize) -> f64 {
    secs / n as f64 * 1e3
}

/// The side-by-side tables (markdown) of every N, with the targets.
fn report_scale(runs: &[ScaleRun]) {
    let mut sizes: Vec<usize> = runs.iter().map(|r| r.n).collect();
    sizes.dedup();
    for n in sizes {
        let col = |label: &str| runs.iter().find(|r| r.n == n && r.label == label);
        let (base, this) = (col(BASELINE), col(THIS_BUILD));
        println!();
        println!(
            "== controller at scale, {n} Runtimes: {BASELINE} | {THIS_BUILD} ({} cores; load now {})",
            cores(),
            procinfo::loadavg()
        );
        println!();
        println!("| item | {BASELINE} | {THIS_BUILD} |");
        println!("|---|---:|---:|");
        let row = |item: &str, f: &dyn Fn(&ScaleRun) -> String| {
            let cell = |r: Option<&ScaleRun>| r.map_or("-".into(), f);
            println!("| {item} | {} | {} |", cell(base), cell(this));
        };
        row("requests to kube-apiserver per provisioned Runtime", &|r| {
            num(r.per(sum_of(requests_by_verb(&r.prov).values())), 2)
        });
        let mut verbs: Vec<String> = [base, this]
            .into_iter()
            .flatten()
            .flat_map(|r| requests_by_verb(&r.prov).into_keys())
            .collect();
        verbs.sort();
        verbs.dedup();
        for v in &verbs {
            row(&format!("… {v}"), &|r| {
                num(
                    r.per(requests_by_verb(&r.prov).get(v).copied().unwrap_or(0.0)),
                    2,
                )
            });
        }
        row(
            "… of them the controller's (its ServiceAccount's FlowSchemas)",
            &|r| num(r.per(r.prov_ctl_requests()), 2),
        );
        row(
            "409 answers per Runtime (count), provisioning + pass",
            &|r| {
                let c = conflicts(&r.prov) + conflicts(&r.pass) + conflicts(&r.rest);
                format!("{} ({c:.0})", num(r.per(c), 3))
            },
        );
        row(
            "Gardener requests per provisioned Runtime (the controller's)",
            &|r| num(r.per(r.prov_win.garden.total()), 2),
        );
        let mut gverbs: Vec<String> = [base, this]
            .into_iter()
            .flatten()
            .flat_map(|r| r.prov_win.garden.by_verb().into_keys())
            .collect();
        gverbs.sort();
        gverbs.dedup();
        for v in &gverbs {
            row(&format!("… {v}"), &|r| {
                num(
                    r.per(r.prov_win.garden.by_verb().get(v).copied().unwrap_or(0.0)),
                    2,
                )
            });
        }
        row(
            "runtime cluster requests per provisioned Runtime (the controller's)",
            &|r| num(r.per(r.prov_win.runtime.total()), 2),
        );
        row("kube-apiserver CPU per Runtime, ms (less idle)", &|r| {
            let (raw, net) = r.api_cpu_ms();
            format!("{} ({})", num(raw, 1), num(net, 1))
        });
        row("time to all Ready, s", &|r| num(r.ready_s, 1));
        row(
            "Shoot Succeeded → Runtime Ready, ms: p50 / p99 / max",
            &|r| {
                let q = |q: f64| num(quantile(&r.ready_latency, q) * 1e3, 1);
                format!("{} / {} / {}", q(0.5), q(0.99), q(1.0))
            },
        );
        row("controller CPU, provisioning, s", &|r| {
            num(r.prov_ctl_cpu, 1)
        });
        row("reconcile errors, provisioning", &|r| {
            num(r.reconcile_errors, 0)
        });
        row(
            "cold no-op pass, s (metrics up; first reconcile counted)",
            &|r| {
                format!(
                    "{} ({}; {})",
                    num(r.pass_s, 2),
                    num(r.pass_up_s, 2),
                    num(r.pass_first_s, 2)
                )
            },
        );
        row(
            "… per-object GETs per Runtime: kube-apiserver + Gardener",
            &|r| {
                let (a, g) = r.pass_gets();
                format!("{} + {}", num(r.per(a), 3), num(r.per(g), 3))
            },
        );
        row(
            "… Shoot GETs: the controller's (gardener-apiserver's, every client)",
            &|r| {
                format!(
                    "{:.0} ({:.0})",
                    r.pass_win.garden.shoot_gets(),
                    gardener_shoot_gets(&r.pass_win.gardener)
                )
            },
        );
        row("… reconciles counted; controller CPU, s", &|r| {
            format!("{:.0}; {}", r.pass_reconciles, num(r.pass_ctl_cpu, 2))
        });
        row("… kube-apiserver CPU in the pass, s", &|r| {
            num(r.pass_cpu.apiserver, 2)
        });
        row("writes at rest: kube-apiserver (status) / Gardener", &|r| {
            format!(
                "{:.0} ({:.0}) / {:.0} in {:.0} s",
                writes_of(&requests_by_verb(&r.rest)),
                status_writes(&r.rest),
                r.rest_win.garden.writes(),
                r.rest_s
            )
        });
        row("… kube-apiserver writes with no controller", &|r| {
            format!(
                "{:.0} in {:.0} s",
                writes_of(&requests_by_verb(&r.idle)),
                r.idle_s
            )
        });
        row("controller RSS, MiB: VmHWM at all Ready (VmRSS)", &|r| {
            format!("{} ({})", num(r.prov_hwm, 1), num(r.prov_rss, 1))
        });
        row("… VmHWM after the pass / at rest (VmRSS)", &|r| {
            format!(
                "{} / {} ({})",
                num(r.pass_hwm, 1),
                num(r.rest_hwm, 1),
                num(r.rest_rss, 1)
            )
        });
        row("status writes sent in the pass (kim's counter)", &|r| {
            num(r.status_writes_sent, 0)
        });

        let Some(t) = this else { continue };
        println!();
        println!("| target ({THIS_BUILD}) | wanted | {BASELINE} | {THIS_BUILD} | verdict |");
        println!("|---|---|---:|---:|---|");
        let cell = |r: Option<&ScaleRun>, f: &dyn Fn(&ScaleRun) -> String| r.map_or("-".into(), f);
        let reqs = |r: &ScaleRun| num(r.per(r.prov_ctl_requests()), 2);
        println!(
            "| controller's requests to kube-apiserver per provisioned Runtime | <= 8 | {} | {} | {} |",
            cell(base, &reqs),
            reqs(t),
            verdict(t.per(t.prov_ctl_requests()) <= 8.0)
        );
        let c409 = |r: &ScaleRun| conflicts(&r.prov) + conflicts(&r.pass) + conflicts(&r.rest);
        println!(
            "| 409 answers | 0 | {} | {:.0} | {} |",
            cell(base, &|r| format!("{:.0}", c409(r))),
            c409(t),
            verdict(c409(t) == 0.0)
        );
        let pass = |r: &ScaleRun| {
            let (a, g) = r.pass_gets();
            format!("{} s, {:.0} GETs", num(r.pass_s, 2), a + g)
        };
        let (a, g) = t.pass_gets();
        println!(
            "| cold no-op pass, per-object GETs | <= 5 s, 0 GETs | {} | {} | {} |",
            cell(base, &pass),
            pass(t),
            if n == TARGET_N {
                verdict(t.pass_s <= 5.0 && a + g == 0.0).to_string()
            } else {
                format!("n/a at N={n}")
            }
        );
        let rss = |r: &ScaleRun| num(r.peak_mib(), 1);
        println!(
            "| controller peak RSS (VmHWM), MiB | <= 150 | {} | {} | {} |",
            cell(base, &rss),
            rss(t),
            if n == TARGET_N {
                verdict(t.peak_mib() <= 150.0).to_string()
            } else {
                format!("n/a at N={n}")
            }
        );
        match base {
            Some(b) => {
                let speed = b.ready_s / t.ready_s;
                let cpu = b.api_cpu_ms().1 / t.api_cpu_ms().1;
                println!(
                    "| time to all Ready, s (×{} faster); kube-apiserver CPU per Runtime less idle, ms (×{} less) | ×2 either | {} ; {} | {} ; {} | {} |",
                    num(speed, 3),
                    num(cpu, 3),
                    num(b.ready_s, 1),
                    num(b.api_cpu_ms().1, 1),
                    num(t.ready_s, 1),
                    num(t.api_cpu_ms().1, 1),
                    verdict(speed >= 2.0 || cpu >= 2.0)
                );
            }
            None => println!(
                "| time to all Ready ×2 faster or kube-apiserver CPU per Runtime halved | ×2 either | - | {} s; {} ms | n/a (no baseline: APISERVER_BENCH_KIM_BASELINE) |",
                num(t.ready_s, 1),
                num(t.api_cpu_ms().1, 1)
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Part 3: kim audit

async fn audit_part(cfg: &Config) -> anyhow::Result<()> {
    let n = cfg.audit_runtimes;
    let args: String = cfg.audit_args.iter().map(|a| format!(" {a}")).collect();
    println!("== 3. kim audit -A -o json{args}, {n} Runtimes on kube-apiserver");
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
    let mut bytes = 0;
    let objects: Vec<Value> = (0..n)
        .map(|i| {
            let (obj, is_broken) = audit_seed::runtime(i, &specs, &statuses);
            if is_broken {
                broken.insert(name_of(&obj));
            }
            bytes += obj.to_string().len();
            obj
        })
        .collect();
    let t0 = Instant::now();
    let (refused, first) = seed(&admin, objects, cfg.seed_concurrency).await?;
    println!(
        "   seeded {:.1} MiB of JSON ({} broken) in {:.1} s; the CRD schema refused {} statuses (stored without status; first: {})",
        bytes as f64 / (1024.0 * 1024.0),
        broken.len(),
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
            .args(&cfg.audit_args)
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
        let names: Vec<String> = doc["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let reported: HashSet<String> = names.iter().cloned().collect();
        let twice = names.len() - reported.len();
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
        // `kim audit` exits 1 when it reports a violation.
        let expected_code = if broken.is_empty() { 0 } else { 1 };
        println!(
            "   run {run}: exit {code:?} (expected {expected_code}), wall {wall:.2} s, peak RSS {:.1} MiB, CPU {:.2} s user + {:.2} s sys, {lists} list requests, {} Runtimes reported (expected {}{}; {twice} reported twice), stdout {:.1} MiB; load before {load}",
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
        if run == 1 {
            println!(
                "     stderr: {}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
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
        let mut runs = Vec::new();
        for &n in &cfg.sizes {
            for build in builds(&cfg) {
                runs.push(scale_part(&cfg, n, &build).await?);
            }
        }
        report_scale(&runs);
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
