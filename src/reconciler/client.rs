//! The reconciler's API clients: kube clients on which every request has a deadline.
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
//! - the answer to every request except a watch must also be **complete** within the timeout
//!   from when the request was sent (its body is wrapped in
//!   [`tower_http::timeout::DeadlineBody`] with the time left);
//! - a watch's stream (query `watch=true`) is not limited here: kube-runtime's watcher asks the
//!   server to end it after `timeoutSeconds` (290 s by default) and drops it on its own if nothing
//!   arrives for that long plus 5 s, then watches again from where it was.
//!
//! A request that runs out of time fails with [`RequestTimedOut`] (or, in the body, tower-http's
//! `TimeoutError`), surfaced by kube as `kube::Error::Service`: a transient error the reconciler
//! retries with backoff.

use futures::FutureExt as _;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::Either;
use kube::client::{Body, ClientBuilder};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{BoxError, Layer, Service};
use tower_http::timeout::DeadlineBody;

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
pub fn is_watch<B>(request: &Request<B>) -> bool {
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
        let deadline = tokio::time::Instant::now() + timeout;
        let answer = self.inner.call(request);
        async move {
            let response = match tokio::time::timeout_at(deadline, answer).await {
                Ok(r) => r.map_err(Into::into)?,
                Err(_) => return Err(Box::new(RequestTimedOut(timeout)) as BoxError),
            };
            Ok(if watch {
                response.map(Either::Left)
            } else {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                response.map(|body| Either::Right(DeadlineBody::new(left, body)))
            })
        }
        .boxed()
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
