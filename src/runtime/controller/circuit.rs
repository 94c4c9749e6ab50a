//! The per-parent circuit breaker. The backoff (`policy`) spaces out a failing parent's retries,
//! but watch events (its children, its lookups, its own status) would still run it at once each
//! time. After `--circuit-failures` failed reconciles in a row the circuit opens: the parent
//! gets `Ready=False` (`CircuitOpen`), its events are ignored, and only the scheduled retry, every
//! [`COOLDOWN`], runs it, until a reconcile succeeds and the circuit closes. A change of the
//! parent's spec (a new `metadata.generation`) is a new try at once: whoever fixes a parent does
//! not wait out the cooldown.

use std::time::{Duration, Instant};

/// The wait between tries of a parent whose circuit is open (also the backoff's longest wait).
pub(super) const COOLDOWN: Duration = Duration::from_secs(300);

/// A parent's failed reconciles in a row, and when the next try is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failures {
    /// Failed reconciles in a row.
    pub count: u32,
    /// When the retry the backoff scheduled is due.
    pub retry_at: Instant,
    /// The parent's `metadata.generation` at the last failure.
    pub generation: i64,
}

/// The failures in a row that open the circuit (`--circuit-failures`; 0: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Threshold(pub u32);

impl Threshold {
    /// Whether `failures` in a row open the circuit.
    pub(super) fn opens_at(self, failures: u32) -> bool {
        self.0 > 0 && failures >= self.0
    }

    /// How long an event that arrives `now` for a parent at `generation` with `failures` must
    /// wait: the time to its scheduled retry while the circuit is open and the spec unchanged,
    /// else `None` (run it).
    pub(super) fn holds(self, failures: Option<&Failures>, generation: i64, now: Instant) -> Option<Duration> {
        let failures = failures.filter(|f| self.opens_at(f.count) && f.generation == generation)?;
        let remaining = failures.retry_at.saturating_duration_since(now);
        (!remaining.is_zero()).then_some(remaining)
    }

    /// The reason and message a failure is reported with when it is failure number
    /// `failures_before + 1` in a row: `CircuitOpen` from the one that opens the circuit on.
    pub(super) fn report(self, failures_before: u32, reason: &'static str, message: &str) -> (&'static str, String) {
        let failures = failures_before.saturating_add(1);
        if self.opens_at(failures) {
            let message = format!(
                "{failures} failed reconciles in a row: events are ignored and it is tried again every {}s \
                 until a reconcile succeeds; the last ({reason}): {message}",
                COOLDOWN.as_secs()
            );
            ("CircuitOpen", message)
        } else {
            (reason, message.to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_circuit_opens_at_the_threshold_and_holds_events_until_the_retry_is_due() {
        let threshold = Threshold(3);
        let now = Instant::now();
        let failing = |count| Failures {
            count,
            retry_at: now + Duration::from_secs(60),
            generation: 4,
        };
        assert_eq!(threshold.holds(Some(&failing(2)), 4, now), None, "still closed");
        assert_eq!(
            threshold.holds(Some(&failing(3)), 4, now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            threshold.holds(Some(&failing(3)), 4, now + COOLDOWN),
            None,
            "the retry is due"
        );
        assert_eq!(
            threshold.holds(Some(&failing(3)), 5, now),
            None,
            "a new spec is a new try"
        );
        assert_eq!(threshold.holds(None, 4, now), None);
        assert_eq!(Threshold(0).holds(Some(&failing(1000)), 4, now), None, "0: never opens");
    }

    #[test]
    fn the_failure_that_opens_the_circuit_is_reported_as_circuit_open_with_the_last_error() {
        let threshold = Threshold(3);
        assert_eq!(
            threshold.report(1, "ApplyFailed", "boom"),
            ("ApplyFailed", "boom".to_owned())
        );
        let (reason, message) = threshold.report(2, "ApplyFailed", "boom");
        assert_eq!(reason, "CircuitOpen");
        assert!(message.starts_with("3 failed reconciles in a row"), "{message}");
        assert!(message.ends_with("the last (ApplyFailed): boom"), "{message}");
        assert_eq!(threshold.report(u32::MAX, "X", "y").0, "CircuitOpen");
    }
}
