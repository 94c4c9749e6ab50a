//! Hostile objects and writers cost only themselves: a parent nested too deeply to decode
//! does not stall its kind.

mod support;

use std::time::{Duration, Instant};

use support::custom::{CustomKind, nested_json};
use support::*;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_parent_nested_300_levels_deep_costs_only_itself() {
    let kind = CustomKind::new("hostile-deep", "Blob");
    kind.install();
    let ns = Namespace::new("hostile-deep");
    let normal = 5;
    for i in 0..normal {
        apply_yaml(
            &ns.0,
            &kind.object(&format!("blob-{i}"), &format!(r#"{{"size": "{i}"}}"#)),
        );
    }
    let deep = kind.object("deep", &format!(r#"{{"payload": {}}}"#, nested_json(300)));
    let out = kubectl_with_stdin(&["create", "-n", &ns.0, "-f", "-"], Some(&deep));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (rules, templates) = kind.config_map_rule("blob");
    let children = || {
        (0..normal)
            .filter(|i| exists(&ns.0, &format!("configmap/blob-{i}-cm")))
            .count()
    };

    for start in ["first start", "restart"] {
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        wait_until(
            WAIT,
            &format!("every normal parent reconciled after the {start}"),
            || operator.metric("ruleop_reconciles_total", &[("rule", "blob"), ("result", "ok")]) >= normal as u64,
        );
        assert_eq!(children(), normal);
        wait_until(WAIT, "the deep parent to be reported in the log", || {
            operator.metric("ruleop_undecodable_objects_total", &[("kind", "Blob")]) == 1
        });
        let log = operator.log_text();
        let line = log
            .lines()
            .find(|l| l.contains("cannot be decoded"))
            .expect("a log line about the deep parent");
        assert!(line.contains("name=deep") && line.contains("recursion limit"), "{line}");
        assert!(line.len() < 1000, "bounded: {} bytes", line.len());
        assert!(operator.stop());
    }
    let reasons = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "involvedObject.name=deep",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(reasons.contains("Undecodable"), "Events on the deep parent: {reasons}");
    assert!(!exists(&ns.0, "configmap/deep-cm"));
}

#[test]
fn a_fight_over_replicas_is_corrected_at_a_bounded_rate_and_reported() {
    install_crds();
    let ns = Namespace::new("hostile-fight");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 2, ""));
    wait_until(WAIT, "the StatefulSet", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "2"
    });
    let writes = || operator.metric("ruleop_api_writes_total", &[("kind", "StatefulSet")]);
    let before = writes();
    let started = Instant::now();
    let mut changes = 0;
    while started.elapsed() < Duration::from_secs(20) {
        let tick = Instant::now();
        changes += 1;
        merge_patch(
            &ns.0,
            "statefulset/orders",
            &format!(r#"{{"spec":{{"replicas":{}}}}}"#, 10 + changes % 5),
        );
        std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
    }
    wait_until(WAIT, "ruleop to correct the last change", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "2"
    });
    let repairs = writes() - before;
    eprintln!("{changes} changes by another writer in 20s; ruleop wrote the StatefulSet {repairs} times");
    assert!(repairs <= 12, "{repairs} writes for {changes} changes");
    let notes = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "reason=DriftFight",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(notes.contains("field manager \"kubectl-patch\""), "{notes}");
    assert!(operator.metric("ruleop_drift_repairs_deferred_total", &[("kind", "StatefulSet")]) > 0);
}

#[test]
fn failing_parents_are_forgotten_once_deleted() {
    let kind = CustomKind::new("hostile-forget", "Thing");
    kind.install();
    let ns = Namespace::new("hostile-forget");
    let (rules, templates) = kind.config_map_rule("thing");
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let remembered = || operator.metric("ruleop_parents_remembered", &[("rule", "thing")]);
    for i in 0..4 {
        // No spec.size: the template fails, so the parent fails and backs off.
        apply_yaml(&ns.0, &kind.object(&format!("bad-{i}"), "{}"));
    }
    wait_until(WAIT, "the failing parents to be remembered", || remembered() >= 4);
    kubectl_ok(&["delete", &kind.resource(), "--all", "-n", &ns.0]);
    wait_until(WAIT, "deleted parents to be forgotten", || remembered() == 0);
}
