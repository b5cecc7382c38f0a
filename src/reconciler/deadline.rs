//! Request deadlines on the reconciler's kube clients (control cluster, Gardener, runtime
//! clusters): [`build`] makes a kube client on which every request has a deadline (the module is
//! named for what it adds to a client; the cache of runtime-cluster clients is
//! [`super::runtime_clients`]).
//!
//! kube's default client has no read timeout (`kube::Config::read_timeout` is `None`), so a call
//! that never gets an answer blocks the reconcile that made it, and so its Runtime, forever. A
//! connection-level read timeout (`read_timeout`) is no fix: it also cuts a watch that is simply
//! idle (no event, and bookmarks are not frequent enough to rely on), so idle watches are cut
//! and reopened again and again, and without `reset_reader_on_write` it counts from when a
//! pooled connection last read, not from the request.
//!
//! [`RequestTimeoutLayer`] is a tower layer on the client's service instead (outermost, so
//! kube's own retries of 429/503/504 count against it):
//!
//! - the answer to every request must **start** (status line and headers) within the timeout;
//! - the body of the answer to every request except a watch must then be **complete** within
//!   the timeout from when it is first read (it is wrapped in a [`DeadlineBody`]), so a request
//!   takes at most twice the timeout;
//! - a watch's stream (query `watch=true`) is not limited here: kube-runtime's watcher asks the
//!   server to end it after `timeoutSeconds` (290 s by default) and drops it on its own if nothing
//!   arrives for that long plus 5 s, then watches again from where it was.
//!
//! The clocks start when the request's future is first polled, not when the service is called,
//! and when its body is first read; and an answer or a body frame that has arrived is taken even
//! if it is collected after the deadline. This matters because a caller may hold a request's
//! future without polling it: kube-runtime's Controller merges its watchers into one trigger
//! stream and, after an error from any of them, stops polling all of them for the trigger
//! backoff (0.8 s, doubling up to 30 s, plus jitter). A deadline started at `call` ran out
//! during that pause for the request another watcher had made in the same poll, so that
//! request failed without an answer; its error started the next backoff, during which the
//! first watcher's retry ran out in turn: once backoffs were longer than the timeout the two
//! watchers kept failing each other and the Controller never reconciled (seen in the fault
//! tests with a 1 s timeout; with the 30 s default it can happen once the backoff has grown to
//! its 30–60 s cap).
//!
//! A request that runs out of time fails with [`RequestTimedOut`] (before or while its body is
//! read), surfaced by kube as `kube::Error::Service`: a transient error the reconciler retries
//! with backoff.

use futures::FutureExt as _;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::Either;
use kube::client::{Body, ClientBuilder};
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// Default deadline of the reconciler's API requests (control cluster, Gardener, runtime
/// clusters): 30 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A kube client from `config` whose requests have the deadlines of [`RequestTimeoutLayer`]
/// (`timeout` zero: none).
///
/// Errors: the client cannot be built from `config` (e.g. TLS material).
pub fn build(config: kube::Config, timeout: Duration) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config)?;
    if timeout.is_zero() {
        return Ok(builder.build());
    }
    Ok(builder
        .with_layer(&RequestTimeoutLayer::new(timeout))
        .build())
}

/// A request got no answer, or no complete answer, within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no answer within {0:?} (request timeout)")]
pub struct RequestTimedOut(pub Duration);

/// Whether `request` is a watch (`watch=true` in the query, as kube sends it); its answer is a
/// stream that ends when the server's `timeoutSeconds` runs out.
pub(crate) fn is_watch<B>(request: &Request<B>) -> bool {
    request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// The tower layer of [`RequestTimeout`].
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeoutLayer {
    timeout: Duration,
}

impl RequestTimeoutLayer {
    /// Deadlines of `timeout` (see the module documentation).
    pub fn new(timeout: Duration) -> RequestTimeoutLayer {
        RequestTimeoutLayer { timeout }
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> RequestTimeout<S> {
        RequestTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// A kube client service whose requests have a deadline (see the module documentation).
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> Service<Request<Body>> for RequestTimeout<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Either<B, DeadlineBody<B>>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let timeout = self.timeout;
        let watch = is_watch(&request);
        let answer = self.inner.call(request);
        async move {
            // The clock starts at the first poll (see the module documentation); `timeout_at`
            // polls the answer before the clock.
            let deadline = Instant::now() + timeout;
            let response = match tokio::time::timeout_at(deadline, answer).await {
                Ok(r) => r.map_err(Into::into)?,
                Err(_) => return Err(Box::new(RequestTimedOut(timeout)) as BoxError),
            };
            Ok(if watch {
                response.map(Either::Left)
            } else {
                response.map(|body| Either::Right(DeadlineBody::new(body, timeout)))
            })
        }
        .boxed()
    }
}

/// A response body that must be complete within `timeout` from when it is first read: a frame
/// that is not there by then fails with [`RequestTimedOut`]. Unlike
/// `tower_http::timeout::DeadlineBody` (whose clock starts when it is built, and which looks at
/// the clock first) a body read late, after its frames arrived, is delivered.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    body: B,
    timeout: Duration,
    /// Armed at the first read.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> DeadlineBody<B> {
    /// `body`, which must be complete within `timeout` from its first read.
    pub fn new(body: B, timeout: Duration) -> DeadlineBody<B> {
        DeadlineBody {
            body,
            timeout,
            sleep: None,
        }
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        let timeout = this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(RequestTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn watches_are_recognised_by_their_query() {
        assert!(is_watch(&req(
            "/api/v1/namespaces/ns/pods?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=0"
        )));
        assert!(is_watch(&req("/api/v1/pods?watch=1")));
        assert!(!is_watch(&req("/api/v1/namespaces/ns/pods?limit=500")));
        assert!(!is_watch(&req("/api/v1/namespaces/ns/pods/watch-true")));
        assert!(!is_watch(&req("/api/v1/pods?watch=false")));
        assert!(!is_watch(&req("/api/v1/pods?labelSelector=watch%3Dtrue")));
    }
}
