//! `ruleop diff` against the real control plane: a template edit shows exactly the changed field
//! of each parent and writes nothing; a rule that would prune shows the prune; an unchanged rule
//! set prints nothing and exits 0.

use std::path::Path;
use std::process::Output;
use std::sync::Mutex;
use std::time::Duration;

use crate::support::audit::{AuditMark, AuditedWrite, listing};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

/// The tests count the API server's writes, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Databases in `ns` converged by `ruleop run` with the shipped rules, which is then stopped.
fn converged_databases(ns: &Namespace, names: &[&str]) {
    install_crds();
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    for name in names {
        apply_yaml(&ns.0, &database(name, 1, ""));
    }
    for name in names {
        wait_until(WAIT, "the Database to converge", || {
            exists(&ns.0, &format!("service/{name}-svc"))
                && exists(&ns.0, &format!("statefulset/{name}"))
                && get(&ns.0, &format!("database/{name}"), "{.status.observedGeneration}") == "1"
        });
    }
    operator.idle_reconciles("database");
    assert!(operator.stop(), "the operator exits cleanly");
}

fn ruleop_diff(ns: &str, rules: &Path, templates: &Path) -> Output {
    ruleop_command(&["diff", "--namespace", ns], rules, templates)
}

/// A copy of the shipped templates with `edit` applied to `file`.
fn edited_templates(file: &str, edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in std::fs::read_dir(templates()).expect("templates").flatten() {
        let sub = sub.file_name().to_string_lossy().into_owned();
        std::fs::create_dir_all(dir.path().join(&sub)).expect("mkdir");
        for entry in std::fs::read_dir(templates().join(&sub)).expect("templates").flatten() {
            let name = format!("{sub}/{}", entry.file_name().to_string_lossy());
            let source = std::fs::read_to_string(entry.path()).expect("read");
            let source = if name == file { edit(&source) } else { source };
            std::fs::write(dir.path().join(&name), source).expect("write");
        }
    }
    dir
}

#[test]
fn an_unchanged_rule_set_prints_nothing_and_exits_0() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("diff-same");
    converged_databases(&ns, &["orders", "users"]);

    let out = ruleop_diff(&ns.0, &root().join("rules"), &templates());
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).starts_with("0 parent(s) would change, 2 unchanged; 0 write(s)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_template_edit_shows_exactly_the_changed_field_of_each_parent_and_writes_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("diff-edit");
    let names = ["alpha", "beta", "gamma"];
    converged_databases(&ns, &names);
    let templates = edited_templates("database/service.yaml.j2", |t| {
        t.replace("targetPort: 5432", "targetPort: 5433")
    });

    let mark = AuditMark::now();
    let out = ruleop_diff(&ns.0, &root().join("rules"), templates.path());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));

    // The audit log is written as each request completes: wait for the three dry runs to show.
    let service_dry_runs = |requests: &[AuditedWrite]| {
        requests
            .iter()
            .filter(|w| w.dry_run && w.resource == "services" && w.object.starts_with(&format!("{}/", ns.0)))
            .count()
    };
    wait_until(WAIT, "the audit log to show ruleop diff's dry runs", || {
        service_dry_runs(&mark.ruleop_requests()) >= 3
    });
    let requests = mark.ruleop_requests();
    let persisted: Vec<AuditedWrite> = requests.iter().filter(|w| !w.dry_run).cloned().collect();
    assert!(
        persisted.is_empty(),
        "ruleop diff wrote nothing, yet:{}",
        listing(&persisted)
    );
    assert_eq!(
        service_dry_runs(&requests),
        3,
        "one server-side apply dry run per changed Service:{}",
        listing(&requests)
    );
    for name in names {
        let section = format!(
            "=== Database {ns}/{name} (rule database)\n--- Service {ns}/{name}-svc (live)\n+++ Service {ns}/{name}-svc (proposed)\n",
            ns = ns.0
        );
        assert!(stdout.contains(&section), "{stdout}");
    }
    let changed: Vec<&str> = stdout
        .lines()
        .filter(|l| (l.starts_with('+') || l.starts_with('-')) && !l.starts_with("+++") && !l.starts_with("---"))
        .collect();
    assert_eq!(
        changed,
        ["-    targetPort: 5432", "+    targetPort: 5433"].repeat(3),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).starts_with("3 parent(s) would change, 0 unchanged; 3 write(s): 3 child update(s)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(get(&ns.0, "service/alpha-svc", "{.spec.ports[0].targetPort}"), "5432");
}

#[test]
fn a_rule_that_would_prune_shows_the_prune_and_deletes_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("diff-prune");
    converged_databases(&ns, &["orders"]);
    let rules = rules_dir(|t| t.replace("when: spec.replicas > 0", "when: spec.replicas > 5"));

    let out = ruleop_diff(&ns.0, rules.path(), &templates());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout,
        format!(
            "=== Database {ns}/orders (rule database)\n- StatefulSet {ns}/orders would be pruned (deleted)\n",
            ns = ns.0
        )
    );
    assert!(text(&out.stderr).contains("1 write(s): 0 child update(s), 0 create(s), 1 prune(s)"));
    assert!(exists(&ns.0, "statefulset/orders"), "the dry run deleted nothing");
}
