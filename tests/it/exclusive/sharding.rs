//! `ruleop run --shards 12` with three replicas against the real control plane: the shards
//! spread 4/4/4, every parent is reconciled by the one replica holding its shard, a killed
//! replica's shards move to the others within the lease duration, and backups stay exactly once
//! per (parent, generation) across the hand-over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::support::fleet::{
    DatabaseWatch, LEASE, all_backed_up, backed_up, databases, databases_yaml, jobs_per_parent_and_action, replica,
};
use crate::support::*;
use ruleop::ha::shard_of;

const SHARDS: u32 = 12;
const PARENTS: usize = 300;
const WAIT: Duration = Duration::from_secs(300);

fn sharded(rules: &std::path::Path, ns: &str) -> Operator {
    replica(rules, ns, &["--shards", "12"])
}

/// Each Database's shard, by name, from its UID (the same function the operator uses).
fn shards_of_parents(ns: &str) -> BTreeMap<String, u32> {
    databases(ns)
        .iter()
        .filter_map(|db| {
            let name = db["metadata"]["name"].as_str()?.to_owned();
            Some((name, shard_of(db["metadata"]["uid"].as_str()?, SHARDS)))
        })
        .collect()
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

#[test]
fn three_replicas_hold_four_of_twelve_shards_each_and_a_killed_ones_shards_move_within_the_lease_duration() {
    install_crds();
    let ns = Namespace::new("shards");
    let rules = rules_dir(str::to_owned);
    let mut replicas: Vec<Operator> = (0..3).map(|_| sharded(rules.path(), &ns.0)).collect();
    let spread = wait_until(Duration::from_secs(30), "the shards to spread 4/4/4", || {
        replicas.iter().all(|r| r.shards_held() == Some(4))
    });
    println!("shards spread 4/4/4 {spread:?} after the third replica was ready");
    let held: Vec<BTreeSet<u32>> = replicas.iter().map(|r| r.shards().into_iter().collect()).collect();
    let every: BTreeSet<u32> = held.iter().flatten().copied().collect();
    assert_eq!(
        every.len(),
        SHARDS as usize,
        "each shard held by exactly one replica: {held:?}"
    );

    let cpu_before: Vec<Duration> = replicas.iter().map(Operator::cpu).collect();
    let created = Instant::now();
    apply_yaml(&ns.0, &databases_yaml(PARENTS, 1));
    wait_until(WAIT, "300 databases reconciled with their backups", || {
        all_backed_up(&ns.0, PARENTS)
    });
    println!("{PARENTS} databases created and backed up in {:?}", created.elapsed());
    for r in &replicas {
        r.idle_reconciles("database");
    }
    let parent_shards = shards_of_parents(&ns.0);
    let mut reconciled_anywhere = BTreeSet::new();
    for (i, r) in replicas.iter().enumerate() {
        let reconciled = r.shard_reconciles();
        let shards: BTreeSet<u32> = reconciled.keys().copied().collect();
        assert!(
            shards.is_subset(&held[i]),
            "replica {i} reconciled parents of shards {shards:?} but holds {:?}",
            held[i]
        );
        reconciled_anywhere.extend(shards);
        let parents = parent_shards.values().filter(|s| held[i].contains(s)).count();
        println!(
            "replica {i}: shards {:?}, {parents} parents, {} reconciles, {} writes, CPU {:?} while reconciling, RSS {:.1} MB",
            held[i],
            reconciled.values().sum::<u64>(),
            r.writes(),
            r.cpu().saturating_sub(cpu_before[i]),
            mb(r.rss()),
        );
    }
    let with_parents: BTreeSet<u32> = parent_shards.values().copied().collect();
    assert_eq!(
        reconciled_anywhere, with_parents,
        "every shard with parents was reconciled, each by the one replica holding it"
    );

    // What sharding does not split: a new generation for every parent of replica 1's shards,
    // which only replica 1 reconciles, while all three cache every parent and child.
    let owner = 1;
    let moved_shards = held[owner].clone();
    let moved: Vec<String> = parent_shards
        .iter()
        .filter(|(_, s)| moved_shards.contains(s))
        .map(|(name, _)| name.clone())
        .collect();
    let generation = |g: u32, names: &[String]| {
        let docs: Vec<String> = names
            .iter()
            .map(|name| database(name, g, "  backup:\n    enabled: true\n"))
            .collect();
        apply_yaml(&ns.0, &docs.join("\n---\n"));
    };
    let converged_at = |g: i64, names: &[String]| {
        // Only the named ones: a poll of all 300 takes a second of this loaded machine.
        let mut args = vec!["get", "databases", "-n", &ns.0, "-o", "json"];
        args.extend(names.iter().map(String::as_str));
        let list: serde_json::Value = serde_json::from_str(&kubectl_ok(&args)).unwrap_or_default();
        let dbs = list["items"].as_array().cloned().unwrap_or_default();
        names.iter().all(|name| {
            dbs.iter()
                .find(|db| db["metadata"]["name"].as_str() == Some(name))
                .is_some_and(|db| db["metadata"]["generation"].as_i64() == Some(g) && backed_up(db))
        })
    };
    let cpu_before: Vec<Duration> = replicas.iter().map(Operator::cpu).collect();
    generation(2, &moved);
    wait_until(WAIT, "replica 1's parents backed up at generation 2", || {
        converged_at(2, &moved)
    });
    for r in &replicas {
        r.idle_reconciles("database");
    }
    for (i, r) in replicas.iter().enumerate() {
        println!(
            "{} parents of replica {owner} changed: replica {i} used {:?} CPU",
            moved.len(),
            r.cpu().saturating_sub(cpu_before[i])
        );
    }

    // SIGKILL it, then change one parent of each of its shards: each waits for its shard to move.
    let probes: Vec<String> = moved_shards
        .iter()
        .filter_map(|shard| {
            parent_shards
                .iter()
                .find(|(_, s)| *s == shard)
                .map(|(name, _)| name.clone())
        })
        .collect();
    let watch = DatabaseWatch::start(&ns.0);
    let victim = replicas.remove(owner);
    victim.kill();
    let killed = Instant::now();
    generation(3, &probes);
    let applied = killed.elapsed();
    let converged = watch.backed_up(&probes, 3, LEASE + Duration::from_secs(20));
    let failover = converged.saturating_duration_since(killed);
    let taken = wait_until(Duration::from_secs(10), "the survivors to hold 6 shards each", || {
        replicas.iter().all(|r| r.shards_held() == Some(6))
    });
    println!(
        "killed replica {owner} (shards {moved_shards:?}): a change to one parent of each of its shards (applied {applied:?} \
         after the kill) converged {failover:?} after the kill; the others held 6 shards each by {:?}",
        failover + taken
    );
    let now_held: BTreeSet<u32> = replicas.iter().flat_map(Operator::shards).collect();
    assert_eq!(now_held.len(), SHARDS as usize, "every shard is held again");
    for (i, r) in replicas.iter().enumerate() {
        println!(
            "survivor {i}: shards {:?}, {} writes in all, RSS {:.1} MB",
            r.shards(),
            r.writes(),
            mb(r.rss())
        );
    }
    assert!(
        failover < LEASE + Duration::from_secs(3),
        "the changes converged {failover:?} after the kill"
    );

    // A replacement replica: the others give up shards above the new share, 4/4/4 again.
    replicas.push(sharded(rules.path(), &ns.0));
    let rebalanced = wait_until(Duration::from_secs(30), "the shards to spread 4/4/4 again", || {
        replicas.iter().all(|r| r.shards_held() == Some(4))
    });
    println!("a replacement replica was ready: 4/4/4 again {rebalanced:?} later");

    // SIGTERM one: it releases its shards and member slot, the others take them at once.
    let leaving = replicas.remove(0);
    let asked = Instant::now();
    assert!(leaving.stop(), "a replica exits cleanly on SIGTERM");
    wait_until(Duration::from_secs(10), "the others to hold 6 shards each", || {
        replicas.iter().all(|r| r.shards_held() == Some(6))
    });
    let handover = asked.elapsed();
    println!("SIGTERM to the other replicas holding its shards: {handover:?}");
    assert!(handover < Duration::from_secs(3), "{handover:?}");

    let jobs = jobs_per_parent_and_action(&ns.0);
    for (name, shard) in &parent_shards {
        let expected = match (moved_shards.contains(shard), probes.contains(name)) {
            (true, true) => 3,
            (true, false) => 2,
            (false, _) => 1,
        };
        let backups = jobs.get(&(name.clone(), "backup".to_owned())).copied().unwrap_or(0);
        assert_eq!(backups, expected, "{name}: one backup Job per generation");
    }
}
