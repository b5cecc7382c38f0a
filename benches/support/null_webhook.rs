//! The null webhook of `benches/apiserver.rs` (set-up (e) of its admission part): what a call
//! costs through kim's transport when the handler does nothing. The bench binary re-executed
//! with [`SERVE_NULL`] `DIR` serves it as a process of its own:
//!
//! - the transport is kim's ([`kim::webhook::start_with_hooks`]): the same listeners, rustls
//!   configuration (ring, TLS 1.2 + 1.3, ALPN `h2` + `http/1.1`), certificates (`DIR`) and their
//!   reload, HTTP/1.1 and HTTP/2 settings and metrics listener as `kim webhook`, on the same
//!   tokio runtime (multi-threaded, one worker per core) with the same JSON logs on stdout, whose
//!   start-up line carries `addr` and `metrics_addr` as kim's does;
//! - `POST /validate` and `POST /mutate` read the whole body and answer `allowed: true` for the
//!   uid found at the start of the review (kube-apiserver writes `request.uid` before the
//!   objects), without reading the objects;
//! - `GET /counts` answers `{"validate": N, "mutate": N, "http1": N, "http2": N, "bytes": N}`:
//!   the reviews answered so far, by path and by the HTTP version they came over, and the bytes
//!   of their bodies.
//!
//! It runs until killed.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Version, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Argument that turns the bench binary into the null webhook (followed by the cert dir).
pub const SERVE_NULL: &str = "--serve-null";

/// Reviews answered, by path and by HTTP version, and the bytes of their bodies.
#[derive(Default)]
struct Counts {
    validate: AtomicU64,
    mutate: AtomicU64,
    http1: AtomicU64,
    http2: AtomicU64,
    bytes: AtomicU64,
}

/// Serves the null webhook on `127.0.0.1` (ephemeral ports) with the certificate of `dir`
/// until the process is killed.
///
/// Errors: the certificate does not load, a listener cannot be bound, the runtime does not
/// start.
pub fn serve(dir: &Path) -> anyhow::Result<()> {
    // As `kim webhook --log-format json` (src/main.rs): logs first, then the runtime.
    kim::telemetry::init_tracing(kim::telemetry::LogFormat::Json);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let counts = Arc::new(Counts::default());
        let hooks = Router::new()
            .route("/validate", post(validate))
            .route("/mutate", post(mutate))
            .route("/counts", get(counts_json))
            // kim's body limit (axum's default is 2 MB).
            .layer(DefaultBodyLimit::max(kim::webhook::BODY_LIMIT))
            .with_state(counts);
        let running =
            kim::webhook::start_with_hooks(kim::webhook::Settings::local(dir), hooks).await?;
        tracing::info!(
            addr = %running.addr,
            metrics_addr = %running.metrics_addr,
            "null webhook serving"
        );
        std::future::pending::<()>().await;
        drop(running);
        Ok(())
    })
}

async fn validate(
    State(c): State<Arc<Counts>>,
    version: Version,
    body: Bytes,
) -> impl IntoResponse {
    c.validate.fetch_add(1, Ordering::Relaxed);
    answer(&c, version, &body)
}

async fn mutate(State(c): State<Arc<Counts>>, version: Version, body: Bytes) -> impl IntoResponse {
    c.mutate.fetch_add(1, Ordering::Relaxed);
    answer(&c, version, &body)
}

async fn counts_json(State(c): State<Arc<Counts>>) -> impl IntoResponse {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    axum::Json(serde_json::json!({
        "validate": n(&c.validate),
        "mutate": n(&c.mutate),
        "http1": n(&c.http1),
        "http2": n(&c.http2),
        "bytes": n(&c.bytes),
    }))
}

/// `allowed: true` for the first `"uid":"…"` of `body` (empty if there is none).
fn answer(c: &Counts, version: Version, body: &[u8]) -> impl IntoResponse + use<> {
    if version == Version::HTTP_2 {
        c.http2.fetch_add(1, Ordering::Relaxed);
    } else {
        c.http1.fetch_add(1, Ordering::Relaxed);
    }
    c.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    const KEY: &[u8] = br#""uid":""#;
    let uid = body
        .windows(KEY.len())
        .position(|w| w == KEY)
        .map(|i| &body[i + KEY.len()..])
        .and_then(|rest| rest.iter().position(|&b| b == b'"').map(|end| &rest[..end]))
        .unwrap_or_default();
    let uid = String::from_utf8_lossy(uid);
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{uid}","allowed":true}}}}"#
        ),
    )
}
