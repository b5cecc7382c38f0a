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
//! | `kim_controller_reconciles_total` | counter | — | reconciles run |
//! | `kim_controller_reconcile_errors_total` | counter | `kind` (`api`\|`denied`\|`runtime_cluster`\|`other`) | reconciles that ended in an error (requeued with backoff) |
//! | `kim_controller_reconcile_duration_seconds` | histogram | — | wall time per reconcile |
//! | `kim_controller_gardener_request_duration_seconds` | histogram | `operation` | latency of Gardener API calls (`get`, `create`, `apply`, `annotate`, `delete`, `adminkubeconfig`, `apply_auth_config`, `delete_auth_config`) |
//! | `kim_controller_status_writes_total` | counter | — | status writes sent |
//! | `kim_controller_status_denied_total` | counter | — | status writes the model denied before sending (reconciler bugs; should stay 0) |
//! | `kim_controller_leader` | gauge | — | 1 while this replica runs the Controller |

use crate::status::State;
use prometheus_client::encoding::EncodeLabelSet;
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
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// `state` label of `kim_controller_runtimes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `Pending`, `Ready`, `Failed`, `Terminating` or `None`.
    pub state: &'static str,
}

/// `kind` label of `kim_controller_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// See [`crate::reconciler::Error::kind`].
    pub kind: &'static str,
}

/// `operation` label of `kim_controller_gardener_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
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
    states: Mutex<HashMap<String, Option<State>>>,
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
        for state in State::ALL {
            let _ = runtimes.get_or_create(&StateLabels {
                state: state.as_str(),
            });
        }
        for kind in ["api", "denied", "runtime_cluster", "other"] {
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
            states: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
        }
    }

    /// Counts one reconcile and its duration; `error` is the error kind when it failed.
    pub fn reconciled(&self, started: Instant, error: Option<&'static str>) {
        self.reconciles.inc();
        self.duration.observe(started.elapsed().as_secs_f64());
        if let Some(kind) = error {
            self.errors.get_or_create(&ErrorLabels { kind }).inc();
        }
    }

    /// Records the latency of one Gardener call.
    pub fn gardener_call(&self, operation: &'static str, started: Instant) {
        self.gardener
            .get_or_create(&OperationLabels { operation })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Counts a status write sent.
    pub fn status_written(&self) {
        self.status_writes.inc();
    }

    /// Counts a status write the model denied (not sent).
    pub fn status_denied(&self) {
        self.status_denied.inc();
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Marks the process ready (`/readyz` answers 200).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Records the state of the Runtime `key` (`namespace/name`); `None` for a Runtime
    /// without status.
    pub fn observe_state(&self, key: &str, state: Option<State>) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let previous = states.insert(key.to_string(), state);
        if previous != Some(state) {
            if let Some(p) = previous {
                self.runtimes
                    .get_or_create(&StateLabels {
                        state: state_label(p),
                    })
                    .dec();
            }
            self.runtimes
                .get_or_create(&StateLabels {
                    state: state_label(state),
                })
                .inc();
        }
    }

    /// Forgets the Runtime `key` (it is gone).
    pub fn forget(&self, key: &str) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = states.remove(key) {
            self.runtimes
                .get_or_create(&StateLabels {
                    state: state_label(p),
                })
                .dec();
        }
    }

    /// Status writes sent so far.
    pub fn status_writes(&self) -> u64 {
        self.status_writes.get()
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

/// `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

/// Serves `GET /metrics`, `/healthz` (always 200) and `/readyz` (200 once
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
            get(move || {
                let m = m.clone();
                async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], m.encode()) }
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
}
