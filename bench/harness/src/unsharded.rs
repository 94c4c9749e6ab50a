//! The 300 parents of tests/it/exclusive/sharding.rs with one replica and no shards, for the comparison in
//! docs/operations/sharding.md (what the three replicas there split). A measurement, not a test
//! (`make measure-unsharded`).

use std::time::{Duration, Instant};

use ruleop_testkit::fleet::{all_backed_up, databases_yaml};
use ruleop_testkit::*;

const PARENTS: usize = 300;
const WAIT: Duration = Duration::from_secs(300);

pub(crate) fn main() {
    one_replica_alone_over_the_same_parents_for_comparison();
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn one_replica_alone_over_the_same_parents_for_comparison() {
    install_crds();
    let ns = Namespace::new("unsharded");
    let rules = rules_dir(str::to_owned);
    let alone = Operator::start(rules.path(), &ruleop_testkit::templates(), &ns.0);
    let cpu_before = alone.cpu();
    let created = Instant::now();
    apply_yaml(&ns.0, &databases_yaml(PARENTS, 1));
    wait_until(WAIT, "300 databases reconciled with their backups", || {
        all_backed_up(&ns.0, PARENTS)
    });
    alone.idle_reconciles("database");
    println!(
        "one replica, {PARENTS} parents: created and backed up in {:?}, {} reconciles, {} writes, CPU {:?} while reconciling, RSS {:.1} MB",
        created.elapsed(),
        alone.reconciles("database"),
        alone.writes(),
        alone.cpu().saturating_sub(cpu_before),
        mb(alone.rss()),
    );
}
