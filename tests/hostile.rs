//! Hostile objects and writers cost only themselves: a parent nested too deeply to decode
//! does not stall its kind.

mod support;

use std::time::Duration;

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
