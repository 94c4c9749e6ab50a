//! The workers of one rule, handed out round-robin by namespace: a tenant that creates 1,000
//! parents at once takes one turn in each round, not the whole queue, while the parents of one
//! namespace keep the order they were queued in.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Which pool a worker came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    /// One of the `maxConcurrentReconciles` slots.
    Slot,
    /// The burst only reconciles queued by a rule reload may take.
    Burst,
}

/// A reconcile waiting for a worker.
#[derive(Debug)]
struct Waiter {
    id: u64,
    /// Queued by a reload: it may take a burst worker too.
    burst: bool,
    grant: oneshot::Sender<Worker>,
}

/// What the workers' lock guards.
#[derive(Debug)]
struct State {
    free_slots: usize,
    free_burst: usize,
    closed: bool,
    /// The waiters of each namespace, in the order they came.
    waiting: BTreeMap<String, VecDeque<Waiter>>,
    /// The namespace served last: the next turn goes to the first namespace after it.
    last_served: Option<String>,
}

impl State {
    /// The next waiter that may take a worker of `pool`, round-robin by namespace: the first one
    /// (that may take it) of the first namespace after the one served last.
    fn next_for(&mut self, pool: Pool) -> Option<Waiter> {
        let eligible = |waiter: &Waiter| pool == Pool::Slot || waiter.burst;
        let after = self.last_served.clone().unwrap_or_default();
        let namespace = self
            .waiting
            .iter()
            .filter(|(namespace, _)| self.last_served.is_none() || **namespace > after)
            .chain(self.waiting.iter())
            .find(|(_, queue)| queue.iter().any(eligible))
            .map(|(namespace, _)| namespace.clone())?;
        let queue = self.waiting.get_mut(&namespace)?;
        let position = queue.iter().position(eligible)?;
        let waiter = queue.remove(position)?;
        if queue.is_empty() {
            self.waiting.remove(&namespace);
        }
        self.last_served = Some(namespace);
        Some(waiter)
    }

    fn take(&mut self, pool: Pool) {
        match pool {
            Pool::Slot => self.free_slots -= 1,
            Pool::Burst => self.free_burst -= 1,
        }
    }

    fn give_back(&mut self, pool: Pool) {
        match pool {
            Pool::Slot => self.free_slots += 1,
            Pool::Burst => self.free_burst += 1,
        }
    }

    fn remove(&mut self, namespace: &str, id: u64) {
        if let Some(queue) = self.waiting.get_mut(namespace) {
            queue.retain(|waiter| waiter.id != id);
            if queue.is_empty() {
                self.waiting.remove(namespace);
            }
        }
    }

    fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    next_id: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves counts that are still whole numbers; go on.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The workers of one rule: `maxConcurrentReconciles` slots, plus a burst pool only reconciles
/// queued by a rule reload may also take, served round-robin by namespace and in order within
/// one.
///
/// kube-runtime's Controller runs the rule with a concurrency of
/// [`crate::runtime::queue::HELD_RECONCILES`] and every reconcile first waits here. Why not
/// kube-runtime's own limit: at its limit it parks queued parents in a hash set and takes an
/// arbitrary one when a worker frees, so under a burst (1,000 parents created at once) some
/// parents waited several times as long as the median, and it knows nothing of namespaces.
#[derive(Debug, Clone)]
pub(crate) struct Workers(Arc<Shared>);

/// A worker held by one reconcile; dropping it hands the worker to the next waiter.
#[derive(Debug)]
pub(crate) struct Worker {
    workers: Workers,
    pool: Pool,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.workers.release(self.pool);
    }
}

/// Takes a waiter out of the queue however its wait ends without a worker (the reconcile was
/// dropped).
struct Queued<'a> {
    workers: &'a Workers,
    namespace: &'a str,
    id: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.workers.0.lock().remove(self.namespace, self.id);
    }
}

impl Workers {
    /// `concurrency` workers (at least one), and a reload burst that lets `reload_in_flight`
    /// reconciles run at once in all (`RuleSpec::reload_in_flight`).
    pub(crate) fn new(concurrency: u16, reload_in_flight: u16) -> Self {
        let concurrency = usize::from(concurrency.max(1));
        let burst = usize::from(reload_in_flight).saturating_sub(concurrency);
        Workers(Arc::new(Shared {
            state: Mutex::new(State {
                free_slots: concurrency,
                free_burst: burst,
                closed: false,
                waiting: BTreeMap::new(),
                last_served: None,
            }),
            next_id: AtomicU64::new(0),
        }))
    }

    /// Waits for a worker for a parent in `namespace`, in its namespace's turn; a reconcile a
    /// reload queued (`burst`) also takes a burst worker when one frees first. `None` once the
    /// rule's controller stops: the reconcile is skipped.
    pub(crate) async fn acquire(&self, namespace: &str, burst: bool) -> Option<Worker> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let granted = {
            let mut state = self.0.lock();
            if state.closed {
                return None;
            }
            // Nobody waits, so nobody's turn is taken.
            let free = if state.waiting.is_empty() && state.free_slots > 0 {
                Some(Pool::Slot)
            } else if burst && state.free_burst > 0 {
                Some(Pool::Burst)
            } else {
                None
            };
            match free {
                Some(pool) => {
                    state.take(pool);
                    Ok(pool)
                }
                None => {
                    let (grant, granted) = oneshot::channel();
                    state
                        .waiting
                        .entry(namespace.to_owned())
                        .or_default()
                        .push_back(Waiter { id, burst, grant });
                    Err(granted)
                }
            }
        };
        match granted {
            Ok(pool) => Some(Worker {
                workers: self.clone(),
                pool,
            }),
            Err(granted) => {
                let _queued = Queued {
                    workers: self,
                    namespace,
                    id,
                };
                // A closed channel: the workers were closed.
                granted.await.ok()
            }
        }
    }

    /// A worker of `pool` is free: hand it to the next waiter that may take it.
    fn release(&self, pool: Pool) {
        let next = {
            let mut state = self.0.lock();
            state.give_back(pool);
            if state.closed {
                return;
            }
            let next = state.next_for(pool);
            if next.is_some() {
                state.take(pool);
            }
            next
        };
        if let Some(waiter) = next {
            // A waiter dropped since: the worker comes back through its drop, to the next one.
            let _ = waiter.grant.send(Worker {
                workers: self.clone(),
                pool,
            });
        }
    }

    /// Reconciles waiting for a worker.
    pub(crate) fn waiting(&self) -> usize {
        self.0.lock().len()
    }

    /// Stops handing out workers: every waiting and later [`Workers::acquire`] returns `None`,
    /// so a stopping controller finishes only the reconciles already running.
    pub(crate) fn close(&self) {
        let waiting = {
            let mut state = self.0.lock();
            state.closed = true;
            std::mem::take(&mut state.waiting)
        };
        // Dropping the senders ends every wait with `None`.
        drop(waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rules::model::RELOAD_BURST_FACTOR;
    use std::time::Duration;

    /// Queues one waiter per `(namespace, burst)` in order (each polled once, so queued), frees
    /// the held workers, and returns the order in which the waiters got one.
    async fn order_served(workers: &Workers, held: Vec<Worker>, queued: &[(&str, bool)]) -> Vec<usize> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (i, (namespace, burst)) in queued.iter().enumerate() {
            let (pool, tx, namespace, burst) = (workers.clone(), tx.clone(), namespace.to_string(), *burst);
            tokio::spawn(async move {
                if let Some(_worker) = pool.acquire(&namespace, burst).await {
                    let _ = tx.send(i);
                    tokio::task::yield_now().await;
                }
            });
            while workers.waiting() <= i {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        drop(held);
        let mut served = Vec::new();
        while let Some(i) = rx.recv().await {
            served.push(i);
        }
        served
    }

    async fn hold(workers: &Workers, n: usize) -> Vec<Worker> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(workers.acquire("held", false).await.expect("a free slot"));
        }
        held
    }

    #[tokio::test(flavor = "current_thread")]
    async fn parents_of_one_namespace_get_a_worker_in_the_order_they_were_queued() {
        let workers = Workers::new(2, 2 * (1 + RELOAD_BURST_FACTOR));
        let held = hold(&workers, 2).await;
        let queued = vec![("a", false); 50];
        let served = order_served(&workers, held, &queued).await;
        assert_eq!(served, (0..50).collect::<Vec<_>>(), "first come, first served");
        assert_eq!(workers.waiting(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_quiet_namespace_is_served_in_the_next_turn_however_many_a_busy_one_queued() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let held = hold(&workers, 1).await;
        let mut queued = vec![("busy", false); 1000];
        queued.push(("quiet", false));
        queued.extend(vec![("busy", false); 10]);
        let served = order_served(&workers, held, &queued).await;
        let quiet = served.iter().position(|&i| i == 1000).expect("the quiet parent ran");
        assert!(
            quiet <= 1,
            "the quiet parent waited for {quiet} others, not for the 1,000"
        );
        let busy: Vec<_> = served.iter().copied().filter(|&i| i != 1000).collect();
        assert_eq!(
            busy,
            (0..1000).chain(1001..1011).collect::<Vec<_>>(),
            "the busy namespace keeps its order"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn namespaces_take_turns_one_parent_each() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let held = hold(&workers, 1).await;
        let queued = [
            ("a", false),
            ("a", false),
            ("a", false),
            ("b", false),
            ("b", false),
            ("c", false),
        ];
        let served = order_served(&workers, held, &queued).await;
        assert_eq!(served, vec![0, 3, 5, 1, 4, 2]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reload_may_use_the_burst_workers_and_nothing_else_may() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let _slot = workers.acquire("ns", false).await.expect("a slot");
        let mut burst = Vec::new();
        for _ in 0..RELOAD_BURST_FACTOR {
            let worker = tokio::time::timeout(Duration::from_secs(1), workers.acquire("ns", true)).await;
            burst.push(worker.expect("a burst worker is free").expect("not closed"));
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(50), workers.acquire("ns", true))
                .await
                .is_err(),
            "the burst is bounded"
        );
        drop(burst);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), workers.acquire("ns", false))
                .await
                .is_err(),
            "a reconcile not queued by a reload waits for a slot"
        );
        assert_eq!(workers.waiting(), 0, "a wait given up leaves the queue");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_rules_reload_concurrency_bounds_all_a_reload_runs_at_once() {
        let workers = Workers::new(2, 5);
        let mut held = Vec::new();
        for _ in 0..5 {
            let worker = tokio::time::timeout(Duration::from_secs(1), workers.acquire("ns", true)).await;
            held.push(worker.expect("a worker is free").expect("not closed"));
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(50), workers.acquire("ns", true))
                .await
                .is_err(),
            "five in all"
        );
        drop(held);
        let equal = Workers::new(3, 3);
        let _slots: Vec<_> = futures::future::join_all((0..3).map(|_| equal.acquire("ns", true))).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), equal.acquire("ns", true))
                .await
                .is_err(),
            "no burst when it equals the rule's concurrency"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_freed_burst_worker_goes_to_a_reload_behind_other_waiters() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let _slot = workers.acquire("ns", false).await.expect("a slot");
        let mut burst = Vec::new();
        for _ in 0..RELOAD_BURST_FACTOR {
            burst.push(workers.acquire("ns", true).await.expect("a burst worker"));
        }
        let plain = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("ns", false).await.is_some() }
        });
        let reload = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("other", true).await.is_some() }
        });
        while workers.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        drop(burst.pop());
        assert!(
            reload.await.expect("the reload waiter"),
            "the reload got the burst worker"
        );
        assert_eq!(workers.waiting(), 1, "the plain reconcile still waits for a slot");
        workers.close();
        assert!(!plain.await.expect("the plain waiter"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stopping_controller_hands_out_no_more_workers() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let slot = workers.acquire("ns", false).await;
        let waiter = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("ns", false).await.is_some() }
        });
        while workers.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        workers.close();
        assert!(!waiter.await.expect("the waiter"), "a waiting reconcile is skipped");
        assert!(workers.acquire("ns", true).await.is_none());
        drop(slot);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_worker_granted_to_a_reconcile_that_was_dropped_goes_to_the_next_one() {
        let workers = Workers::new(1, 1 + RELOAD_BURST_FACTOR);
        let slot = workers.acquire("ns", false).await.expect("a slot");
        let dropped = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("ns", false).await.is_some() }
        });
        while workers.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        let next = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("ns", false).await.is_some() }
        });
        while workers.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        dropped.abort();
        let _ = dropped.await;
        drop(slot);
        assert!(next.await.expect("the next waiter"), "the worker was not lost");
    }
}
