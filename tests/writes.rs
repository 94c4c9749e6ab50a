//! What one Database costs the API server: its writes verb by verb, counted by the API server
//! itself, while it converges and when its spec changes. Alone in its test binary so the API
//! server's write counters see only this test's operator.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::*;

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
struct Reading {
    counts: BTreeMap<String, u64>,
    sent: u64,
    foreign: BTreeSet<String>,
}

fn reading(operator: &Operator) -> Reading {
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
fn writes_since(operator: &Operator, before: &Reading, ours: &[&str]) -> BTreeMap<String, u64> {
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

/// Whether a Database's status names the Job of its latest backup run as its latest backup.
fn reports_its_job(namespace: &str, name: &str) -> bool {
    let what = format!("database/{name}");
    let key = get(namespace, &what, "{.status.actions.backup.key}");
    let job = get(namespace, &what, "{.status.lastBackupJob}");
    key.len() >= 10 && job.ends_with(&key[..10]) && get(namespace, &what, "{.status.lastBackupResult}") == "Running"
}

fn expected(writes: &[(&str, u64)]) -> BTreeMap<String, u64> {
    writes.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

#[test]
fn a_database_with_backups_converges_in_eight_writes_a_spec_change_costs_five_and_one_without_backups_four() {
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
    let converged = writes_since(&operator, &before, &["POST databases.myorg.io"]);
    eprintln!("one Database converging: {converged:?}");
    // The floor's four (two applies, the Job, one status write), the backups volume, the
    // finalizer the final backup needs before the parent can be deleted, one Event saying
    // what was done, and a second status write once the watch shows the Job the run created
    // (lastBackupJob, lastBackupResult: Running; this control plane runs no Job controller, so
    // it stays Running). No intent write before the Job (its name is the lock) and no 409.
    assert_eq!(
        converged,
        expected(&[
            ("APPLY persistentvolumeclaims", 1),
            ("APPLY services", 1),
            ("APPLY statefulsets.apps", 1),
            ("PATCH databases.myorg.io", 1),
            ("PATCH databases.myorg.io/status", 2),
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
    let changed = writes_since(&operator, &before, &["PATCH databases.myorg.io"]);
    eprintln!("one spec change: {changed:?}");
    assert_eq!(
        changed,
        expected(&[
            ("APPLY statefulsets.apps", 1),
            ("PATCH databases.myorg.io/status", 2),
            ("POST events.events.k8s.io", 1),
            ("POST jobs.batch", 1),
        ]),
        "writes of one spec change, by verb and resource (the run's record, then its Job in status)"
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

/// A measurement, not a check (run it alone: `cargo test --test writes -- --ignored`): N
/// Databases with backups (`WRITES_N`, default 100) converging, then a template edit that
/// changes every Service, with the API server's writes by verb and the wall time of each.
#[test]
#[ignore = "a measurement: run it on its own"]
fn many_databases_converge_and_reload_with_these_writes() {
    let n: usize = std::env::var("WRITES_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    install_crds();
    let ns = Namespace::new("writes-many");
    let templates = templates_with(&[]);
    let operator = Operator::start_with(
        &root().join("rules"),
        templates.path(),
        &ns.0,
        &["--reload-debounce", "500ms"],
    );
    let before = reading(&operator);
    let all: String = (0..n)
        .map(|i| database(&format!("db-{i:04}"), 1, "  backup:\n    enabled: true\n"))
        .collect::<Vec<_>>()
        .join("---\n");
    let start = std::time::Instant::now();
    apply_yaml(&ns.0, &all);
    wait_until(Duration::from_secs(600), "convergence", || {
        let records = get(
            &ns.0,
            "databases",
            "{range .items[*]}{.status.observedGeneration}/{.status.actions.backup.phase}{\"\\n\"}{end}",
        );
        records.lines().filter(|l| *l == "1/Done").count() == n
    });
    let converged_in = start.elapsed();
    let converged = writes_since(&operator, &before, &vec!["POST databases.myorg.io"; n]);
    let total: u64 = converged.values().sum();
    eprintln!(
        "{n} Databases converged in {converged_in:?} (kubectl polling): {total} writes, {:.2} per parent: {converged:?}",
        total as f64 / n as f64
    );

    let before = reading(&operator);
    let service = templates.path().join("database/service.yaml.j2");
    let text = std::fs::read_to_string(&service).expect("service template");
    let edited = text.replace("port: 5432", "port: 5433");
    assert_ne!(text, edited, "the edit changes the Service");
    let start = std::time::Instant::now();
    std::fs::write(&service, edited).expect("edit the template");
    wait_until(Duration::from_secs(600), "every Service updated", || {
        get(&ns.0, "services", "{.items[*].spec.ports[0].port}")
            .split_whitespace()
            .filter(|p| *p == "5433")
            .count()
            == n
    });
    let reloaded_in = start.elapsed();
    let reloaded = writes_since(&operator, &before, &[]);
    eprintln!(
        "template edit to all {n} Services updated in {reloaded_in:?} (incl. 500 ms debounce, kubectl polling): {reloaded:?}"
    );
    let conflicts: u64 = operator.metric("ruleop_reconciles_total", &[("result", "conflict")]);
    let events = operator.metric("ruleop_api_writes_total", &[("kind", "Event")]);
    eprintln!("reconciles ending in a conflict: {conflicts}; Event writes sent by ruleop in all: {events}");
}
