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
//!   window, and when the connection is still open the write timeout after its GOAWAY with
//!   nothing left to answer. A response waits for the window until its last byte has room in
//!   it ([`Unsent`]): a client that keeps its window at 0 held its connection for good, and so
//!   did one that keeps it at one byte, whose answers h2 held in its send buffer once hyper had
//!   handed them over (2026-12-03).
//! - [`Capped`] wraps the TCP acceptor of the HTTPS listener: over the cap, a new connection is
//!   closed before the TLS handshake, so that connections a client keeps open cannot take the
//!   process's memory. Its [`Counted`] stream fails a write that the socket has not taken for
//!   the write timeout, which ends the connection: a client that stops reading (an HTTP/1.1
//!   client that pipelines requests and never reads the answers, 2026-12-03) no longer holds
//!   it.
//! - [`Evicting`] wraps the TCP acceptor of the metrics listener: at the cap, a new connection
//!   is admitted and the one idle longest is closed (its [`Counted`] reads and writes fail), so
//!   that whoever holds the cap's worth of connections cannot keep kubelet's liveness probe
//!   out.

use axum::Router;
use axum::body::Body;
use axum::http::Version;
use axum::http::{HeaderMap, Request};
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
use std::task::{Context, Poll, Waker};
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
                        requested: false,
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
    /// A request has come (a connection that never sent one is idle since it was accepted).
    requested: bool,
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
        {
            let mut a = shared.lock();
            a.in_flight += 1;
            a.requested = true;
        }
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

/// Largest data frame an [`Unsent`] body hands hyper at once (h2's default frame size): each
/// frame after the first is taken only once the client's window has made room for the ones
/// before, which counts as progress.
const CHUNK: usize = 16 * 1024;

/// An HTTP/2 response body, counted as unsent from the moment it is ready until hyper drops it,
/// which it does once it has handed the body's last frame to h2 (or the stream was reset, or
/// the connection closed).
///
/// hyper hands a data frame to h2 as soon as the stream has one byte of window, and h2 buffers
/// what does not fit: a whole answer handed over at once left its body the moment the client
/// opened its window by a byte, and a client that kept it there (a stream window of one byte)
/// had its answers held in h2's send buffer, counted as sent, for good (2026-12-03). So the
/// body holds back its last byte as a frame of its own: hyper hands a frame over only while
/// the stream's window has room beyond what h2 already buffers for it, so the last frame
/// leaves, and the body is dropped, only once the client's window has room for the whole
/// answer. Data comes in frames of at most [`CHUNK`] bytes, and each frame hyper takes
/// restarts the response's clock: a large answer to a slow client that keeps reading is not
/// cut off, one whose client stops opening its window is.
struct Unsent {
    inner: Body,
    /// Data taken from `inner` and not yet handed to hyper.
    rest: Bytes,
    /// `inner`'s trailers, handed over after `rest`.
    trailers: Option<HeaderMap>,
    /// `inner` has ended.
    done: bool,
    /// When hyper last took a frame (first: when the response became ready), with the
    /// response's number.
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
        Body::new(Unsent {
            inner,
            rest: Bytes::new(),
            trailers: None,
            done: false,
            key,
            shared,
        })
    }

    /// A data frame for hyper: progress, the response's clock restarts.
    fn hand(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut a = self.shared.lock();
        a.unsent.remove(&self.key);
        self.key.0 = Instant::now();
        a.unsent.insert(self.key);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl http_body::Body for Unsent {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        loop {
            // All but the last byte in hand, a chunk at a time.
            if this.rest.len() > 1 {
                let chunk = this.rest.split_to((this.rest.len() - 1).min(CHUNK));
                return this.hand(chunk);
            }
            if this.done {
                break;
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                None => this.done = true,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) if this.rest.is_empty() => this.rest = data,
                    // The byte held back was not the last.
                    Ok(data) => {
                        let held = std::mem::replace(&mut this.rest, data);
                        return this.hand(held);
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => {
                            this.trailers = Some(trailers);
                            this.done = true;
                        }
                        Err(other) => return Poll::Ready(Some(Ok(other))),
                    },
                },
            }
        }
        if !this.rest.is_empty() {
            let last = std::mem::take(&mut this.rest);
            return this.hand(last);
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.trailers.is_none() && (self.done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
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
/// - a response of which hyper has taken no frame for `write` (the client keeps its
///   flow-control window closed, [`Unsent`]): the connection is closed at once;
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
                    Counted::new(
                        stream,
                        Place::Permit { _permit: permit },
                        self.write_timeout,
                    ),
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

/// The TCP acceptor of the metrics listener: at most `limit` connections are open, and a new
/// connection is always admitted: at the cap, the one that has been idle longest is closed to
/// make room. kubelet's liveness probe opens a connection of its own each time, so refusing new
/// connections at the cap let any client that held the cap's worth of connections fail the
/// probe and restart the pod (2026-12-03).
///
/// Which connection goes ([`Listed::rank`]): one idle after a request, idle longest (since its
/// last answer was sent); else one that has not sent a request yet, the oldest; else, all busy,
/// the oldest. A connection that has just been accepted and not sent its request head yet (a
/// probe) goes only once no connection is idle after a request, and then after every older
/// one that has sent nothing.
#[derive(Clone)]
pub(super) struct Evicting {
    open: Arc<Mutex<Open>>,
    limit: usize,
    /// See `Settings::write_timeout`.
    write_timeout: Duration,
    /// Whether the last connection closed another: the warning is logged once per episode.
    full: Arc<AtomicBool>,
}

/// The connections an [`Evicting`] acceptor has open.
#[derive(Default)]
struct Open {
    next: u64,
    conns: std::collections::HashMap<u64, Listed>,
}

impl Open {
    fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
        // Nothing panics while holding it.
        open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One open connection of an [`Evicting`] acceptor.
struct Listed {
    accepted: Instant,
    /// Its requests and responses (its [`Tracked`] service).
    shared: Arc<Shared>,
    close: Arc<Close>,
}

impl Listed {
    /// The lowest goes first: idle after a request (by the time it went idle), then no request
    /// yet (by accept time), then busy (by accept time).
    fn rank(&self) -> (u8, Instant) {
        let a = self.shared.lock();
        if a.in_flight > 0 || !a.unsent.is_empty() {
            (2, self.accepted)
        } else if a.requested {
            (0, a.idle_since.max(a.last_sent))
        } else {
            (1, self.accepted)
        }
    }
}

impl Evicting {
    pub(super) fn new(max_connections: usize, write_timeout: Duration) -> Evicting {
        Evicting {
            open: Arc::new(Mutex::new(Open::default())),
            limit: max_connections.max(1),
            write_timeout,
            full: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl<I> Accept<I, Tracked> for Evicting {
    type Stream = Counted<I>;
    type Service = Tracked;
    type Future = Ready<io::Result<(Counted<I>, Tracked)>>;

    fn accept(&self, stream: I, service: Tracked) -> Self::Future {
        let close = Arc::new(Close::default());
        let id = {
            let mut open = Open::lock(&self.open);
            if open.conns.len() >= self.limit {
                let victim = open
                    .conns
                    .iter()
                    .map(|(id, c)| (c.rank(), *id))
                    .min()
                    .map(|(_, id)| id);
                if let Some(victim) = victim.and_then(|id| open.conns.remove(&id)) {
                    victim.close.close();
                    if !self.full.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            limit = self.limit,
                            "the limit of open connections on the metrics listener is reached: each new connection closes the one idle longest"
                        );
                    }
                }
            } else if self.full.load(Ordering::Relaxed) {
                self.full.store(false, Ordering::Relaxed);
            }
            let id = open.next;
            open.next += 1;
            open.conns.insert(
                id,
                Listed {
                    accepted: Instant::now(),
                    shared: service.conn.shared.clone(),
                    close: close.clone(),
                },
            );
            id
        };
        let place = Place::Listed {
            id,
            open: self.open.clone(),
            close,
        };
        ready(Ok((
            Counted::new(stream, place, self.write_timeout),
            service,
        )))
    }
}

/// Tells a connection of an [`Evicting`] acceptor to close: its reads and writes fail from then
/// on, and the tasks waiting on them are woken.
#[derive(Default)]
struct Close {
    closed: AtomicBool,
    /// The tasks of the last pending read (0) and write (1).
    wakers: Mutex<[Option<Waker>; 2]>,
}

impl Close {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }

    /// Whether the connection is to close; if not, `cx` is woken when it is (`slot` 0 for
    /// reads, 1 for writes).
    fn poll_closed(&self, slot: usize, cx: &Context<'_>) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return true;
        }
        {
            let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            match &mut wakers[slot] {
                Some(w) if w.will_wake(cx.waker()) => {}
                w => *w = Some(cx.waker().clone()),
            }
        }
        // Closed meanwhile: `close` may have taken the wakers before this one was stored.
        self.closed.load(Ordering::Acquire)
    }
}

/// A connection's place under its listener's cap, given back when the connection is dropped.
enum Place {
    /// [`Capped`]'s.
    Permit { _permit: OwnedSemaphorePermit },
    /// [`Evicting`]'s; `close` tells the connection it was closed to admit another.
    Listed {
        id: u64,
        open: Arc<Mutex<Open>>,
        close: Arc<Close>,
    },
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Place::Listed { id, open, .. } = self {
            // Gone already when it was closed to admit another.
            Open::lock(open).conns.remove(id);
        }
    }
}

/// An accepted connection that holds its place under the cap until it is dropped, and whose
/// writes fail once the socket has taken nothing for the write timeout; on the metrics
/// listener, whose reads and writes fail once it is closed to admit another.
pub(super) struct Counted<I> {
    // Dropped first: the place is free by the time the client sees the connection close.
    place: Place,
    inner: I,
    write_timeout: Duration,
    /// Runs while a write waits for the socket; reset by every write it takes.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> Counted<I> {
    fn new(inner: I, place: Place, write_timeout: Duration) -> Counted<I> {
        Counted {
            place,
            inner,
            write_timeout,
            stalled: None,
        }
    }

    /// The error every read and write returns once the connection was closed to admit another
    /// ([`Evicting`]); `None` while it is open (`cx` woken when it is closed).
    fn closed(&self, slot: usize, cx: &Context<'_>) -> Option<io::Error> {
        match &self.place {
            Place::Listed { close, .. } if close.poll_closed(slot, cx) => Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to admit a new connection",
            )),
            _ => None,
        }
    }

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
        if let Some(e) = self.closed(0, cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.closed(1, cx) {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.closed(1, cx) {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.closed(1, cx) {
            return Poll::Ready(Err(e));
        }
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.flushed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.flushed(cx, polled)
    }
}
