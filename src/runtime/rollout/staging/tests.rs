//! Tests of a staged rollout between reconciles: its steps, halts and which parents have moved.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::records::rollouts::{decode, recorded};

fn staging(max_failures: u32, on_failure: OnFailure) -> Staging {
    let set = crate::engine::rules::load::one_rule(
        "r",
        "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  watch: {apiVersion: example.com/v1, kind: R}\n",
    );
    let rollout = crate::engine::rules::rollout_policy::ten_then_all(max_failures, on_failure);
    let staging = Staging::new(Arc::new(set), rollout, 1, 2);
    staging.publish();
    staging
}

/// [`Staging::moves`] among `uids` (each test has one list of parents, never departed).
fn moves(staging: &Staging, uid: &str, uids: &[&str]) -> bool {
    let membership = Membership {
        departures: 0,
        count: uids.len(),
    };
    staging.moves(uid, membership, || uids.iter().map(|u| (*u).to_owned()).collect())
}

#[test]
fn the_parents_are_read_once_per_state_and_membership() {
    let staging = staging(0, OnFailure::Halt);
    let uids = twenty_uids();
    let reads = std::cell::Cell::new(0);
    let read = || {
        reads.set(reads.get() + 1);
        uids.clone()
    };
    let at = |departures, count| Membership { departures, count };
    let moved: Vec<&String> = uids.iter().filter(|u| staging.moves(u, at(0, 20), read)).collect();
    assert_eq!((moved.len(), reads.get()), (2, 1), "20 parents asked, read once");

    // One leaves (a departure, one fewer): read again, and it moves no more.
    let gone = moved[0].clone();
    let fewer: Vec<String> = uids.iter().filter(|u| **u != gone).cloned().collect();
    let read_fewer = || {
        reads.set(reads.get() + 1);
        fewer.clone()
    };
    assert!(!staging.moves(&gone, at(1, 19), read_fewer));
    assert!(staging.moves(moved[1], at(1, 19), read_fewer));
    assert_eq!(reads.get(), 2);

    // The next step, once published: read again.
    let paused = Instant::now() + Duration::from_secs(61);
    assert_eq!(staging.advance(paused), Advanced::Step(1));
    assert!(staging.moves(moved[1], at(1, 19), read_fewer));
    assert_eq!(reads.get(), 2, "the step is followed once published");
    staging.publish();
    assert!(fewer.iter().all(|u| staging.moves(u, at(1, 19), read_fewer)));
    assert_eq!(reads.get(), 3);
}

fn twenty_uids() -> Vec<String> {
    (0..20).map(|i| format!("u{i}")).collect()
}

#[test]
fn a_new_rollout_moves_nobody_until_its_first_step_is_on_record() {
    let set = crate::engine::rules::load::one_rule(
        "r",
        "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  watch: {apiVersion: example.com/v1, kind: R}\n",
    );
    let rollout = crate::engine::rules::rollout_policy::ten_then_all(0, OnFailure::Halt);
    let staging = Staging::new(Arc::new(set), rollout, 1, 2);
    let uids = twenty_uids();
    let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
    assert!(uids.iter().all(|u| !moves(&staging, u, &uids)));
    assert!(staging.unpublished());
    staging.publish();
    assert!(!staging.unpublished());
    assert_eq!(uids.iter().filter(|u| moves(&staging, u, &uids)).count(), 2);
}

#[test]
fn the_baseline_is_what_a_parent_was_before_the_step_moved_it() {
    let staging = staging(0, OnFailure::Halt);
    let uids = twenty_uids();
    let all: Vec<&str> = uids.iter().map(String::as_str).collect();
    let moved: Vec<&str> = all.iter().copied().filter(|u| moves(&staging, u, &all)).collect();
    let parents: Vec<ParentNow> = uids
        .iter()
        .map(|uid| ParentNow {
            uid: uid.clone(),
            body: parent("True"),
        })
        .collect();
    staging.watch_from_now(&parents);
    // First seen here already failed (another replica moved it): a failure all the same.
    assert!(staging.observe(moved[0], "ns/a", &parent("False"), true));
}

fn parent(status: &str) -> Value {
    json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "R", "message": "m"}]}})
}

#[test]
fn more_failures_than_allowed_halt_the_rollout_and_list_the_failed_parents() {
    let staging = staging(1, OnFailure::Halt);
    for who in ["a", "b"] {
        assert!(!staging.observe(who, who, &parent("True"), true));
    }
    assert!(
        !staging.observe("a", "a", &parent("False"), true),
        "one failure is allowed"
    );
    assert!(
        !staging.observe("a", "a", &parent("False"), true),
        "a parent fails once"
    );
    assert!(staging.observe("b", "b", &parent("False"), true), "the second halts it");
    assert_eq!(staging.state().phase, Phase::Halted);
    assert!(
        staging.describe().contains("  b: Ready False: R: m"),
        "{}",
        staging.describe()
    );
    assert_eq!(staging.next_due(), None, "a halted rollout takes no further step");
}

#[test]
fn a_recorded_state_resumes_at_its_step_and_garbage_resumes_nothing() {
    let running = staging(0, OnFailure::Halt);
    running.advance(Instant::now() + Duration::from_secs(61));
    running.take(
        RolloutState {
            phase: Phase::Halted,
            ..running.state()
        },
        "paused by ruleop rollout pause".to_owned(),
    );
    let text = running.describe();
    let read = recorded(&text).expect("a state");
    assert_eq!(read.state, running.state());
    let resumed = Staging::resumed(running.previous.clone(), running.rollout.clone(), read);
    assert_eq!(resumed.describe(), text);
    for garbage in [
        "",
        "from: x",
        "phase: Complete\nfrom: 1\nto: 2\nstep: 1 of 2\nstepStartedAt: 2026-01-01T00:00:00Z",
        "from: 1\nto: 2\nstep: 0 of 2\nphase: Halted\nstepStartedAt: 2026-01-01T00:00:00Z",
        "from: 1\nto: 2\nstep: 1 of 2\nphase: Halted\nstepStartedAt: yesterday",
    ] {
        assert!(recorded(garbage).is_none(), "{garbage:?}");
    }
}

#[test]
fn a_replica_that_does_not_decide_counts_failures_and_follows_the_recorded_halt() {
    let deciding = staging(0, OnFailure::Halt);
    let following = staging(0, OnFailure::Halt);
    assert!(!deciding.observe("a", "ns/a", &parent("True"), true));
    assert!(!following.observe("a", "ns/a", &parent("True"), false));
    let evil = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "R", "message": "x\n  ns/b: forged\nphase: Complete"}]}});
    assert!(!following.observe("a", "ns/a", &evil, false), "only counted");
    assert_eq!(following.state().phase, Phase::Progressing);
    let taking_over = staging(0, OnFailure::Halt);
    assert!(!taking_over.observe("a", "ns/a", &parent("True"), false));
    assert!(!taking_over.observe("a", "ns/a", &evil, false));
    assert!(taking_over.halt_if_over(), "it decides once it takes over");
    assert!(!taking_over.halt_if_over(), "once");
    assert!(deciding.observe("a", "ns/a", &evil, true));
    let text = deciding.describe();
    let read = recorded(&text).expect("a halted rollout is under way");
    assert_eq!(read.state.phase, Phase::Halted);
    assert_eq!(read.failed.keys().collect::<Vec<_>>(), ["ns/a"], "{text}");
    assert!(following.follow(&read, Vec::new), "the halt is new to it");
    assert!(!following.follow(&read, Vec::new), "and then not");
    assert_eq!(following.describe(), text);
    assert!(following.is_between(1, 2) && !following.is_between(2, 3));
}

#[test]
fn a_followed_step_keeps_its_start_and_a_complete_record_reads_back() {
    let running = staging(0, OnFailure::Halt);
    let started = Instant::now() + Duration::from_secs(61);
    assert_eq!(running.advance(started), Advanced::Step(1));
    let follower = staging(0, OnFailure::Halt);
    assert!(follower.follow(&recorded(&running.describe()).expect("step 2"), Vec::new));
    assert_eq!(follower.state(), running.state());
    assert_eq!(follower.describe(), running.describe());
    assert_eq!(running.advance(started), Advanced::Complete);
    let complete = running.describe();
    assert!(recorded(&complete).is_none(), "not under way");
    assert_eq!(decode(&complete).map(|r| r.state.phase), Some(Phase::Complete));
}

#[test]
fn a_parent_that_was_never_ready_is_no_failure() {
    let staging = staging(0, OnFailure::Halt);
    assert!(!staging.observe("a", "a", &parent("False"), true));
    assert!(!staging.observe("a", "a", &json!({}), true));
    assert_eq!(staging.state().phase, Phase::Progressing);
}

#[test]
fn a_rollback_puts_every_parent_back() {
    let staging = staging(0, OnFailure::Rollback);
    let uids: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
    let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
    assert!(!staging.observe("x", "x", &parent("True"), true));
    assert!(staging.observe("x", "x", &parent("False"), true));
    assert_eq!(staging.state().phase, Phase::RolledBack);
    assert!(
        uids.iter().any(|u| moves(&staging, u, &uids)),
        "not before it is published"
    );
    staging.publish();
    assert!(uids.iter().all(|u| !moves(&staging, u, &uids)));
}

#[test]
fn the_next_step_begins_after_the_pause_and_the_last_completes_it() {
    let staging = staging(0, OnFailure::Halt);
    let uids: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
    let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
    let moved = |s: &Staging| uids.iter().filter(|u| moves(s, u, &uids)).count();
    assert_eq!(moved(&staging), 2);
    let started = Instant::now();
    assert_eq!(staging.advance(started), Advanced::No);
    let paused = started + Duration::from_secs(61);
    assert_eq!(staging.advance(paused), Advanced::Step(1));
    assert_eq!(moved(&staging), 2, "the step is followed once published");
    staging.publish();
    assert_eq!(moved(&staging), 20);
    assert_eq!(staging.advance(paused), Advanced::Complete);
}
