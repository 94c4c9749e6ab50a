//! Serving an axum [`Router`] with bounded connections, for the admin server and the console:
//! every connection is bounded in time (request headers within [`HEADER_READ_TIMEOUT`], the
//! whole exchange within [`CONNECTION_TIMEOUT`]), at most [`MAX_CONNECTIONS`] are open at once
//! (beyond that a new one is closed at once, so a flood costs neither memory nor file
//! descriptors), and accept errors (say, out of file descriptors) back off instead of spinning.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tracing::warn;

/// A client must send its request headers within this time.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this time, whatever it is doing.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; one more is closed as soon as it is accepted.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Longest pause after repeated accept errors.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until the process ends, each connection bounded in time and at
/// most [`MAX_CONNECTIONS`] at once.
pub(crate) async fn serve_limited(listener: tokio::net::TcpListener, app: Router) {
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
                        "the server is at its connection limit; closing new ones"
                    );
                }
                drop(stream);
            }
        },
    )
    .await;
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
