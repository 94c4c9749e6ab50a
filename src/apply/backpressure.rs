//! Backpressure from and towards the API server. Every request of the operator's client
//! passes, in this order: the lease fence, kube's own [`RetryPolicy`] (429, 503 and 504 are sent
//! again after the server's `Retry-After`, or an exponential backoff, a bounded number of times),
//! then [`Throttled`]: each attempt, retries included, takes a token of the optional client-side
//! bucket (`--kube-qps`, `--kube-burst`), and each 429 the API server answers (API Priority and
//! Fairness, `--max-requests-inflight`) is counted. A busy API server so slows ruleop down
//! instead of turning each rejection into a failed reconcile and a retry storm.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use prometheus_client::metrics::counter::Counter;
use tower::{BoxError, Layer, Service};

/// How many times one request is sent again after a 429, 503 or 504.
const MAX_RETRIES: u32 = 8;
/// The first wait before a retry (doubled per retry, or the server's `Retry-After` when that is
/// longer).
const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest wait before one retry.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The retry policy of the operator's client: kube's, honouring `Retry-After`, with the waits
/// bounded so a request never hangs for kube's default of up to 1,000 s per retry.
pub(crate) fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(RETRY_MIN, RETRY_MAX, MAX_RETRIES, true).unwrap_or_else(|_| RetryPolicy::server_retry())
}

/// The client-side limit: `qps` requests per second on average, `burst` at once. `qps` 0
/// switches it off (the default: the API server's Priority and Fairness is the arbiter, and its
/// 429s are honoured; see docs/operations/backpressure.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientLimit {
    /// Requests per second; 0: no client-side limit.
    pub qps: u32,
    /// Requests allowed at once above the rate.
    pub burst: u32,
}

/// What every request of the operator's client shares: the token bucket and the counters.
#[derive(Debug)]
pub(crate) struct Backpressure {
    limiter: Option<DefaultDirectRateLimiter>,
    /// 429 answers the API server sent (each retried by the policy, the last one returned).
    pub rejected: Counter,
    /// Requests that had to wait for the client-side bucket.
    pub waited: Counter,
}

impl Backpressure {
    /// The shared state for `limit`.
    pub(crate) fn new(limit: ClientLimit) -> Arc<Self> {
        let limiter = NonZeroU32::new(limit.qps).map(|qps| {
            let burst = NonZeroU32::new(limit.burst).unwrap_or(qps);
            RateLimiter::direct(Quota::per_second(qps).allow_burst(burst))
        });
        Arc::new(Backpressure {
            limiter,
            rejected: Counter::default(),
            waited: Counter::default(),
        })
    }

    /// Waits for a token of the client-side bucket, if there is one.
    async fn admit(&self) {
        if let Some(limiter) = &self.limiter
            && limiter.check().is_err()
        {
            self.waited.inc();
            limiter.until_ready().await;
        }
    }
}

/// The tower layer adding [`Backpressure`] to a client's service stack.
#[derive(Debug, Clone)]
pub(crate) struct BackpressureLayer(pub Arc<Backpressure>);

impl<S> Layer<S> for BackpressureLayer {
    type Service = Throttled<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttled {
            inner,
            shared: self.0.clone(),
        }
    }
}

/// The service of [`BackpressureLayer`]: a token, then the request; a 429 is counted.
#[derive(Debug, Clone)]
pub(crate) struct Throttled<S> {
    inner: S,
    shared: Arc<Backpressure>,
}

impl<S, B> Service<Request<Body>> for Throttled<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The token is awaited before the inner call: take the readied service, leave a clone.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let shared = self.shared.clone();
        Box::pin(async move {
            shared.admit().await;
            let response = inner.call(request).await.map_err(Into::into)?;
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                shared.rejected.inc();
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tower::ServiceExt;
    use tower::retry::RetryLayer;

    use super::*;

    /// A stand-in API server answering 429 (with `Retry-After: 0`) to the first `rejections`
    /// requests, then 200 with the body it was sent; it counts what it was sent.
    #[derive(Clone)]
    struct Busy {
        rejections: u32,
        seen: Arc<AtomicU32>,
    }

    impl Service<Request<Body>> for Busy {
        type Response = Response<String>;
        type Error = BoxError;
        type Future = BoxFuture<'static, Result<Response<String>, BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let seen = self.seen.fetch_add(1, Ordering::SeqCst);
            let rejected = seen < self.rejections;
            Box::pin(async move {
                let body = request.into_body().collect_bytes().await?;
                let mut response = Response::new(String::from_utf8_lossy(&body).into_owned());
                if rejected {
                    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    response.headers_mut().insert(http::header::RETRY_AFTER, "0".parse()?);
                }
                Ok(response)
            })
        }
    }

    /// Sends one POST through the retry policy and [`Throttled`] to a server that rejects the
    /// first `rejections`: the response, how many the server saw, how many 429s were counted.
    async fn send(rejections: u32) -> (Response<String>, u32, u64) {
        let seen = Arc::new(AtomicU32::new(0));
        let shared = Backpressure::new(ClientLimit { qps: 0, burst: 0 });
        let throttled = BackpressureLayer(shared.clone()).layer(Busy {
            rejections,
            seen: seen.clone(),
        });
        let service = RetryLayer::new(retry_policy()).layer(throttled);
        let request = Request::post("/api/v1/namespaces/a/configmaps")
            .body(Body::from(b"{\"kind\":\"ConfigMap\"}".to_vec()))
            .expect("a request");
        let response = service.oneshot(request).await.expect("a response");
        (response, seen.load(Ordering::SeqCst), shared.rejected.get())
    }

    #[tokio::test]
    async fn a_429_is_counted_and_sent_again_with_its_body() {
        let (response, sent, rejected) = send(3).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.body(),
            "{\"kind\":\"ConfigMap\"}",
            "the retry carries the same body"
        );
        assert_eq!((sent, rejected), (4, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_keeps_rejecting_gets_its_429_back_after_the_last_retry() {
        let (response, sent, rejected) = send(u32::MAX).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(sent, MAX_RETRIES + 1);
        assert_eq!(rejected, u64::from(MAX_RETRIES + 1));
    }

    #[tokio::test]
    async fn the_client_side_bucket_lets_a_burst_through_then_holds_to_the_rate() {
        let shared = Backpressure::new(ClientLimit { qps: 20, burst: 5 });
        let started = std::time::Instant::now();
        for _ in 0..15 {
            shared.admit().await;
        }
        // 5 at once, then 10 more at 20 per second: about half a second.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(shared.waited.get(), 10);
    }
}
