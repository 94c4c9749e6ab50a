//! The reconciles running in this process, and a wait for a moment when none is: Events (for
//! people, never urgent) go out then, so a burst of reconciles sends its child and status writes
//! first instead of sharing the API server with as many Events.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Counts the reconciles running; wakes the waiters when the last one ends.
#[derive(Debug, Default)]
pub(crate) struct Quiet {
    running: AtomicUsize,
    ended: Notify,
}

/// One running reconcile, counted until dropped.
#[derive(Debug)]
pub(crate) struct Running(Arc<Quiet>);

impl Quiet {
    /// Counts a reconcile as running until the returned guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }

    /// Returns once no reconcile is running, or after `longest`, whichever comes first: work
    /// that waits here is delayed by a burst, never held by one that does not end.
    pub(crate) async fn wait(&self, longest: Duration) {
        let quiet = async {
            loop {
                // Registered before the count is read, so an end between the two is not missed.
                let ended = self.ended.notified();
                if self.running.load(Ordering::SeqCst) == 0 {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout(longest, quiet).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_waiter_goes_when_the_last_reconcile_ends_or_after_the_longest_wait() {
        let quiet = Arc::new(Quiet::default());
        let start = tokio::time::Instant::now();
        quiet.wait(Duration::from_secs(30)).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing running: at once");

        let (first, second) = (quiet.enter(), quiet.enter());
        let waiter = tokio::spawn({
            let quiet = quiet.clone();
            async move {
                quiet.wait(Duration::from_secs(30)).await;
                start.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiter.is_finished(), "one reconcile still runs");
        drop(second);
        assert_eq!(waiter.await.expect("waiter"), Duration::from_secs(5));

        let _endless = quiet.enter();
        let start = tokio::time::Instant::now();
        quiet.wait(Duration::from_secs(30)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(30),
            "a burst that never ends delays, never holds"
        );
    }
}
