//! End-to-end tests on the test cluster's node (tests/node): ruleop runs as a Pod installed by
//! `kubectl apply -k` of deploy/ (through the test overlay), Databases run real Postgres pods,
//! and rule changes reach ruleop through the kubelet's ConfigMap volumes. Driven by kubectl only.
//! The tests take the one installation in turn (`support::node::ruleop`); each puts its own
//! Databases in its own namespace.

mod support;

use std::time::{Duration, Instant};
use support::node::{self, create_database, ms};
use support::{Namespace, get, kubectl_ok, merge_patch, wait_until};

const POD_READY: Duration = Duration::from_secs(180);

fn ready_replicas(namespace: &str, name: &str) -> String {
    get(namespace, &format!("database/{name}"), "{.status.readyReplicas}")
}

fn condition(namespace: &str, what: &str, kind: &str) -> String {
    get(
        namespace,
        what,
        &format!("{{.status.conditions[?(@.type==\"{kind}\")].status}}"),
    )
}

#[test]
fn the_ruleop_pod_from_the_test_overlay_runs_and_is_ready_as_its_service_account() {
    let _ruleop = node::ruleop();
    let pods = node::pods();
    assert_eq!(pods.len(), 1, "one ruleop pod: {pods:?}");
    let (pod, phase, ready) = &pods[0];
    assert_eq!((phase.as_str(), *ready), ("Running", true), "pod {pod}");
    let what = format!("pod/{pod}");
    assert_eq!(get("ruleop-system", &what, "{.spec.serviceAccountName}"), "ruleop");
    // In-cluster config: the projected token of its ServiceAccount, no kubeconfig in the image.
    let volumes = get(
        "ruleop-system",
        &what,
        "{.spec.volumes[*].projected.sources[*].serviceAccountToken.path}",
    );
    assert_eq!(volumes, "token", "the service-account token is projected");
    assert_eq!(
        get("ruleop-system", &what, "{.spec.containers[0].image}"),
        format!(
            "ruleop:{}",
            std::fs::read_to_string(support::root().join("target/ruleop-image.tag"))
                .expect("image tag")
                .trim()
        ),
        "the image built by make image"
    );
    // It leads (the Lease names this pod) and wrote ruleop-status: it could reach the API
    // server and was allowed to by the generated RBAC.
    assert_eq!(get("ruleop-system", "lease/ruleop", "{.spec.holderIdentity}"), *pod);
    assert_eq!(node::status("state"), "Loaded");
    assert_eq!(node::status("rulesInForce"), "cache,database,tenant");
}

#[test]
fn the_example_database_runs_real_postgres_becomes_ready_and_scales_to_three() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-db");
    let example = std::fs::read_to_string(support::root().join("examples/database.yaml")).expect("example");
    let example = example.replace("namespace: default", &format!("namespace: {}", ns.0));
    let start = Instant::now();
    support::apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: orders-credentials}\nstringData: {password: e2e-secret}\n",
    );
    support::apply_yaml(&ns.0, &example);
    wait_until(POD_READY, "Database orders Ready with 2 ready replicas", || {
        condition(&ns.0, "database/orders", "Ready") == "True" && ready_replicas(&ns.0, "orders") == "2"
    });
    eprintln!("example Database Ready (2 replicas) in {} ms", ms(start));
    // Real Postgres answers inside the pods.
    for pod in ["orders-0", "orders-1"] {
        let version = kubectl_ok(&[
            "exec",
            "-n",
            &ns.0,
            pod,
            "--",
            "psql",
            "-U",
            "postgres",
            "-Atc",
            "select version()",
        ]);
        assert!(version.starts_with("PostgreSQL "), "{pod}: {version}");
    }

    let start = Instant::now();
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":3}}"#);
    wait_until(POD_READY, "Database orders Ready with 3 ready replicas", || {
        ready_replicas(&ns.0, "orders") == "3" && condition(&ns.0, "database/orders", "Ready") == "True"
    });
    eprintln!("scaled to 3 ready replicas in {} ms", ms(start));
    assert_eq!(get(&ns.0, "statefulset/orders", "{.status.readyReplicas}"), "3");
}

#[test]
fn a_template_change_applied_with_kustomize_reaches_every_child_through_the_kubelet() {
    let ruleop = node::ruleop();
    let ruleop = ruleop.as_ref().expect("installed");
    let ns = Namespace::new("e2e-tpl");
    let names = ["alpha", "beta", "gamma"];
    for name in names {
        create_database(&ns.0, name, 1, false);
    }
    wait_until(Duration::from_secs(60), "every child created", || {
        names.iter().all(|name| {
            support::exists(&ns.0, &format!("service/{name}-svc"))
                && support::exists(&ns.0, &format!("statefulset/{name}"))
        })
    });

    // As docs/operations/deploy.md says: edit the template, apply -k. (deploy/config holds the copies that
    // `make deploy-config` writes from templates/.)
    for template in ["service.yaml.j2", "statefulset.yaml.j2"] {
        ruleop.edit(&format!("deploy/config/templates/database/{template}"), |text| {
            text.replacen("  labels:\n", "  labels:\n    e2e.ruleop.io/edit: \"1\"\n", 1)
        });
    }
    let start = Instant::now();
    ruleop.apply();
    wait_until(
        Duration::from_secs(120),
        "every child labelled by the new templates",
        || {
            names.iter().all(|name| {
                get(
                    &ns.0,
                    &format!("service/{name}-svc"),
                    "{.metadata.labels.e2e\\.ruleop\\.io/edit}",
                ) == "1"
                    && get(
                        &ns.0,
                        &format!("statefulset/{name}"),
                        "{.metadata.labels.e2e\\.ruleop\\.io/edit}",
                    ) == "1"
            })
        },
    );
    eprintln!(
        "template edit applied -> all {} children updated in {} ms (kubelet syncFrequency 10s)",
        names.len() * 2,
        ms(start)
    );
    assert_eq!(node::status("state"), "Loaded");
    assert_ne!(node::status("fingerprint"), ruleop.shipped_fingerprint());
}

#[test]
fn an_invalid_rule_edit_keeps_the_last_good_rules_running_and_says_rejected_with_the_location() {
    let ruleop = node::ruleop();
    let ruleop = ruleop.as_ref().expect("installed");
    let ns = Namespace::new("e2e-bad");

    ruleop.edit("deploy/config/rules/database.yaml", |text| {
        text.replacen("  resync: 10m\n", "  resync: 10m\n  bogusField: true\n", 1)
    });
    let start = Instant::now();
    ruleop.apply();
    wait_until(Duration::from_secs(120), "ruleop-status Rejected", || {
        node::status("state") == "Rejected"
    });
    eprintln!("invalid edit applied -> Rejected in {} ms", ms(start));
    let edited = std::fs::read_to_string(ruleop.dir().join("deploy/config/rules/database.yaml")).expect("rules");
    let line = 1 + edited
        .lines()
        .position(|l| l.contains("bogusField"))
        .expect("the edited line");
    let errors = node::status("errors");
    assert!(
        errors.contains(&format!(
            "/etc/ruleop/rules/database.yaml:{line}:3: error: unknown field `bogusField`"
        )),
        "the error names the mounted file, the line and column, and the field: {errors}"
    );

    // The last good rules keep reconciling.
    create_database(&ns.0, "still", 0, false);
    wait_until(Duration::from_secs(60), "the Service of a new Database", || {
        support::exists(&ns.0, "service/still-svc")
    });
    assert_eq!(node::pods().len(), 1, "the pod keeps running");
    assert!(node::pods()[0].2, "and ready");
}

#[test]
fn the_backup_job_dumps_the_database_onto_its_backups_volume_with_the_statefulsets_credentials() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-backup");
    let start = Instant::now();
    // One replica and backups on: the backup action runs once for generation 1, against the
    // server through its Service, with the password of the Secret the StatefulSet uses.
    create_database(&ns.0, "nightly", 1, true);
    let job = || get(&ns.0, "jobs", "{.items[0].metadata.name}");
    wait_until(Duration::from_secs(60), "the backup Job", || !job().is_empty());
    let job = format!("job/{}", job());
    wait_until(POD_READY, "the backup Job complete", || {
        condition(&ns.0, &job, "Complete") == "True"
    });
    eprintln!("Database created -> backup Job complete in {} ms", ms(start));
    assert_eq!(get(&ns.0, &job, "{.status.succeeded}"), "1");
    let key = get(&ns.0, "database/nightly", "{.status.actions.backup.key}");
    let log = kubectl_ok(&["logs", "-n", &ns.0, &job]);
    let file = format!("/backups/nightly-{key}.pgc");
    let line = log
        .lines()
        .find(|l| l.starts_with(&format!("backup {file} ")))
        .unwrap_or_else(|| panic!("the dump's file and size in the log: {log}"));
    let bytes: u64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a size in {line:?}"));
    assert!(bytes > 1000, "a real pg_dump archive, not an empty file: {line}");
    assert_eq!(
        get(&ns.0, "pvc/nightly-backups", "{.status.phase}"),
        "Bound",
        "the dump is on the Database's backups volume"
    );
    assert_eq!(condition(&ns.0, "database/nightly", "BackupInitiated"), "True");
    // The outcome, from the Job's own status: succeeded, with its completion time.
    wait_until(Duration::from_secs(60), "BackupSucceeded in status", || {
        condition(&ns.0, "database/nightly", "BackupSucceeded") == "True"
    });
    assert_eq!(
        get(&ns.0, "database/nightly", "{.status.lastBackupResult}"),
        "Succeeded"
    );
    assert_eq!(
        get(&ns.0, "database/nightly", "{.status.lastBackupTime}"),
        get(&ns.0, &job, "{.status.completionTime}")
    );
}

#[test]
fn a_deleted_ruleop_pod_is_replaced_and_reconciling_goes_on() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-restart");
    let old = node::pods()[0].0.clone();
    let start = Instant::now();
    kubectl_ok(&["-n", "ruleop-system", "delete", "pod", &old, "--wait=false"]);
    wait_until(POD_READY, "a new ruleop pod Ready and the old one gone", || {
        let pods = node::pods();
        pods.len() == 1 && pods[0].0 != old && pods[0].2
    });
    let new = node::pods()[0].0.clone();
    wait_until(Duration::from_secs(60), "the new pod leading", || {
        get("ruleop-system", "lease/ruleop", "{.spec.holderIdentity}") == new
    });
    eprintln!("pod deleted -> replacement Ready and leading in {} ms", ms(start));
    create_database(&ns.0, "after", 0, false);
    wait_until(
        Duration::from_secs(60),
        "the new pod reconciling a new Database",
        || support::exists(&ns.0, "service/after-svc") && condition(&ns.0, "database/after", "Ready") == "True",
    );
}
