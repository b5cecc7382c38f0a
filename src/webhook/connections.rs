//! What a listener's connections may hold: the idle close of HTTP/2 connections, the time a
//! connection may go without making progress on its writes, and the cap on open connections.
//! The other bounds are library settings applied in `server.rs` (the handshake, first-request
//! and HTTP/1.1 header timeouts, HTTP/2 PINGs and streams).
//!
//! - [`PerConnection`] makes each connection's service: the router, plus the count of its
//!   requests in flight. On an HTTP/2 connection a watchdog task sends GOAWAY (axum-server's
//!   [`ConnectionShutdown::graceful_shutdown`]) once no request has been in flight for the idle
//!   timeout: hyper has no idle timeout for HTTP/2, and a live client's idle connection stayed
//!   open for good (its PINGs only find peers that are gone). HTTP/1.1 needs no watchdog:
//!   hyper's header read timeout, which runs while a connection waits for its next request,
//!   is set to the idle timeout.
//! - The same watchdog closes an HTTP/2 connection at once ([`ConnectionShutdown::shutdown`])
//!   when a response has waited longer than the write timeout for the client's flow-control
//!   window (hyper takes a response body only once the window has room: a client that keeps
//!   it at 0 held its connection for good, 2026-12-03), and when the connection is still open
//!   the write timeout after its GOAWAY with nothing left to answer.
//! - [`Capped`] wraps the TCP acceptor: over the cap, a new connection is closed before the TLS
//!   handshake, so that connections a client keeps open cannot take the process's memory. Its
//!   [`Counted`] stream fails a write that the socket has not taken for the write timeout, which
//!   ends the connection: a client that stops reading (an HTTP/1.1 client that pipelines
//!   requests and never reads the answers, 2026-12-03) no longer holds it.

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::http::Version;
use axum::response::Response;
use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
use bytes::Bytes;
use http_body::Frame;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::{Instant, Sleep};

/// The make-service of a listener: one [`Tracked`] router per connection.
#[derive(Clone)]
pub(super) struct PerConnection {
    pub(super) app: Router,
    /// See `Settings::idle_timeout`.
    pub(super) idle_timeout: Duration,
    /// See `Settings::write_timeout`.
    pub(super) write_timeout: Duration,
}

impl tower::Service<SocketAddr> for PerConnection {
    type Response = Tracked;
    type Error = Infallible;
    type Future = Ready<Result<Tracked, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: SocketAddr) -> Self::Future {
        let now = Instant::now();
        ready(Ok(Tracked {
            app: self.app.clone(),
            conn: Arc::new(Conn {
                shared: Arc::new(Shared {
                    activity: Mutex::new(Activity {
                        in_flight: 0,
                        idle_since: now,
                        unsent: BTreeSet::new(),
                        next_response: 0,
                        last_sent: now,
                    }),
                    changed: Notify::new(),
                }),
                idle_timeout: self.idle_timeout,
                write_timeout: self.write_timeout,
                watchdog: OnceLock::new(),
            }),
        }))
    }
}

/// One connection's router; counts the requests in flight on it and, on HTTP/2, the responses
/// hyper still holds ([`Unsent`]).
#[derive(Clone)]
pub(super) struct Tracked {
    app: Router,
    conn: Arc<Conn>,
}

impl<B> tower::Service<Request<B>> for Tracked
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Counted before the watchdog starts (it finds this request in flight) and before the
        // answer future exists (dropped unpolled, it still ends the count).
        let ended = InFlight::start(self.conn.shared.clone());
        let mut watched = None;
        if req.version() == Version::HTTP_2
            && let Some(shutdown) = req.extensions().get::<ConnectionShutdown>()
        {
            self.conn.watch(shutdown);
            watched = Some(self.conn.shared.clone());
        }
        let answer = tower::Service::call(&mut self.app, req);
        Box::pin(async move {
            let answer = answer.await?;
            // The response is counted as unsent before the request stops being in flight, so
            // that the watchdog never sees the connection idle in between.
            let answer = match watched {
                Some(shared) => answer.map(|body| Unsent::track(body, shared)),
                None => answer,
            };
            drop(ended);
            Ok(answer)
        })
    }
}

/// Requests in flight on a connection, and since when none has been; the responses hyper still
/// holds.
struct Activity {
    in_flight: usize,
    idle_since: Instant,
    /// When each unsent response became ready, with its number (two may share an instant).
    unsent: BTreeSet<(Instant, u64)>,
    next_response: u64,
    /// When hyper last dropped an unsent response.
    last_sent: Instant,
}

/// What a connection's service, its requests, responses and watchdog share.
struct Shared {
    activity: Mutex<Activity>,
    /// Wakes the watchdog when a response becomes unsent (an earlier deadline).
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Activity> {
        // Nothing panics while holding it; a poisoned count is still a count.
        self.activity.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connection's state, shared by its service and its requests; dropped when the connection
/// and its last request are gone, which stops the watchdog.
struct Conn {
    shared: Arc<Shared>,
    idle_timeout: Duration,
    write_timeout: Duration,
    watchdog: OnceLock<AbortHandle>,
}

impl Conn {
    /// Starts the watchdog of an HTTP/2 connection (once).
    fn watch(&self, shutdown: &ConnectionShutdown) {
        self.watchdog.get_or_init(|| {
            tokio::spawn(watchdog(
                self.shared.clone(),
                self.idle_timeout,
                self.write_timeout,
                shutdown.clone(),
            ))
            .abort_handle()
        });
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(task) = self.watchdog.get() {
            task.abort();
        }
    }
}

/// One request in flight; ends it when dropped (answered, or cancelled with its connection).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn start(shared: Arc<Shared>) -> InFlight {
        shared.lock().in_flight += 1;
        InFlight(shared)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = self.0.lock();
        a.in_flight -= 1;
        if a.in_flight == 0 {
            a.idle_since = Instant::now();
        }
    }
}

/// An HTTP/2 response body, counted as unsent from the moment it is ready until hyper drops it:
/// hyper holds a body until it has handed its last frame to h2, which it does only once the
/// client's flow-control window has room (it may poll a frame before that and keep it), or
/// until the stream is reset or the connection closed.
struct Unsent {
    inner: Body,
    key: (Instant, u64),
    shared: Arc<Shared>,
}

impl Unsent {
    fn track(inner: Body, shared: Arc<Shared>) -> Body {
        use http_body::Body as _;
        if inner.is_end_stream() {
            // Headers only: nothing waits for the window.
            return inner;
        }
        let key = {
            let mut a = shared.lock();
            let key = (Instant::now(), a.next_response);
            a.next_response += 1;
            a.unsent.insert(key);
            key
        };
        shared.changed.notify_one();
        Body::new(Unsent { inner, key, shared })
    }
}

impl http_body::Body for Unsent {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        let mut a = self.shared.lock();
        a.unsent.remove(&self.key);
        a.last_sent = Instant::now();
    }
}

/// The watchdog of an HTTP/2 connection:
/// - a response unsent for `write` (the client keeps its flow-control window closed): the
///   connection is closed at once;
/// - no request in flight for `idle`: GOAWAY. Streams the client opened before it saw the
///   GOAWAY are still answered, then hyper closes the connection; a client that does not
///   answer the PING of the graceful close is closed by hyper's PING timeout;
/// - after the GOAWAY, nothing in flight and nothing unsent for `write`, and still open (hyper
///   holds data the window does not let it send): closed at once.
async fn watchdog(
    shared: Arc<Shared>,
    idle: Duration,
    write: Duration,
    shutdown: ConnectionShutdown,
) {
    let mut goaway = false;
    loop {
        let now = Instant::now();
        let (quiet_since, stuck_since) = {
            let a = shared.lock();
            let quiet =
                (a.in_flight == 0 && a.unsent.is_empty()).then(|| a.idle_since.max(a.last_sent));
            (quiet, a.unsent.first().map(|(at, _)| *at))
        };
        if let Some(since) = stuck_since
            && since + write <= now
        {
            tracing::info!(
                write_timeout_seconds = write.as_secs(),
                "closing an HTTP/2 connection: a response waited for the client's flow-control window for the write timeout"
            );
            shutdown.shutdown();
            return;
        }
        let quiet_for = if goaway { write } else { idle };
        let due = quiet_since.map(|since| since + quiet_for);
        if let Some(due) = due
            && due <= now
        {
            if goaway {
                tracing::info!(
                    write_timeout_seconds = write.as_secs(),
                    "closing an HTTP/2 connection still open after its GOAWAY"
                );
                shutdown.shutdown();
                return;
            }
            tracing::debug!(
                idle_seconds = idle.as_secs(),
                "closing an idle HTTP/2 connection"
            );
            shutdown.graceful_shutdown();
            goaway = true;
            continue;
        }
        // Busy: looked at again one period later, the earliest the close can be due.
        let mut next = due.unwrap_or(now + quiet_for);
        if let Some(since) = stuck_since {
            next = next.min(since + write);
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = shared.changed.notified() => {}
        }
    }
}

/// The TCP acceptor (under the TLS one on the HTTPS listener): at most `permits` connections
/// are open; a connection over the cap is closed at once.
#[derive(Clone)]
pub(super) struct Capped {
    permits: Arc<Semaphore>,
    limit: usize,
    /// See `Settings::write_timeout`.
    write_timeout: Duration,
    /// Whether the last connection was refused: the warning is logged once per episode, not
    /// once per refused connection.
    full: Arc<AtomicBool>,
}

impl Capped {
    pub(super) fn new(max_connections: usize, write_timeout: Duration) -> Capped {
        let limit = max_connections.min(Semaphore::MAX_PERMITS);
        Capped {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            write_timeout,
            full: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl<I, S> Accept<I, S> for Capped {
    type Stream = Counted<I>;
    type Service = S;
    type Future = Ready<io::Result<(Counted<I>, S)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        ready(match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                if self.full.load(Ordering::Relaxed) {
                    self.full.store(false, Ordering::Relaxed);
                }
                Ok((
                    Counted {
                        _permit: permit,
                        inner: stream,
                        write_timeout: self.write_timeout,
                        stalled: None,
                    },
                    service,
                ))
            }
            Err(_) => {
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        limit = self.limit,
                        "the limit of open connections is reached: new connections are closed until one ends"
                    );
                }
                Err(io::Error::other("the limit of open connections is reached"))
            }
        })
    }
}

/// An accepted connection that holds its place under the cap until it is dropped, and whose
/// writes fail once the socket has taken nothing for the write timeout.
pub(super) struct Counted<I> {
    // Dropped first: the place is free by the time the client sees the connection close.
    _permit: OwnedSemaphorePermit,
    inner: I,
    write_timeout: Duration,
    /// Runs while a write waits for the socket; reset by every write it takes.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> Counted<I> {
    /// What a write that the socket did not take returns: `Pending` (the stall timer armed,
    /// this task woken when it runs out), or the error that ends the connection.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.write_timeout;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::info!(
                    write_timeout_seconds = timeout.as_secs(),
                    "closing a connection whose client has not read for the write timeout"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client has not read for the write timeout",
                )))
            }
        }
    }

    /// A write's result: bytes taken disarm the stall timer.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Pending => self.stalled(cx),
            Poll::Ready(Ok(n)) if n > 0 => {
                self.stalled = None;
                Poll::Ready(Ok(n))
            }
            ready => ready,
        }
    }

    /// A flush's or shutdown's result: it only arms the timer (TLS flushes its records with
    /// writes; a flush of the socket itself takes nothing).
    fn flushed(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<()>>,
    ) -> Poll<io::Result<()>> {
        match polled {
            Poll::Pending => self.stalled(cx),
            ready => ready,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.flushed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.flushed(cx, polled)
    }
}
