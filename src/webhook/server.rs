//! The HTTPS admission server and the plain-HTTP metrics server.
//!
//! Routes on the HTTPS listener (`--addr`):
//! - `POST /validate`, `POST /mutate`: AdmissionReview v1 in, AdmissionReview out, always HTTP
//!   200 with `Content-Type: application/json`; the body comes from
//!   [`admission::review`] or, for bodies refused here, [`admission::reject`] (413 over the
//!   body limit, 400 for a wrong content type or an unreadable body). Over the budget of body
//!   bytes in flight: HTTP 429 with `Retry-After: 1` and no review. Query strings (the
//!   apiserver's `?timeout=10s`) are ignored.
//! - `GET /healthz`: 200 while the process runs. `GET /readyz`: 200 once the certificate is
//!   loaded and the listener bound, 503 once shutdown began.
//! - anything else: 404 (405 for a wrong method on a known path).
//!
//! On the metrics listener (`--metrics-addr`): `GET /metrics` (OpenMetrics text; the Prometheus
//! text format 0.0.4 for `Accept: text/plain`), plus
//! `/healthz` and `/readyz` with the same meaning.
//!
//! How long an HTTPS connection stays open (fields of [`Settings`], production defaults in
//! parentheses):
//! - until the TLS handshake is done: `handshake_timeout` (10 s) from the TCP accept (a client
//!   that sends no ClientHello or stops mid-handshake);
//! - until the first request head has arrived: `header_timeout` (10 s) after the handshake (a
//!   client that sends nothing, only the HTTP/2 preface or part of a head). hyper-util reads
//!   the first bytes to tell HTTP/1.1 from HTTP/2 without a timer, so this is axum-server's
//!   first-request timeout, not hyper's header read timeout;
//! - with no request in flight: `idle_timeout` (120 s). kube-apiserver closes its own idle
//!   connections to a webhook after 90 s (Go's `http.Transport.IdleConnTimeout`), so it closes
//!   them first and never sends a request into kim's close. HTTP/1.1: hyper's header read
//!   timeout, which runs from the end of a response until the next head is read, so a head
//!   after the first may also take that long. HTTP/2: GOAWAY, then close (hyper has no idle
//!   timeout for HTTP/2: `connections.rs`);
//! - HTTP/2, a client that stops answering: a PING after `ping_interval` (30 s) without a
//!   frame from it, closed when the ACK is not back within `ping_timeout` (20 s);
//! - a request body: `body_timeout` (30 s), then a 400 review;
//! - a write: `write_timeout` (30 s) without the socket taking a byte (a client that stops
//!   reading, e.g. an HTTP/1.1 client that pipelines requests and never reads the answers),
//!   then the connection is closed; HTTP/2: also a response that waits that long for the
//!   client's flow-control window, or a connection still open that long after its idle GOAWAY
//!   with nothing left to answer (`connections.rs`). Before (2026-12-03), both kinds of client
//!   kept their connection for good. A response counts as sent only once the client's window
//!   has room for all of it: hyper hands a body to h2 as soon as the window has one byte, and
//!   h2 buffers the rest, so a client announcing a window of one byte
//!   (SETTINGS_INITIAL_WINDOW_SIZE 1) had the answers of its streams held in that buffer for
//!   good while a request now and then kept the connection from being idle (2026-12-03);
//!   `connections.rs` holds the last byte of each body back until the window has room.
//!
//! At most `max_connections` (1024) are open; one more is closed before its handshake. A
//! connection takes about 13 KiB after the handshake, 27 KiB (HTTP/1.1) to 34 KiB (HTTP/2)
//! after a request (the process's RSS, debug build, 2026-12-03): 1024 idle ones fit in the
//! shipped 192 MiB memory limit, some 5 000 would not. An HTTP/2 connection has at most 200
//! streams open. The request bodies in flight hold at most `body_budget` ([`BODY_BUDGET`],
//! 32 MiB) together, each at most [`BODY_LIMIT`]: a body is charged as its bytes arrive (its
//! buffer's capacity, at most 256 KiB ahead of them; a declared `Content-Length` is not
//! reserved, so a client that declares 7 MiB and sends nothing holds nothing, not 7 MiB), a
//! declared length over the limit is refused 413 by that length (only the first 64 KiB kept),
//! and a request whose bytes go over the budget is answered HTTP 429 with `Retry-After: 1`,
//! which kube-apiserver retries (unbounded, 2026-12-03: 30 HTTP/1.1 requests with 7 MiB
//! bodies took the process to 263 MB RSS; with the declared length reserved, five clients
//! declaring 7 MiB and sending nothing got every other review a 429 until the 30 s body
//! timeout).
//!
//! What a body decodes to is bounded too: a review may build at most
//! [`admission::DECODED_LIMIT`] (16 MiB, estimated as it is built) of `status` values and
//! `userInfo.groups` strings, else it is answered 413 (a well-formed review, uid echoed when
//! readable), since small JSON builds large values (unbounded, 2026-12-03: one 7 MiB review of
//! `[{"a":0},…]` statuses grew the process by 444 MiB RSS; bounded, by 32 MiB). A body of at
//! most [`INLINE_REVIEW_LIMIT`] (16 KiB, twice a Runtime's review) is evaluated inline on the
//! async worker that read it; JSON builds at most about 152 bytes for each of its bytes
//! (arrays nested in arrays; `[{"a":0},…]` 64), so such a review builds at most 2.4 MiB. A
//! larger one waits for its turn, its body held, and is evaluated on the blocking pool, at most
//! [`LARGE_REVIEWS_AT_ONCE`] (2; 1 on one core) at a time. Decoding so holds at most
//! min(cores, 2) × 16 MiB + workers × 2.4 MiB besides the body budget, more cores adding only
//! the 2.4 MiB of their workers: 18.4 MiB with the chart's CPU limit (500m, one core and one
//! worker as the process counts them; its memory limit is 192 MiB), 186 MiB on 64 cores
//! without a CPU limit. Before (2026-12-03) bodies up to 256 KiB were evaluated inline and
//! larger ones one per core: 2 × cores × 16 MiB (2 GiB on 64 cores). Measured 2026-12-03
//! (debug build, 2 cores, the client in the same process, freed pages handed back every
//! 100 ms): six 7 MiB reviews of `[{"a":0},…]` at once, with reviews of 240 KiB of nested
//! arrays sent meanwhile, grew the process by 82–85 MiB, against 87–104 MiB before (on 2 cores
//! 2 large reviews at a time either way; what changed there is that the 240 KiB ones wait for
//! their turn instead of being decoded on the workers beside them)
//! (`webhook_bad_input::concurrent_reviews_that_decode_to_too_much_stay_within_the_decoding_bound`).
//! Evaluation copies nothing of a status but the defaulting patch's values (a few per
//! condition, for at most 64 conditions).
//!
//! Freed memory goes back to the system every `malloc_trim` (10 s, `--malloc-trim-seconds`,
//! [`crate::memory`]): glibc keeps the pages a review's body and decoded values leave in the
//! heap of each thread that held them. Without it (2026-12-03, debug build, server and client
//! in one process) three rounds of twelve reviews that decode to too much took the RSS from
//! 43–46 to 132–134 MiB, still 106–132 MiB a minute later; with it every 500 ms, to
//! 63–71 MiB during the rounds and back to 47–64 MiB once they were answered
//! (`webhook_bad_input::memory_freed_after_large_reviews_goes_back_to_the_system`). And blocks
//! of 128 KiB or more are unmapped when freed ([`crate::memory::unmap_large_blocks`]): glibc
//! otherwise raises that threshold to the largest block freed, so after one 7 MiB body every
//! later body and decoded review stayed in the threads' heaps. Twelve concurrent 7 MiB reviews
//! from another process over HTTP/2 (2026-12-03, debug build) peaked at 186 MiB RSS before and
//! 132–137 MiB after, 38 MiB 15 s later against 138: what the allocator and the connections
//! hold beyond the bounds above, inside the shipped 192 MiB memory limit.
//!
//! The metrics listener has the same bounds after accepting (first request head, idle,
//! writes, HTTP/2 PINGs) and at most [`MAX_METRICS_CONNECTIONS`] (64) connections of its own;
//! kubelet's liveness probe goes there (`/healthz`), so that a client holding the HTTPS
//! connections does not restart the pod. A new connection to it is always admitted: at the cap,
//! the connection idle longest is closed to make room (else the oldest that has not sent a
//! request, else the oldest). Before (2026-12-03) a new connection over the cap was refused,
//! so 64 idle keep-alive connections from anywhere the NetworkPolicy admits failed the
//! liveness probe, and a request on each now and then defeated the idle timeout.

use super::certs::{self, ReloadSettings};
use super::connections::{Capped, Evicting, PerConnection};
use super::metrics::Metrics;
use crate::admission::{self, Hook, Outcome};
use crate::status::Policy;
use anyhow::{Context, anyhow};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Largest accepted request body: 7 MiB (controller-runtime's limit; the apiserver sends at
/// most 3 MiB objects, and a review carries `object` and `oldObject`).
pub const BODY_LIMIT: usize = 7 * 1024 * 1024;

/// Bytes of request bodies all requests may hold at once: 32 MiB. kube-apiserver's reviews of a
/// Runtime are a few KiB (a thousand of them fit), and four reviews at [`BODY_LIMIT`] (objects
/// at the apiserver's 3 MiB limit, `object` and `oldObject`) fit at once. With the 1024
/// connections and the process itself it stays within the shipped 192 MiB memory limit:
/// unbounded, 30 HTTP/1.1 requests with 7 MiB bodies took the process to 263 MB RSS
/// (2026-12-03).
pub const BODY_BUDGET: usize = 32 * 1024 * 1024;

/// Open connections on the metrics listener at most: Prometheus keeps one or two, kubelet's
/// probes open one each (kubelet's HTTP prober does not keep connections alive). At the cap a
/// new connection closes the one idle longest instead of being refused, so that whoever holds
/// the cap's worth of connections cannot fail the liveness probe. A shorter idle timeout on
/// this listener would not do it: a client that reopens its connections as soon as they close,
/// or that sends a request on each now and then, keeps the cap full regardless. Nor does
/// Prometheus need one: it scrapes every `scrape_interval` (1 m by default, 15-30 s commonly)
/// on the connection it keeps, so the idle timeout of 120 s lets it reuse that connection; a
/// connection of its closed meanwhile (the longest idle when the cap is reached) costs it a
/// new TCP connection at the next scrape, not a failed scrape.
pub const MAX_METRICS_CONNECTIONS: usize = 64;

/// An oversized body is read and discarded up to this many bytes in total so that the client
/// receives the 413 review instead of a reset connection; beyond it the connection is dropped.
const DRAIN_LIMIT: u64 = 32 * 1024 * 1024;

/// Streams an HTTP/2 client may have open on one connection (hyper's default), and streams it
/// may cancel before the server accepted them. kube-apiserver's Go client opens another
/// connection when one has this many streams open. The memory the bodies of these streams can
/// take is bounded by [`BODY_BUDGET`] over all connections, not by this count.
const MAX_CONCURRENT_STREAMS: u32 = 200;

/// Bodies up to this size are evaluated on the async worker that read them (microseconds of
/// work), without waiting for a turn; larger ones on the blocking pool, at most
/// [`LARGE_REVIEWS_AT_ONCE`] at a time, so that a flood of big reviews can neither starve small
/// ones (the apiserver's timeout is 10 s by default) nor take more memory with more cores.
/// 16 KiB: twice a Runtime's review as kube-apiserver sends it (5.5–7.8 KiB for the sample
/// Runtimes' status writes, `testing::model::status_review`, 2026-12-03). JSON builds at most
/// about 152 bytes for each of its bytes (arrays nested in arrays, 151 measured with the
/// decoder's estimate: `admission::tests::the_estimate_of_what_decoding_builds_holds`,
/// 2026-12-03), so an inline review builds at most 2.4 MiB.
pub const INLINE_REVIEW_LIMIT: usize = 16 * 1024;

/// Reviews over [`INLINE_REVIEW_LIMIT`] evaluated at once at most: 2, one on a single core
/// (`available_parallelism`, which counts a CPU limit of 500m as one). Each may build up to
/// [`admission::DECODED_LIMIT`]; the others wait for their turn, their bodies held.
pub const LARGE_REVIEWS_AT_ONCE: usize = 2;

/// Longest uid, user or detail written to a log line; longer values are cut.
const LOG_FIELD_LIMIT: usize = 512;

/// A request-controlled string made safe for a log line as it is displayed (no copy): cut to
/// [`LOG_FIELD_LIMIT`] characters, control characters (newline, ESC, …) escaped so nothing can
/// forge a line.
struct LogSafe<'a>(&'a str);

impl std::fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        let s = self.0;
        // The common case: short (bytes bound characters) and printable, written as is.
        if s.len() <= LOG_FIELD_LIMIT && !s.chars().any(char::is_control) {
            return f.write_str(s);
        }
        for (i, c) in s.chars().enumerate() {
            if i == LOG_FIELD_LIMIT {
                f.write_str("...")?;
                break;
            }
            if c.is_control() {
                for e in c.escape_default() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// Rule ids joined by commas as they are displayed (no copy).
struct Rules<'a>(&'a [&'static str]);

impl std::fmt::Display for Rules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(r)?;
        }
        Ok(())
    }
}

/// When the declared `Content-Length` is already over the limit, only this much of the body
/// is kept (enough to find `request.uid`, which real apiservers write near the start).
const PREFIX_WHEN_OVERSIZED: usize = 64 * 1024;

/// The part of a body a refusal before decoding reads for `request.uid`: the first
/// [`PREFIX_WHEN_OVERSIZED`] bytes. Answered on the async worker, so the whole of a large body
/// is not parsed there (a 7 MiB body with a wrong Content-Type was, 2026-12-03).
fn uid_part(body: &[u8]) -> &[u8] {
    &body[..body.len().min(PREFIX_WHEN_OVERSIZED)]
}

/// Everything [`start`] needs. `Settings::new` gives the production defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    /// HTTPS listener. Port 0 picks a free port (see [`Running::addr`]).
    pub addr: SocketAddr,
    /// Plain-HTTP metrics listener. Port 0 picks a free port (see [`Running::metrics_addr`]).
    pub metrics_addr: SocketAddr,
    /// Directory with `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// The status policy every review is judged by.
    pub policy: Arc<Policy>,
    /// Request body cap in bytes (default [`BODY_LIMIT`]).
    pub body_limit: usize,
    /// Time allowed to receive a whole request body (default 30 s); slower bodies get a 400
    /// review.
    pub body_timeout: Duration,
    /// Period of the certificate re-read (default 5 s).
    pub reload_interval: Duration,
    /// Watch the cert dir for changes (default true); the periodic re-read runs regardless.
    pub watch_cert_dir: bool,
    /// Time allowed for the TLS handshake from the accepted TCP connection (default 10 s): a
    /// client that sends no ClientHello or stops mid-handshake is closed after it.
    pub handshake_timeout: Duration,
    /// Time allowed after the handshake for the head of the first request (default 10 s): a
    /// connection that sends nothing, only the HTTP/2 preface or part of a request head is
    /// closed after it.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed (default 120 s, longer
    /// than the 90 s kube-apiserver keeps its own idle connections to a webhook, so that it is
    /// the apiserver that closes them). HTTP/1.1: hyper's header read timeout, which also
    /// bounds each request head after the first. HTTP/2: GOAWAY, then close.
    pub idle_timeout: Duration,
    /// HTTP/2: a PING is sent after this long without a frame from the client (default 30 s)…
    pub ping_interval: Duration,
    /// …and the connection closed if its ACK does not come within this time (default 20 s):
    /// a peer that is gone or does not answer does not hold the connection.
    pub ping_timeout: Duration,
    /// Open HTTPS connections at most (default 1024); a new connection over it is closed before
    /// the TLS handshake, so that connections a client keeps open cannot take the memory.
    pub max_connections: usize,
    /// A connection that makes no progress on its writes for this long is closed (default
    /// 30 s, the longest `timeoutSeconds` kube-apiserver allows a webhook call, after which it
    /// has given up on the answer anyway): a write the socket has not taken (a client that
    /// stops reading), or, on HTTP/2, a response waiting for the client's flow-control window.
    /// Also how long an HTTP/2 connection may stay open after its idle GOAWAY with nothing left
    /// to answer.
    pub write_timeout: Duration,
    /// Bytes of request bodies held at once by all requests together (default
    /// [`BODY_BUDGET`]). A body is charged as its bytes arrive, whether it declares a
    /// `Content-Length` or not; a request over the budget is answered HTTP 429 with
    /// `Retry-After: 1` (no AdmissionReview), which kube-apiserver retries.
    pub body_budget: usize,
    /// Period of the hand-back of freed heap pages to the operating system (`malloc_trim`,
    /// glibc only: [`crate::memory`]; default 10 s, `--malloc-trim-seconds`); zero: never. The
    /// decoding of a large review and the bodies leave free pages inside the heaps of the
    /// threads that held them, which otherwise stay resident. Unless zero, blocks of 128 KiB
    /// or more are also unmapped as soon as they are freed ([`crate::memory::unmap_large_blocks`],
    /// process-wide).
    pub malloc_trim: Duration,
}

impl Settings {
    /// Production defaults: `0.0.0.0:9443`, metrics on `0.0.0.0:8080`, the built-in policy,
    /// 7 MiB body limit, 30 s body timeout, re-read every 5 s plus a directory watch, 10 s for
    /// the handshake and for the first request head, 120 s idle, HTTP/2 PINGs after 30 s
    /// answered within 20 s, 1024 connections, 30 s write timeout, 32 MiB of bodies in flight,
    /// freed heap pages handed back every 10 s.
    pub(crate) fn new(cert_dir: impl Into<PathBuf>) -> Settings {
        Settings {
            addr: SocketAddr::from(([0, 0, 0, 0], 9443)),
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            cert_dir: cert_dir.into(),
            policy: Arc::new(Policy::builtin()),
            body_limit: BODY_LIMIT,
            body_timeout: Duration::from_secs(30),
            reload_interval: Duration::from_secs(5),
            watch_cert_dir: true,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            ping_interval: Duration::from_secs(30),
            ping_timeout: Duration::from_secs(20),
            max_connections: 1024,
            write_timeout: Duration::from_secs(30),
            body_budget: BODY_BUDGET,
            malloc_trim: Duration::from_secs(crate::memory::DEFAULT_TRIM_SECONDS),
        }
    }

    /// Both listeners on `127.0.0.1` with ephemeral ports — for tests and benches.
    pub fn local(cert_dir: impl Into<PathBuf>) -> Settings {
        Settings {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Settings::new(cert_dir)
        }
    }
}

struct AppState {
    /// The turns of reviews over [`INLINE_REVIEW_LIMIT`]: [`LARGE_REVIEWS_AT_ONCE`] at most,
    /// fewer on fewer cores.
    heavy: Arc<tokio::sync::Semaphore>,
    policy: Arc<Policy>,
    metrics: Arc<Metrics>,
    ready: AtomicBool,
    shutting_down: AtomicBool,
    body_limit: usize,
    body_timeout: Duration,
    /// Bytes of request bodies held now, as permits: [`Settings::body_budget`] in all.
    budget: Arc<tokio::sync::Semaphore>,
    body_budget: usize,
    /// Whether the last request over the budget was refused: logged once per episode.
    over_budget: AtomicBool,
}

/// A started server. Dropping it stops everything abruptly; use [`Running::shutdown`] for a
/// graceful stop.
pub struct Running {
    /// The bound HTTPS address.
    pub addr: SocketAddr,
    /// The bound metrics address.
    pub metrics_addr: SocketAddr,
    state: Arc<AppState>,
    handle: Handle<SocketAddr>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    metrics_server: Option<JoinHandle<std::io::Result<()>>>,
    metrics_handle: Handle<SocketAddr>,
    reloader: JoinHandle<()>,
    /// The hand-back of freed heap pages ([`Settings::malloc_trim`]), if any.
    trimmer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("addr", &self.addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

/// Loads the certificate, binds both listeners and starts serving; returns once the server
/// is ready (readiness 200).
///
/// Installs ring as the default rustls provider if none is installed.
///
/// Errors: the certificate cannot be read or does not load (bad PEM, key/certificate
/// mismatch), or a listener cannot be bound.
pub async fn start(settings: Settings) -> anyhow::Result<Running> {
    start_serving(settings, None).await
}

/// [`start`] with `hooks` on the HTTPS listener in place of kim's `/validate` and `/mutate`
/// (`/healthz` and `/readyz` stay): the same listeners, rustls configuration and certificate
/// reload, HTTP/1.1 and HTTP/2 settings, metrics listener and shutdown. For benches that
/// measure this transport under another handler (the null webhook of `benches/apiserver.rs`);
/// not a stable API. Requests to `hooks` are not counted in kim's metrics.
///
/// Errors: as [`start`].
pub async fn start_with_hooks(settings: Settings, hooks: Router) -> anyhow::Result<Running> {
    start_serving(settings, Some(hooks)).await
}

async fn start_serving(settings: Settings, hooks: Option<Router>) -> anyhow::Result<Running> {
    certs::install_default_provider();
    // Large bodies and decoded reviews go back to the system when freed (process-wide); with
    // the trim off, glibc's malloc is left as it is.
    if !settings.malloc_trim.is_zero() {
        crate::memory::unmap_large_blocks();
    }
    let dir = settings.cert_dir.clone();
    let (pair, loaded) = tokio::task::spawn_blocking(move || certs::load_dir(&dir))
        .await
        .context("certificate loading task")??;
    let metrics = Arc::new(Metrics::new());
    metrics.set_cert_expiry(loaded.not_after);
    let tls = RustlsConfig::from_config(loaded.config);

    let listener = std::net::TcpListener::bind(settings.addr)
        .with_context(|| format!("cannot bind the HTTPS listener to {}", settings.addr))?;
    let addr = listener.local_addr()?;
    let metrics_listener =
        std::net::TcpListener::bind(settings.metrics_addr).with_context(|| {
            format!(
                "cannot bind the metrics listener to {}",
                settings.metrics_addr
            )
        })?;
    let metrics_addr = metrics_listener.local_addr()?;

    let state = Arc::new(AppState {
        heavy: Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism()
                .map_or(LARGE_REVIEWS_AT_ONCE, |n| n.get())
                .min(LARGE_REVIEWS_AT_ONCE),
        )),
        policy: settings.policy.clone(),
        metrics: metrics.clone(),
        ready: AtomicBool::new(false),
        shutting_down: AtomicBool::new(false),
        body_limit: settings.body_limit,
        body_timeout: settings.body_timeout,
        budget: Arc::new(tokio::sync::Semaphore::new(
            settings
                .body_budget
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        body_budget: settings.body_budget,
        over_budget: AtomicBool::new(false),
    });

    let handle = Handle::new();
    let acceptor = RustlsAcceptor::new(tls.clone())
        .handshake_timeout(settings.handshake_timeout)
        .acceptor(Capped::new(
            settings.max_connections,
            settings.write_timeout,
        ));
    // hyper-util's detection of HTTP/1.1 or HTTP/2 waits for the client's first bytes without a
    // timer, and hyper's header read timeout starts only after it: without the first-request
    // timeout, a client that completes the handshake and sends nothing keeps its connection.
    let mut server = axum_server::from_tcp(listener)
        .context("HTTPS listener")?
        .acceptor(acceptor)
        .handle(handle.clone())
        .first_request_timeout(settings.header_timeout);
    // axum-server turns hyper's header read timeout off. It runs from the end of one response
    // until the next request head is read, so it is the idle timeout of HTTP/1.1 (the first
    // request head is bounded by the first-request timeout above).
    server
        .http_builder()
        .http1()
        .header_read_timeout(settings.idle_timeout);
    // kube-apiserver cancels every call that reaches the webhook's `timeoutSeconds`; a busy
    // replica may not have accepted those streams yet. h2 allows 20 such resets per connection,
    // then closes it with GOAWAY ENHANCE_YOUR_CALM, failing every other call on it (measured:
    // docs/control-plane.md, "An overloaded webhook: queue or shed with 429"). Allowing as many
    // as may be open at once still bounds a rapid-reset flood.
    server
        .http_builder()
        .http2()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(MAX_CONCURRENT_STREAMS as usize)
        .keep_alive_interval(settings.ping_interval)
        .keep_alive_timeout(settings.ping_timeout);
    let app = PerConnection {
        app: router(state.clone(), hooks),
        idle_timeout: settings.idle_timeout,
        write_timeout: settings.write_timeout,
    };
    let server = tokio::spawn(server.serve(app));

    // The metrics listener (plain HTTP, where kubelet's liveness probe goes) gets the same
    // bounds as the HTTPS one after its handshake: first request head, idle, writes, HTTP/2
    // PINGs; and a cap of its own, so that a flood of the HTTPS port does not fail liveness.
    // At that cap a new connection closes the one idle longest: the probe is always admitted.
    let metrics_handle = Handle::new();
    let mut metrics_server = axum_server::from_tcp(metrics_listener)
        .context("metrics listener")?
        .acceptor(Evicting::new(
            MAX_METRICS_CONNECTIONS,
            settings.write_timeout,
        ))
        .handle(metrics_handle.clone())
        .first_request_timeout(settings.header_timeout);
    metrics_server
        .http_builder()
        .http1()
        .header_read_timeout(settings.idle_timeout);
    metrics_server
        .http_builder()
        .http2()
        .keep_alive_interval(settings.ping_interval)
        .keep_alive_timeout(settings.ping_timeout);
    let metrics_server = tokio::spawn(metrics_server.serve(PerConnection {
        app: metrics_router(state.clone()),
        idle_timeout: settings.idle_timeout,
        write_timeout: settings.write_timeout,
    }));

    let reloader = certs::spawn_reloader(
        ReloadSettings {
            dir: settings.cert_dir.clone(),
            interval: settings.reload_interval,
            watch: settings.watch_cert_dir,
        },
        tls,
        metrics,
        pair,
    );

    let running = Running {
        addr,
        metrics_addr,
        state,
        handle: handle.clone(),
        server: Some(server),
        metrics_server: Some(metrics_server),
        metrics_handle,
        reloader,
        trimmer: crate::memory::spawn_trimmer(settings.malloc_trim),
    };
    // The listener is already bound; this waits until the accept loop runs.
    if handle.listening().await.is_none() {
        return Err(anyhow!("the HTTPS listener on {addr} failed to start"));
    }
    if running.metrics_handle.listening().await.is_none() {
        return Err(anyhow!(
            "the metrics listener on {metrics_addr} failed to start"
        ));
    }
    running.state.ready.store(true, Ordering::Release);
    Ok(running)
}

impl Running {
    /// Turns readiness to 503 ("shutting down") without stopping; requests are still served.
    /// Lets endpoints controllers take the pod out of rotation before connections stop.
    pub fn begin_shutdown(&self) {
        self.state.shutting_down.store(true, Ordering::Release);
        self.state.ready.store(false, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.state.ready.load(Ordering::Acquire)
    }

    /// This server's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.state.metrics.clone()
    }

    /// Number of open HTTPS connections.
    pub fn connection_count(&self) -> usize {
        self.handle.connection_count()
    }

    /// Bytes of request bodies held now against [`Settings::body_budget`] (what their buffers
    /// take: the bytes arrived, and at most 256 KiB more each).
    pub fn body_bytes_held(&self) -> usize {
        self.state
            .body_budget
            .min(tokio::sync::Semaphore::MAX_PERMITS)
            .saturating_sub(self.state.budget.available_permits())
    }

    /// Resolves only if the HTTPS server stops on its own (an I/O error of the listener);
    /// returns that error. Pending forever while serving.
    pub(crate) async fn stopped(&mut self) -> anyhow::Result<()> {
        match self.server.as_mut() {
            Some(task) => match task.await {
                Ok(Ok(())) => Err(anyhow!("the HTTPS server stopped")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("the HTTPS server failed")),
                Err(e) => Err(anyhow!("the HTTPS server task failed: {e}")),
            },
            None => std::future::pending().await,
        }
    }

    /// Graceful stop: readiness 503, stop accepting, let in-flight requests finish (idle
    /// keep-alive connections are closed, HTTP/2 connections get GOAWAY), then close what is
    /// still open after `grace`. Returns within about `grace` + 1 s.
    ///
    /// Errors: the HTTPS server had failed with an I/O error.
    pub async fn shutdown(mut self, grace: Duration) -> anyhow::Result<()> {
        self.begin_shutdown();
        self.handle.graceful_shutdown(Some(grace));
        let mut result = Ok(());
        if let Some(task) = self.server.take() {
            match tokio::time::timeout(grace.saturating_add(Duration::from_secs(1)), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => result = Err(anyhow::Error::new(e).context("HTTPS server")),
                Ok(Err(e)) => result = Err(anyhow!("the HTTPS server task failed: {e}")),
                Err(_) => {
                    tracing::warn!("connections still open after the grace period; closing them");
                    self.handle.shutdown();
                }
            }
        }
        self.reloader.abort();
        if let Some(t) = self.trimmer.take() {
            t.abort();
        }
        self.metrics_handle
            .graceful_shutdown(Some(Duration::from_secs(1)));
        if let Some(task) = self.metrics_server.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        result
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.server.is_some() {
            self.handle.shutdown();
        }
        self.reloader.abort();
        if let Some(t) = self.trimmer.take() {
            t.abort();
        }
        self.metrics_handle.shutdown();
        if let Some(task) = self.metrics_server.take() {
            task.abort();
        }
    }
}

/// The HTTPS routes: kim's hooks, or `hooks` in their place ([`start_with_hooks`]).
fn router(state: Arc<AppState>, hooks: Option<Router>) -> Router {
    let health = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    match hooks {
        None => health
            .route("/validate", post(validate))
            .route("/mutate", post(mutate))
            .with_state(state),
        Some(hooks) => health.with_state(state).merge(hooks),
    }
}

fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(st): State<Arc<AppState>>) -> (StatusCode, &'static str) {
    if st.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else if st.shutting_down.load(Ordering::Acquire) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// `GET /metrics`: OpenMetrics, or the Prometheus text format 0.0.4 for a client that asks
/// for `text/plain` only ([`crate::exposition`]).
async fn metrics_text(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let format = crate::exposition::Format::negotiate(
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
    );
    (
        [(header::CONTENT_TYPE, format.content_type())],
        format.render(st.metrics.encode()),
    )
        .into_response()
}

async fn validate(State(st): State<Arc<AppState>>, req: Request) -> Response {
    admit(&st, Hook::Validate, "/validate", req).await
}

async fn mutate(State(st): State<Arc<AppState>>, req: Request) -> Response {
    admit(&st, Hook::Mutate, "/mutate", req).await
}

/// How reading a request body ended.
enum BodyRead {
    /// The whole body, within the limit.
    Complete(Vec<u8>),
    /// Over the limit; what was kept of the start of the body.
    TooLarge(Vec<u8>),
    /// The client failed or was too slow; what was read so far and why.
    Failed(Vec<u8>, String),
    /// The budget of bytes in flight has no room for the bytes arriving.
    OverBudget,
}

/// The body bytes one request holds under [`AppState::budget`]; given back when dropped,
/// which is when the body is: it goes with the body to the blocking pool.
struct Held {
    budget: Arc<tokio::sync::Semaphore>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Held {
    fn new(budget: Arc<tokio::sync::Semaphore>) -> Held {
        Held {
            budget,
            permit: None,
        }
    }

    /// Holds `bytes` in all; false (holding what it held) when the budget has not that much
    /// left. Never waits: a request over the budget is refused, not queued.
    fn grow_to(&mut self, bytes: usize) -> bool {
        let held = self.permit.as_ref().map_or(0, |p| p.num_permits());
        let Some(more) = bytes.checked_sub(held).filter(|&n| n > 0) else {
            return true;
        };
        let Ok(more) = u32::try_from(more) else {
            return false;
        };
        match self.budget.clone().try_acquire_many_owned(more) {
            Ok(p) => {
                match &mut self.permit {
                    Some(held) => held.merge(p),
                    None => self.permit = Some(p),
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// The most a body's buffer runs ahead of the bytes that have arrived: a declared
/// `Content-Length` is not reserved (a client could declare 7 MiB, send nothing and hold that
/// much of the budget until the body timeout).
const BUFFER_AHEAD: usize = 256 * 1024;

/// Appends to `buf` what fits of `data` within `keep` bytes, the room charged to `held` first
/// (the buffer's capacity, what the allocator holds). The buffer grows by doubling, at most
/// [`BUFFER_AHEAD`] beyond what it needs and never beyond `ceiling` (the declared length, when
/// there is one). False when the budget has no room.
fn append(buf: &mut Vec<u8>, held: &mut Held, data: &[u8], keep: usize, ceiling: usize) -> bool {
    let take = data.len().min(keep.saturating_sub(buf.len()));
    if take == 0 {
        return true;
    }
    let want = buf.len() + take;
    if want > buf.capacity() {
        // Doubling, as `Vec` grows, or just what is needed when the budget is short.
        let doubled = buf
            .capacity()
            .saturating_mul(2)
            .min(want.saturating_add(BUFFER_AHEAD))
            .min(ceiling.min(keep))
            .max(want);
        let capacity = if held.grow_to(doubled) {
            doubled
        } else if held.grow_to(want) {
            want
        } else {
            return false;
        };
        buf.reserve_exact(capacity - buf.len());
    }
    buf.extend_from_slice(&data[..take]);
    true
}

/// Streams the body, keeping at most `limit` bytes; never buffers more, and never more than
/// `held` can take from the budget. Bytes are charged as they arrive (the buffer's capacity,
/// which runs at most [`BUFFER_AHEAD`] ahead of them): a declared length over the limit is
/// refused by that length (the prefix kept, the rest read and discarded), one within it holds
/// next to nothing until its bytes come.
async fn read_body(
    mut body: Body,
    headers: &HeaderMap,
    limit: usize,
    timeout: Duration,
    held: &mut Held,
) -> BodyRead {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let declared_too_large = declared.is_some_and(|n| n > limit as u64);
    let keep = if declared_too_large {
        PREFIX_WHEN_OVERSIZED.min(limit)
    } else {
        limit
    };
    // The buffer never needs more than the declared length (hyper ends a body that would go
    // over it with an error).
    let ceiling = declared.map_or(keep, |n| n.min(keep as u64) as usize);
    // Nothing is allocated or charged before the first bytes: an HTTP/2 connection may have 200
    // streams open, and streams that send only their headers held 16 KiB each, enough for 11
    // connections to fill the budget with no body byte sent (2026-12-03).
    let mut buf = Vec::new();
    let mut total: u64 = 0;
    let mut too_large = declared_too_large;
    if declared.is_some_and(|n| n > DRAIN_LIMIT) {
        // Not worth draining: keep the prefix, then let the connection close.
        let deadline = tokio::time::Instant::now() + timeout.min(Duration::from_secs(2));
        while buf.len() < keep {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data()
                        && !append(&mut buf, held, &data, keep, ceiling)
                    {
                        return BodyRead::OverBudget;
                    }
                }
                _ => break,
            }
        }
        return BodyRead::TooLarge(buf);
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if too_large => return BodyRead::TooLarge(buf),
            Err(_) => {
                return BodyRead::Failed(
                    buf,
                    format!("request body not received within {timeout:?}"),
                );
            }
            Ok(None) => break,
            Ok(Some(Err(_))) if too_large => return BodyRead::TooLarge(buf),
            Ok(Some(Err(e))) => {
                return BodyRead::Failed(buf, format!("cannot read the request body: {e}"));
            }
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers
                };
                total += data.len() as u64;
                if !append(&mut buf, held, &data, keep, ceiling) {
                    return BodyRead::OverBudget;
                }
                if total > limit as u64 {
                    too_large = true;
                    if total > DRAIN_LIMIT {
                        return BodyRead::TooLarge(buf);
                    }
                }
            }
        }
    }
    if too_large {
        BodyRead::TooLarge(buf)
    } else {
        BodyRead::Complete(buf)
    }
}

/// `Ok` when the `Content-Type` is `application/json`, parameters (charset) allowed.
fn check_content_type(headers: &HeaderMap) -> Result<(), String> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err("missing Content-Type; expected application/json".to_string());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        let shown: String = text.chars().take(64).collect();
        Err(format!("Content-Type {shown:?} is not application/json"))
    }
}

/// Runs [`admission::review`] on a complete body: inline when at most
/// [`INLINE_REVIEW_LIMIT`], else on the blocking pool once it has its turn
/// ([`AppState::heavy`]). A panic in the review is answered with `reject(500)`; `None` only if
/// that panics too. The body's bytes stay charged to the budget (`held`), and a review on the
/// blocking pool keeps its turn, until the review ends, also when the request is cancelled
/// meanwhile.
async fn evaluate(
    st: &Arc<AppState>,
    hook: Hook,
    path: &'static str,
    bytes: Vec<u8>,
    held: Held,
) -> Option<Outcome> {
    let run = move |policy: &Policy, bytes: &[u8]| {
        guarded(path, || {
            admission::review(hook, policy, bytes, chrono::Utc::now())
        })
        .or_else(|| {
            guarded(path, || {
                admission::reject(500, "internal error in the webhook", bytes)
            })
        })
    };
    if bytes.len() <= INLINE_REVIEW_LIMIT {
        return run(&st.policy, &bytes);
    }
    let permit = st.heavy.clone().acquire_owned().await.ok()?;
    let policy = st.policy.clone();
    tokio::task::spawn_blocking(move || {
        let _held = (held, permit);
        run(&policy, &bytes)
    })
    .await
    .ok()
    .flatten()
}

/// Runs `f`, turning a panic into `None` (logged) so that a bug answers 500 instead of
/// killing the connection.
fn guarded(path: &'static str, f: impl FnOnce() -> Outcome) -> Option<Outcome> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(o) => Some(o),
        Err(_) => {
            tracing::error!(path, "admission code panicked");
            None
        }
    }
}

async fn admit(st: &Arc<AppState>, hook: Hook, path: &'static str, req: Request) -> Response {
    let started = Instant::now();
    let _in_flight = st.metrics.in_flight();
    let (parts, body) = req.into_parts();
    let mut held = Held::new(st.budget.clone());
    let read = read_body(
        body,
        &parts.headers,
        st.body_limit,
        st.body_timeout,
        &mut held,
    )
    .await;
    let outcome = match read {
        BodyRead::OverBudget => return over_budget(st, path, started),
        BodyRead::Complete(bytes) => {
            if st.over_budget.load(Ordering::Relaxed) {
                st.over_budget.store(false, Ordering::Relaxed);
            }
            match check_content_type(&parts.headers) {
                Ok(()) => evaluate(st, hook, path, bytes, held).await,
                Err(msg) => guarded(path, || admission::reject(400, &msg, uid_part(&bytes))),
            }
        }
        BodyRead::TooLarge(prefix) => {
            let msg = format!(
                "request body larger than {} bytes ({} MiB)",
                st.body_limit,
                st.body_limit / (1024 * 1024)
            );
            guarded(path, || admission::reject(413, &msg, &prefix))
        }
        BodyRead::Failed(prefix, msg) => {
            guarded(path, || admission::reject(400, &msg, uid_part(&prefix)))
        }
    };
    let latency = started.elapsed();
    let Some(o) = outcome else {
        st.metrics
            .observe_request(path, false, 500, latency.as_secs_f64());
        return (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response();
    };
    st.metrics
        .observe_request(path, o.allowed, o.code, latency.as_secs_f64());
    st.metrics.observe_violations(&o.violations);
    // One line per review: routine answers (allowed, checked, nothing in warn mode) at
    // `debug`, denials, errors, warn-mode findings and unchecked reviews at `info`.
    macro_rules! review_line {
        ($level:ident) => {
            tracing::$level!(
                path,
                uid = %LogSafe(&o.uid),
                operation = %LogSafe(&o.operation),
                user = %LogSafe(&o.user),
                decision = if o.allowed { "allowed" } else { "denied" },
                code = o.code,
                rules = %Rules(&o.rules),
                latency_us = latency.as_micros() as u64,
                dry_run = o.dry_run,
                patched = o.patched,
                detail = %LogSafe(&o.detail),
                "admission review"
            )
        };
    }
    if o.is_routine() {
        review_line!(debug);
    } else {
        review_line!(info);
    }
    let mut resp = Response::new(Body::from(o.body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The answer to a request whose body does not fit in the budget: HTTP 429 with
/// `Retry-After: 1` and a plain-text reason, no AdmissionReview (the body was not read, so
/// its uid is unknown). kube-apiserver sends the call again after a second while its timeout
/// allows (client-go's retry of a 429 with `Retry-After`, docs/control-plane.md), then applies
/// the webhook's `failurePolicy`. Counted in the request metrics with code 429.
fn over_budget(st: &AppState, path: &'static str, started: Instant) -> Response {
    if !st.over_budget.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            budget_bytes = st.body_budget,
            "the request bodies in flight reach the budget: requests over it are answered 429 until some end"
        );
    }
    st.metrics
        .observe_request(path, false, 429, started.elapsed().as_secs_f64());
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::RETRY_AFTER, HeaderValue::from_static("1")),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
        ],
        format!(
            "the request bodies in flight reach the webhook's budget of {} bytes; retry later\n",
            st.body_budget
        ),
    )
        .into_response()
}
