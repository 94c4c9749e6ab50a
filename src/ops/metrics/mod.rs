//! The operator's metrics: one typed registry, every family named and described once here,
//! exported at `/metrics` in the OpenMetrics text format (which Prometheus scrapes natively).
//!
//! Families that have a controller-runtime equivalent use its name and labels (`controller` is the
//! rule name) so dashboards and alerts written for Go operators work unchanged; the rest are
//! `ruleop_*`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleResult {
    rule: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleReason {
    rule: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionName {
    rule: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    rule: String,
    action: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    verb: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// client-go's and controller-runtime's workqueue labels (both the rule name here).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    controller: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleKind {
    rule: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleTrigger {
    rule: String,
    trigger: String,
}

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

/// Every `result` of `ruleop_rule_reloads_total`.
const RELOAD_RESULTS: &[&str] = &["ok", "invalid", "retrying"];

/// A controller that is sampled as one placeholder series, for [`exposition_of_every_family`].
struct Placeholder;

impl Sampled for Placeholder {
    fn queue_depth(&self) -> usize {
        0
    }

    fn cached_objects(&self) -> BTreeMap<String, usize> {
        BTreeMap::from([("<kind>".to_owned(), 0)])
    }
}

/// The exposition of a registry in which every family has series: one per value of a label
/// with a known set of values (`result`), a `<placeholder>` for a label whose values are names
/// (`<rule>`, `<kind>`). What `ruleop reference metrics` turns into docs/reference/metrics.md.
pub(crate) fn exposition_of_every_family() -> String {
    let mut m = Metrics::default();
    m.register_backpressure(Counter::default(), Counter::default());
    let rule = "<rule>";
    m.rule_started(rule);
    for outcome in [Outcome::Ok, Outcome::Conflict, Outcome::Error("<reason>")] {
        m.reconciled(rule, outcome, Duration::ZERO);
    }
    drop(m.reconcile_started(rule));
    m.api_write("<verb>", "<kind>");
    m.action_ran(rule, "<action>", true);
    m.action_ran(rule, "<action>", false);
    m.undecodable("<kind>");
    m.too_large("<kind>");
    m.controller_restarted(rule);
    m.circuit_opened(rule);
    m.circuit_held(rule);
    m.paused(rule);
    m.slots_skipped(rule, "<action>", 0);
    m.drift_repair_deferred("<kind>");
    m.parents_remembered(rule, 0);
    m.set_leader(false);
    m.triggered(rule, "<trigger>");
    m.set_shards(0, &std::collections::BTreeSet::new());
    let shard = ShardLabels {
        shard: "<shard>".to_owned(),
    };
    let _ = m.shard_leader.get_or_create(&shard);
    let _ = m.shard_reconciles.get_or_create(&shard);
    let controller: std::sync::Arc<dyn Sampled> = std::sync::Arc::new(Placeholder);
    m.sample(rule, std::sync::Arc::downgrade(&controller));
    let text = m.render();
    drop(controller);
    text
}

/// Counts a reconcile as running until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Marks a reconcile of `rule` as running until the returned guard drops.
    pub(crate) fn reconcile_started(&self, rule: &str) -> InFlight {
        let gauge = self.active_workers.get_or_create_owned(&ControllerLabels {
            controller: rule.to_owned(),
        });
        gauge.inc();
        InFlight(gauge)
    }

    /// Records one finished reconcile of `rule`.
    pub(crate) fn reconciled(&self, rule: &str, outcome: Outcome, elapsed: Duration) {
        let controller = ControllerLabels {
            controller: rule.to_owned(),
        };
        self.reconcile_total
            .get_or_create(&ControllerResult {
                controller: rule.to_owned(),
                result: outcome.controller_runtime().to_owned(),
            })
            .inc();
        self.reconcile_time
            .get_or_create(&controller)
            .observe(elapsed.as_secs_f64());
        self.reconciles
            .get_or_create(&RuleResult {
                rule: rule.to_owned(),
                result: outcome.ruleop().to_owned(),
            })
            .inc();
        match outcome {
            Outcome::Ok => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                self.last_success
                    .get_or_create(&RuleLabels { rule: rule.to_owned() })
                    .set(now.as_secs_f64());
            }
            Outcome::Conflict => {}
            Outcome::Error(reason) => {
                self.reconcile_errors.get_or_create(&controller).inc();
                self.reconcile_errors_by_reason
                    .get_or_create(&RuleReason {
                        rule: rule.to_owned(),
                        reason: reason.to_owned(),
                    })
                    .inc();
            }
        }
    }

    /// Counts one write request.
    pub(crate) fn api_write(&self, verb: &str, kind: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one action run.
    pub(crate) fn action_ran(&self, rule: &str, action: &str, ok: bool) {
        self.actions
            .get_or_create(&ActionLabels {
                rule: rule.to_owned(),
                action: action.to_owned(),
                result: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
    }

    /// Counts one rule set reload attempt with its result (`ok`, `invalid`, `retrying`).
    pub(crate) fn reloaded(&self, result: &'static str) {
        self.reloads
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts one watched object of `kind` that could not be decoded.
    pub(crate) fn undecodable(&self, kind: &str) {
        self.undecodable
            .get_or_create(&KindLabels { kind: kind.to_owned() })
            .inc();
    }

    /// Counts one reconcile of a paused parent of `rule`.
    pub(crate) fn paused(&self, rule: &str) {
        self.paused.get_or_create(&RuleLabels { rule: rule.to_owned() }).inc();
    }

    /// Counts the slots a scheduled action's run skipped.
    pub(crate) fn slots_skipped(&self, rule: &str, action: &str, skipped: u32) {
        self.slots_skipped
            .get_or_create(&ActionName {
                rule: rule.to_owned(),
                action: action.to_owned(),
            })
            .inc_by(u64::from(skipped));
    }

    /// Counts one restart of `rule`'s controller after it ended by itself.
    pub(crate) fn controller_restarted(&self, rule: &str) {
        self.controller_restarts
            .get_or_create(&RuleLabels { rule: rule.to_owned() })
            .inc();
    }

    /// Counts a parent of `rule` whose circuit opened.
    pub(crate) fn circuit_opened(&self, rule: &str) {
        self.circuits_opened
            .get_or_create(&RuleLabels { rule: rule.to_owned() })
            .inc();
    }

    /// Counts an event of `rule` ignored because its parent's circuit is open.
    pub(crate) fn circuit_held(&self, rule: &str) {
        self.circuit_held
            .get_or_create(&RuleLabels { rule: rule.to_owned() })
            .inc();
    }

    /// Counts a halted staged rollout of `rule`.
    pub(crate) fn rollout_halted(&self, rule: &str) {
        self.rollout_halts
            .get_or_create(&RuleLabels { rule: rule.to_owned() })
            .inc();
    }

    /// Counts one watched object of `kind` over the size cap.
    pub(crate) fn too_large(&self, kind: &str) {
        self.too_large
            .get_or_create(&KindLabels { kind: kind.to_owned() })
            .inc();
    }

    /// Counts one drift repair of a `kind` child deferred by the parent's budget.
    pub(crate) fn drift_repair_deferred(&self, kind: &str) {
        self.drift_deferred
            .get_or_create(&KindLabels { kind: kind.to_owned() })
            .inc();
    }

    /// Sets how many parents `rule` remembers.
    pub(crate) fn parents_remembered(&self, rule: &str, count: usize) {
        self.parents_remembered
            .get_or_create(&RuleLabels { rule: rule.to_owned() })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Sets whether this replica leads.
    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Counts a reconcile of `rule` started by `trigger`.
    pub(crate) fn triggered(&self, rule: &str, trigger: &str) {
        self.triggers
            .get_or_create(&RuleTrigger {
                rule: rule.to_owned(),
                trigger: trigger.to_owned(),
            })
            .inc();
    }

    /// Sets which shards this replica holds, of `shards`.
    pub(crate) fn set_shards(&self, shards: u32, held: &std::collections::BTreeSet<u32>) {
        self.shards_held.set(i64::try_from(held.len()).unwrap_or(i64::MAX));
        for shard in 0..shards {
            self.shard_leader
                .get_or_create(&ShardLabels {
                    shard: shard.to_string(),
                })
                .set(i64::from(held.contains(&shard)));
        }
    }

    /// Counts one reconcile of a parent of `shard`.
    pub(crate) fn shard_reconciled(&self, shard: u32) {
        self.shard_reconciles
            .get_or_create(&ShardLabels {
                shard: shard.to_string(),
            })
            .inc();
    }

    /// Creates `rule`'s controller series at 0 (its errors, each reconcile result), so they are
    /// scraped before its first reconcile.
    pub(crate) fn rule_started(&self, rule: &str) {
        let controller = ControllerLabels {
            controller: rule.to_owned(),
        };
        let _ = self.reconcile_errors.get_or_create(&controller);
        let _ = self
            .controller_restarts
            .get_or_create(&RuleLabels { rule: rule.to_owned() });
        let _ = self.paused.get_or_create(&RuleLabels { rule: rule.to_owned() });
        let _ = self.rollout_halts.get_or_create(&RuleLabels { rule: rule.to_owned() });
        for outcome in [Outcome::Ok, Outcome::Conflict, Outcome::Error("")] {
            let _ = self.reconcile_total.get_or_create(&ControllerResult {
                controller: rule.to_owned(),
                result: outcome.controller_runtime().to_owned(),
            });
            let _ = self.reconciles.get_or_create(&RuleResult {
                rule: rule.to_owned(),
                result: outcome.ruleop().to_owned(),
            });
        }
    }

    /// Samples `controller` (the controller of `rule`) at each scrape while it lives.
    pub(crate) fn sample(&self, rule: &str, controller: Weak<dyn Sampled>) {
        if let Ok(mut sampled) = self.sampled.lock() {
            sampled.push((rule.to_owned(), controller));
        }
    }

    /// Sets the sampled gauges: series of stopped controllers go first, so a rule restarted
    /// under the same name keeps the series its new controller sets.
    fn refresh_sampled(&self, sampled: &mut Vec<(String, Weak<dyn Sampled>)>) {
        let (live, gone): (Vec<_>, Vec<_>) = sampled
            .drain(..)
            .map(|(rule, weak)| (rule, weak.upgrade(), weak))
            .partition(|(_, strong, _)| strong.is_some());
        let queue = |rule: &str| QueueLabels {
            controller: rule.to_owned(),
            name: rule.to_owned(),
        };
        for (rule, _, _) in &gone {
            self.queue_depth.remove(&queue(rule));
        }
        // Every kind series of a rule is set again below (or dropped with its controller).
        self.cached_objects.clear();
        for (rule, strong, weak) in live {
            let Some(controller) = strong else { continue };
            self.queue_depth
                .get_or_create(&queue(&rule))
                .set(i64::try_from(controller.queue_depth()).unwrap_or(i64::MAX));
            for (kind, count) in controller.cached_objects() {
                self.cached_objects
                    .get_or_create(&RuleKind {
                        rule: rule.clone(),
                        kind,
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            sampled.push((rule, weak));
        }
    }

    /// The OpenMetrics text exposition of every family (each with `# HELP` and `# TYPE`).
    pub(crate) fn render(&self) -> String {
        // Held until encoded, so that two scrapes at once do not see each other's refresh.
        let mut sampled = self.sampled.lock();
        if let Ok(sampled) = sampled.as_mut() {
            self.refresh_sampled(sampled);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_moves_the_controller_runtime_and_ruleop_families() {
        let m = Metrics::default();
        m.reconciled("db", Outcome::Ok, Duration::from_millis(30));
        m.reconciled("db", Outcome::Ok, Duration::from_millis(30));
        m.reconciled("db", Outcome::Error("TemplateFailed"), Duration::from_secs(2));
        let text = m.render();
        for line in [
            "# TYPE controller_runtime_reconcile counter\n",
            "controller_runtime_reconcile_total{controller=\"db\",result=\"success\"} 2\n",
            "controller_runtime_reconcile_errors_total{controller=\"db\"} 1\n",
            "controller_runtime_reconcile_time_seconds_count{controller=\"db\"} 3\n",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.05\",controller=\"db\"} 2\n",
            "ruleop_reconciles_total{rule=\"db\",result=\"ok\"} 2\n",
            "ruleop_reconcile_errors_total{rule=\"db\",reason=\"TemplateFailed\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn a_fresh_scrape_has_the_reload_and_controller_series_the_alerts_name_at_zero() {
        let m = Metrics::default();
        m.rule_started("db");
        let text = m.render();
        for line in [
            "ruleop_rule_reloads_total{result=\"ok\"} 0\n",
            "ruleop_rule_reloads_total{result=\"invalid\"} 0\n",
            "ruleop_rule_reloads_total{result=\"retrying\"} 0\n",
            "controller_runtime_reconcile_errors_total{controller=\"db\"} 0\n",
            "controller_runtime_reconcile_total{controller=\"db\",result=\"error\"} 0\n",
            "ruleop_reconciles_total{rule=\"db\",result=\"error\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn the_exposition_for_the_reference_has_every_registered_family() {
        // Every `registry.register(` call of this file before its tests is one family.
        let source = include_str!("metrics.rs");
        let code = source.split("#[cfg(test)]").next().unwrap_or_default();
        let registered = code.matches("registry.register(").count();
        let text = exposition_of_every_family();
        let shown = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            shown, registered,
            "a family has no series in exposition_of_every_family:\n{text}"
        );
    }

    struct Fixed(usize);

    impl Sampled for Fixed {
        fn queue_depth(&self) -> usize {
            self.0
        }

        fn cached_objects(&self) -> BTreeMap<String, usize> {
            BTreeMap::from([("Database".to_owned(), 10), ("Service".to_owned(), 20)])
        }
    }

    #[test]
    fn a_running_controller_is_sampled_at_each_scrape_and_its_series_go_when_it_stops() {
        let m = Metrics::default();
        let old: std::sync::Arc<dyn Sampled> = std::sync::Arc::new(Fixed(3));
        m.sample("db", std::sync::Arc::downgrade(&old));
        let text = m.render();
        for line in [
            "# TYPE workqueue_depth gauge\n",
            "workqueue_depth{controller=\"db\",name=\"db\"} 3\n",
            "ruleop_cached_objects{rule=\"db\",kind=\"Service\"} 20\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        // The rule restarts (a reload that changed its kinds): the new controller's series stay.
        let new: std::sync::Arc<dyn Sampled> = std::sync::Arc::new(Fixed(1));
        m.sample("db", std::sync::Arc::downgrade(&new));
        drop(old);
        assert!(
            m.render()
                .contains("workqueue_depth{controller=\"db\",name=\"db\"} 1\n")
        );
        drop(new);
        let text = m.render();
        assert!(
            !text.contains("workqueue_depth{") && !text.contains("ruleop_cached_objects{"),
            "{text}"
        );
    }

    #[test]
    fn the_in_flight_gauge_falls_when_the_reconcile_ends() {
        let m = Metrics::default();
        let guard = m.reconcile_started("db");
        assert!(
            m.render()
                .contains("controller_runtime_active_workers{controller=\"db\"} 1\n")
        );
        drop(guard);
        assert!(
            m.render()
                .contains("controller_runtime_active_workers{controller=\"db\"} 0\n")
        );
    }
}
