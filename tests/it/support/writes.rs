//! What the API server served for an operator's writes: its write counters read at one moment,
//! and the writes since then that were ruleop's (tests/it/exclusive/writes.rs, benches/writes.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{DATABASE_WRITES, Operator, apiserver_write_counts, count_difference, kubectl_ok, wait_until};

/// How long the API server may take to serve the writes ruleop sent.
const WAIT: Duration = Duration::from_secs(60);

/// Events (events.k8s.io) not reported by ruleop, cluster-wide: the API server's own controllers
/// publish some (its ClusterIP repair loop about new Services), and its counter cannot tell.
fn foreign_events() -> BTreeSet<String> {
    kubectl_ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.reportingController}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .filter(|(_, controller)| *controller != "ruleop")
    .map(|(name, _)| name.to_owned())
    .collect()
}

/// The API server's write counters, ruleop's own count of the writes it sent, and the Events
/// others published, at one moment.
pub struct Reading {
    counts: BTreeMap<String, u64>,
    sent: u64,
    foreign: BTreeSet<String>,
}

pub fn reading(operator: &Operator) -> Reading {
    Reading {
        counts: apiserver_write_counts(DATABASE_WRITES),
        sent: operator.metric("ruleop_api_writes_total", &[]),
        foreign: foreign_events(),
    }
}

/// Waits until the API server has served every write the operator sent (Events go out in the
/// background, after the reconcile that caused them) and the operator is idle, then returns the
/// API server's writes since `before`, without the test's own (`ours`, one each) and without
/// Events others created meanwhile.
pub fn writes_since(operator: &Operator, before: &Reading, ours: &[&str]) -> BTreeMap<String, u64> {
    operator.idle_reconciles("database");
    let sent = operator.metric("ruleop_api_writes_total", &[]) - before.sent;
    let total = sent + ours.len() as u64;
    wait_until(WAIT, "the API server to serve every write ruleop sent", || {
        let served: u64 = count_difference(&before.counts, &apiserver_write_counts(DATABASE_WRITES))
            .values()
            .sum();
        served.saturating_sub(foreign_events().difference(&before.foreign).count() as u64) >= total
    });
    let mut writes = count_difference(&before.counts, &apiserver_write_counts(DATABASE_WRITES));
    let foreign = foreign_events().difference(&before.foreign).count();
    let theirs = std::iter::repeat_n("POST events.events.k8s.io", foreign);
    for write in ours.iter().copied().chain(theirs) {
        let left = writes.get(write).copied().unwrap_or(0).saturating_sub(1);
        if left == 0 {
            writes.remove(write);
        } else {
            writes.insert(write.to_owned(), left);
        }
    }
    writes
}
