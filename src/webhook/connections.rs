//! What the HTTPS listener's connections may hold: the idle close of HTTP/2 connections and
//! the cap on open connections. The other bounds are library settings applied in
//! `server.rs` (the handshake, first-request and HTTP/1.1 header timeouts, HTTP/2 PINGs).
//!
//! - [`PerConnection`] makes each connection's service: the router, plus the count of its
//!   requests in flight. On an HTTP/2 connection a watchdog task sends GOAWAY (axum-server's
//!   [`ConnectionShutdown::graceful_shutdown`]) once no request has been in flight for the idle
//!   timeout: hyper has no idle timeout for HTTP/2, and a live client's idle connection stayed
//!   open for good (its PINGs only find peers that are gone). HTTP/1.1 needs no watchdog:
//!   hyper's header read timeout, which runs while a connection waits for its next request,
//!   is set to the idle timeout.
//! - [`Capped`] wraps the TCP acceptor: over the cap, a new connection is closed before the TLS
//!   handshake, so that connections a client keeps open cannot take the process's memory.

use axum::Router;
use axum::http::Request;
use axum::http::Version;
use axum::response::Response;
use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
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
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// The make-service of the HTTPS listener: one [`Tracked`] router per connection.
#[derive(Clone)]
pub(super) struct PerConnection {
    pub(super) app: Router,
    /// See `Settings::idle_timeout`.
    pub(super) idle_timeout: Duration,
}

impl tower::Service<SocketAddr> for PerConnection {
    type Response = Tracked;
    type Error = Infallible;
    type Future = Ready<Result<Tracked, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: SocketAddr) -> Self::Future {
        ready(Ok(Tracked {
            app: self.app.clone(),
            conn: Arc::new(Conn {
                activity: Arc::new(Mutex::new(Activity {
                    in_flight: 0,
                    idle_since: Instant::now(),
                })),
                idle_timeout: self.idle_timeout,
                watchdog: OnceLock::new(),
            }),
        }))
    }
}

/// One connection's router; counts the requests in flight on it.
#[derive(Clone)]
pub(super) struct Tracked {
    app: Router,
    conn: Arc<Conn>,
}

impl<B> tower::Service<Request<B>> for Tracked
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
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
        let ended = InFlight::start(self.conn.activity.clone());
        if req.version() == Version::HTTP_2
            && let Some(shutdown) = req.extensions().get::<ConnectionShutdown>()
        {
            self.conn.watch(shutdown);
        }
        let answer = tower::Service::call(&mut self.app, req);
        Box::pin(async move {
            let _ended = ended;
            answer.await
        })
    }
}

/// Requests in flight on a connection, and since when none has been.
struct Activity {
    in_flight: usize,
    idle_since: Instant,
}

/// A connection's state, shared by its service and its requests; dropped when the connection
/// and its last request are gone, which stops the watchdog.
struct Conn {
    activity: Arc<Mutex<Activity>>,
    idle_timeout: Duration,
    watchdog: OnceLock<AbortHandle>,
}

impl Conn {
    /// Starts the idle watchdog of an HTTP/2 connection (once).
    fn watch(&self, shutdown: &ConnectionShutdown) {
        self.watchdog.get_or_init(|| {
            tokio::spawn(close_when_idle(
                self.activity.clone(),
                self.idle_timeout,
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
struct InFlight(Arc<Mutex<Activity>>);

impl InFlight {
    fn start(activity: Arc<Mutex<Activity>>) -> InFlight {
        lock(&activity).in_flight += 1;
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = lock(&self.0);
        a.in_flight -= 1;
        if a.in_flight == 0 {
            a.idle_since = Instant::now();
        }
    }
}

fn lock(activity: &Mutex<Activity>) -> std::sync::MutexGuard<'_, Activity> {
    // Nothing panics while holding it; a poisoned count is still a count.
    activity.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends GOAWAY once the connection has had no request in flight for `idle`: streams the
/// client opened before it saw the GOAWAY are still answered, then the connection closes. A
/// client that does not answer the PING of the graceful close is closed by hyper's PING
/// timeout.
async fn close_when_idle(
    activity: Arc<Mutex<Activity>>,
    idle: Duration,
    shutdown: ConnectionShutdown,
) {
    loop {
        let deadline = {
            let a = lock(&activity);
            if a.in_flight > 0 {
                // Looked at again one idle period later: the earliest the close can be due.
                Instant::now() + idle
            } else {
                a.idle_since + idle
            }
        };
        if deadline <= Instant::now() {
            tracing::debug!(
                idle_seconds = idle.as_secs(),
                "closing an idle HTTP/2 connection"
            );
            shutdown.graceful_shutdown();
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// The TCP acceptor under the TLS one: at most `permits` connections are open; a connection
/// over the cap is closed at once.
#[derive(Clone)]
pub(super) struct Capped {
    permits: Arc<Semaphore>,
    limit: usize,
    /// Whether the last connection was refused: the warning is logged once per episode, not
    /// once per refused connection.
    full: Arc<AtomicBool>,
}

impl Capped {
    pub(super) fn new(max_connections: usize) -> Capped {
        let limit = max_connections.min(Semaphore::MAX_PERMITS);
        Capped {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
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

/// An accepted connection that holds its place under the cap until it is dropped.
pub(super) struct Counted<I> {
    // Dropped first: the place is free by the time the client sees the connection close.
    _permit: OwnedSemaphorePermit,
    inner: I,
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
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
