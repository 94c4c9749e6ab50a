//! The admin endpoints: `/metrics`, `/healthz` (liveness: the process makes progress) and
//! `/readyz` (readiness: controllers started, caches synced, watches healthy), on axum.
//!
//! They are served from a thread with its own runtime, so `/healthz` still answers, and says
//! so, when the operator's runtime is wedged. Every connection is bounded in time (request
//! headers within [`HEADER_READ_TIMEOUT`], the whole exchange within [`CONNECTION_TIMEOUT`]),
//! at most [`MAX_CONNECTIONS`] are open at once (beyond that a new one is closed at once, so a
//! flood costs neither memory nor file descriptors), and accept errors (say, out of file
//! descriptors) back off instead of spinning.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tracing::{error, warn};

use crate::ops::Observability;

/// A client must send its request headers within this time.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this time, whatever it is doing.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; one more is closed as soon as it is accepted.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Longest pause after repeated accept errors.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Binds the admin address and serves it from a thread of its own for the life of the process.
/// Returns the bound address.
pub(crate) async fn serve(addr: SocketAddr, state: Arc<Observability>) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("admin".to_owned()).spawn(move || {
        runtime.block_on(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => listener,
                Err(e) => {
                    error!(error = %e, "the admin server cannot listen");
                    return;
                }
            };
            let app = router(state);
            let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
            let mut refused = 0u64;
            accept_loop(
                || async { listener.accept().await.map(|(stream, _)| stream) },
                |stream| match open.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let app = app.clone();
                        tokio::spawn(async move {
                            serve_connection(stream, app).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        refused += 1;
                        if refused.is_power_of_two() {
                            warn!(
                                refused,
                                limit = MAX_CONNECTIONS,
                                "the admin server is at its connection limit; closing new ones"
                            );
                        }
                        drop(stream);
                    }
                },
            )
            .await;
        });
    })?;
    Ok(bound)
}

/// The routes.
pub(crate) fn router(state: Arc<Observability>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<Observability>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::ops::metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
}

fn verdict(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn healthz(State(state): State<Arc<Observability>>) -> impl IntoResponse {
    verdict(state.health.liveness())
}

async fn readyz(State(state): State<Arc<Observability>>) -> impl IntoResponse {
    verdict(state.health.readiness())
}

/// Accepts connections until the process ends; after an error it waits (doubling from 10 ms to
/// [`MAX_ACCEPT_BACKOFF`]) so a persistent error costs a few wakeups a second, not a spinning core.
async fn accept_loop<S, A, F>(mut accept: A, mut handle: impl FnMut(S))
where
    A: FnMut() -> F,
    F: Future<Output = std::io::Result<S>>,
{
    let mut failures = 0u32;
    loop {
        match accept().await {
            Ok(stream) => {
                failures = 0;
                handle(stream);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures.is_power_of_two() {
                    warn!(error = %e, failures, "the admin server cannot accept connections; backing off");
                }
                let delay = Duration::from_millis(10)
                    .saturating_mul(2u32.saturating_pow(failures.min(16)))
                    .min(MAX_ACCEPT_BACKOFF);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

async fn serve_connection(stream: TcpStream, app: Router) {
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    // A client that does not read its response (or trickles its request) is cut off.
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_client_that_sends_nothing_is_cut_off_and_others_are_answered() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = "127.0.0.1:0".parse().expect("address");
        let bound = serve(addr, Arc::new(Observability::default())).await.expect("bind");
        let started = std::time::Instant::now();
        let mut silent = TcpStream::connect(bound).await.expect("connect");

        let mut client = TcpStream::connect(bound).await.expect("connect");
        client
            .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("send");
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.ends_with("controllers not started\n"), "{answer}");

        let mut nothing = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut nothing)).await;
        assert!(closed.is_ok(), "a silent connection is still open after 30s");
        let waited = started.elapsed();
        assert!(waited < CONNECTION_TIMEOUT + Duration::from_secs(2), "{waited:?}");
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed_at_once_and_served_again_once_others_end() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = "127.0.0.1:0".parse().expect("address");
        let bound = serve(addr, Arc::new(Observability::default())).await.expect("bind");
        let ask = || async move {
            let mut client = TcpStream::connect(bound).await.expect("connect");
            // A closed connection may refuse the write; the answer tells.
            let _ = client.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
            let mut answer = String::new();
            let _ = client.read_to_string(&mut answer).await;
            answer
        };
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            silent.push(TcpStream::connect(bound).await.expect("connect"));
        }
        // The admin thread has accepted them all once a request past them is refused.
        let started = std::time::Instant::now();
        loop {
            let answer = ask().await;
            if answer.is_empty() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "never refused: {answer}");
        }
        assert!(
            started.elapsed() < HEADER_READ_TIMEOUT,
            "refused at once, not after a timeout"
        );
        drop(silent);
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let answer = ask().await;
                if !answer.is_empty() {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("served again once the silent connections closed");
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }

    #[tokio::test]
    async fn accept_errors_back_off_instead_of_spinning() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let accept = move || {
            let n = counted.fetch_add(1, Ordering::Relaxed);
            assert!(n < 1000, "the accept loop spins on errors");
            async { Err::<(), _>(std::io::Error::other("too many open files")) }
        };
        let one_second = tokio::time::timeout(Duration::from_secs(1), accept_loop(accept, |()| {}));
        assert!(one_second.await.is_err(), "the loop runs until the process ends");
        let n = calls.load(Ordering::Relaxed);
        assert!(n <= 10, "{n} accepts in one second of errors");
    }
}
