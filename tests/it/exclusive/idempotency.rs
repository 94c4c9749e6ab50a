//! Once or a thousand times, same outcome, no side effects: converged parents reconciled
//! 1,000 times make zero write requests, and status writes do not trigger themselves.
//! The API server's audit log names the writer, so the cluster's own controllers' writes (a
//! StatefulSet's status, a Job's) do not count. Windows are counted in reconciles, not seconds:
//! a slow machine makes them longer, never wrong.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::*;

/// The tests take turns: the thousand-reconcile one loads the machine that the others time.
static ALONE: Mutex<()> = Mutex::new(());

const RESOURCES: &[&str] = &[
    "services",
    "statefulsets",
    "persistentvolumeclaims",
    "databases",
    "jobs",
];

/// Parents reconciled together: with the 1 s resync floor, 40 parents give 1,000 reconciles
/// in about 25 s.
const PARENTS: usize = 40;

#[test]
fn a_thousand_reconciles_of_converged_parents_write_nothing() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("idem");
    let rules = rules_dir(|text| text.replace("resync: 10m", "resync: 1s"));
    let operator = Operator::start(rules.path(), &templates(), &ns.0);
    let names: Vec<String> = (0..PARENTS).map(|i| format!("orders-{i}")).collect();
    let all: String = names
        .iter()
        .map(|name| database(name, 2, "  backup:\n    enabled: true\n"))
        .collect::<Vec<_>>()
        .join("---\n");
    apply_yaml(&ns.0, &all);
    wait_until(Duration::from_secs(120), "convergence", || {
        let generations = get(&ns.0, "databases", "{.items[*].status.observedGeneration}");
        let phases = get(&ns.0, "databases", "{.items[*].status.actions.backup.phase}");
        generations.split_whitespace().filter(|g| *g == "1").count() == PARENTS
            && phases.split_whitespace().filter(|p| *p == "Done").count() == PARENTS
            && kubectl_ok(&["get", "statefulsets", "-n", &ns.0, "-o", "name"])
                .lines()
                .count()
                == PARENTS
    });
    // Let the last status writes' watch events and the actions' requeues settle: every parent
    // reconciled at least twice more after convergence.
    let settled = operator.metric("ruleop_reconciles_total", &[("rule", "database")]) + 2 * PARENTS as u64;
    wait_until(Duration::from_secs(60), "settling", || {
        operator.metric("ruleop_reconciles_total", &[("rule", "database")]) >= settled
    });

    let mark = audit::AuditMark::now();
    let ruleop_writes_before = operator.metric("ruleop_api_writes_total", &[]);
    let reconciles_before = operator.metric("ruleop_reconciles_total", &[("rule", "database")]);
    let start = Instant::now();
    wait_until(Duration::from_secs(120), "1,000 more reconciles", || {
        operator.metric("ruleop_reconciles_total", &[("rule", "database")]) >= reconciles_before + 1000
    });
    let reconciles = operator.metric("ruleop_reconciles_total", &[("rule", "database")]) - reconciles_before;
    let writes = mark.ruleop_writes(&ns.0, RESOURCES);
    let ruleop_writes = operator.metric("ruleop_api_writes_total", &[]) - ruleop_writes_before;
    eprintln!(
        "{reconciles} reconciles of {PARENTS} converged parents in {:?}: {} write requests from ruleop in the API server's audit log, {ruleop_writes} counted by ruleop",
        start.elapsed(),
        writes.len()
    );
    assert!(
        writes.is_empty(),
        "the API server audited ruleop's writes:{}",
        audit::listing(&writes)
    );
    assert_eq!(ruleop_writes, 0, "ruleop sent write requests");
    assert_eq!(
        kubectl_ok(&["get", "jobs", "-n", &ns.0, "-o", "name"]).lines().count(),
        PARENTS,
        "exactly one backup Job per parent"
    );
    assert_eq!(operator.metric("ruleop_reconciles_total", &[("result", "error")]), 0);
}

/// The counters a window of reconciles is judged by, read from one scrape so they agree.
struct Counters {
    reconciles: u64,
    started: u64,
    resyncs: u64,
    writes: u64,
}

impl Counters {
    fn read(operator: &Operator) -> Counters {
        let text = operator.get("/metrics").expect("/metrics answers");
        let rule = ("rule", "database");
        Counters {
            reconciles: sum_metric(&text, "ruleop_reconciles_total", &[rule]),
            started: sum_metric(&text, "ruleop_reconcile_triggers_total", &[rule]),
            resyncs: sum_metric(&text, "ruleop_reconcile_triggers_total", &[rule, ("trigger", "resync")]),
            writes: sum_metric(&text, "ruleop_api_writes_total", &[]),
        }
    }
}

#[test]
fn status_writes_do_not_trigger_more_reconciles() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("idem-bounded");
    let rules = rules_dir(|text| text.replace("resync: 10m", "resync: 2s"));
    let operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(Duration::from_secs(30), "convergence", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
    });
    // Its own last writes come back as watch events: let those reconciles finish first.
    operator.idle_reconciles("database");
    let before = Counters::read(&operator);
    // A status write that triggered a reconcile would show as a `parent_event` among these.
    const WINDOW: u64 = 4;
    wait_until(Duration::from_secs(60), "four more reconciles", || {
        Counters::read(&operator).reconciles >= before.reconciles + WINDOW
    });
    let after = Counters::read(&operator);
    let (started, resyncs) = (after.started - before.started, after.resyncs - before.resyncs);
    eprintln!(
        "{} reconciles of a converged parent: {started} started, {resyncs} by resync, {} writes",
        after.reconciles - before.reconciles,
        after.writes - before.writes
    );
    assert_eq!(started, resyncs, "every reconcile in the window was a resync");
    assert_eq!(
        after.writes, before.writes,
        "the resyncs of a converged parent write nothing"
    );
}

#[test]
fn a_restarted_operator_reconciles_converged_parents_without_writing() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("idem-restart");
    let first = Operator::start(&root().join("rules"), &templates(), &ns.0);
    for name in ["a", "b", "c"] {
        apply_yaml(&ns.0, &database(name, 1, "  backup:\n    enabled: true\n"));
    }
    wait_until(Duration::from_secs(30), "convergence", || {
        get(&ns.0, "databases", "{range .items[*]}{.status.observedGeneration}{end}") == "111"
    });
    // Its own last status writes come back as watch events: let those reconciles finish too.
    first.idle_reconciles("database");
    assert!(first.stop(), "SIGTERM exits cleanly");

    let mark = audit::AuditMark::now();
    let second = Operator::start(&root().join("rules"), &templates(), &ns.0);
    wait_until(
        Duration::from_secs(30),
        "the restarted operator to reconcile all three",
        || second.metric("ruleop_reconciles_total", &[("rule", "database")]) >= 3,
    );
    // Every reconcile the start-up caused (and any its writes would cause) has finished.
    second.idle_reconciles("database");
    let writes = mark.ruleop_writes(&ns.0, RESOURCES);
    eprintln!(
        "restart: {} write requests from ruleop for 3 converged parents (children came from a LIST)",
        writes.len()
    );
    assert!(
        writes.is_empty(),
        "the API server audited ruleop's writes:{}",
        audit::listing(&writes)
    );
    assert_eq!(second.metric("ruleop_api_writes_total", &[]), 0);
}
