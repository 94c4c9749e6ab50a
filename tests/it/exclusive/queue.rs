//! The rule's workers serve queued parents in turn: under a backlog, a parent queued first is
//! reconciled first (the p99 latency of a burst of creates depends on it).

use std::time::Duration;

use crate::support::*;

#[test]
fn under_a_backlog_parents_are_reconciled_in_the_order_they_were_queued() {
    install_crds();
    let ns = Namespace::new("queue-order");
    // One worker: every parent created while it is busy waits in the queue.
    let rules = rules_dir(|text| text.replace("maxConcurrentReconciles: 5", "maxConcurrentReconciles: 1"));
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    let names: Vec<String> = (0..30).map(|i| format!("db-{i:02}")).collect();
    // One kubectl creating them one after the other, faster than one worker reconciles them.
    let manifests: Vec<String> = names.iter().map(|name| database(name, 1, "")).collect();
    apply_yaml(&ns.0, &manifests.join("---\n"));
    let services = || {
        kubectl_ok(&[
            "get",
            "services",
            "-n",
            &ns.0,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}",
        ])
    };
    wait_until(Duration::from_secs(90), "a Service per Database", || {
        services().lines().count() == names.len()
    });
    // A parent's first reconcile creates its Service, and resourceVersions follow etcd's
    // revisions: sorted by them, the Services give the order the parents were served in.
    let mut served: Vec<(u64, String)> = services()
        .lines()
        .filter_map(|line| {
            let (name, version) = line.split_once(' ')?;
            Some((version.parse().ok()?, name.trim_end_matches("-svc").to_owned()))
        })
        .collect();
    served.sort();
    let served: Vec<String> = served.into_iter().map(|(_, name)| name).collect();
    // Watch events handled in the same millisecond may swap places in kube-runtime's scheduler;
    // an arbitrary order (kube-runtime's own limit) moves parents by many places.
    let moved = names
        .iter()
        .enumerate()
        .map(|(queued, name)| {
            let position = served.iter().position(|s| s == name).unwrap_or(usize::MAX / 2);
            queued.abs_diff(position)
        })
        .max()
        .unwrap_or_default();
    assert!(
        moved <= 3,
        "queued {names:?}\nserved {served:?}\na parent was served {moved} places away from its turn"
    );
}
