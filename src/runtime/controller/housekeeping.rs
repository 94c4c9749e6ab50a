//! What a controller remembers per parent (failure counts for backoff, our own last status
//! writes, drift-repair budgets) is forgotten when the parent goes: on its delete event, and on
//! a relist for parents deleted while the watch was down (no delete event ever comes for them).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use crate::apply::WrittenParents;
use crate::apply::drift_limit::DriftLimiter;
use crate::ops::Observability;

/// Failed reconciles in a row, and the next try, by parent UID (the backoff exponent and the
/// circuit breaker).
pub(crate) type FailureCounts = Mutex<HashMap<String, super::circuit::Failures>>;

/// The per-parent maps of one rule's controller.
#[derive(Debug, Default, Clone)]
pub(crate) struct ParentMemory {
    /// Failed reconciles in a row.
    pub failures: Arc<FailureCounts>,
    /// Our own last status writes.
    pub written: Arc<WrittenParents>,
    /// Drift-repair budgets.
    pub drift: Arc<DriftLimiter>,
}

impl ParentMemory {
    /// Forgets one parent.
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(uid);
        }
        self.written.forget(uid);
        self.drift.forget(uid);
    }

    /// Keeps only the parents in `live`.
    pub(crate) fn retain(&self, live: &HashSet<String>) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.retain(|uid, _| live.contains(uid));
        }
        self.written.retain(live);
        self.drift.retain(live);
    }

    /// Parents remembered in any map.
    pub(crate) fn len(&self) -> usize {
        self.failures.lock().map_or(0, |f| f.len()) + self.written.len() + self.drift.len()
    }

    /// Publishes [`ParentMemory::len`] as `ruleop_parents_remembered{rule}`.
    pub(crate) fn publish(&self, observability: &Observability, rule: &str) {
        observability.metrics.parents_remembered(rule, self.len());
    }
}

/// Follows a parent watch stream and forgets parents that are gone.
pub(crate) struct Housekeeping {
    memory: ParentMemory,
    observability: Arc<Observability>,
    rule: String,
    relist: Option<HashSet<String>>,
}

impl Housekeeping {
    /// Housekeeping of `memory` for rule `rule`.
    pub(crate) fn new(memory: ParentMemory, observability: Arc<Observability>, rule: String) -> Self {
        Housekeeping {
            memory,
            observability,
            rule,
            relist: None,
        }
    }

    /// Observes one event of the parent watch.
    pub(crate) fn observe(&mut self, event: &Event<DynamicObject>) {
        match event {
            Event::Delete(parent) => {
                self.memory.forget(&parent.uid().unwrap_or_default());
            }
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitApply(parent) => {
                if let Some(live) = self.relist.as_mut() {
                    live.insert(parent.uid().unwrap_or_default());
                }
            }
            Event::InitDone => {
                if let Some(live) = self.relist.take() {
                    self.memory.retain(&live);
                }
            }
            Event::Apply(parent) => {
                self.memory
                    .written
                    .caught_up(&parent.uid().unwrap_or_default(), parent.resource_version().as_deref());
                self.memory.drift.forget_settled(Instant::now());
            }
        }
        self.memory.publish(&self.observability, &self.rule);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parent(uid: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "myorg.io/v1", "kind": "Database",
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
        }))
        .expect("parent")
    }

    fn remember(memory: &ParentMemory, uid: &str) {
        let failures = crate::runtime::controller::Failures {
            count: 3,
            retry_at: Instant::now(),
            generation: 1,
        };
        memory.failures.lock().expect("lock").insert(uid.to_owned(), failures);
        memory.drift.decide(uid, Instant::now());
    }

    #[test]
    fn a_deleted_parent_and_parents_missing_from_a_relist_are_forgotten() {
        let memory = ParentMemory::default();
        let observability = Arc::new(Observability::default());
        let mut housekeeping = Housekeeping::new(memory.clone(), observability.clone(), "db".to_owned());
        for uid in ["a", "b", "c"] {
            remember(&memory, uid);
        }
        assert_eq!(memory.len(), 6);
        housekeeping.observe(&Event::Delete(parent("a")));
        assert_eq!(memory.len(), 4);
        assert!(
            observability
                .metrics
                .render()
                .contains("ruleop_parents_remembered{rule=\"db\"} 4\n")
        );

        housekeeping.observe(&Event::Init);
        housekeeping.observe(&Event::InitApply(parent("c")));
        housekeeping.observe(&Event::InitDone);
        assert_eq!(memory.len(), 2, "b was deleted while the watch was down");
        assert!(memory.failures.lock().expect("lock").contains_key("c"));
    }
}
