//! The admin endpoints: `/metrics`, `/healthz` (liveness: the process makes progress) and
//! `/readyz` (readiness: controllers started, caches synced, watches healthy), on axum.
//!
//! They are served from a thread with its own runtime, so `/healthz` still answers, and says
//! so, when the operator's runtime is wedged; connections are bounded as [`crate::ops::http`]
//! bounds them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tracing::error;

use crate::ops::Observability;
use crate::ops::http::serve_limited;

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
            serve_limited(listener, router(state)).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::http::{CONNECTION_TIMEOUT, HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
    use std::time::Duration;
    use tokio::net::TcpStream;

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
}
