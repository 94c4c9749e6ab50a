//! A stop that always ends: the first SIGTERM or SIGINT starts a graceful stop with a deadline;
//! a second signal, or the deadline passing, ends the process whatever is still running.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;
use tracing::error;

/// Exit code when the process is ended by a second signal or by the deadline.
const FORCED_EXIT: i32 = 130;

/// Installs the handlers now (not when the returned future is first polled: until then a SIGTERM
/// would kill the process without a graceful stop) and a watchdog that ends the process
/// `timeout` after the first signal, or at once on a second one. The future resolves on the first.
pub(crate) fn install(timeout: Duration) -> impl Future<Output = ()> {
    let mut first = Signals::new();
    let mut watchdog = Signals::new();
    tokio::spawn(async move {
        watchdog.next().await;
        tokio::select! {
            name = watchdog.next() => {
                eprintln!("ruleop: a second {name}: exiting at once");
                error!("a second {name}: exiting at once");
            }
            () = tokio::time::sleep(timeout) => {
                eprintln!("ruleop: the stop did not finish within {timeout:?} (--shutdown-timeout): exiting");
                error!(?timeout, "the stop did not finish within --shutdown-timeout: exiting");
            }
        }
        std::process::exit(FORCED_EXIT);
    });
    async move {
        first.next().await;
    }
}

/// When the controllers must have stopped, and when the leases must have been released: the
/// controllers get three quarters of the time, the lease writes the rest (at most 2 s of it).
pub(crate) fn deadlines(now: Instant, timeout: Duration) -> (Instant, Instant) {
    let release = (timeout / 4).min(Duration::from_secs(2));
    // A margin before the watchdog fires, so that the graceful path ends first.
    let margin = timeout / 20;
    let released_by = now + timeout.saturating_sub(margin);
    (released_by - release, released_by)
}

/// SIGTERM and SIGINT, as one stream.
struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

impl Signals {
    fn new() -> Self {
        let install = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| error!(error = %e, "cannot listen for {name}"))
                .ok()
        };
        Signals {
            terminate: install(SignalKind::terminate(), "SIGTERM"),
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// The name of the next signal received (never resolves if neither could be installed).
    async fn next(&mut self) -> &'static str {
        async fn recv(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.terminate) => "SIGTERM",
            () = recv(&mut self.interrupt) => "SIGINT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_get_most_of_the_time_and_the_leases_the_rest_before_the_watchdog() {
        let now = Instant::now();
        let (controllers_by, released_by) = deadlines(now, Duration::from_secs(10));
        assert_eq!(controllers_by - now, Duration::from_millis(7_500));
        assert_eq!(released_by - now, Duration::from_millis(9_500));
    }

    #[test]
    fn a_short_timeout_keeps_the_order_of_the_deadlines() {
        let now = Instant::now();
        let (controllers_by, released_by) = deadlines(now, Duration::from_secs(1));
        assert!(now < controllers_by && controllers_by < released_by);
        assert!(released_by - now < Duration::from_secs(1));
    }
}
