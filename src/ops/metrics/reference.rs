//! Every family with series, for `ruleop reference metrics` (docs/reference/metrics.md).

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use super::labels::ShardLabels;
use super::{Metrics, Outcome, Sampled};

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
