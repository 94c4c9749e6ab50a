//! What the layers record: one method a fact (a reconcile, a write, an action, a reload, ...).

use std::sync::Weak;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use super::labels::{
    ActionLabels, ActionName, ControllerLabels, ControllerResult, KindLabels, QueueLabels, ResultLabels, RuleKind,
    RuleLabels, RuleReason, RuleResult, RuleTrigger, ShardLabels, WriteLabels,
};
use super::{Metrics, Outcome, Sampled};

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
