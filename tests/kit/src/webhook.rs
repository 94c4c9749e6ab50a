//! A webhook receiver for action tests: records every delivery's `Idempotency-Key` and
//! `Authorization`, applies each key's effect once (deduplicates), and can fail the first
//! deliveries on purpose or hold every answer until released.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the receiver has seen.
#[derive(Debug, Default)]
pub struct Received {
    /// Deliveries per key, in arrival order of first delivery.
    pub deliveries: HashMap<String, usize>,
    /// Keys whose effect was applied (once each).
    pub effects: Vec<String>,
    /// The body of each key's first delivery.
    pub bodies: HashMap<String, String>,
    /// The `Authorization` header of every delivery that had one.
    pub authorizations: Vec<String>,
    /// Deliveries waiting for their answer now (see [`Webhook::holding`]).
    pub held: usize,
    /// The most deliveries that waited for their answers at once.
    pub most_held: usize,
}

/// Whether answers wait: `true` until [`Webhook::release`].
type Gate = Arc<(Mutex<bool>, Condvar)>;

/// A running receiver on 127.0.0.1.
pub struct Webhook {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    /// Everything received.
    pub received: Arc<Mutex<Received>>,
    gate: Gate,
}

impl Webhook {
    /// Starts a receiver that answers 500 to the first `fail_first` deliveries, then 200.
    pub fn start(fail_first: usize) -> Self {
        Self::with(fail_first, false)
    }

    /// Starts a receiver that reads every delivery but answers none (200) until
    /// [`Webhook::release`]: a slow webhook.
    pub fn holding() -> Self {
        Self::with(0, true)
    }

    /// Lets every held answer go, and every later one go at once.
    pub fn release(&self) {
        let (held, wake) = &*self.gate;
        *held.lock().unwrap_or_else(|p| p.into_inner()) = false;
        wake.notify_all();
    }

    /// A copy of what was received so far.
    pub fn snapshot<T>(&self, read: impl FnOnce(&Received) -> T) -> T {
        read(&self.received.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn with(fail_first: usize, hold: bool) -> Self {
        let gate: Gate = Arc::new((Mutex::new(hold), Condvar::new()));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let received = Arc::new(Mutex::new(Received::default()));
        let failures_left = Arc::new(AtomicUsize::new(fail_first));
        let (state, held) = (received.clone(), gate.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, held) = (state.clone(), held.clone());
                let failures_left = failures_left.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    let (mut key, mut length, mut authorization) = (String::new(), 0usize, None);
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("idempotency-key:") {
                            key = v.trim().to_owned();
                        } else if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        } else if lower.starts_with("authorization:") {
                            authorization = Some(line["authorization:".len()..].trim().to_owned());
                        }
                        line.clear();
                    }
                    let mut body = vec![0; length];
                    if key.is_empty() || reader.read_exact(&mut body).is_err() {
                        // A request cut short (its sender was killed) is not a delivery.
                        return;
                    }
                    let fail = failures_left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    {
                        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                        *state.deliveries.entry(key.clone()).or_insert(0) += 1;
                        state
                            .bodies
                            .entry(key.clone())
                            .or_insert_with(|| String::from_utf8_lossy(&body).into_owned());
                        if !fail && !state.effects.contains(&key) {
                            state.effects.push(key);
                        }
                        state.authorizations.extend(authorization);
                        state.held += 1;
                        state.most_held = state.most_held.max(state.held);
                    }
                    {
                        let (waiting, wake) = &*held;
                        let mut waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
                        while *waiting {
                            waiting = wake
                                .wait_timeout(waiting, Duration::from_secs(1))
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                    }
                    state.lock().unwrap_or_else(|p| p.into_inner()).held -= 1;
                    let status = if fail { "500 Internal Server Error" } else { "200 OK" };
                    let _ = reader.get_mut().write_all(
                        format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes(),
                    );
                });
            }
        });
        Webhook { url, received, gate }
    }

    /// (distinct keys, total deliveries, effects applied).
    pub fn counts(&self) -> (usize, usize, usize) {
        let state = self.received.lock().unwrap_or_else(|p| p.into_inner());
        (
            state.deliveries.len(),
            state.deliveries.values().sum(),
            state.effects.len(),
        )
    }
}

impl Webhook {
    /// How many distinct keys each body received (bodies name the parent and generation).
    pub fn keys_per_body(&self) -> std::collections::BTreeMap<String, usize> {
        let state = self.received.lock().unwrap_or_else(|p| p.into_inner());
        let mut counts = std::collections::BTreeMap::new();
        for body in state.bodies.values() {
            *counts.entry(body.clone()).or_insert(0) += 1;
        }
        counts
    }
}

/// A listener on 127.0.0.1 that only counts the connections it accepts: the target a refused
/// request must never reach.
pub struct Trap {
    /// Its port.
    pub port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Trap {
    /// Starts accepting (and closing) connections on a free port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Trap { port, accepted }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}
