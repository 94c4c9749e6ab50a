//! How a watch waits after an error before it tries again.
//!
//! kube-runtime's `default_backoff` (0.8 s doubling to 30 s, with jitter, as client-go's
//! reflector) is kept for the failures it is meant for, with two exceptions that made a watch
//! sleep long after the API server was back:
//! - **410 Gone** is the API server answering, and saying "list again": the watcher relists at
//!   once, and what the watch waited out before (an outage's refused connections) is forgotten.
//!   A 410 within 30 s of the last one waits as any error does (a relist whose watch expired
//!   again: a server that compacts faster than a list completes), so lists never loop hot.
//! - **A probe that reached the API server** (`cache::watch`'s one-item LIST of a failing watch's
//!   kind) wakes the watch from its wait: after an outage the watch retries when the server
//!   answers, not up to 30 s later.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ops::watch_error::is_gone;

/// A 410 this soon after the previous one waits out the backoff.
const GONE_AGAIN: Duration = Duration::from_secs(30);

/// `events` retried as the module says: after an error the next item is awaited only once the
/// backoff elapsed or `wake` was notified.
pub(crate) fn retried<S, K>(
    events: S,
    wake: Arc<Notify>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    let state = Retry {
        events: events.boxed(),
        backoff: DefaultBackoff::default(),
        pause: None,
        last_gone: None,
        wake,
    };
    futures::stream::unfold(state, |mut state| async move {
        if let Some(pause) = state.pause.take() {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = state.wake.notified() => {}
            }
        }
        let item = state.events.next().await?;
        state.after(&item);
        Some((item, state))
    })
}

/// The watch and what decides its next wait.
struct Retry<K> {
    events: futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    backoff: DefaultBackoff,
    /// The wait before the next item, after an error.
    pause: Option<Duration>,
    /// When the last 410 Gone came.
    last_gone: Option<Instant>,
    /// Cuts a pause short.
    wake: Arc<Notify>,
}

impl<K> Retry<K> {
    fn after(&mut self, item: &Result<watcher::Event<K>, watcher::Error>) {
        let now = Instant::now();
        let gone = item.as_ref().err().is_some_and(is_gone);
        let gone_again = self.last_gone.is_some_and(|last| now.duration_since(last) < GONE_AGAIN);
        self.pause = match item {
            Ok(_) => {
                self.backoff.reset();
                None
            }
            Err(_) if gone && !gone_again => {
                self.backoff.reset();
                None
            }
            Err(_) => self.backoff.next(),
        };
        if gone {
            self.last_gone = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use kube::core::Status;

    fn gone() -> watcher::Error {
        let status = Status::failure("too old resource version: 1 (2)", "Expired").with_code(410);
        watcher::Error::WatchError(Box::new(status))
    }

    fn refused() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    /// How long after the previous item each of `items` arrives, all queued up front.
    async fn gaps(items: Vec<Result<watcher::Event<()>, watcher::Error>>, wake: Arc<Notify>) -> Vec<Duration> {
        let (tx, rx) = mpsc::unbounded();
        for item in items {
            tx.unbounded_send(item).expect("queued");
        }
        drop(tx);
        let mut stream = std::pin::pin!(retried(rx, wake));
        let mut last = Instant::now();
        let mut gaps = Vec::new();
        while stream.next().await.is_some() {
            gaps.push(last.elapsed());
            last = Instant::now();
        }
        gaps
    }

    #[tokio::test(start_paused = true)]
    async fn errors_back_off_and_a_410_after_them_relists_at_once() {
        let items = vec![
            Err(refused()),
            Err(refused()),
            Err(refused()),
            Err(gone()),
            Ok(watcher::Event::Init),
        ];
        let gaps = gaps(items, Arc::new(Notify::new())).await;
        assert_eq!(gaps[0], Duration::ZERO);
        // The second and third errors wait out the backoff (0.8 s then 1.6 s, jittered).
        assert!(gaps[1] >= Duration::from_millis(800), "{gaps:?}");
        assert!(gaps[2] > gaps[1], "the backoff grows: {gaps:?}");
        // The 410 still waits for the third error's backoff; the relist after it does not wait.
        assert!(gaps[3] >= Duration::from_millis(1600), "{gaps:?}");
        assert_eq!(gaps[4], Duration::ZERO, "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_soon_after_a_410_waits_even_with_a_relist_between() {
        let items = vec![
            Err(gone()),
            Ok(watcher::Event::Init),
            Err(gone()),
            Ok(watcher::Event::Init),
        ];
        let gaps = gaps(items, Arc::new(Notify::new())).await;
        assert_eq!(gaps[1], Duration::ZERO, "the first 410 relists at once: {gaps:?}");
        assert_eq!(gaps[2], Duration::ZERO, "{gaps:?}");
        assert!(gaps[3] >= Duration::from_millis(800), "the second one waits: {gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_cuts_one_wait_short() {
        let wake = Arc::new(Notify::new());
        // A probe reached the API server: the next wait is skipped, the one after it is not.
        wake.notify_one();
        let items = vec![Err(refused()), Err(refused()), Err(refused())];
        let gaps = gaps(items, wake).await;
        assert_eq!(gaps[1], Duration::ZERO, "{gaps:?}");
        assert!(gaps[2] >= Duration::from_millis(800), "{gaps:?}");
    }
}
