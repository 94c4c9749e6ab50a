//! `ruleop run --leader-elect` against the real control plane: one replica writes, a killed
//! leader is replaced within the lease duration, SIGTERM hands over at once, and backups stay
//! exactly once per (parent, generation) across every hand-over.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::fleet::{LEASE, all_backed_up, databases_yaml, jobs_per_parent_and_action};
use crate::support::metrics::percentile;
use crate::support::*;

/// The tests here read the API server's global write counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PARENTS: usize = 20;
const ROUNDS: usize = 5;
const WAIT: Duration = Duration::from_secs(90);

fn replica(rules: &std::path::Path, ns: &str) -> Operator {
    crate::support::fleet::replica(rules, ns, &["--leader-elect"])
}

/// The Cache whose change times a failover.
fn probe(megabytes: usize) -> String {
    format!(
        "apiVersion: myorg.io/v1\nkind: Cache\nmetadata:\n  name: probe\nspec:\n  version: \"7\"\n  maxMemory: {megabytes}mb\n"
    )
}

#[test]
fn only_the_leader_writes_and_a_killed_leader_is_replaced_within_the_lease_duration() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    install_crds();
    let ns = Namespace::new("leader");
    let rules = rules_dir(str::to_owned);
    let first = replica(rules.path(), &ns.0);
    wait_until(Duration::from_secs(10), "the first replica to lead", || first.leads());
    let second = replica(rules.path(), &ns.0);
    assert_eq!(
        second.gauge("ruleop_leader"),
        Some(0),
        "a standby is ready but does not lead"
    );

    let resources = [
        "services",
        "statefulsets",
        "persistentvolumeclaims",
        "jobs",
        "databases",
        "deployments",
        "caches",
    ];
    let mark = audit::AuditMark::now();
    apply_yaml(&ns.0, &databases_yaml(PARENTS, 1));
    wait_until(WAIT, "20 databases reconciled with their backups", || {
        all_backed_up(&ns.0, PARENTS)
    });
    apply_yaml(&ns.0, &probe(1));
    // The API server audits what every ruleop process sent: exactly what the leader says it sent.
    let counts = || (mark.ruleop_writes(&ns.0, &resources).len() as u64, first.writes());
    wait_until(WAIT, "the probe reconciled and every write counted", || {
        let (server, ours) = counts();
        exists(&ns.0, "deployment/probe-cache") && server == ours
    });
    println!("API server writes from ruleop: {}", counts().0);
    let (leader_writes, standby_writes) = (first.writes(), second.writes());
    println!("writes over {PARENTS} parents: leader {leader_writes}, standby {standby_writes}");
    println!(
        "memory: leader {:.1} MB, standby {:.1} MB (debug build)",
        first.rss() as f64 / 1e6,
        second.rss() as f64 / 1e6
    );
    assert!(leader_writes >= 3 * PARENTS as u64, "{leader_writes}");
    assert_eq!(standby_writes, 0, "the standby wrote");

    let mut replicas = vec![first, second];
    let mut failovers = Vec::new();
    for round in 1..=ROUNDS {
        let replicas_now = u32::try_from(round + 1).expect("small");
        apply_yaml(&ns.0, &databases_yaml(PARENTS, replicas_now));
        // Kill it somewhere in the middle of reconciling the new generation.
        std::thread::sleep(Duration::from_millis(50 * round as u64));
        let leader = replicas.iter().position(Operator::leads).expect("a leader");
        let killed = replicas.remove(leader);
        killed.kill();
        let killed_at = Instant::now();
        // The parent change it is timed on: a Cache, whose controller is not busy with the
        // Databases' new generation (that backlog is throughput, which the benchmarks measure).
        apply_yaml(&ns.0, &probe(round + 1));
        let memory = format!("{}mb", round + 1);
        wait_until(
            LEASE + Duration::from_secs(10),
            "the standby to act on a change",
            || {
                get(
                    &ns.0,
                    "deployment/probe-cache",
                    "{.spec.template.spec.containers[0].args[1]}",
                ) == memory
            },
        );
        let failover = killed_at.elapsed();
        println!("round {round}: killed the leader; the standby applied a parent change after {failover:?}");
        failovers.push(failover);
        assert!(replicas[0].leads());
        replicas.push(replica(rules.path(), &ns.0));
        wait_until(WAIT, "every database backed up at its new generation", || {
            all_backed_up(&ns.0, PARENTS)
        });
    }
    failovers.sort();
    println!(
        "failover over {ROUNDS} rounds: p50 {:?}, max {:?}",
        percentile(&failovers, 50.0).unwrap_or_default(),
        failovers[failovers.len() - 1]
    );
    for failover in &failovers {
        assert!(*failover < LEASE + Duration::from_secs(3), "{failovers:?}");
    }

    let jobs = jobs_per_parent_and_action(&ns.0);
    for i in 0..PARENTS {
        let parent = format!("db-{i}");
        let backups = jobs.get(&(parent.clone(), "backup".to_owned())).copied().unwrap_or(0);
        assert_eq!(backups, ROUNDS + 1, "{parent}: one backup Job per generation: {jobs:?}");
    }
}

#[test]
fn sigterm_hands_the_lease_over_in_under_three_seconds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    install_crds();
    let ns = Namespace::new("handover");
    let rules = rules_dir(str::to_owned);
    let first = replica(rules.path(), &ns.0);
    wait_until(Duration::from_secs(10), "the first replica to lead", || first.leads());
    let second = replica(rules.path(), &ns.0);
    assert!(!second.leads());
    let asked = Instant::now();
    assert!(first.stop(), "the leader exits cleanly on SIGTERM");
    let handover = wait_until(Duration::from_secs(10), "the standby to lead", || second.leads());
    let handover = asked.elapsed().max(handover);
    println!("SIGTERM to the standby leading: {handover:?}");
    assert!(handover < Duration::from_secs(3), "{handover:?}");
    let holder = get(&ns.0, "lease/ruleop", "{.spec.holderIdentity}");
    assert!(!holder.is_empty(), "the lease has a holder");
    assert_eq!(get(&ns.0, "lease/ruleop", "{.spec.leaseTransitions}"), "1");
}
