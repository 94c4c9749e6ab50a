//! What N Databases with backups (`WRITES_N`, default 100) cost the API server while they
//! converge, then after a template edit that changes every Service: the API server's writes by
//! verb and the wall time of each. A measurement, not a test (`make measure-writes`); alone in its
//! binary, so the API server's write counters see only its operator.

use std::time::Duration;

use ruleop_testkit::writes::{reading, writes_since};
use ruleop_testkit::*;

pub(crate) fn main() {
    many_databases_converge_and_reload_with_these_writes();
}

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
