//! Tests of the action decisions: guards, records, schedules and what each run creates or sends.

use super::*;

fn decision(id: &str, run: bool, effect: Option<Effect>) -> ActionDecision {
    ActionDecision {
        id: id.to_owned(),
        run,
        reason: String::new(),
        guard_value: Some("generation=2".to_owned()),
        key: Some("0123456789abcdef".to_owned()),
        effect,
        retry_in_ms: None,
        skipped_slots: 0,
    }
}

#[test]
fn a_create_run_decided_now_shows_as_done_with_its_object_for_status() {
    let parent = json!({"status": {"actions": {"backup": {
        "key": "fedcba9876543210", "guardValue": "generation=1", "phase": "Done", "runs": 1,
        "startedAt": "2026-12-01T00:00:00Z",
    }}}});
    let before = json!({"backup": {"key": "fedcba9876543210", "object": null}, "notify": null});
    let job = json!({"kind": "Job", "metadata": {"name": "orders-backup-01234567"}});
    let decisions = [
        decision("backup", true, Some(Effect::Create(job))),
        decision("notify", false, None),
    ];
    let after = after_runs(&before, &decisions, &parent, "2026-12-05T00:00:00Z").expect("a run");
    assert_eq!(
        after["backup"],
        json!({
            "key": "0123456789abcdef", "guardValue": "generation=2", "phase": "Done", "runs": 2,
            "startedAt": "2026-12-05T00:00:00Z",
            "object": {"kind": "Job", "status": {}, "metadata": {
                "name": "orders-backup-01234567", "creationTimestamp": "2026-12-05T00:00:00Z",
            }},
        })
    );
    assert_eq!(after["notify"], Value::Null, "an action that does not run is as it was");
    assert_eq!(
        after_runs(&before, &decisions[1..], &parent, "2026-12-05T00:00:00Z"),
        None,
        "nothing runs: the context stays"
    );
}

#[test]
fn a_run_count_at_its_maximum_in_status_stays_there_instead_of_overflowing() {
    let parent = json!({"status": {"actions": {"backup": {
        "key": "0123456789abcdef", "guardValue": "generation=2", "phase": "Done", "runs": u64::MAX,
    }}}});
    let start = RunStart::of(&parent, "backup", "fedcba9876543210", "2026-12-05T00:00:00Z");
    assert_eq!(start.runs, u64::MAX);
    assert!(start.record.is_none(), "another key: a new run");
}

#[test]
fn retry_delay_doubles_and_is_capped() {
    assert_eq!(retry_delay(1), Duration::from_secs(1));
    assert_eq!(retry_delay(3), Duration::from_secs(4));
    assert_eq!(retry_delay(40), MAX_RETRY_DELAY);
}

#[test]
fn a_failed_run_waits_out_its_backoff() {
    let record = RunRecord {
        attempts: 2,
        failed_at: Some("2026-11-29T10:00:00Z".into()),
        ..RunRecord::default()
    };
    assert_eq!(
        backoff_left(&record, "2026-11-29T10:00:00Z"),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        backoff_left(&record, "2026-11-29T10:00:01Z"),
        Some(Duration::from_secs(1))
    );
    assert_eq!(backoff_left(&record, "2026-11-29T10:00:02Z"), None);
}

#[test]
fn keys_are_stable_and_names_fit_a_label() {
    assert_eq!(
        idempotency_key("uid", "backup", "generation=1"),
        idempotency_key("uid", "backup", "generation=1")
    );
    assert_ne!(
        idempotency_key("uid", "backup", "generation=1"),
        idempotency_key("uid", "backup", "generation=2")
    );
    let name = object_name(&"x".repeat(80), "backup", "0123456789abcdef");
    assert!(name.len() <= 63 && name.ends_with("-backup-0123456789"), "{name}");
}

#[test]
fn a_key_ruleop_did_not_write_is_no_record_and_never_panics() {
    let name = object_name("orders", "backup", "ééééééééééé");
    assert_eq!(name, "orders-backup-éééééééééé");
    for key in [
        "ééééééééééé",
        "0123456789ABCDEF",
        "0123456789abcde",
        "k1",
        "0123456789abcdef0",
    ] {
        let parent = json!({"status": {"actions": {"backup": {"key": key, "phase": "Pending", "guardValue": "x"}}}});
        assert_eq!(RunRecord::read(&parent, "backup"), None, "{key:?}");
    }
    let parent = json!({"status": {"actions": {"backup": {"key": "0123456789abcdef", "phase": "Done"}}}});
    assert_eq!(
        RunRecord::read(&parent, "backup").map(|r| r.key),
        Some("0123456789abcdef".to_owned())
    );
    let keyless = json!({"status": {"actions": {"backup": {"phase": "Done", "runs": 2}}}});
    assert_eq!(RunRecord::read(&keyless, "backup").map(|r| r.runs), Some(2));
    assert!(is_key(&idempotency_key("uid", "backup", "generation=1")));
}
