//! Prometheus metrics of the reconciler, served in the OpenMetrics text format on the
//! plain-HTTP metrics listener (`--metrics-addr`, path `/metrics`, plus `/healthz` and
//! `/readyz`).
//!
//! Every controller owns its own [`Metrics`] (no global registry), so several controllers can
//! run in one process (tests).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `kim_controller_runtimes` | gauge | `state` | Runtimes seen by this replica, by `status.state` (`None` = no status yet) |
//! | `kim_controller_runtime_state` | gauge | `namespace`, `runtime`, `state` | 1 for each Runtime, labelled with its current `status.state` (one series per Runtime) |
//! | `kim_controller_runtime_provisioning_completed` | gauge | `namespace`, `runtime` | `status.provisioningCompleted` of each Runtime (1 once it was `Ready`, else 0) |
//! | `kim_controller_runtime_kubeconfig_expiry_timestamp_seconds` | gauge | `namespace`, `runtime` | when the kubeconfig stored in the Runtime's Secret expires, seconds since the Unix epoch |
//! | `kim_controller_provisioning_duration_seconds` | histogram | — | time from a Runtime's `creationTimestamp` to its first `Ready` (the write that sets `provisioningCompleted`) |
//! | `kim_controller_reconciles_total` | counter | — | reconciles run |
//! | `kim_controller_reconcile_errors_total` | counter | `kind` (`api`\|`denied`\|`runtime_cluster`\|`other`) | reconciles that ended in an error (requeued with backoff) |
//! | `kim_controller_reconcile_duration_seconds` | histogram | — | wall time per reconcile |
//! | `kim_controller_gardener_request_duration_seconds` | histogram | `operation` | latency of Gardener API calls (`get`, `create`, `apply`, `annotate`, `delete`, `adminkubeconfig`, `get_auth_config`, `apply_auth_config`, `delete_auth_config`; `list` and `list_auth_configs` only when a Runtime whose spec names no Shoot is deleted), failed calls included |
//! | `kim_controller_gardener_request_errors_total` | counter | `operation`, `code` | Gardener API calls that failed: `code` is the HTTP status Gardener answered, or `timeout`, `connection`, `client` when there was no answer |
//! | `kim_controller_status_writes_total` | counter | — | status writes sent |
//! | `kim_controller_status_denied_total` | counter | — | status writes the model denied before sending (reconciler bugs; should stay 0) |
//! | `kim_controller_leader` | gauge | — | 1 while this replica runs the Controller |
//!
//! The per-Runtime series (`kim_controller_runtime_*`, bounded by the number of Runtimes) are
//! exported by the replica that runs the Controller only: a Runtime's series go when it is
//! deleted (finalizer removed) and all of them when the replica stops leading. Their labels
//! `namespace` and `runtime` are the Runtime's `metadata.namespace` and `metadata.name`; scrape
//! with `honor_labels: true` (as for kube-state-metrics) so that the target's own `namespace`
//! label does not rename them to `exported_namespace`.

use crate::status::State;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Buckets (seconds) of the reconcile and Gardener latency histograms: 1 ms … 60 s.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// Upper bounds (seconds) of `kim_controller_provisioning_duration_seconds`: 1 min … 2 h, every
/// 5 min around Gardener's usual 10–30 min of Shoot creation.
pub(crate) const PROVISIONING_BUCKETS: [f64; 14] = [
    60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1500.0, 1800.0, 2100.0, 2400.0, 2700.0, 3600.0,
    5400.0, 7200.0,
];

/// Labels of `kim_controller_gardener_request_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GardenerErrorLabels {
    /// The Gardener call, e.g. `create`.
    pub operation: &'static str,
    /// The HTTP status code answered, or `timeout`, `connection`, `client`.
    pub code: String,
}

/// `state` label of `kim_controller_runtimes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    /// `Pending`, `Ready`, `Failed`, `Terminating` or `None`.
    pub state: &'static str,
}

/// `kind` label of `kim_controller_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    /// One of [`super::error::Error::KINDS`].
    pub kind: &'static str,
}

/// `operation` label of `kim_controller_gardener_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OperationLabels {
    /// The Gardener call, e.g. `create`.
    pub operation: &'static str,
}

type HistogramFamily = Family<OperationLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metric handles, the per-Runtime state behind the gauge, and the registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runtimes: Family<StateLabels, Gauge>,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    gardener: HistogramFamily,
    status_writes: Counter,
    status_denied: Counter,
    leader: Gauge,
    series: Arc<RuntimeSeries>,
    provisioning: Histogram,
    gardener_errors: Family<GardenerErrorLabels, Counter>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn state_label(s: Option<State>) -> &'static str {
    s.map(State::as_str).unwrap_or("None")
}

/// The `code` label of a failed Gardener call: the HTTP status answered, `timeout` (the
/// request deadline passed), `connection` (no answer: connection refused, reset, TLS) or
/// `client` (the answer could not be used, e.g. not decodable).
pub(crate) fn gardener_error_code(e: &kube::Error) -> String {
    use std::error::Error as _;
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = e.source();
            while let Some(s) = source {
                if s.is::<super::deadline::RequestTimedOut>() {
                    return "timeout".to_string();
                }
                source = s.source();
            }
            "connection".to_string()
        }
        _ => "client".to_string(),
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kim_controller");
        let runtimes = Family::<StateLabels, Gauge>::default();
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = latency_histogram();
        let gardener: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let status_writes = Counter::default();
        let status_denied = Counter::default();
        let leader = Gauge::default();
        let series = Arc::new(RuntimeSeries::default());
        let provisioning = Histogram::new(PROVISIONING_BUCKETS);
        let gardener_errors = Family::<GardenerErrorLabels, Counter>::default();
        registry.register(
            "runtimes",
            "Runtimes seen by this replica by status.state",
            runtimes.clone(),
        );
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that ended in an error (requeued with backoff), by kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Wall time per reconcile in seconds",
            duration.clone(),
        );
        registry.register(
            "gardener_request_duration_seconds",
            "Latency of Gardener API calls in seconds, by operation",
            gardener.clone(),
        );
        registry.register("status_writes", "Status writes sent", status_writes.clone());
        registry.register(
            "status_denied",
            "Status writes denied by the status model before sending (reconciler bugs)",
            status_denied.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica runs the Controller",
            leader.clone(),
        );
        registry.register(
            "provisioning_duration_seconds",
            "Time from a Runtime's creation to its first Ready in seconds",
            provisioning.clone(),
        );
        registry.register(
            "gardener_request_errors",
            "Gardener API calls that failed, by operation and HTTP status code (timeout, connection, client: no answer)",
            gardener_errors.clone(),
        );
        registry.register_collector(Box::new(series.clone()));
        for state in State::ALL {
            let _ = runtimes.get_or_create(&StateLabels {
                state: state.as_str(),
            });
        }
        for kind in super::error::Error::KINDS {
            let _ = errors.get_or_create(&ErrorLabels { kind });
        }
        Metrics {
            registry,
            runtimes,
            reconciles,
            errors,
            duration,
            gardener,
            status_writes,
            status_denied,
            leader,
            series,
            provisioning,
            gardener_errors,
            ready: AtomicBool::new(false),
        }
    }

    /// Counts one reconcile and its duration; `error` is the error kind when it failed.
    pub(crate) fn reconciled(&self, started: Instant, error: Option<&'static str>) {
        self.reconciles.inc();
        self.duration.observe(started.elapsed().as_secs_f64());
        if let Some(kind) = error {
            self.errors.get_or_create(&ErrorLabels { kind }).inc();
        }
    }

    /// Records the latency of one Gardener call.
    pub(crate) fn gardener_call(&self, operation: &'static str, started: Instant) {
        self.gardener
            .get_or_create(&OperationLabels { operation })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Counts a failed Gardener call by operation and `code` ([`gardener_error_code`]).
    pub(crate) fn gardener_error(&self, operation: &'static str, code: String) {
        self.gardener_errors
            .get_or_create(&GardenerErrorLabels { operation, code })
            .inc();
    }

    /// Records the time from a Runtime's creation to its first `Ready`.
    pub(crate) fn provisioned(&self, seconds: f64) {
        self.provisioning.observe(seconds.max(0.0));
    }

    /// Sets `status.provisioningCompleted` of the Runtime `key` (`namespace/name`).
    pub(crate) fn observe_provisioning_completed(&self, key: &str, completed: bool) {
        self.series.with(key, |s| s.completed = Some(completed));
    }

    /// Sets the expiry (seconds since the Unix epoch) of the kubeconfig stored for `key`.
    pub(crate) fn set_kubeconfig_expiry(&self, key: &str, expiry_unix: i64) {
        self.series.with(key, |s| s.expiry = Some(expiry_unix));
    }

    /// Drops the kubeconfig expiry of `key` (its kubeconfig is being deleted).
    pub(crate) fn forget_kubeconfig(&self, key: &str) {
        let mut map = self.series.lock();
        if let Some(s) = map.get_mut(key) {
            s.expiry = None;
            if s.is_empty() {
                map.remove(key);
            }
        }
    }

    /// Counts a status write sent.
    pub(crate) fn status_written(&self) {
        self.status_writes.inc();
    }

    /// Counts a status write the model denied (not sent).
    pub(crate) fn status_denied(&self) {
        self.status_denied.inc();
    }

    /// Sets the leader gauge.
    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Marks the process ready (`/readyz` answers 200).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Records the state of the Runtime `key` (`namespace/name`); `None` for a Runtime
    /// without status.
    pub(crate) fn observe_state(&self, key: &str, state: Option<State>) {
        let previous = self.series.with(key, |s| s.state.replace(state));
        if previous != Some(state) {
            if let Some(p) = previous {
                self.by_state(p).dec();
            }
            self.by_state(state).inc();
        }
    }

    /// The `kim_controller_runtimes` gauge of `state`.
    fn by_state(&self, state: Option<State>) -> impl std::ops::Deref<Target = Gauge> + '_ {
        self.runtimes.get_or_create(&StateLabels {
            state: state_label(state),
        })
    }

    /// Forgets the Runtime `key` (it is gone): its count in `kim_controller_runtimes` and
    /// its per-Runtime series.
    pub(crate) fn forget(&self, key: &str) {
        let gone = self.series.lock().remove(key);
        if let Some(Some(p)) = gone.map(|s| s.state) {
            self.by_state(p).dec();
        }
    }

    /// Forgets every Runtime (this replica stopped running the Controller: the next leader
    /// reports them).
    pub(crate) fn forget_all(&self) {
        let gone = std::mem::take(&mut *self.series.lock());
        for p in gone.into_values().filter_map(|s| s.state) {
            self.by_state(p).dec();
        }
    }

    /// Status writes denied by the model so far (should be 0).
    pub fn status_denials(&self) -> u64 {
        self.status_denied.get()
    }

    /// Reconciles run so far.
    pub fn reconciles(&self) -> u64 {
        self.reconciles.get()
    }

    /// The OpenMetrics text exposition of every metric (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What the per-Runtime series say about one Runtime (`None`: that series is not exported).
#[derive(Clone, Copy, Debug, Default)]
struct Series {
    /// `kim_controller_runtime_state`: the observed `status.state` (`Some(None)`: no status).
    state: Option<Option<State>>,
    /// `kim_controller_runtime_provisioning_completed`.
    completed: Option<bool>,
    /// `kim_controller_runtime_kubeconfig_expiry_timestamp_seconds`.
    expiry: Option<i64>,
}

impl Series {
    fn is_empty(&self) -> bool {
        self.state.is_none() && self.completed.is_none() && self.expiry.is_none()
    }
}

/// The per-Runtime series, one small entry per Runtime (key `namespace/name`), written out at
/// each scrape. Held as a `Family` per metric they cost three label sets of owned strings and a
/// gauge per Runtime, plus a map of the states: about 0.8 KiB per Runtime of heap against
/// about 0.1 KiB here (the controller's memory at 10 000 Runtimes, BENCHMARKS.md).
#[derive(Debug, Default)]
struct RuntimeSeries(Mutex<HashMap<Box<str>, Series>>);

impl RuntimeSeries {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Series>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `f` to the entry of `key`, made if missing.
    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Series) -> T) -> T {
        let mut map = self.lock();
        match map.get_mut(key) {
            Some(s) => f(s),
            None => f(map.entry(key.into()).or_default()),
        }
    }
}

/// The labels `namespace` and `runtime` of `key` (`namespace/name`).
fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

impl Collector for RuntimeSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let map = self.lock();
        let mut rows: Vec<(&str, &Series)> = map.iter().map(|(k, s)| (&**k, s)).collect();
        rows.sort_unstable_by_key(|(k, _)| *k);
        {
            let mut m = encoder.encode_descriptor(
                "runtime_state",
                "1 for each Runtime, labelled with its current status.state",
                None,
                MetricType::Gauge,
            )?;
            for (key, s) in &rows {
                if let Some(state) = s.state {
                    let (namespace, runtime) = split_key(key);
                    let labels = [
                        ("namespace", namespace),
                        ("runtime", runtime),
                        ("state", state_label(state)),
                    ];
                    m.encode_family(&labels)?.encode_gauge(&1i64)?;
                }
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "runtime_provisioning_completed",
                "status.provisioningCompleted of each Runtime (1 once it was Ready)",
                None,
                MetricType::Gauge,
            )?;
            for (key, s) in &rows {
                if let Some(done) = s.completed {
                    let (namespace, runtime) = split_key(key);
                    let labels = [("namespace", namespace), ("runtime", runtime)];
                    m.encode_family(&labels)?.encode_gauge(&i64::from(done))?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "runtime_kubeconfig_expiry_timestamp_seconds",
            "Expiry of the kubeconfig stored for each Runtime, seconds since the Unix epoch",
            None,
            MetricType::Gauge,
        )?;
        for (key, s) in &rows {
            if let Some(expiry) = s.expiry {
                let (namespace, runtime) = split_key(key);
                let labels = [("namespace", namespace), ("runtime", runtime)];
                m.encode_family(&labels)?.encode_gauge(&expiry)?;
            }
        }
        Ok(())
    }
}

/// A running metrics server: its bound address and a stop switch.
#[derive(Debug)]
pub struct Server {
    /// The bound address (port 0 in the request picks a free port).
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Server {
    /// Stops serving.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

/// Serves `GET /metrics` (OpenMetrics; the Prometheus text format 0.0.4 for a client that asks
/// for `text/plain` only, see `crate::exposition`), `/healthz` (always 200) and `/readyz` (200 once
/// [`Metrics::set_ready`], else 503) on `addr` until [`Server::stop`].
///
/// Errors: the address cannot be bound.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<Server> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let m = metrics.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| {
                let m = m.clone();
                async move {
                    let format = crate::exposition::Format::negotiate(
                        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
                    );
                    (
                        [(header::CONTENT_TYPE, format.content_type())],
                        format.render(m.encode()),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let m = metrics.clone();
                async move {
                    if m.is_ready() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(Server { addr: bound, stop })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_gauge_follows_runtimes() {
        let m = Metrics::new();
        m.observe_state("ns/a", None);
        m.observe_state("ns/a", Some(State::Pending));
        m.observe_state("ns/b", Some(State::Pending));
        m.observe_state("ns/a", Some(State::Ready));
        m.observe_state("ns/a", Some(State::Ready));
        let text = m.encode();
        assert!(
            text.contains("kim_controller_runtimes{state=\"Ready\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kim_controller_runtimes{state=\"Pending\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kim_controller_runtimes{state=\"None\"} 0"),
            "{text}"
        );
        m.forget("ns/a");
        assert!(
            m.encode()
                .contains("kim_controller_runtimes{state=\"Ready\"} 0")
        );
    }

    #[test]
    fn per_runtime_series_follow_the_runtime_and_go_with_it() {
        let m = Metrics::new();
        m.observe_state("kcp-system/a", None);
        m.observe_provisioning_completed("kcp-system/a", false);
        m.observe_state("kcp-system/a", Some(State::Pending));
        m.observe_state("kcp-system/b", Some(State::Failed));
        m.set_kubeconfig_expiry("kcp-system/a", 1_800_000_000);
        let text = m.encode();
        let a = "namespace=\"kcp-system\",runtime=\"a\"";
        assert!(
            text.contains(&format!(
                "kim_controller_runtime_state{{{a},state=\"Pending\"}} 1"
            )),
            "{text}"
        );
        assert!(
            !text.contains("state=\"None\"}} 1"),
            "old state removed: {text}"
        );
        assert!(
            text.contains(&format!(
                "kim_controller_runtime_kubeconfig_expiry_timestamp_seconds{{{a}}} 1800000000"
            )),
            "{text}"
        );
        m.observe_state("kcp-system/a", Some(State::Ready));
        m.observe_provisioning_completed("kcp-system/a", true);
        let text = m.encode();
        assert!(text.contains(&format!(
            "kim_controller_runtime_state{{{a},state=\"Ready\"}} 1"
        )));
        assert!(!text.contains(&format!("{a},state=\"Pending\"")), "{text}");
        assert!(text.contains(&format!(
            "kim_controller_runtime_provisioning_completed{{{a}}} 1"
        )));
        m.forget_kubeconfig("kcp-system/a");
        assert!(!m.encode().contains("kubeconfig_expiry_timestamp_seconds{"));
        m.forget("kcp-system/a");
        let text = m.encode();
        assert!(!text.contains("runtime=\"a\""), "{text}");
        assert!(text.contains("runtime=\"b\""), "{text}");
        m.forget_all();
        let text = m.encode();
        assert!(!text.contains("runtime=\""), "{text}");
        assert!(
            text.contains("kim_controller_runtimes{state=\"Failed\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn gardener_errors_are_counted_by_operation_and_code() {
        let m = Metrics::new();
        let answered = kube::Error::Api(
            kube::core::Status::failure("boom", "InternalError")
                .with_code(500)
                .boxed(),
        );
        m.gardener_error("create", gardener_error_code(&answered));
        m.provisioned(700.0);
        let text = m.encode();
        assert!(
            text.contains(
                "kim_controller_gardener_request_errors_total{operation=\"create\",code=\"500\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("kim_controller_provisioning_duration_seconds_bucket{le=\"900.0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kim_controller_provisioning_duration_seconds_bucket{le=\"600.0\"} 0"),
            "{text}"
        );
    }
}
