//! Serving an axum [`Router`] with bounded connections, for the admin server and the console:
//! every connection is bounded in time (request headers within [`HEADER_READ_TIMEOUT`], the
//! whole exchange within [`CONNECTION_TIMEOUT`]), at most [`MAX_CONNECTIONS`] are open at once
//! and at most [`MAX_CONNECTIONS_PER_CLIENT`] from one address (beyond that a new one is closed at
//! once, so a flood costs neither memory nor file descriptors, and one client holding idle
//! connections cannot starve the kubelet's probes), and accept errors (say, out of file
//! descriptors) back off instead of spinning.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
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
/// Connections served at once from one client address: a client holding idle connections takes
/// at most this share, so the others (the kubelet's probes, Prometheus) are still answered.
pub(crate) const MAX_CONNECTIONS_PER_CLIENT: usize = 8;
/// Longest pause after repeated accept errors.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until the process ends, each connection bounded in time, at most
/// [`MAX_CONNECTIONS`] at once and [`MAX_CONNECTIONS_PER_CLIENT`] from one address.
pub(crate) async fn serve_limited(listener: tokio::net::TcpListener, app: Router) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let clients = Arc::new(ClientCounts::default());
    let mut refused = 0u64;
    accept_loop(
        || listener.accept(),
        |(stream, peer): (TcpStream, std::net::SocketAddr)| {
            let admitted = open
                .clone()
                .try_acquire_owned()
                .ok()
                .and_then(|permit| Some((permit, clients.clone().admit(peer.ip())?)));
            match admitted {
                Some((permit, client)) => {
                    let app = app.clone();
                    tokio::spawn(async move {
                        serve_connection(stream, app).await;
                        drop((client, permit));
                    });
                }
                None => {
                    refused += 1;
                    if refused.is_power_of_two() {
                        warn!(
                            refused,
                            limit = MAX_CONNECTIONS,
                            per_client = MAX_CONNECTIONS_PER_CLIENT,
                            "the server is at a connection limit; closing new ones"
                        );
                    }
                    drop(stream);
                }
            }
        },
    )
    .await;
}

/// Open connections per client address.
#[derive(Debug, Default)]
struct ClientCounts(Mutex<HashMap<IpAddr, usize>>);

/// One admitted connection of a client; its count goes down when this drops.
struct ClientSlot {
    counts: Arc<ClientCounts>,
    ip: IpAddr,
}

impl ClientCounts {
    /// A slot for one more connection from `ip`, or `None` if it has its share open.
    fn admit(self: Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let ip = ip.to_canonical();
        let mut counts = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = counts.entry(ip).or_default();
        if *open >= MAX_CONNECTIONS_PER_CLIENT {
            return None;
        }
        *open += 1;
        drop(counts);
        Some(ClientSlot { counts: self, ip })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = counts.get_mut(&self.ip) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                counts.remove(&self.ip);
            }
        }
    }
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

    /// Issue 48, item 9: one client holding [`MAX_CONNECTIONS`] idle connections (from
    /// 127.0.0.2) left no `/healthz` probe answered; now each of 30 probes (from 127.0.0.1) is.
    #[tokio::test]
    async fn one_client_holding_idle_connections_does_not_starve_the_probes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve_limited(listener, app));
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket
                .bind("127.0.0.2:0".parse().expect("addr"))
                .expect("bind 127.0.0.2");
            idle.push(socket.connect(addr).await.expect("connect"));
        }
        let mut answered = 0;
        for _ in 0..30 {
            let mut probe = TcpStream::connect(addr).await.expect("connect");
            probe
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .await
                .expect("write");
            let mut answer = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(2), probe.read_to_end(&mut answer)).await;
            if read.is_ok() && answer.starts_with(b"HTTP/1.1 200") {
                answered += 1;
            }
        }
        assert_eq!(
            answered,
            30,
            "probes answered while another client holds {} idle connections",
            idle.len()
        );
    }
}
