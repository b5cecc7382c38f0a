//! Prometheus metrics of the webhook, served in the OpenMetrics text format on the plain-HTTP
//! metrics listener (`--metrics-addr`, path `/metrics`).
//!
//! Every server instance owns its own [`Metrics`] (no global registry), so several servers can
//! run in one process (tests, benches).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `kim_webhook_requests_total` | counter | `path`, `decision` (`allowed`\|`denied`), `code` | admission answers sent (`code` 429: HTTP 429 over the budget of body bytes in flight, no review) |
//! | `kim_webhook_request_duration_seconds` | histogram | `path` | server time per admission request, body read included (buckets 50 µs … 1 s) |
//! | `kim_webhook_requests_in_flight` | gauge | — | admission requests being handled now |
//! | `kim_webhook_cert_reloads_total` | counter | `result` (`success`\|`failure`) | certificate reloads after a change in the cert dir |
//! | `kim_webhook_cert_expiry_timestamp_seconds` | gauge | — | `notAfter` of the serving certificate in use, seconds since the Unix epoch |
//! | `kim_webhook_cert_last_reload_successful` | gauge | — | 1 while the files in the cert dir are the certificate in use (start-up, or the last reload loaded them), 0 after a change that did not load (the previous certificate stays in use) |
//! | `kim_webhook_violations_total` | counter | `rule` (rule id), `action` (`deny`\|`warn`\|`ratcheted`) | status-model violations found by `/validate`: denied, allowed in `warn` mode, or ratcheted (the stored object already broke the rule) |

use crate::status::{Action, RuleId};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the latency histogram: fine below a millisecond, where a
/// purpose-built webhook should answer, up to one second.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0,
];

/// Labels of `kim_webhook_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// `/validate` or `/mutate`.
    pub path: &'static str,
    /// `allowed` or `denied`.
    pub decision: &'static str,
    /// `response.status.code` of the review (200, 400, 403, 413, …), or the HTTP status of an
    /// answer without one (429 over the body budget, 500).
    pub code: u16,
}

/// Labels of `kim_webhook_violations_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ViolationLabels {
    /// The rule id (`kim policy` lists them).
    pub rule: &'static str,
    /// `deny`, `warn` or `ratcheted`.
    pub action: &'static str,
}

/// Labels of `kim_webhook_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PathLabels {
    /// `/validate` or `/mutate`.
    pub path: &'static str,
}

/// Labels of `kim_webhook_cert_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    /// `success` or `failure`.
    pub result: &'static str,
}

type HistogramFamily = Family<PathLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metric handles and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily,
    in_flight: Gauge,
    cert_reloads: Family<ReloadLabels, Counter>,
    cert_expiry: Gauge,
    cert_reload_ok: Gauge,
    violations: Family<ViolationLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered (families start empty).
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kim_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let in_flight = Gauge::default();
        let cert_reloads = Family::<ReloadLabels, Counter>::default();
        let cert_expiry = Gauge::default();
        let cert_reload_ok = Gauge::default();
        cert_reload_ok.set(1);
        let violations = Family::<ViolationLabels, Counter>::default();
        registry.register(
            "requests",
            "Admission answers sent, by path, decision and review status code",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Server time per admission request in seconds, body read included",
            latency.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Admission requests being handled",
            in_flight.clone(),
        );
        registry.register(
            "cert_reloads",
            "Serving certificate reloads by result (success, failure)",
            cert_reloads.clone(),
        );
        registry.register(
            "cert_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, seconds since the Unix epoch",
            cert_expiry.clone(),
        );
        registry.register(
            "cert_last_reload_successful",
            "1 while the certificate in the cert dir is the one in use, 0 after a change that did not load",
            cert_reload_ok.clone(),
        );
        registry.register(
            "violations",
            "Status-model violations found by /validate, by rule id and action (deny, warn, ratcheted)",
            violations.clone(),
        );
        // Both results are always exported, so that `rate(...{result="failure"})` exists at 0.
        for result in ["success", "failure"] {
            let _ = cert_reloads.get_or_create(&ReloadLabels { result });
        }
        Metrics {
            registry,
            requests,
            latency,
            in_flight,
            cert_reloads,
            cert_expiry,
            cert_reload_ok,
            violations,
        }
    }

    /// Counts the violations of one review by rule and action.
    pub(crate) fn observe_violations(&self, violations: &[(RuleId, Action)]) {
        for (rule, action) in violations {
            self.violations
                .get_or_create(&ViolationLabels {
                    rule: rule.as_str(),
                    action: action.as_str(),
                })
                .inc();
        }
    }

    /// Counts one admission answer and its server time.
    pub(crate) fn observe_request(
        &self,
        path: &'static str,
        allowed: bool,
        code: u16,
        seconds: f64,
    ) {
        let decision = if allowed { "allowed" } else { "denied" };
        self.requests
            .get_or_create(&RequestLabels {
                path,
                decision,
                code,
            })
            .inc();
        self.latency
            .get_or_create(&PathLabels { path })
            .observe(seconds);
    }

    /// Marks one admission request as in flight until the returned guard is dropped.
    pub(crate) fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Counts a certificate reload attempt.
    pub(crate) fn cert_reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.cert_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
        self.cert_reload_ok.set(i64::from(success));
    }

    /// Sets the expiry (`notAfter`, seconds since the Unix epoch) of the certificate in use.
    pub(crate) fn set_cert_expiry(&self, not_after_unix: i64) {
        self.cert_expiry.set(not_after_unix);
    }

    /// The OpenMetrics text exposition of every metric (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Decrements the in-flight gauge when dropped (also when the handler future is cancelled).
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
