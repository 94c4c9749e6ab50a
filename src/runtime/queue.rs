//! Why each parent is reconciled (its trigger) and how many parents are queued (the queue
//! depth; the workers they wait for are in `workers.rs`). kube-runtime's
//! Controller keeps its queue to itself, so this follows what feeds it: the parent, child and lookup streams, rule reloads, and the requeues that the reconciler
//! and its error policy ask for. kube's own `reconciling object` span names a reason too, but in
//! kube's words and without telling a resync from a retry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What made a parent reconcile: the `trigger` field of the `reconcile` span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Trigger {
    /// The parent changed or was listed (start-up, a watch restart).
    ParentEvent,
    /// One of its children changed or went away.
    ChildEvent,
    /// An object its last plan looked up changed.
    LookupEvent,
    /// Someone asked for it: a new value of the `ruleop.io/reconcile-requested-at` annotation.
    Requested,
    /// The rule set was reloaded with a change to this rule.
    Reload,
    /// One of its `http` requests was answered (or failed): record the outcome.
    Delivered,
    /// This replica took the parent's shard (`--shards`).
    ShardTaken,
    /// The periodic resync came due.
    Resync,
    /// A retry after a failure (backoff) or after a write conflict.
    Retry,
    /// A follow-up the last reconcile asked for: after an action ran, a wait in its plan
    /// (`waitFor`, a timeout), or a drift repair deferred by the parent's budget.
    Requeue,
    /// None of the above was seen (the parent was queued before this rule's tracking began).
    Unknown,
}

impl Trigger {
    /// The label value (`parent_event`, `child_event`, `lookup_event`, `reload`, `delivered`, `shard_taken`, `resync`,
    /// `retry`, `requeue`, `unknown`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::ParentEvent => "parent_event",
            Trigger::Requested => "requested",
            Trigger::ChildEvent => "child_event",
            Trigger::LookupEvent => "lookup_event",
            Trigger::Reload => "reload",
            Trigger::Delivered => "delivered",
            Trigger::ShardTaken => "shard_taken",
            Trigger::Resync => "resync",
            Trigger::Retry => "retry",
            Trigger::Requeue => "requeue",
            Trigger::Unknown => "unknown",
        }
    }
}

/// What is pending for one parent since its last reconcile started.
#[derive(Debug, Default, Clone, Copy)]
struct Pending {
    /// The first event since then, and when it came.
    event: Option<(Trigger, Instant)>,
    /// The requeue its last reconcile (or error policy) asked for, and when it comes due.
    scheduled: Option<(Trigger, Instant)>,
}

impl Pending {
    /// Whether a worker would take it now: an event came, or the requeue is due.
    fn queued(&self, now: Instant) -> bool {
        self.event.is_some() || self.scheduled.is_some_and(|(_, due)| due <= now)
    }
}

/// Set to any new value (a time, say) to have a parent reconciled at once, whatever its
/// backoff or resync; counted as trigger `requested`.
pub(crate) const ANNOTATION_RECONCILE_REQUESTED: &str = "ruleop.io/reconcile-requested-at";

/// Whether `now` (a new version of a parent) asks for a reconcile: its
/// [`ANNOTATION_RECONCILE_REQUESTED`] is set and differs from `before`'s. A parent seen for the
/// first time is reconciled anyway.
pub(crate) fn reconcile_requested(before: Option<&kube::api::DynamicObject>, now: &kube::api::DynamicObject) -> bool {
    let value = |object: &kube::api::DynamicObject| {
        object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RECONCILE_REQUESTED))
            .cloned()
    };
    before.is_some_and(|before| value(now).is_some_and(|v| !v.is_empty()) && value(before) != value(now))
}

/// The pending triggers of one rule's parents, by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct Triggers(Mutex<HashMap<String, Pending>>);

/// The key of a parent.
pub(crate) fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Triggers {
    /// An event queued the parent; the first one since its last reconcile started is kept
    /// (kube-runtime runs it once for all of them).
    pub(crate) fn event(&self, key: String, trigger: Trigger) {
        if let Ok(mut pending) = self.0.lock() {
            pending
                .entry(key)
                .or_default()
                .event
                .get_or_insert((trigger, Instant::now()));
        }
    }

    /// A reconcile asked to run the parent again after `after`. Like kube-runtime's scheduler,
    /// the earlier of two requeues wins.
    pub(crate) fn schedule(&self, key: String, after: Duration, trigger: Trigger) {
        let due = Instant::now() + after;
        if let Ok(mut pending) = self.0.lock() {
            let scheduled = &mut pending.entry(key).or_default().scheduled;
            if scheduled.is_none_or(|(_, at)| due < at) {
                *scheduled = Some((trigger, due));
            }
        }
    }

    /// A reconcile of the parent starts: what triggered it (the earliest of its first event and
    /// its due requeue). Later events count for the next reconcile.
    pub(crate) fn started(&self, key: &str) -> Trigger {
        let now = Instant::now();
        let Some(pending) = self.0.lock().ok().and_then(|mut p| p.remove(key)) else {
            return Trigger::Unknown;
        };
        let due = pending.scheduled.filter(|(_, due)| *due <= now);
        match (pending.event, due) {
            (Some((event, at)), Some((requeue, due))) => {
                if due < at {
                    requeue
                } else {
                    event
                }
            }
            (Some((event, _)), None) => event,
            (None, Some((requeue, _))) => requeue,
            // Run before its requeue was due: kube-runtime saw a trigger we did not.
            (None, None) => pending.scheduled.map_or(Trigger::Unknown, |(requeue, _)| requeue),
        }
    }

    /// Forgets a parent that is gone (kube-runtime drops its queued work).
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut pending) = self.0.lock() {
            pending.remove(key);
        }
    }

    /// Parents waiting for a worker now: triggered by an event, or with a requeue that is due,
    /// and not started since.
    pub(crate) fn depth(&self) -> usize {
        let now = Instant::now();
        self.0
            .lock()
            .map_or(0, |pending| pending.values().filter(|p| p.queued(now)).count())
    }
}

/// How many reconciles of one rule kube-runtime may hold at once, running or waiting for a worker
/// (`Workers`, in `workers.rs`, which reads this): beyond it, queued parents wait in kube-runtime's scheduler instead. kube-runtime
/// polls every reconcile it holds whenever one of them wakes, so with no bound the CPU a reconcile
/// costs grew with the backlog: 7.9 CPU s per 1,000 parents converged at N = 1,000, 14.8 at 3,000
/// and 26.6 at 10,000 (`make bench`; a profile of the 3,000 run spent 55% in `JoinHandle::poll`,
/// hashing and comparing `ObjectRef`s). Up to this many queued parents are served in turn.
pub(crate) const HELD_RECONCILES: u16 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_since_the_last_start_is_the_trigger() {
        let triggers = Triggers::default();
        triggers.event(key("ns", "a"), Trigger::ChildEvent);
        triggers.event(key("ns", "a"), Trigger::ParentEvent);
        assert_eq!(triggers.depth(), 1, "one parent queued once");
        assert_eq!(triggers.started("ns/a"), Trigger::ChildEvent);
        assert_eq!(triggers.depth(), 0);
        triggers.event(key("ns", "a"), Trigger::Reload);
        assert_eq!(
            triggers.started("ns/a"),
            Trigger::Reload,
            "an event during a run is the next run's"
        );
    }

    #[test]
    fn a_requeue_counts_in_the_queue_only_once_it_is_due() {
        let triggers = Triggers::default();
        triggers.schedule(key("ns", "a"), Duration::from_secs(600), Trigger::Resync);
        triggers.schedule(key("ns", "b"), Duration::ZERO, Trigger::Retry);
        assert_eq!(triggers.depth(), 1, "only b is due");
        assert_eq!(triggers.started("ns/b"), Trigger::Retry);
        triggers.schedule(key("ns", "a"), Duration::ZERO, Trigger::Requeue);
        assert_eq!(triggers.started("ns/a"), Trigger::Requeue, "the earlier requeue wins");
        triggers.schedule(key("ns", "a"), Duration::ZERO, Trigger::Resync);
        triggers.forget("ns/a");
        assert_eq!(triggers.depth(), 0, "a deleted parent leaves the queue");
        assert_eq!(triggers.started("ns/c"), Trigger::Unknown);
    }

    #[test]
    fn a_new_value_of_the_request_annotation_asks_for_a_reconcile() {
        let with = |value: Option<&str>| {
            let mut object = kube::api::DynamicObject::new(
                "a",
                &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            );
            if let Some(value) = value {
                object.metadata.annotations =
                    Some([(ANNOTATION_RECONCILE_REQUESTED.to_owned(), value.to_owned())].into());
            }
            object
        };
        assert!(reconcile_requested(
            Some(&with(None)),
            &with(Some("2026-12-02T10:00:00Z"))
        ));
        assert!(reconcile_requested(Some(&with(Some("1"))), &with(Some("2"))));
        assert!(
            !reconcile_requested(Some(&with(Some("1"))), &with(Some("1"))),
            "the same value again"
        );
        assert!(!reconcile_requested(Some(&with(Some("1"))), &with(None)), "removed");
        assert!(
            !reconcile_requested(None, &with(Some("1"))),
            "a new parent is reconciled anyway"
        );
    }

    #[test]
    fn a_due_requeue_older_than_the_event_is_the_trigger() {
        let triggers = Triggers::default();
        triggers.schedule(key("ns", "a"), Duration::ZERO, Trigger::Resync);
        std::thread::sleep(Duration::from_millis(2));
        triggers.event(key("ns", "a"), Trigger::ChildEvent);
        assert_eq!(triggers.started("ns/a"), Trigger::Resync);
    }
}
