//! One kube-runtime Controller per rule: watch the parent kind, own the child kinds, and
//! reconcile each parent from the caches (never from an event payload): plan, then apply.
//! `streams` wires the watches into the Controller, `reconcile` runs one parent, `policy`
//! decides when a parent runs again; what they share is here.

mod circuit;
pub(crate) mod housekeeping;
mod policy;
mod reconcile;
mod resync;
mod streams;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::FutureExt;
use futures::channel::{mpsc, oneshot};
use kube::api::DynamicObject;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::apply::deliveries::Deliveries;
use crate::apply::drift_limit::DriftLimiter;
use crate::apply::{ApplyError, WrittenParents, events};
use crate::cache::children::ChildIndex;
use crate::cache::discovery::{Kinds, ServedKind};
use crate::cache::lookups::RuleLookups;
use crate::cache::parents::ParentIndex;
use crate::engine::plan::PlanError;
use crate::engine::rules::RuleSet;
use crate::ops::Observability;
use crate::ops::metrics::Sampled;
use crate::runtime::queue::{self, Triggers};
use crate::runtime::rollout::staging::ParentNow;
use crate::runtime::workers::Workers;

pub(crate) use circuit::{Failures, Threshold};
use housekeeping::FailureCounts;

/// State shared by every controller of the process.
pub(crate) struct Shared {
    /// The API client.
    pub client: Client,
    /// The current rule set and the kinds it resolved to; swapped whole on reload.
    pub current: RwLock<(Arc<RuleSet>, Arc<Kinds>)>,
    /// Counters and readiness.
    pub observability: Arc<Observability>,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Resync period for rules without `resync`.
    pub default_resync: Duration,
    /// Restricts every watch to one namespace.
    pub namespace: Option<String>,
    /// Where each parent's writes go, and which parents are this replica's (`--shards`).
    pub writers: Arc<crate::ha::shard::Writers>,
    /// How every watch lists first (`--initial-list`).
    pub initial_list: crate::cache::watch::InitialList,
    /// Watched objects whose JSON text is longer are not cached (`--max-object-size`).
    pub max_object_bytes: usize,
    /// Addresses `http` actions never reach through a name: `--egress-deny-cidr` and the API
    /// server's own addresses.
    pub egress_deny: Vec<ipnet::IpNet>,
    /// The staged rollouts under way (`spec.rollout`).
    pub rollouts: crate::runtime::rollout::staging::Rollouts,
    /// Failed reconciles in a row that open a parent's circuit (`--circuit-failures`).
    pub circuit: Threshold,
    /// The kept revisions parents may be pinned to, and the pinned ones' rule sets.
    pub pins: crate::runtime::pins::Pins,
}

impl Shared {
    /// The rule set and kinds a reconcile uses from start to end.
    pub(crate) fn snapshot(&self) -> (Arc<RuleSet>, Arc<Kinds>) {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    /// No plan could be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A write failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The child or lookup caches have not listed yet (a watch failing, see `/readyz`).
    #[error("the caches of this rule have not synced within {0:?}; retrying")]
    NotSynced(Duration),
    /// The parent's `ruleop.io/revision` pin cannot be followed (reported on the parent).
    #[error("{message}")]
    Pin {
        /// `InvalidRevisionPin`, `RevisionNotKept` or `RevisionNotServable`.
        reason: &'static str,
        /// What is wrong and what to write instead.
        message: String,
    },
}

impl ReconcileError {
    fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Plan(e) => e.reason(),
            ReconcileError::Apply(e) => e.reason(),
            ReconcileError::NotSynced(_) => "CachesNotSynced",
            ReconcileError::Pin { reason, .. } => reason,
        }
    }
}

/// What one rule's reconciles share.
struct RuleContext {
    shared: Arc<Shared>,
    rule_name: String,
    parent_kind: ServedKind,
    children: Vec<(kube::discovery::ApiResource, Arc<ChildIndex>)>,
    /// Failed reconciles in a row per parent (the backoff exponent).
    failures: Arc<FailureCounts>,
    /// Parents as our own status writes left them, until the cache catches up.
    written: Arc<WrittenParents>,
    /// Drift-repair budgets per parent.
    drift: Arc<DriftLimiter>,
    /// Events published recently, so a repeat becomes a series.
    events: Arc<events::EventLog>,
    /// The rule's `http` requests in flight.
    deliveries: Arc<Deliveries>,
    /// Caches of looked-up kinds and who read what.
    lookups: RuleLookups,
    /// Becomes true once every child cache has listed. A watch channel, because kube-runtime's
    /// `Store::wait_until_ready` wakes only the last of several concurrent waiters.
    children_synced: tokio::sync::watch::Receiver<bool>,
    /// The parent cache (metadata).
    parents: Store<DynamicObject>,
    /// The parents as JSON text.
    bodies: Arc<ParentIndex>,
    /// What queued each parent (the span's `trigger`, the queue depth).
    triggers: Arc<Triggers>,
    /// The rule's workers (`maxConcurrentReconciles`), handed out round-robin by namespace.
    workers: Arc<Workers>,
}

impl RuleContext {
    /// The reason and message a parent's failure is reported with: `CircuitOpen` once it is
    /// the failure that opens the parent's circuit ([`Threshold::report`]).
    fn failure_report(&self, uid: &str, reason: &'static str, message: &str) -> (&'static str, String) {
        let before = self
            .failures
            .lock()
            .ok()
            .and_then(|f| f.get(uid).map(|f| f.count))
            .unwrap_or(0);
        self.shared.circuit.report(before, reason, message)
    }
}

impl Sampled for RuleContext {
    fn queue_depth(&self) -> usize {
        // Queued and not started, or started and waiting for a worker.
        self.triggers.depth() + self.workers.waiting()
    }

    fn cached_objects(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        let children = self.children.iter().map(|(r, index)| (r.kind.as_str(), index.len()));
        let parents = std::iter::once((self.parent_kind.resource.kind.as_str(), self.parents.len()));
        for (kind, count) in parents.chain(children).chain(self.lookups.cached_objects()) {
            *counts.entry(kind.to_owned()).or_default() += count;
        }
        counts
    }
}

/// The trigger key of a parent.
fn parent_key(parent: &DynamicObject) -> String {
    queue::key(&parent.namespace().unwrap_or_default(), &parent.name_any())
}

/// A running controller and the handles to steer it.
pub(crate) struct RunningController {
    /// `(apiVersion, kind)` watched.
    pub watched: (String, String),
    /// Kinds owned (watched for changes to children).
    pub owned: Vec<(String, String)>,
    /// Kinds looked up (a cache each).
    pub looked_up: Vec<(String, String)>,
    /// The rule digest it was started or last re-triggered with.
    pub digest: String,
    reconcile_all: mpsc::UnboundedSender<()>,
    workers: Arc<Workers>,
    /// The cache of the watched parents (ready once their first list is in).
    parents: Store<DynamicObject>,
    /// Their bodies, and the resource they are of.
    bodies: (Arc<ParentIndex>, kube::discovery::ApiResource),
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningController {
    /// Re-reconciles every parent (the rule changed).
    pub(crate) fn reconcile_all(&self) {
        let _ = self.reconcile_all.unbounded_send(());
    }

    /// Every cached parent with its body, for a staged rollout's baseline.
    pub(crate) fn parents_now(&self) -> Vec<ParentNow> {
        let (bodies, resource) = &self.bodies;
        self.parents
            .state()
            .iter()
            .filter_map(|parent| {
                let namespace = parent.namespace().unwrap_or_default();
                Some(ParentNow {
                    uid: parent.metadata.uid.clone()?,
                    body: bodies.get(&namespace, &parent.name_any(), resource)?,
                })
            })
            .collect()
    }

    /// The task that runs it, to learn when it ends by itself.
    pub(crate) fn task(&mut self) -> &mut tokio::task::JoinHandle<()> {
        &mut self.task
    }

    /// Stops watching; in-flight reconciles finish first (those still waiting for a worker are
    /// dropped). What has not finished by `deadline` is aborted, so a stop always ends.
    pub(crate) async fn stop_by(mut self, deadline: tokio::time::Instant) {
        self.workers.close();
        let _ = self.stop.send(());
        // kube-runtime starts no reconcile before the parents' first list is in the store, and
        // the stop ends that list: until then nothing runs that could finish, and the controller
        // would wait for the list until the deadline (a SIGTERM in the first second took 7.5 s).
        let listed = self
            .parents
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|r| r.is_ok());
        if !listed {
            self.task.abort();
            info!(watch = %format!("{} {}", self.watched.0, self.watched.1), "stopped before its parents were listed");
            return;
        }
        if tokio::time::timeout_at(deadline, &mut self.task).await.is_err() {
            self.task.abort();
            warn!(watch = %format!("{} {}", self.watched.0, self.watched.1), "the controller did not stop in time; aborted");
        }
    }
}

pub(crate) use streams::start;
