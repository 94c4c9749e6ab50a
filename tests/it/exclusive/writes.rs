//! What one Database costs the API server: its writes verb by verb, counted by the API server
//! itself, while it converges and when its spec changes. Alone in its test binary so the API
//! server's write counters see only this test's operator.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::writes::{reading, writes_since};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// Whether a Database's status names the Job of its latest backup run as its latest backup.
fn reports_its_job(namespace: &str, name: &str) -> bool {
    let what = format!("database/{name}");
    let key = get(namespace, &what, "{.status.actions.backup.key}");
    let job = get(namespace, &what, "{.status.lastBackupJob}");
    key.len() >= 10 && job.ends_with(&key[..10]) && get(namespace, &what, "{.status.lastBackupResult}") == "Running"
}

/// Waits until the operator has been idle for longer than the follow-up reconcile a run asks
/// for comes after it (a second), so that a write that reconcile made is counted too.
fn settled_after_a_run(operator: &Operator) {
    operator.idle_for("database", Duration::from_millis(1500));
}

fn expected(writes: &[(&str, u64)]) -> BTreeMap<String, u64> {
    writes.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

#[test]
fn a_database_with_backups_converges_in_seven_writes_a_spec_change_costs_four_and_one_without_backups_four() {
    install_crds();
    let ns = Namespace::new("writes");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    let before = reading(&operator);
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    wait_until(WAIT, "convergence", || {
        get(
            &ns.0,
            "database/orders",
            "{.status.observedGeneration}/{.status.actions.backup.phase}",
        ) == "1/Done"
            && exists(&ns.0, "service/orders-svc")
            && exists(&ns.0, "statefulset/orders")
            && reports_its_job(&ns.0, "orders")
    });
    settled_after_a_run(&operator);
    let converged = writes_since(&operator, &before, &["POST databases.myorg.io"]);
    eprintln!("one Database converging: {converged:?}");
    // The floor's four (two applies, the Job, one status write), the backups volume, the
    // finalizer the final backup needs before the parent can be deleted, and one Event saying
    // what was done. The one status write already names the Job the run created
    // (lastBackupJob, lastBackupResult: Running), so the watch showing the Job, and the
    // reconcile a second after the run, write nothing (this control plane runs no Job
    // controller, so it stays Running). No intent write before the Job (its name is the lock)
    // and no 409.
    assert_eq!(
        converged,
        expected(&[
            ("APPLY persistentvolumeclaims", 1),
            ("APPLY services", 1),
            ("APPLY statefulsets.apps", 1),
            ("PATCH databases.myorg.io", 1),
            ("PATCH databases.myorg.io/status", 1),
            ("POST events.events.k8s.io", 1),
            ("POST jobs.batch", 1),
        ]),
        "writes of one converging Database, by verb and resource"
    );

    let before = reading(&operator);
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":2}}"#);
    wait_until(WAIT, "the second generation", || {
        get(
            &ns.0,
            "database/orders",
            "{.status.observedGeneration}/{.status.actions.backup.guardValue}/{.status.actions.backup.phase}",
        ) == "2/generation=2/Done"
            && reports_its_job(&ns.0, "orders")
    });
    settled_after_a_run(&operator);
    let changed = writes_since(&operator, &before, &["PATCH databases.myorg.io"]);
    eprintln!("one spec change: {changed:?}");
    assert_eq!(
        changed,
        expected(&[
            ("APPLY statefulsets.apps", 1),
            ("PATCH databases.myorg.io/status", 1),
            ("POST events.events.k8s.io", 1),
            ("POST jobs.batch", 1),
        ]),
        "writes of one spec change, by verb and resource (the run's record and its Job in one status write)"
    );

    let before = reading(&operator);
    apply_yaml(&ns.0, &database("plain", 1, ""));
    wait_until(WAIT, "the Database without backups to converge", || {
        get(&ns.0, "database/plain", "{.status.observedGeneration}") == "1"
            && exists(&ns.0, "service/plain-svc")
            && exists(&ns.0, "statefulset/plain")
    });
    let plain = writes_since(&operator, &before, &["POST databases.myorg.io"]);
    eprintln!("one Database without backups converging: {plain:?}");
    assert_eq!(
        plain,
        expected(&[
            ("APPLY services", 1),
            ("APPLY statefulsets.apps", 1),
            ("PATCH databases.myorg.io/status", 1),
            ("POST events.events.k8s.io", 1),
        ]),
        "writes of one converging Database without backups (no Job, no finalizer)"
    );
}
