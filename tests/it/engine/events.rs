//! Events say what the reconcile they report did: one Event per reconcile that changed
//! something (three runs of an action are three Events, each naming its own guard value), a
//! Warning of its own per failure, and a failure that repeats is one Event whose series counts
//! the repeats, not a new object each time.

use std::time::Duration;

use crate::support::webhook::Webhook;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// `reason`, note and series count (empty when none) of every events.k8s.io Event about `parent`.
fn events_about(ns: &str, parent: &str) -> Vec<(String, String, String)> {
    let out = kubectl_ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-n",
        ns,
        "--field-selector",
        &format!("regarding.name={parent}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}\t{.note}\t{.series.count}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut fields = l.splitn(3, '\t').map(str::to_owned);
            let mut next = || fields.next().unwrap_or_default();
            (next(), next(), next())
        })
        .collect()
}

#[test]
fn each_reconcile_that_writes_has_one_event_saying_what_it_did() {
    install_crds();
    let ns = Namespace::new("events-runs");
    let _operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    for generation in 1..=3 {
        if generation > 1 {
            merge_patch(
                &ns.0,
                "database/orders",
                &format!(r#"{{"spec":{{"replicas":{generation}}}}}"#),
            );
        }
        let wanted = format!("ran backup for generation={generation} (key ");
        wait_until(
            WAIT,
            &format!("an Event for the run of generation {generation}"),
            || {
                events_about(&ns.0, "orders")
                    .iter()
                    .any(|(_, note, _)| note.contains(&wanted))
            },
        );
    }
    let events = events_about(&ns.0, "orders");
    assert_eq!(events.len(), 3, "one Event per reconcile that wrote: {events:#?}");
    assert!(events.iter().all(|(reason, _, _)| reason == "ActionRan"), "{events:#?}");
    let first = events
        .iter()
        .find(|(_, note, _)| note.contains("generation=1"))
        .map(|(_, note, _)| note.as_str())
        .unwrap_or_default();
    assert!(
        first.starts_with(
            "created Service orders-svc, StatefulSet orders, PersistentVolumeClaim orders-backups; ran backup for generation=1 (key "
        ),
        "{first}"
    );
    let key = get(&ns.0, "database/orders", "{.status.actions.backup.key}");
    let last = events
        .iter()
        .find(|(_, note, _)| note.contains("generation=3"))
        .map(|(_, note, _)| note.as_str())
        .unwrap_or_default();
    assert!(last.starts_with("updated StatefulSet orders; ran backup"), "{last}");
    assert!(last.contains(&key), "{last} names the run's key {key}");
    assert!(last.contains(": created Job orders-backup-"), "{last}");
}

#[test]
fn a_failure_that_repeats_is_one_warning_event_with_a_series() {
    install_crds();
    let ns = Namespace::new("events-series");
    let hook = Webhook::start(2);
    let rules = rules_with_webhook(&hook.url);
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the notify run to complete", || {
        get(&ns.0, "database/orders", "{.status.actions.notify.phase}") == "Done"
    });
    wait_until(WAIT, "the Event of the run", || {
        events_about(&ns.0, "orders")
            .iter()
            .any(|(reason, _, _)| reason == "ActionRan")
    });
    let events = events_about(&ns.0, "orders");
    let failures: Vec<_> = events
        .iter()
        .filter(|(reason, _, _)| reason == "ActionFailed")
        .collect();
    assert_eq!(failures.len(), 1, "two identical failures, one Event: {events:#?}");
    let (_, note, count) = failures[0];
    assert!(note.contains("answered 500"), "{note}");
    assert_eq!(count, "2", "the second failure is the Event's series: {events:#?}");
}

#[test]
fn a_failed_backup_job_is_one_warning_event_on_the_database_with_the_jobs_reason() {
    install_crds();
    let ns = Namespace::new("events-failed");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    let mut job = String::new();
    wait_until(WAIT, "the backup Job", || {
        job = kubectl_ok(&[
            "get",
            "jobs",
            "-n",
            &ns.0,
            "-l",
            "ruleop.io/action=backup",
            "-o",
            "name",
        ])
        .trim()
        .to_owned();
        !job.is_empty()
    });
    // No node runs it here: the Job controller's verdict is written as it would write it.
    let failed = r#"{"status": {"startTime": "2026-12-04T10:00:00Z", "failed": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-12-04T10:01:00Z"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-12-04T10:01:00Z"}]}}"#;
    merge_patch_status(&ns.0, &job, failed);
    let warnings = || {
        events_about(&ns.0, "orders")
            .into_iter()
            .filter(|(reason, _, _)| reason == "BackoffLimitExceeded")
            .collect::<Vec<_>>()
    };
    wait_until(WAIT, "a BackoffLimitExceeded Warning on the Database", || {
        !warnings().is_empty()
    });
    let (_, note, _) = &warnings()[0];
    assert!(note.starts_with("BackupSucceeded: Job orders-backup-"), "{note}");
    assert!(note.contains("backoff limit"), "{note}");
    assert_eq!(
        get(
            &ns.0,
            "database/orders",
            "{.status.conditions[?(@.type==\"BackupSucceeded\")].reason}"
        ),
        "BackoffLimitExceeded"
    );
    // Later reconciles find the condition as it was: no second Event, no series.
    for touch in 1..=2 {
        operator.reconciled_after("database", || {
            merge_patch(
                &ns.0,
                "database/orders",
                &format!(r#"{{"metadata":{{"labels":{{"touch":"{touch}"}}}}}}"#),
            );
        });
    }
    let after = warnings();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].2, "", "no series: the Warning was published once");
}
