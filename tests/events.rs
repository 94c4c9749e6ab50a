//! Events say what happened in the run they report: three runs of an action are three Events,
//! each naming its own guard value, not one series carrying the first run's note.

mod support;

use std::time::Duration;

use support::*;

const WAIT: Duration = Duration::from_secs(60);

fn action_ran_notes(ns: &str, parent: &str) -> Vec<String> {
    let out = kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={parent},reason=ActionRan"),
        "-o",
        "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ]);
    out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn each_action_run_has_an_event_saying_what_that_run_did() {
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
        let wanted = format!("action backup ran for generation={generation} (key ");
        wait_until(
            WAIT,
            &format!("an Event for the run of generation {generation}"),
            || action_ran_notes(&ns.0, "orders").iter().any(|n| n.starts_with(&wanted)),
        );
    }
    let notes = action_ran_notes(&ns.0, "orders");
    assert_eq!(notes.len(), 3, "one Event per run: {notes:#?}");
    let key = get(&ns.0, "database/orders", "{.status.actions.backup.key}");
    let last = notes
        .iter()
        .find(|n| n.contains("generation=3"))
        .expect("the last run's Event");
    assert!(last.contains(&key), "{last} names the run's key {key}");
    assert!(last.contains(": created Job orders-backup-"), "{last}");
}
