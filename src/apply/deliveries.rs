//! `http` requests in flight, each sent by a task of its own: a reconcile records the run's
//! intent, hands the request over and lets its worker go, so a slow or black-holed webhook holds
//! a socket for at most its `timeout`, never one of the rule's `maxConcurrentReconciles`. When the
//! answer comes, the parent is queued again (trigger `delivered`) and that reconcile records the
//! outcome under the same key, as an inline send did before.
//!
//! A process that ends with a request in flight leaves its `Pending` record: the next one sends
//! again under the same `Idempotency-Key`, as after any crash (at least once, with a stable key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use tokio::sync::Semaphore;

/// How many requests of one rule may be on the wire at once; more wait for a turn (holding no
/// worker and no socket). Each costs one connection for at most 30 s.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// How long a finished delivery waits for the reconcile that records it before it is dropped (the
/// parent went away, or another replica took it): its run is then sent again under its key.
const UNCLAIMED_FOR: Duration = Duration::from_secs(600);

/// How a delivery ended: `Ok`, or the failure's reason and message (scheme and host only).
pub(crate) type Outcome = Result<(), (&'static str, String)>;

/// The parent to queue again once its delivery ended: namespace and name.
pub(crate) type Delivered = (String, String);

#[derive(Debug)]
enum Delivery {
    InFlight,
    Done { outcome: Outcome, at: Instant },
}

/// What one delivery's key says now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Nothing is known of it here: send it.
    NotSent,
    /// Sent, no answer yet: the reconcile leaves it alone.
    InFlight,
    /// The answer, taken: record it.
    Done(Outcome),
}

/// One rule's deliveries, by idempotency key (unique per parent, action and guard value).
#[derive(Debug)]
pub(crate) struct Deliveries {
    by_key: Mutex<HashMap<String, Delivery>>,
    turns: Arc<Semaphore>,
    delivered: mpsc::UnboundedSender<Delivered>,
}

impl Deliveries {
    /// Deliveries whose ends queue their parents on `delivered`.
    pub(crate) fn new(delivered: mpsc::UnboundedSender<Delivered>) -> Self {
        Deliveries {
            by_key: Mutex::new(HashMap::new()),
            turns: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            delivered,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Delivery>> {
        // The map holds whole entries whatever panicked while it was held; go on.
        self.by_key.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the delivery under `key` stands. A finished one stays until [`Deliveries::settle`]:
    /// if recording its outcome fails, the next reconcile records it instead of sending again.
    pub(crate) fn progress(&self, key: &str) -> Progress {
        match self.lock().get(key) {
            None => Progress::NotSent,
            Some(Delivery::InFlight) => Progress::InFlight,
            Some(Delivery::Done { outcome, .. }) => Progress::Done(outcome.clone()),
        }
    }

    /// Forgets a finished delivery whose outcome is recorded.
    pub(crate) fn settle(&self, key: &str) {
        let mut by_key = self.lock();
        if matches!(by_key.get(key), Some(Delivery::Done { .. })) {
            by_key.remove(key);
        }
    }

    /// Hands `send` to a task of its own under `key`, for the parent `namespace/name`: it waits
    /// for a turn, sends, keeps the outcome for the next reconcile and queues the parent.
    pub(crate) fn spawn<F>(self: &Arc<Self>, key: String, parent: Delivered, send: F)
    where
        F: Future<Output = Outcome> + Send + 'static,
    {
        self.lock().insert(key.clone(), Delivery::InFlight);
        let deliveries = Arc::clone(self);
        tokio::spawn(async move {
            let outcome = match deliveries.turns.clone().acquire_owned().await {
                Ok(_turn) => send.await,
                Err(_) => Err(("ActionFailed", "the operator is stopping".to_owned())),
            };
            deliveries.finish(key, outcome);
            // The receiver is gone only while the rule's controller stops; the next process
            // resumes the `Pending` run.
            let _ = deliveries.delivered.unbounded_send(parent);
        });
    }

    /// Keeps `outcome` for the reconcile that records it, and drops answers nobody claimed.
    fn finish(&self, key: String, outcome: Outcome) {
        let now = Instant::now();
        let mut by_key = self.lock();
        by_key.retain(|_, d| !matches!(d, Delivery::Done { at, .. } if now.duration_since(*at) > UNCLAIMED_FOR));
        by_key.insert(key, Delivery::Done { outcome, at: now });
    }

    /// How many requests are sent or waiting for a turn.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().values().filter(|d| matches!(d, Delivery::InFlight)).count()
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn a_delivery_is_in_flight_until_its_answer_which_is_kept_until_settled_and_its_parent_queued() {
        let (tx, mut rx) = mpsc::unbounded();
        let deliveries = Arc::new(Deliveries::new(tx));
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        assert_eq!(deliveries.progress("k1"), Progress::NotSent);
        deliveries.spawn("k1".to_owned(), ("shop".to_owned(), "orders".to_owned()), async move {
            let _ = answered.await;
            Err((
                "ActionFailed",
                "request to https://hooks.example.com failed: timed out".to_owned(),
            ))
        });
        assert_eq!(deliveries.progress("k1"), Progress::InFlight);
        assert_eq!(deliveries.in_flight(), 1);
        answer.send(()).expect("the task waits");
        assert_eq!(rx.next().await, Some(("shop".to_owned(), "orders".to_owned())));
        assert_eq!(
            deliveries.progress("k1"),
            Progress::Done(Err((
                "ActionFailed",
                "request to https://hooks.example.com failed: timed out".to_owned()
            )))
        );
        deliveries.settle("k1");
        assert_eq!(deliveries.progress("k1"), Progress::NotSent);
        assert_eq!(deliveries.in_flight(), 0);
    }

    #[tokio::test]
    async fn no_more_than_the_cap_are_sent_at_once() {
        let (tx, mut rx) = mpsc::unbounded();
        let deliveries = Arc::new(Deliveries::new(tx));
        let sending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let total = MAX_IN_FLIGHT + 10;
        for i in 0..total {
            let (sending, most, mut released) = (sending.clone(), most.clone(), released.clone());
            deliveries.spawn(format!("k{i}"), ("ns".to_owned(), format!("p{i}")), async move {
                let now = sending.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                let _ = released.wait_for(|r| *r).await;
                sending.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            });
        }
        // Wait until the cap is reached (the rest wait for turns), then let them all answer.
        while sending.load(std::sync::atomic::Ordering::SeqCst) < MAX_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
        release.send(true).expect("the tasks wait");
        for _ in 0..total {
            rx.next().await.expect("every delivery queues its parent");
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), MAX_IN_FLIGHT);
        assert_eq!(deliveries.in_flight(), 0);
    }
}
