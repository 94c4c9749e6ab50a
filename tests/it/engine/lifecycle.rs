//! The parent's lifecycle against the real control plane: the final backup on deletion (waited
//! for, or given up after its timeout), the confused-deputy guard, cluster-scoped children
//! cleaned up through the finalizer, SIGKILL in the middle of that cleanup, pausing and
//! requesting a reconcile with annotations, the backups volume released (`deletionPolicy:
//! Orphan`), and `updateStrategy: Recreate` and `OnDelete`.

use std::time::{Duration, Instant};

use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

fn backup(name: &str) -> String {
    database(name, 1, "  backup:\n    enabled: true\n")
}

/// Names of the Jobs the final backup created in `ns`.
fn final_backup_jobs(ns: &str) -> Vec<String> {
    crate::support::fleet::jobs_of_action(ns, "final-backup", "{.metadata.name}")
}

fn delete(ns: &str, what: &str) {
    kubectl_ok(&["delete", "-n", ns, what, "--wait=false"]);
}

fn reconciles(operator: &Operator) -> u64 {
    operator.metric("ruleop_reconciles_total", &[])
}

#[test]
fn a_deleted_database_waits_for_its_final_backup_then_goes() {
    install_crds();
    let ns = Namespace::new("lc-final");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &backup("orders"));
    wait_until(WAIT, "the finalizer and the first backup", || {
        has_cleanup_finalizer(&ns.0, "database/orders")
            && get(&ns.0, "database/orders", "{.status.actions.backup.phase}") == "Done"
    });
    assert!(final_backup_jobs(&ns.0).is_empty(), "no final backup while it lives");
    delete(&ns.0, "database/orders");
    wait_until(WAIT, "the final backup Job", || final_backup_jobs(&ns.0).len() == 1);
    // The deletion is re-examined every second: let several reconciles pass, then look.
    let seen = reconciles(&operator);
    wait_until(WAIT, "three more reconciles", || reconciles(&operator) >= seen + 3);
    assert!(exists(&ns.0, "database/orders"), "the deletion waits for the backup");
    let jobs = final_backup_jobs(&ns.0);
    assert_eq!(jobs.len(), 1, "exactly one final backup: {jobs:?}");
    let job = format!("job/{}", jobs[0]);
    assert_eq!(
        get(&ns.0, &job, "{.metadata.ownerReferences}"),
        "",
        "it outlives the Database"
    );
    // No Job controller runs here: report success the way it would.
    merge_patch_status(&ns.0, &job, r#"{"status":{"succeeded":1}}"#);
    let took = wait_until(WAIT, "the Database to be gone", || !exists(&ns.0, "database/orders"));
    eprintln!("Job succeeded -> Database gone: {took:?}");
    assert_eq!(final_backup_jobs(&ns.0), jobs, "still one final backup, kept");
    // Its backups volume (deletionPolicy: Orphan) outlives it, released: nothing of ruleop's
    // left on it, so neither the garbage collector nor a later Database of that name claims it.
    assert_eq!(
        get(
            &ns.0,
            "pvc/orders-backups",
            "{.metadata.ownerReferences}|{.metadata.labels}|{.metadata.annotations}"
        ),
        "|{\"app\":\"orders\"}|",
        "the backups volume is released"
    );
}

#[test]
fn a_paused_database_is_left_alone_until_resumed_and_a_request_reconciles_it_at_once() {
    install_crds();
    let ns = Namespace::new("lc-paused");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the StatefulSet", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "1"
    });
    kubectl_ok(&["annotate", "-n", &ns.0, "database/orders", "ruleop.io/paused=true"]);
    let paused = || {
        get(
            &ns.0,
            "database/orders",
            "{.status.conditions[?(@.type==\"Paused\")].status}",
        )
    };
    wait_until(WAIT, "Paused=True", || paused() == "True");
    // While paused: a spec change and a deleted child are left as they are.
    let seen = operator.metric("ruleop_paused_reconciles_total", &[("rule", "database")]);
    apply_yaml(&ns.0, &database("orders", 2, ""));
    kubectl_ok(&["delete", "-n", &ns.0, "service/orders-svc", "--wait=false"]);
    wait_until(WAIT, "a reconcile of the paused parent after each change", || {
        operator.metric("ruleop_paused_reconciles_total", &[("rule", "database")]) >= seen + 2
    });
    assert_eq!(
        get(&ns.0, "statefulset/orders", "{.spec.replicas}"),
        "1",
        "not updated while paused"
    );
    assert!(!exists(&ns.0, "service/orders-svc"), "not recreated while paused");
    assert_eq!(get(&ns.0, "database/orders", "{.status.observedGeneration}"), "1");

    // Resumed: reconciled as usual, and it says so.
    kubectl_ok(&["annotate", "-n", &ns.0, "database/orders", "ruleop.io/paused-"]);
    wait_until(WAIT, "the spec change applied after the pause", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "2" && exists(&ns.0, "service/orders-svc")
    });
    wait_until(WAIT, "Paused=False", || paused() == "False");

    // A request: one reconcile at once, counted as such.
    let requested = || {
        operator.metric(
            "ruleop_reconcile_triggers_total",
            &[("rule", "database"), ("trigger", "requested")],
        )
    };
    assert_eq!(requested(), 0);
    kubectl_ok(&[
        "annotate",
        "-n",
        &ns.0,
        "database/orders",
        "ruleop.io/reconcile-requested-at=2026-12-02T10:00:00Z",
    ]);
    wait_until(Duration::from_secs(10), "the requested reconcile", || requested() == 1);
    assert!(operator.stop());
}

#[test]
fn a_final_backup_that_never_succeeds_times_out_and_the_deletion_goes_on() {
    install_crds();
    let ns = Namespace::new("lc-timeout");
    let rules = rules_dir(|text| text.replace("timeout: 10m", "timeout: 3s"));
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &backup("orders"));
    wait_until(WAIT, "the finalizer", || {
        has_cleanup_finalizer(&ns.0, "database/orders")
    });
    delete(&ns.0, "database/orders");
    let took = wait_until(WAIT, "the Database to be gone", || !exists(&ns.0, "database/orders"));
    assert!(took >= Duration::from_secs(3), "held for its timeout first ({took:?})");
    assert_eq!(final_backup_jobs(&ns.0).len(), 1);
    wait_until(WAIT, "the Warning Event", || {
        kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.0,
            "-o",
            "jsonpath={range .items[*]}{.type}/{.reason}{\"\\n\"}{end}",
        ])
        .lines()
        .any(|l| l == "Warning/DeleteActionTimedOut")
    });
}

#[test]
fn the_finalizer_comes_with_backups_turned_on_and_a_database_whose_backups_were_turned_off_goes_without_a_final_backup()
{
    install_crds();
    let ns = Namespace::new("lc-toggle");
    let _operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the Database without backups to converge", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
    });
    assert!(
        !has_cleanup_finalizer(&ns.0, "database/orders"),
        "no final backup could run: no finalizer"
    );
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"backup":{"enabled":true}}}"#);
    wait_until(WAIT, "the finalizer and the backup of generation 2", || {
        get(
            &ns.0,
            "database/orders",
            "{.status.observedGeneration}/{.status.actions.backup.phase}",
        ) == "2/Done"
            && has_cleanup_finalizer(&ns.0, "database/orders")
    });
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"backup":{"enabled":false}}}"#);
    wait_until(WAIT, "generation 3", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "3"
    });
    // Kept while it lives (dropping it would cost a write, and another to add it back when
    // backups are turned on again); removed at the deletion, which it does not hold.
    assert!(has_cleanup_finalizer(&ns.0, "database/orders"));
    delete(&ns.0, "database/orders");
    wait_until(WAIT, "the Database to be gone", || !exists(&ns.0, "database/orders"));
    assert!(
        final_backup_jobs(&ns.0).is_empty(),
        "no final backup for backups turned off"
    );
}

/// The shipped rules plus, on the Database, a ConfigMap whose namespace the parent chooses with
/// its `directory` annotation (the hostile part), and optionally a Namespace of its own named
/// by its `home` annotation with a ConfigMap inside.
fn rules_with(extra_children: &str) -> tempfile::TempDir {
    let extra = extra_children.to_owned();
    rules_dir(move |text| {
        if !text.contains("name: database") {
            return text.to_owned();
        }
        text.replace("  children:\n", &format!("  children:\n{extra}"))
    })
}

const DIRECTORY: &str =
    "    - id: directory\n      apiVersion: v1\n      kind: ConfigMap\n      template: extra/directory.yaml.j2\n";
const HOME: &str = "    - id: home\n      apiVersion: v1\n      kind: Namespace\n      template: extra/home.yaml.j2\n    - id: settings\n      apiVersion: v1\n      kind: ConfigMap\n      template: extra/settings.yaml.j2\n";

fn extra_templates() -> tempfile::TempDir {
    templates_with(&[
        (
            "extra/directory.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dir-{{ metadata.name }}\n  namespace: {{ metadata | dig(\"annotations.directory\", metadata.namespace) }}\ndata:\n  owner: {{ metadata.name }}\n",
        ),
        (
            "extra/home.yaml.j2",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {{ metadata | dig(\"annotations.home\", metadata.namespace ~ \"-\" ~ metadata.name) }}\n",
        ),
        (
            "extra/settings.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {{ metadata | dig(\"annotations.home\", metadata.namespace ~ \"-\" ~ metadata.name) }}\ndata:\n  owner: {{ metadata.name }}\n",
        ),
    ])
}

fn ready(ns: &str, what: &str) -> String {
    get(
        ns,
        what,
        "{.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}",
    )
}

#[test]
fn a_hostile_parent_aiming_a_child_at_another_namespace_gets_namespace_not_allowed_and_no_write() {
    install_crds();
    let ns = Namespace::new("lc-deputy");
    let victim = Namespace::new("lc-victim");
    let rules = rules_with(DIRECTORY);
    let templates = extra_templates();
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let hostile = database("mallory", 1, "").replace(
        "  name: mallory\n",
        &format!("  name: mallory\n  annotations:\n    directory: {}\n", victim.0),
    );
    apply_yaml(&ns.0, &hostile);
    wait_until(WAIT, "Ready=False NamespaceNotAllowed", || {
        ready(&ns.0, "database/mallory") == "False/NamespaceNotAllowed"
    });
    let message = get(
        &ns.0,
        "database/mallory",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    );
    assert!(
        message.contains(&format!("targets namespace \"{}\"", victim.0)),
        "{message}"
    );
    assert_eq!(
        get(&victim.0, "configmaps", "{.items[*].metadata.labels.ruleop\\.io/rule}"),
        ""
    );
    let writes: u64 = ["ConfigMap", "Service", "StatefulSet"]
        .iter()
        .map(|kind| operator.metric("ruleop_api_writes_total", &[("kind", kind)]))
        .sum();
    assert_eq!(writes, 0, "all or nothing: no child of the hostile parent was written");
    // The same parent pointing at its own namespace converges.
    kubectl_ok(&[
        "annotate",
        "--overwrite",
        "-n",
        &ns.0,
        "database/mallory",
        &format!("directory={}", ns.0),
    ]);
    wait_until(WAIT, "the ConfigMap in its own namespace", || {
        exists(&ns.0, "configmap/dir-mallory")
    });
}

#[test]
fn a_parent_cannot_claim_an_existing_namespace_by_naming_its_child_after_it() {
    install_crds();
    let ns = Namespace::new("lc-claim");
    let victim = Namespace::new("lc-claimed");
    let rules = rules_with(HOME);
    let templates = extra_templates();
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let claim = database("mallory", 1, "").replace(
        "  name: mallory\n",
        &format!("  name: mallory\n  annotations:\n    home: {}\n", victim.0),
    );
    apply_yaml(&ns.0, &claim);
    wait_until(WAIT, "Ready=False ChildNotOwned", || {
        ready(&ns.0, "database/mallory") == "False/ChildNotOwned"
    });
    assert_eq!(
        get(
            &ns.0,
            &format!("namespace/{}", victim.0),
            "{.metadata.labels.ruleop\\.io/rule}"
        ),
        ""
    );
    assert!(!exists(&victim.0, "configmap/settings"), "nothing written into it");
    delete(&ns.0, "database/mallory");
    wait_until(WAIT, "the parent to be gone", || !exists(&ns.0, "database/mallory"));
    assert_eq!(
        get(
            &ns.0,
            &format!("namespace/{}", victim.0),
            "{.metadata.deletionTimestamp}"
        ),
        "",
        "the claimed namespace survives the parent's deletion"
    );
}

#[test]
fn a_cluster_scoped_child_is_deleted_with_its_parent_and_the_finalizer_removed() {
    install_crds();
    let ns = Namespace::new("lc-cluster");
    let rules = rules_with(HOME);
    let templates = extra_templates();
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    let home = format!("{}-orders", ns.0);
    // The ConfigMap waits for the Namespace; the Namespace's watch event brings the parent back.
    wait_until(WAIT, "the Namespace and the ConfigMap inside it", || {
        exists(&home, "configmap/settings")
    });
    assert!(has_cleanup_finalizer(&ns.0, "database/orders"));
    assert_eq!(
        get(
            &ns.0,
            &format!("namespace/{home}"),
            "{.metadata.annotations.ruleop\\.io/parent}"
        ),
        format!("{}/orders", ns.0)
    );
    delete(&ns.0, "database/orders");
    let took = wait_until(WAIT, "the Database to be gone", || !exists(&ns.0, "database/orders"));
    let deleting = namespaces_named(&home);
    assert!(
        deleting.iter().all(|(_, ts)| !ts.is_empty()),
        "its Namespace is being deleted: {deleting:?}"
    );
    eprintln!("Database deletion with a cluster-scoped child: {took:?}");
}

#[test]
fn sigkill_during_cleanup_leaks_nothing_and_leaves_no_parent_stuck() {
    let mut timings = RandomTimings::new("sigkill_during_cleanup_leaks_nothing_and_leaves_no_parent_stuck");
    install_crds();
    let ns = Namespace::new("lc-kill");
    let rules = rules_with(HOME);
    let templates = extra_templates();
    const PARENTS: usize = 8;
    let mut kills = 0;
    for round in 0..4 {
        let names: Vec<String> = (0..PARENTS).map(|i| format!("r{round}db{i}")).collect();
        let manifests: String = names.iter().map(|n| format!("---\n{}", database(n, 1, ""))).collect();
        apply_yaml(&ns.0, &manifests);
        // Kill once while the children are being created, once while they are being deleted.
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        std::thread::sleep(Duration::from_millis(timings.below(600)));
        operator.kill();
        kills += 1;
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        wait_until(WAIT, "every parent's Namespace and ConfigMap", || {
            names
                .iter()
                .all(|n| exists(&format!("{}-{n}", ns.0), "configmap/settings"))
        });
        // Delete while ruleop is down: the finalizer holds every parent. Then let the restarted
        // operator start the cleanup and kill it in the middle.
        operator.kill();
        kills += 1;
        let mut args = vec!["delete", "-n", ns.0.as_str(), "--wait=false"];
        let targets: Vec<String> = names.iter().map(|n| format!("database/{n}")).collect();
        args.extend(targets.iter().map(String::as_str));
        kubectl_ok(&args);
        assert!(
            names.iter().all(|n| exists(&ns.0, &format!("database/{n}"))),
            "the finalizer holds the parents while ruleop is down"
        );
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        std::thread::sleep(Duration::from_millis(timings.below(1500)));
        operator.kill();
        kills += 1;
        let left = names.iter().filter(|n| exists(&ns.0, &format!("database/{n}"))).count();
        let start = Instant::now();
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        wait_until(WAIT, "every parent to be gone", || {
            names.iter().all(|n| !exists(&ns.0, &format!("database/{n}")))
        });
        eprintln!(
            "round {round}: {left}/{PARENTS} parents left at the kill, all gone {:?} after the restart",
            start.elapsed()
        );
        for name in &names {
            let home = format!("{}-{name}", ns.0);
            let leaked: Vec<_> = namespaces_named(&home)
                .into_iter()
                .filter(|(n, ts)| *n == home && ts.is_empty())
                .collect();
            assert!(leaked.is_empty(), "leaked: {leaked:?}");
        }
        operator.stop();
    }
    eprintln!("{kills} SIGKILLs, nothing leaked, nothing stuck");
}

/// The shipped rules plus a ConfigMap child `settings` with this `updateStrategy`, holding the
/// Database's replicas.
fn rules_with_strategy(strategy: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let rules = rules_with(&format!(
        "    - id: settings\n      apiVersion: v1\n      kind: ConfigMap\n      template: extra/settings.yaml.j2\n      updateStrategy: {strategy}\n"
    ));
    let templates = templates_with(&[(
        "extra/settings.yaml.j2",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-settings\ndata:\n  replicas: \"{{ spec.replicas }}\"\n",
    )]);
    (rules, templates)
}

fn settings(ns: &str) -> String {
    get(ns, "configmap/orders-settings", "{.metadata.uid}/{.data.replicas}")
}

#[test]
fn a_recreate_child_is_deleted_and_created_again_when_its_rendering_changes() {
    install_crds();
    let ns = Namespace::new("lc-recreate");
    let (rules, templates) = rules_with_strategy("Recreate");
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the settings", || settings(&ns.0).ends_with("/1"));
    let first = settings(&ns.0);
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":2}}"#);
    wait_until(WAIT, "the settings of 2 replicas", || settings(&ns.0).ends_with("/2"));
    let second = settings(&ns.0);
    assert_ne!(
        first.split('/').next(),
        second.split('/').next(),
        "a new object, not an update: {first} -> {second}"
    );
}

#[test]
fn an_on_delete_child_keeps_its_live_object_until_someone_deletes_it() {
    install_crds();
    let ns = Namespace::new("lc-ondelete");
    let (rules, templates) = rules_with_strategy("OnDelete");
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the settings", || settings(&ns.0).ends_with("/1"));
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":2}}"#);
    wait_until(WAIT, "generation 2 observed", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "2"
    });
    assert!(settings(&ns.0).ends_with("/1"), "kept: {}", settings(&ns.0));
    kubectl_ok(&["delete", "-n", &ns.0, "configmap/orders-settings"]);
    wait_until(WAIT, "the settings created again from the new rendering", || {
        settings(&ns.0).ends_with("/2")
    });
}
