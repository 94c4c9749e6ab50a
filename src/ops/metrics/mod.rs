//! The operator's metrics: one typed registry, every family named and described once here,
//! exported at `/metrics` in the OpenMetrics text format (which Prometheus scrapes natively).
//!
//! Families that have a controller-runtime equivalent use its name and labels (`controller` is the
//! rule name) so dashboards and alerts written for Go operators work unchanged; the rest are
//! `ruleop_*`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, Weak};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::render`].
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Reconcile duration buckets, in seconds (a subset of controller-runtime's).
const RECONCILE_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0,
];

/// Every `result` of `ruleop_rule_reloads_total`.
const RELOAD_RESULTS: &[&str] = &["ok", "invalid", "retrying"];

mod labels;
mod record;
mod reference;

use labels::{
    ActionLabels, ActionName, ControllerLabels, ControllerResult, KindLabels, QueueLabels, ResultLabels, RuleKind,
    RuleLabels, RuleReason, RuleResult, RuleTrigger, ShardLabels, WriteLabels,
};
pub(crate) use reference::exposition_of_every_family;

/// A running controller's figures, read at each scrape.
pub(crate) trait Sampled: Send + Sync {
    /// Parents waiting for a worker.
    fn queue_depth(&self) -> usize;
    /// Objects in the controller's caches, per kind (parents, children, looked-up objects).
    fn cached_objects(&self) -> BTreeMap<String, usize>;
}

/// How one reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The parent converged (or has nothing to do).
    Ok,
    /// An optimistic-concurrency conflict (a stale cache): retried soon, not a failure.
    Conflict,
    /// A failure with its CamelCase reason; retried with backoff.
    Error(&'static str),
}

impl Outcome {
    /// ruleop's own `result` label.
    fn ruleop(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Conflict => "conflict",
            Outcome::Error(_) => "error",
        }
    }

    /// controller-runtime's `result` label.
    fn controller_runtime(self) -> &'static str {
        match self {
            Outcome::Ok => "success",
            Outcome::Conflict => "requeue",
            Outcome::Error(_) => "error",
        }
    }
}

/// Every metric the operator exports.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    reconcile_total: Family<ControllerResult, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    reconciles: Family<RuleResult, Counter>,
    reconcile_errors_by_reason: Family<RuleReason, Counter>,
    last_success: Family<RuleLabels, Gauge<f64, AtomicU64>>,
    api_writes: Family<WriteLabels, Counter>,
    actions: Family<ActionLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    undecodable: Family<KindLabels, Counter>,
    too_large: Family<KindLabels, Counter>,
    controller_restarts: Family<RuleLabels, Counter>,
    circuits_opened: Family<RuleLabels, Counter>,
    circuit_held: Family<RuleLabels, Counter>,
    rollout_halts: Family<RuleLabels, Counter>,
    paused: Family<RuleLabels, Counter>,
    slots_skipped: Family<ActionName, Counter>,
    drift_deferred: Family<KindLabels, Counter>,
    parents_remembered: Family<RuleLabels, Gauge>,
    leader: Gauge,
    queue_depth: Family<QueueLabels, Gauge>,
    cached_objects: Family<RuleKind, Gauge>,
    triggers: Family<RuleTrigger, Counter>,
    /// The running controllers by rule, sampled at each scrape; a controller that stopped
    /// (dropped) takes its series with it.
    sampled: Mutex<Vec<(String, Weak<dyn Sampled>)>>,
    shards_held: Gauge,
    shard_leader: Family<ShardLabels, Gauge>,
    shard_reconciles: Family<ShardLabels, Counter>,
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        // Counter names are registered without `_total`: the encoder appends it to the samples.
        let reconcile_total = Family::default();
        registry.register(
            "controller_runtime_reconcile",
            "Reconciles per rule (controller) and result: success, error or requeue (a write conflict)",
            reconcile_total.clone(),
        );
        let reconcile_errors = Family::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Failed reconciles per rule (controller); see ruleop_reconcile_errors_total for the reason",
            reconcile_errors.clone(),
        );
        let reconcile_time = Family::new_with_constructor(reconcile_histogram as fn() -> Histogram);
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Time one reconcile of a parent took, per rule (controller)",
            reconcile_time.clone(),
        );
        let active_workers = Family::default();
        registry.register(
            "controller_runtime_active_workers",
            "Reconciles running now per rule (controller); near maxConcurrentReconciles means a backlog",
            active_workers.clone(),
        );
        let reconciles = Family::default();
        registry.register(
            "ruleop_reconciles",
            "Reconciles per rule and result: ok, conflict (retried at once) or error (retried with backoff)",
            reconciles.clone(),
        );
        let reconcile_errors_by_reason = Family::default();
        registry.register(
            "ruleop_reconcile_errors",
            "Failed reconciles per rule and reason (the Ready condition's reason)",
            reconcile_errors_by_reason.clone(),
        );
        let last_success = Family::default();
        registry.register(
            "ruleop_last_successful_reconcile_timestamp_seconds",
            "Unix time of the last successful reconcile per rule",
            last_success.clone(),
        );
        let api_writes = Family::default();
        registry.register(
            "ruleop_api_writes",
            "Write requests sent to the API server per verb and kind",
            api_writes.clone(),
        );
        let actions = Family::default();
        registry.register(
            "ruleop_actions",
            "Action runs per rule, action and result (ok or error)",
            actions.clone(),
        );
        let reloads = Family::default();
        registry.register(
            "ruleop_rule_reloads",
            "Rule set reloads per result: ok, invalid (rejected; the last good rules keep running) or retrying",
            reloads.clone(),
        );
        let undecodable = Family::default();
        registry.register(
            "ruleop_undecodable_objects",
            "Watched objects that could not be decoded (skipped), per kind",
            undecodable.clone(),
        );
        let too_large = Family::default();
        registry.register(
            "ruleop_objects_too_large",
            "Watched objects over --max-object-size (skipped: not cached, not reconciled), per kind",
            too_large.clone(),
        );
        let controller_restarts = Family::default();
        registry.register(
            "ruleop_controller_restarts",
            "Times a rule's controller ended by itself (a panic in a reconcile) and was started again, per rule",
            controller_restarts.clone(),
        );
        let circuits_opened = Family::default();
        registry.register(
            "ruleop_circuits_opened",
            "Parents whose circuit opened after --circuit-failures failed reconciles in a row (Ready=False, CircuitOpen), per rule",
            circuits_opened.clone(),
        );
        let circuit_held = Family::default();
        registry.register(
            "ruleop_circuit_held_events",
            "Events ignored because their parent's circuit was open (it runs only at its retry, every 5 minutes), per rule",
            circuit_held.clone(),
        );
        let rollout_halts = Family::default();
        registry.register(
            "ruleop_rollout_halts",
            "Staged rollouts halted because more moved parents than spec.rollout.maxFailures stopped being ready, per rule",
            rollout_halts.clone(),
        );
        let paused = Family::default();
        registry.register(
            "ruleop_paused_reconciles",
            "Reconciles of parents paused by the ruleop.io/paused annotation (nothing written but the Paused condition), per rule",
            paused.clone(),
        );
        let slots_skipped = Family::default();
        registry.register(
            "ruleop_action_slots_skipped",
            "Slots of a scheduled action skipped because they were older than its startingDeadline (only the latest slot runs), per rule and action",
            slots_skipped.clone(),
        );
        let drift_deferred = Family::default();
        registry.register(
            "ruleop_drift_repairs_deferred",
            "Drift repairs deferred because the parent's repair budget is spent (a fight with another writer), per child kind",
            drift_deferred.clone(),
        );
        let parents_remembered = Family::default();
        registry.register(
            "ruleop_parents_remembered",
            "Parents with per-parent memory (failure counts, written hashes, drift budgets) per rule",
            parents_remembered.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "ruleop_leader",
            "1 while this replica holds the leader lease (or runs without leader election), else 0",
            leader.clone(),
        );
        let queue_depth = Family::default();
        registry.register(
            "workqueue_depth",
            "Parents waiting for a worker per rule (controller and name): queued by an event, or with a requeue that is due",
            queue_depth.clone(),
        );
        let cached_objects = Family::default();
        registry.register(
            "ruleop_cached_objects",
            "Watched objects cached per rule and kind (parents, children, looked-up objects)",
            cached_objects.clone(),
        );
        let triggers = Family::default();
        registry.register(
            "ruleop_reconcile_triggers",
            "Reconciles started per rule and trigger: parent_event, requested, child_event, lookup_event, reload, delivered, shard_taken, resync, retry, requeue (or unknown)",
            triggers.clone(),
        );
        let shards_held = Gauge::default();
        registry.register(
            "ruleop_shards_held",
            "Shards whose lease this replica holds (with --shards; the sum over replicas should be the shard count)",
            shards_held.clone(),
        );
        let shard_leader = Family::default();
        registry.register(
            "ruleop_shard_leader",
            "1 while this replica holds the shard's lease, else 0 (with --shards)",
            shard_leader.clone(),
        );
        let shard_reconciles = Family::default();
        registry.register(
            "ruleop_shard_reconciles",
            "Reconciles this replica ran per shard of the parent (with --shards)",
            shard_reconciles.clone(),
        );
        let metrics = Metrics {
            queue_depth,
            cached_objects,
            triggers,
            sampled: Mutex::default(),
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            reconciles,
            reconcile_errors_by_reason,
            last_success,
            api_writes,
            actions,
            reloads,
            undecodable,
            too_large,
            controller_restarts,
            circuits_opened,
            circuit_held,
            rollout_halts,
            paused,
            slots_skipped,
            drift_deferred,
            parents_remembered,
            leader,
            shards_held,
            shard_leader,
            shard_reconciles,
        };
        // Known label sets exist from start-up at 0, as controller-runtime does, so that a
        // fresh scrape has what the shipped alerts and dashboard name.
        for result in RELOAD_RESULTS {
            let _ = metrics.reloads.get_or_create(&ResultLabels {
                result: (*result).to_owned(),
            });
        }
        metrics
    }
}

impl Metrics {
    /// Registers the API client's backpressure counters (made with the client, before these
    /// metrics): 429 answers and client-side waits.
    pub(crate) fn register_backpressure(&mut self, rejected: Counter, waited: Counter) {
        self.registry.register(
            "ruleop_api_rejected",
            "429 answers from the API server (Priority and Fairness, max-requests-inflight); each is retried after its Retry-After, up to 8 times",
            rejected,
        );
        self.registry.register(
            "ruleop_api_client_throttled",
            "Requests that waited for the client-side limit (--kube-qps, --kube-burst)",
            waited,
        );
    }
}

#[cfg(test)]
mod tests;
