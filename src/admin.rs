//! The admin endpoints: `/metrics`, `/healthz` (the process serves) and `/readyz` (rules loaded
//! and controllers started). A deliberately tiny HTTP/1.1 server: GET only, one response per
//! connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// What the admin endpoints report.
#[derive(Debug, Default)]
pub struct AdminState {
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Set once the controllers are started.
    pub ready: AtomicBool,
}

/// Binds the admin address and serves until the task is dropped. Returns the bound address.
pub async fn serve(addr: SocketAddr, state: Arc<AdminState>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&request[..n]);
                let path = line.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = respond(path, &state);
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok(bound)
}

fn respond(path: &str, state: &AdminState) -> (&'static str, String) {
    match path {
        "/metrics" => ("200 OK", state.metrics.render()),
        "/healthz" => ("200 OK", "ok\n".to_owned()),
        "/readyz" if state.ready.load(Ordering::Relaxed) => ("200 OK", "ok\n".to_owned()),
        "/readyz" => ("503 Service Unavailable", "controllers not started\n".to_owned()),
        _ => ("404 Not Found", "not found\n".to_owned()),
    }
}
