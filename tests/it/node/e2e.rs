//! End-to-end tests on the test cluster's node (tests/node): ruleop runs as a Pod installed by
//! `kubectl apply -k` of deploy/ (through the test overlay), Databases run real Postgres pods,
//! and rule changes reach ruleop through the kubelet's ConfigMap volumes. Driven by kubectl only.
//! The tests take the one installation in turn (`crate::support::node::ruleop`); each puts its own
//! Databases in its own namespace.

use crate::support::node::{self, create_database, ms};
use crate::support::{Namespace, get, kubectl_ok, merge_patch, wait_until};
use std::time::{Duration, Instant};

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
            std::fs::read_to_string(crate::support::root().join("target/ruleop-image.tag"))
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

/// The example Database, created before its credentials Secret: `Ready` names the missing Secret
/// (the rule reads the first pod's CreateContainerConfigError, no Secret), then the Secret's
/// creation lets real Postgres start, and the Database scales.
#[test]
fn the_example_database_names_a_missing_secret_in_ready_then_runs_and_scales_to_three() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-db");
    let example = std::fs::read_to_string(crate::support::root().join("examples/database.yaml")).expect("example");
    let example = example.replace("namespace: default", &format!("namespace: {}", ns.0));
    let start = Instant::now();
    crate::support::apply_yaml(&ns.0, &example);
    let ready = |field: &str| {
        get(
            &ns.0,
            "database/orders",
            &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
        )
    };
    wait_until(POD_READY, "Ready=False naming the missing Secret", || {
        ready("reason") == "CredentialsSecretMissing"
    });
    let message = ready("message");
    assert!(
        message
            .starts_with("Secret orders-credentials (key password, spec.credentialsSecret) is missing: pod orders-0: ")
            && message.contains(r#"secret "orders-credentials" not found"#),
        "{message}"
    );
    assert_eq!(ready("status"), "False");
    eprintln!("Ready names the missing Secret in {} ms: {message}", ms(start));
    let start = Instant::now();
    crate::support::apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: orders-credentials}\nstringData: {password: e2e-secret}\n",
    );
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
            crate::support::exists(&ns.0, &format!("service/{name}-svc"))
                && crate::support::exists(&ns.0, &format!("statefulset/{name}"))
        })
    });

    // As docs/operations/deploy.md says: edit the template, apply -k. (repo/ holds the copies of
    // the repository's install, templates/ among them.)
    for template in ["service.yaml.j2", "statefulset.yaml.j2"] {
        ruleop.edit(&format!("repo/templates/database/{template}"), |text| {
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

    ruleop.edit("repo/rules/database.yaml", |text| {
        text.replacen("  resync: 10m\n", "  resync: 10m\n  bogusField: true\n", 1)
    });
    let start = Instant::now();
    ruleop.apply();
    wait_until(Duration::from_secs(120), "ruleop-status Rejected", || {
        node::status("state") == "Rejected"
    });
    eprintln!("invalid edit applied -> Rejected in {} ms", ms(start));
    let edited = std::fs::read_to_string(ruleop.dir().join("repo/rules/database.yaml")).expect("rules");
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
        crate::support::exists(&ns.0, "service/still-svc")
    });
    assert_eq!(node::pods().len(), 1, "the pod keeps running");
    assert!(node::pods()[0].2, "and ready");
}

/// `select version()` on the Database's first pod (the one its Service and Jobs reach).
fn psql(namespace: &str, pod: &str, sql: &str) -> String {
    kubectl_ok(&[
        "exec",
        "-n",
        namespace,
        pod,
        "-c",
        "postgres",
        "--",
        "psql",
        "-U",
        "postgres",
        "-v",
        "ON_ERROR_STOP=1",
        "-Atc",
        sql,
    ])
    .trim()
    .to_owned()
}

/// The Job that action `action` of a Database created last (empty while there is none).
fn job_of(namespace: &str, action: &str) -> String {
    kubectl_ok(&[
        "get",
        "jobs",
        "-n",
        namespace,
        "-l",
        &format!("ruleop.io/action={action}"),
        "--sort-by=.metadata.creationTimestamp",
        "-o",
        "jsonpath={.items[-1:].metadata.name}",
    ])
}

/// Where the node's hostPath provisioner keeps the volume of claim `pvc` (this test runs on the
/// node's host, so the dumps can be read without the Jobs' word for it).
fn volume_dir(namespace: &str, pvc: &str) -> std::path::PathBuf {
    let pv = get(namespace, &format!("pvc/{pvc}"), "{.spec.volumeName}");
    assert!(!pv.is_empty(), "claim {pvc} is bound");
    std::path::PathBuf::from(kubectl_ok(&[
        "get",
        &format!("pv/{pv}"),
        "-o",
        "jsonpath={.spec.hostPath.path}",
    ]))
}

/// The size of `file` on the backups volume, from the file itself.
fn dump_size(namespace: &str, pvc: &str, file: &str) -> u64 {
    let path = volume_dir(namespace, pvc).join(file);
    std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("the dump {} on the backups volume: {e}", path.display()))
        .len()
}

/// The pods of Database `name`: (pod, image, ready), by name.
fn database_pods(namespace: &str, name: &str) -> Vec<(String, String, bool)> {
    kubectl_ok(&[
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        &format!("app={name}"),
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
    ])
    .lines()
    .filter_map(|line| {
        let mut fields = line.split_whitespace();
        Some((fields.next()?.to_owned(), fields.next()?.to_owned(), fields.next() == Some("True")))
    })
    .collect()
}

/// Steps and their durations, printed as they end and once more together at the end.
struct Steps(Vec<(&'static str, u128)>, Instant);

impl Steps {
    fn new() -> Self {
        Steps(Vec::new(), Instant::now())
    }

    fn done(&mut self, step: &'static str) {
        let took = ms(self.1);
        eprintln!("step: {step}: {took} ms");
        self.0.push((step, took));
        self.1 = Instant::now();
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        for (step, took) in &self.0 {
            eprintln!("  {took:>7} ms  {step}");
        }
    }
}

/// The whole story of issue 23, driven by kubectl only, on the shipped rules and templates:
/// data written, backed up, dropped, restored, carried through a minor-version roll, a backup
/// that fails visibly for a wrong password, and the final backup at deletion. The version goes
/// up, 16.13 -> 16.15: the node has these two builds, and a minor upgrade (same data directory
/// format within a major) is what users do; tests/it/node/node_network.rs also serves a 16.13 data
/// directory with 16.15.
#[test]
fn a_database_keeps_its_rows_through_backup_restore_a_minor_upgrade_and_its_final_backup() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-story");
    let ns = ns.0.as_str();
    let mut steps = Steps::new();

    // 1. The Secret and the Database: Ready, and real PostgreSQL 16 answers.
    crate::support::apply_yaml(
        ns,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: shop-credentials}\nstringData: {password: story-secret}\n---\n\
         apiVersion: myorg.io/v1\nkind: Database\nmetadata: {name: shop}\n\
         spec: {version: \"16.13\", replicas: 2, storage: {size: 1Gi}, backup: {enabled: true}}\n",
    );
    wait_until(POD_READY, "Database shop Ready with 2 ready replicas", || {
        condition(ns, "database/shop", "Ready") == "True" && ready_replicas(ns, "shop") == "2"
    });
    let version = psql(ns, "shop-0", "select version()");
    assert!(version.starts_with("PostgreSQL 16.13 "), "{version}");
    steps.done("Secret + Database created -> Ready (2 replicas), select version() says 16.13");

    // 2. A table of 1,000 rows, on the first pod (the one the Service selects).
    psql(
        ns,
        "shop-0",
        "create table items (id int primary key, name text not null); \
         insert into items select g, 'item ' || g from generate_series(1, 1000) g",
    );
    assert_eq!(psql(ns, "shop-0", "select count(*) from items"), "1000");
    steps.done("table created, 1,000 rows inserted (kubectl exec psql)");

    // 3. A requested backup: the Job succeeds, its dump is on the volume, status says so.
    merge_patch(
        ns,
        "database/shop",
        r#"{"metadata":{"annotations":{"myorg.io/backup-request":"story-1"}}}"#,
    );
    wait_until(Duration::from_secs(60), "the requested backup's Job", || {
        !job_of(ns, "backup-request").is_empty()
    });
    let job = job_of(ns, "backup-request");
    wait_until(POD_READY, "the requested backup succeeded in status", || {
        get(ns, "database/shop", "{.status.lastBackupJob}") == job
            && get(ns, "database/shop", "{.status.lastBackupResult}") == "Succeeded"
    });
    assert_eq!(condition(ns, "database/shop", "BackupSucceeded"), "True");
    assert_eq!(
        get(ns, "database/shop", "{.status.lastBackupTime}"),
        get(ns, &format!("job/{job}"), "{.status.completionTime}")
    );
    let file = get(ns, "database/shop", "{.status.lastBackupFile}");
    let key = get(ns, "database/shop", "{.status.actions.backup-request.key}");
    assert_eq!(file, format!("shop-{key}.pgc"), "the file is named by the run's key");
    let bytes = dump_size(ns, "shop-backups", &file);
    let log = kubectl_ok(&["logs", "-n", ns, &format!("job/{job}")]);
    assert!(
        log.contains(&format!("backup /backups/{file} {bytes} bytes")),
        "the Job logged the file and the size it has on the volume ({bytes}): {log}"
    );
    assert!(
        bytes > 4_000,
        "a pg_dump archive with 1,000 rows (an empty database's is about 1 kB): {bytes} bytes"
    );
    eprintln!("backup {file}: {bytes} bytes on the volume");
    steps.done("backup requested (annotation) -> Job succeeded, dump on the volume, status Succeeded");

    // 4. The table dropped, then restored from that file.
    psql(ns, "shop-0", "drop table items");
    merge_patch(
        ns,
        "database/shop",
        &format!(r#"{{"metadata":{{"annotations":{{"myorg.io/restore-from":"{file}"}}}}}}"#),
    );
    wait_until(POD_READY, "RestoreSucceeded", || {
        condition(ns, "database/shop", "RestoreSucceeded") == "True"
    });
    assert_eq!(get(ns, "database/shop", "{.status.lastRestoreResult}"), "Succeeded");
    assert_eq!(get(ns, "database/shop", "{.status.lastRestoreFrom}"), file);
    assert_eq!(psql(ns, "shop-0", "select count(*) from items"), "1000");
    steps.done("table dropped, restore-from annotation set -> restore succeeded, 1,000 rows again");

    // 5. A minor upgrade: the pods roll one at a time (never none ready), the rows survive.
    let old = "postgres:16.13";
    merge_patch(ns, "database/shop", r#"{"spec":{"version":"16.15"}}"#);
    let mut least_ready = 2;
    let mut order: Vec<String> = Vec::new();
    wait_until(
        Duration::from_secs(300),
        "both pods on postgres:16.15 and Ready",
        || {
            let pods = database_pods(ns, "shop");
            let ready = pods.iter().filter(|p| p.2).count();
            least_ready = least_ready.min(ready);
            for (pod, image, _) in &pods {
                if image != old && !order.contains(pod) {
                    order.push(pod.clone());
                }
            }
            pods.len() == 2
                && pods.iter().all(|p| p.1 == "postgres:16.15" && p.2)
                && condition(ns, "database/shop", "Ready") == "True"
                && ready_replicas(ns, "shop") == "2"
        },
    );
    assert_eq!(
        order,
        ["shop-1", "shop-0"],
        "the StatefulSet rolls the highest ordinal first"
    );
    assert!(least_ready >= 1, "one pod at a time: some pod was Ready at every look");
    let version = psql(ns, "shop-0", "select version()");
    assert!(version.starts_with("PostgreSQL 16.15 "), "{version}");
    assert_eq!(psql(ns, "shop-0", "select count(*) from items"), "1000");
    steps.done("16.13 -> 16.15: both pods rolled one at a time, Ready again, 1,000 rows");

    // 6. A wrong password in the Secret: the backup fails visibly, the Database stays.
    merge_patch(
        ns,
        "secret/shop-credentials",
        r#"{"stringData":{"password":"not-the-password"}}"#,
    );
    merge_patch(
        ns,
        "database/shop",
        r#"{"metadata":{"annotations":{"myorg.io/backup-request":"story-2"}}}"#,
    );
    wait_until(Duration::from_secs(60), "the second requested backup's Job", || {
        let newest = job_of(ns, "backup-request");
        !newest.is_empty() && newest != job
    });
    let failed = job_of(ns, "backup-request");
    wait_until(Duration::from_secs(300), "the failed backup in status", || {
        get(ns, "database/shop", "{.status.lastBackupJob}") == failed
            && get(ns, "database/shop", "{.status.lastBackupResult}") == "Failed"
    });
    assert_eq!(condition(ns, "database/shop", "BackupSucceeded"), "False");
    assert_eq!(
        get(
            ns,
            "database/shop",
            "{.status.conditions[?(@.type==\"BackupSucceeded\")].reason}"
        ),
        "BackoffLimitExceeded",
        "the Job's own reason"
    );
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={failed},reason=BackoffLimitExceeded"),
        "-o",
        "jsonpath={.items[*].type}",
    ]);
    assert!(
        events.contains("Warning"),
        "a Warning Event with the Job's reason: {events:?}"
    );
    let log = kubectl_ok(&["logs", "-n", ns, &format!("job/{failed}")]);
    assert!(log.contains("password authentication failed"), "{log}");
    assert!(crate::support::exists(ns, "database/shop"), "the Database stays");
    assert_eq!(condition(ns, "database/shop", "Ready"), "True", "and keeps serving");
    steps.done("wrong password in the Secret -> backup Job Failed (BackoffLimitExceeded) in status and Event");

    // 7. The password put back; deleting the Database runs the final backup, then it is gone.
    merge_patch(
        ns,
        "secret/shop-credentials",
        r#"{"stringData":{"password":"story-secret"}}"#,
    );
    let start = Instant::now();
    kubectl_ok(&["delete", "-n", ns, "database/shop", "--wait=false"]);
    wait_until(Duration::from_secs(120), "the Database gone", || {
        !crate::support::exists(ns, "database/shop")
    });
    let gone = start.elapsed();
    let last = job_of(ns, "final-backup");
    assert_eq!(
        get(ns, &format!("job/{last}"), "{.status.succeeded}"),
        "1",
        "the final backup succeeded"
    );
    let log = kubectl_ok(&["logs", "-n", ns, &format!("job/{last}")]);
    let final_file = log
        .lines()
        .find_map(|l| l.strip_prefix("backup /backups/"))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the final dump's file in the log: {log}"))
        .to_owned();
    assert!(
        dump_size(ns, "shop-backups", &final_file) > 4_000,
        "the final dump is on the released volume"
    );
    assert!(
        get(ns, "pvc/shop-backups", "{.metadata.ownerReferences}").is_empty(),
        "the backups volume outlives the Database, nobody's"
    );
    steps.done("Database deleted -> final backup succeeded, Database gone");
    assert!(gone < Duration::from_secs(30), "gone in {gone:?}, not under 30 s");
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
        || crate::support::exists(&ns.0, "service/after-svc") && condition(&ns.0, "database/after", "Ready") == "True",
    );
}

/// Every process of the container `id` (a containerd container ID), from the host's /proc: the
/// node runs its containers as processes of this machine.
fn container_pids(id: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|cgroup| cgroup.contains(id)))
        .collect()
}

/// `(idempotency key, succeeded)` of each Job of the `scheduled-backup` action in `ns`.
fn scheduled_jobs(ns: &str) -> Vec<(String, bool)> {
    crate::support::fleet::jobs_of_action(
        ns,
        "scheduled-backup",
        r#"{.metadata.annotations.ruleop\.io/idempotency-key} {.status.succeeded}"#,
    )
    .iter()
    .filter_map(|line| {
        let mut fields = line.split_whitespace();
        Some((fields.next()?.to_owned(), fields.next() == Some("1")))
    })
    .collect()
}

/// Issue 23, step 5: a schedule of one minute backs up exactly once per slot, also across a
/// SIGKILL of the ruleop Pod's process (the kubelet restarts its container; the new process
/// waits out the killed one's lease). Each Job's idempotency key is matched to the minute it was
/// for, by the key function the engine uses.
#[test]
fn a_minutely_schedule_backs_up_once_per_slot_across_a_sigkill_of_the_ruleop_pod() {
    let _ruleop = node::ruleop();
    let ns = Namespace::new("e2e-cron");
    crate::support::apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: cron-credentials}\nstringData: {password: e2e-secret}\n---\n\
         apiVersion: myorg.io/v1\nkind: Database\nmetadata: {name: cron}\n\
         spec: {version: \"16\", replicas: 1, storage: {size: 1Gi}, backup: {enabled: true, schedule: \"* * * * *\"}}\n",
    );
    wait_until(POD_READY, "the Database Ready", || {
        condition(&ns.0, "database/cron", "Ready") == "True"
    });
    wait_until(Duration::from_secs(120), "the first scheduled backup", || {
        !scheduled_jobs(&ns.0).is_empty()
    });
    let pod = node::pods()[0].0.clone();
    let container = get(
        "ruleop-system",
        &format!("pod/{pod}"),
        "{.status.containerStatuses[0].containerID}",
    );
    let id = container.trim_start_matches("containerd://").to_owned();
    let pids = container_pids(&id);
    assert!(!pids.is_empty(), "the ruleop container's processes ({id})");
    let killed = Instant::now();
    for pid in &pids {
        sigkill(*pid);
    }
    wait_until(POD_READY, "the ruleop container restarted and Ready", || {
        get(
            "ruleop-system",
            &format!("pod/{pod}"),
            "{.status.containerStatuses[0].restartCount}",
        ) != "0"
            && node::pods().first().is_some_and(|p| p.2)
    });
    eprintln!(
        "SIGKILL of {pids:?} -> container restarted and Ready in {} ms",
        ms(killed)
    );
    let after_kill = scheduled_jobs(&ns.0).len();
    wait_until(Duration::from_secs(200), "two more slots backed up", || {
        scheduled_jobs(&ns.0).len() >= after_kill + 2
    });
    wait_until(Duration::from_secs(180), "every scheduled backup succeeded", || {
        scheduled_jobs(&ns.0).iter().all(|(_, succeeded)| *succeeded)
    });

    // Which minute each Job was for: the key is a function of the UID, the action and the slot.
    let uid = get(&ns.0, "database/cron", "{.metadata.uid}");
    let created: jiff::Timestamp = get(&ns.0, "database/cron", "{.metadata.creationTimestamp}")
        .parse()
        .expect("creationTimestamp");
    let now = jiff::Timestamp::now();
    let mut slot_of = std::collections::BTreeMap::new();
    let mut minute = jiff::Timestamp::from_second(created.as_second() - created.as_second() % 60).expect("a minute");
    while minute <= now {
        let key = ruleop::engine::plan::actions::idempotency_key(&uid, "scheduled-backup", &format!("slot={minute}"));
        slot_of.insert(key, minute);
        minute += jiff::SignedDuration::from_secs(60);
    }
    let jobs = scheduled_jobs(&ns.0);
    let mut slots: Vec<jiff::Timestamp> = jobs
        .iter()
        .map(|(key, _)| {
            *slot_of
                .get(key)
                .unwrap_or_else(|| panic!("the Job with key {key} is for no minute slot"))
        })
        .collect();
    slots.sort();
    eprintln!("scheduled backups, one per slot: {slots:?}");
    let distinct: std::collections::BTreeSet<_> = slots.iter().collect();
    assert_eq!(distinct.len(), slots.len(), "no slot backed up twice: {slots:?}");
    for pair in slots.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).as_secs(),
            60,
            "consecutive minutes, none missed across the SIGKILL: {slots:?}"
        );
    }
    assert!(slots.len() >= 3, "{slots:?}");
}

/// SIGKILL of a process of this machine (a container's, on the node).
fn sigkill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -KILL {pid}");
}
