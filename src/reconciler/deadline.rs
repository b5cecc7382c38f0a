//! Request deadlines on the reconciler's kube clients (control cluster, Gardener, runtime
//! clusters): [`build`] makes a kube client on which every request has a deadline (the module is
//! named for what it adds to a client; the cache of runtime-cluster clients is
//! `super::runtime_clients`).
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
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A kube client from `config` whose requests have the deadlines of [`RequestTimeoutLayer`]
/// (`timeout` zero: none).
///
/// Errors: the client cannot be built from `config` (e.g. TLS material).
pub fn build(config: kube::Config, timeout: Duration) -> Result<kube::Client, BuildError> {
    build_limited(config, timeout, None)
}

/// [`build`], and the body of every answer but a watch's is cut off with [`BodyTooLarge`] past
/// `max_body_bytes` (kube reads whole answers into memory before decoding them).
///
/// Errors: as [`build`].
pub(crate) fn build_limited(
    config: kube::Config,
    timeout: Duration,
    max_body_bytes: Option<u64>,
) -> Result<kube::Client, BuildError> {
    check_credentials(&config)?;
    let builder = ClientBuilder::try_from(config)?;
    if timeout.is_zero() && max_body_bytes.is_none() {
        return Ok(builder.build());
    }
    Ok(builder
        .with_layer(&RequestTimeoutLayer {
            timeout,
            max_body_bytes,
        })
        .build())
}

/// Why [`build`] cannot make a client.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The bearer token cannot be sent as an HTTP header (a newline or another control
    /// character in it, as a token pasted into a YAML block scalar gets); kube's client would
    /// panic on it. The token itself is never part of the message.
    #[error(
        "the kubeconfig's bearer token cannot be sent as an HTTP header (it contains a newline or another control character)"
    )]
    InvalidToken,
    /// kube cannot build a client from the configuration (e.g. its TLS material).
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Checks what kube would put into request headers unchecked: the bearer token, given inline
/// or in a token file (kubectl reports such a token as an error; kube's client panics).
fn check_credentials(config: &kube::Config) -> Result<(), BuildError> {
    use secrecy::ExposeSecret as _;
    let valid = |token: &str| http::HeaderValue::from_str(&format!("Bearer {token}")).is_ok();
    if let Some(token) = &config.auth_info.token
        && !valid(token.expose_secret())
    {
        return Err(BuildError::InvalidToken);
    }
    if let Some(file) = &config.auth_info.token_file
        && let Ok(token) = std::fs::read_to_string(file)
        && !valid(token.trim_end_matches(['\n', '\r']))
    {
        return Err(BuildError::InvalidToken);
    }
    Ok(())
}

/// An answer's body was longer than the client allows ([`build_limited`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an answer longer than {0} bytes")]
pub(crate) struct BodyTooLarge(pub u64);

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
    max_body_bytes: Option<u64>,
}

impl RequestTimeoutLayer {
    /// Deadlines of `timeout` (see the module documentation); zero: none.
    pub fn new(timeout: Duration) -> RequestTimeoutLayer {
        RequestTimeoutLayer {
            timeout,
            max_body_bytes: None,
        }
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> RequestTimeout<S> {
        RequestTimeout {
            inner,
            timeout: self.timeout,
            max_body_bytes: self.max_body_bytes,
        }
    }
}

/// A kube client service whose requests have a deadline (see the module documentation).
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
    max_body_bytes: Option<u64>,
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
        let max = self.max_body_bytes;
        let watch = is_watch(&request);
        let answer = self.inner.call(request);
        async move {
            // The clock starts at the first poll (see the module documentation); `timeout_at`
            // polls the answer before the clock.
            let response = if timeout.is_zero() {
                answer.await.map_err(Into::into)?
            } else {
                let deadline = Instant::now() + timeout;
                match tokio::time::timeout_at(deadline, answer).await {
                    Ok(r) => r.map_err(Into::into)?,
                    Err(_) => return Err(Box::new(RequestTimedOut(timeout)) as BoxError),
                }
            };
            Ok(if watch {
                response.map(Either::Left)
            } else {
                response.map(|body| {
                    let mut body = DeadlineBody::new(body, timeout);
                    body.max_bytes = max;
                    Either::Right(body)
                })
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
    /// Armed at the first read (never with a zero timeout).
    sleep: Option<Pin<Box<Sleep>>>,
    /// Longest body accepted ([`BodyTooLarge`] past it); `None`: any.
    max_bytes: Option<u64>,
    /// Bytes read so far.
    read: u64,
}

impl<B> DeadlineBody<B> {
    /// `body`, which must be complete within `timeout` from its first read (zero: no limit).
    pub(crate) fn new(body: B, timeout: Duration) -> DeadlineBody<B> {
        DeadlineBody {
            body,
            timeout,
            sleep: None,
            max_bytes: None,
            read: 0,
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
        use bytes::Buf as _;
        let this = self.get_mut();
        let timeout = this.timeout;
        if !timeout.is_zero() && this.sleep.is_none() {
            this.sleep = Some(Box::pin(tokio::time::sleep(timeout)));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            if let (Some(Ok(f)), Some(max)) = (&frame, this.max_bytes)
                && let Some(data) = f.data_ref()
            {
                this.read += data.remaining() as u64;
                if this.read > max {
                    return Poll::Ready(Some(Err(Box::new(BodyTooLarge(max)))));
                }
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.sleep.as_mut().map(|s| s.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Some(Err(Box::new(RequestTimedOut(timeout))))),
            _ => Poll::Pending,
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
