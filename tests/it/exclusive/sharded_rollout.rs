//! One staged rollout across `--shards` replicas: the holder of shard 0 runs its clock and
//! decides its halt, the others follow the state it records, so every parent moves once, a step's
//! pause survives the death of the replica that ran it, and failures counted on different
//! replicas' parents add up to one halt.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ruleop::ha::shard_of;

use crate::engine::rollout::{
    RELOAD_FLAGS, config_maps, editions, listed, ready_count, rollout_state, shop_rule_in_steps, shop_template,
    twenty_ready_shops,
};
use crate::support::audit::AuditMark;
use crate::support::custom::CustomKind;
use crate::support::fleet::{LEASE, replica_flags};
use crate::support::mount::Mount;
use crate::support::*;

const SHARDS: u32 = 3;

/// A replica of `--shards 3` over the shop rule and templates, reloading within 100 ms.
fn shop_replica(rules: &Mount, templates: &Mount, ns: &str) -> Operator {
    let mut flags = replica_flags(ns, &["--shards", "3"]);
    flags.extend(RELOAD_FLAGS);
    Operator::start_with(rules.path(), templates.path(), ns, &flags)
}

/// Each shop ConfigMap's shard (`<shop>-cm` -> the shard of its Shop's UID).
fn shards_of_config_maps(kind: &CustomKind, ns: &str) -> BTreeMap<String, u32> {
    listed(kind, ns)
        .iter()
        .filter_map(|shop| {
            let name = shop["metadata"]["name"].as_str()?;
            Some((
                format!("{name}-cm"),
                shard_of(shop["metadata"]["uid"].as_str()?, SHARDS),
            ))
        })
        .collect()
}

/// The ConfigMaps in `ns` of `edition`, by name.
fn of_edition(ns: &str, edition: &str) -> BTreeSet<String> {
    config_maps(ns)
        .1
        .into_iter()
        .filter(|(_, e)| e == edition)
        .map(|(name, _)| name)
        .collect()
}

/// Waits until each of `replicas` holds one shard; returns the index of the one holding shard 0.
fn one_shard_each(replicas: &[&Operator]) -> usize {
    wait_until(Duration::from_secs(60), "each replica to hold one shard", || {
        replicas.iter().all(|r| r.shards().len() == 1)
    });
    replicas
        .iter()
        .position(|r| r.shards() == [0])
        .expect("a replica holds shard 0")
}

#[test]
fn three_replicas_run_one_rollout_that_survives_its_runner_and_halts_on_failures_counted_across_replicas() {
    let kind = CustomKind::new("rollout-shards", "Shop");
    kind.install();
    let ns = Namespace::new("rollout-shards");
    let pause = Duration::from_secs(20);
    // Half the parents move first; the tenth failure among them halts it (maxFailures 9).
    let rules = Mount::new(&shop_rule_in_steps(&kind, 50, pause, "    maxFailures: 9\n"));
    let mut templates = Mount::new(&shop_template(1, "yes"));
    let mut replicas: Vec<Operator> = (0..3).map(|_| shop_replica(&rules, &templates, &ns.0)).collect();
    let runner = one_shard_each(&replicas.iter().collect::<Vec<_>>());
    twenty_ready_shops(&kind, &ns.0);

    // A healthy edit: 10 of 20 move, the same 10 on every poll, until the pause ends.
    let mark = AuditMark::now();
    let edited = Instant::now();
    templates.swap(&shop_template(2, "yes"));
    wait_until(Duration::from_secs(30), "10 ConfigMaps of the new template", || {
        of_edition(&ns.0, "2").len() == 10
    });
    let moved = of_edition(&ns.0, "2");
    let shards = shards_of_config_maps(&kind, &ns.0);
    let moved_shards: BTreeSet<u32> = moved.iter().map(|cm| shards[cm]).collect();
    eprintln!("moved at the first step: {moved:?}, on shards {moved_shards:?}");
    assert!(
        moved_shards.len() > 1,
        "the moved parents are on several replicas' shards"
    );
    wait_until(pause, "a third of the pause", || {
        assert_eq!(of_edition(&ns.0, "2"), moved, "before the kill");
        edited.elapsed() >= pause / 3
    });
    // The replica that runs the rollout dies; another takes shard 0 after the lease expires.
    replicas.remove(runner).kill();
    let killed = edited.elapsed();
    let mut polls = 0;
    wait_until(pause + Duration::from_secs(30), "the first step's pause to end", || {
        let now_moved = of_edition(&ns.0, "2");
        if rollout_state(&ns.0, "shop").contains("step: 2 of 2") {
            return true;
        }
        assert_eq!(now_moved, moved, "the same 10 parents, after the kill");
        polls += 1;
        false
    });
    let step_two = edited.elapsed();
    wait_until(Duration::from_secs(60), "all 20 ConfigMaps of the new template", || {
        editions(&ns.0) == BTreeMap::from([("2".to_owned(), 20)])
    });
    wait_until(Duration::from_secs(30), "the rollout to complete", || {
        rollout_state(&ns.0, "shop").contains("phase: Complete")
    });
    let shop_cm_writes = |mark: &AuditMark| {
        mark.ruleop_writes(&ns.0, &["configmaps"])
            .into_iter()
            .filter(|w| w.object.ends_with("-cm"))
            .map(|w| w.object)
            .collect::<Vec<_>>()
    };
    wait_until(Duration::from_secs(10), "the audit log to show 20 writes", || {
        shop_cm_writes(&mark).len() >= 20
    });
    let writes = shop_cm_writes(&mark);
    let distinct: BTreeSet<&String> = writes.iter().collect();
    eprintln!(
        "edit -> runner SIGKILLed at {killed:?}; the same 10 held over {polls} polls; step 2 at {step_two:?} (pause {pause:?}, lease {LEASE:?}); {} ConfigMap writes for {} ConfigMaps",
        writes.len(),
        distinct.len()
    );
    assert!(step_two >= pause, "step 2 after the pause: {step_two:?}");
    assert!(
        step_two < pause + LEASE + Duration::from_secs(4),
        "the pause went on from the recorded start, not from the takeover: {step_two:?}"
    );
    assert_eq!(
        (writes.len(), distinct.len()),
        (20, 20),
        "each parent moved once: {writes:?}"
    );

    // A third replica again, then an edit that makes the moved parents unready: 10 fail, on the
    // shards of more than one replica, and only their sum exceeds maxFailures.
    replicas.push(shop_replica(&rules, &templates, &ns.0));
    one_shard_each(&replicas.iter().collect::<Vec<_>>());
    let (before, _) = config_maps(&ns.0);
    templates.swap(&shop_template(3, "no"));
    wait_until(Duration::from_secs(60), "the rollout to halt", || {
        rollout_state(&ns.0, "shop").contains("phase: Halted")
    });
    let failing = of_edition(&ns.0, "3");
    let failing_shards: BTreeMap<u32, usize> = failing.iter().fold(BTreeMap::new(), |mut by, cm| {
        *by.entry(shards[cm]).or_default() += 1;
        by
    });
    eprintln!("halted; the failing parents by shard: {failing_shards:?}");
    assert_eq!(failing.len(), 10, "half moved: {failing:?}");
    assert!(
        failing_shards.values().all(|n| *n <= 9),
        "no one replica saw more than maxFailures: {failing_shards:?}"
    );
    let state = rollout_state(&ns.0, "shop");
    assert_eq!(state.matches("Ready False").count(), 10, "{state}");
    // Past the pause, the 10 unmoved ConfigMaps are as they were, on every replica's shards.
    let halted = Instant::now();
    wait_until(pause + Duration::from_secs(30), "the pause to have passed", || {
        let (now, _) = config_maps(&ns.0);
        let rewritten: Vec<&String> = now
            .iter()
            .filter(|(name, version)| !failing.contains(*name) && before.get(*name) != Some(*version))
            .map(|(name, _)| name)
            .collect();
        assert!(rewritten.is_empty(), "unmoved ConfigMaps written: {rewritten:?}");
        halted.elapsed() > pause + Duration::from_secs(2)
    });
    assert_eq!(ready_count(&kind, &ns.0), 10, "the 10 unmoved Shops stay Ready");
    let halts: u64 = replicas
        .iter()
        .map(|r| r.metric("ruleop_rollout_halts_total", &[("rule", "shop")]))
        .sum();
    assert_eq!(halts, 1, "one replica decided the halt");
    let events = events(&ns.0, "reason=RolloutHalted", "{.items[*].metadata.name}");
    assert_eq!(events.split_whitespace().count(), 1, "one RolloutHalted Event");
    kind.uninstall();
}
