//! A loopback TCP proxy the harness can pause: one replica's kubeconfig points at it, so a pause
//! stalls that replica's connections to the API server (both ways, TLS untouched) while the
//! others and the harness go on. It only ever connects to a loopback address.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A running proxy to one upstream address; it lives as long as the process.
pub struct StallProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    paused: Arc<AtomicBool>,
}

impl StallProxy {
    /// Listens on 127.0.0.1 (a port of the kernel's choosing, bound here and kept) and forwards
    /// every connection to `upstream`, which must be a loopback address.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(upstream.ip().is_loopback(), "the stall proxy forwards to loopback only");
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let paused = Arc::new(AtomicBool::new(false));
        let gate = Arc::clone(&paused);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                // While paused a new connection is accepted and then stalls like the others.
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                let (up, down) = (Arc::clone(&gate), Arc::clone(&gate));
                std::thread::spawn(move || pump(client_read, server, &up));
                std::thread::spawn(move || pump(server_read, client, &down));
            }
        });
        Ok(StallProxy { addr, paused })
    }

    /// Stops forwarding (bytes already read wait with the rest) until [`StallProxy::resume`].
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Forwards again, what waited first.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Whether it is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` until either side ends, holding every chunk while `paused`.
fn pump(mut from: TcpStream, mut to: TcpStream, paused: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
