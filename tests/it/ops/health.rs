//! `/readyz` and `/healthz` tell the truth: readiness drops while a watched kind is gone or the
//! API server is unreachable and comes back when they do; liveness holds through both (a
//! restart cannot fix the network).

use std::time::Duration;

use crate::support::custom::CustomKind;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

fn not_ready_because(operator: &Operator, needle: &str) -> bool {
    operator
        .get_status("/readyz")
        .is_some_and(|(code, body)| code == 503 && body.contains(needle))
}

#[test]
fn readiness_drops_while_a_watched_crd_is_deleted_and_returns_with_it() {
    let kind = CustomKind::new("health-crd", "Gadget");
    kind.install();
    let ns = Namespace::new("health-crd");
    let (rules, templates) = kind.config_map_rule("gadget");
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &kind.object("one", r#"{"size": "1"}"#));
    wait_until(WAIT, "the first child", || exists(&ns.0, "configmap/one-cm"));

    kind.uninstall();
    wait_until(WAIT, "/readyz to fail naming the deleted kind", || {
        not_ready_because(&operator, "watch of Gadget")
    });
    assert_eq!(operator.get_status("/healthz").map(|(code, _)| code), Some(200));
    wait_until(WAIT, "the deleted kind to be logged", || {
        operator.log_text().contains("the watched kind is no longer served")
    });

    kind.install();
    wait_until(Duration::from_secs(60), "/readyz to recover", || {
        operator.get("/readyz").is_some()
    });
    apply_yaml(&ns.0, &kind.object("two", r#"{"size": "2"}"#));
    wait_until(
        Duration::from_secs(60),
        "a child for a parent created after the CRD came back",
        || exists(&ns.0, "configmap/two-cm"),
    );
    let log = operator.log_text();
    assert_eq!(
        log.matches("the watched kind is no longer served").count(),
        1,
        "logged once per deletion:\n{log}"
    );
}

#[test]
fn readiness_drops_and_liveness_holds_while_the_api_server_is_unreachable() {
    let (mut apiserver, _stdin, kubeconfig) = start_apiserver(&[]);
    let crds = root().join("deploy/crds").display().to_string();
    for args in [
        vec!["apply", "-f", crds.as_str()],
        vec!["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        vec!["create", "namespace", "outage"],
    ] {
        let out = kubectl_at(&kubeconfig, &args, None);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut operator = Operator::start_on(&kubeconfig, &root().join("rules"), &templates(), "outage", &[]);
    assert_eq!(operator.get_status("/healthz").map(|(code, _)| code), Some(200));

    apiserver.kill().expect("stop the API server");
    let _ = apiserver.wait();
    let down = std::time::Instant::now();
    wait_until(WAIT, "/readyz to fail while the API server is down", || {
        not_ready_because(&operator, "failing for")
    });
    eprintln!("readiness dropped {:?} after the API server stopped", down.elapsed());
    let (code, body) = operator.get_status("/healthz").expect("healthz answers");
    assert_eq!(code, 200, "{body}");
    assert!(operator.is_running());
}

/// The shipped Database and Cache rules alone: the Role below grants what they need in one
/// namespace (the Tenant rule needs cluster-wide grants).
fn database_and_cache_rules() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["database.yaml", "cache.yaml"] {
        std::fs::copy(root().join("rules").join(file), dir.path().join(file)).expect("copy rule");
    }
    dir
}

/// A ServiceAccount in `ns` with everything the Database and Cache rules need there except StatefulSets;
/// returns its kubeconfig and the `--serviceaccount` argument for further bindings.
fn account_without_statefulsets(ns: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    kubectl_ok(&["create", "serviceaccount", "ruleop-test", "-n", ns]);
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: partial}\nrules:\n  - apiGroups: [myorg.io]\n    resources: [databases, caches, databases/status, caches/status]\n    verbs: [get, list, watch, patch]\n  - apiGroups: [\"\"]\n    resources: [services, configmaps, persistentvolumeclaims]\n    verbs: [get, list, watch, create, patch, delete]\n  - apiGroups: [\"\"]\n    resources: [pods]\n    verbs: [get, list, watch]\n  - apiGroups: [apps]\n    resources: [deployments]\n    verbs: [get, list, watch, create, patch, delete]\n  - apiGroups: [batch]\n    resources: [jobs]\n    verbs: [create, get, list, watch]\n  - apiGroups: [events.k8s.io]\n    resources: [events]\n    verbs: [create, patch]\n";
    apply_yaml(ns, role);
    let account = format!("--serviceaccount={ns}:ruleop-test");
    kubectl_ok(&["create", "rolebinding", "partial", "-n", ns, "--role=partial", &account]);
    let (dir, kubeconfig) = service_account_kubeconfig(ns, "ruleop-test");
    (dir, kubeconfig, account)
}

#[test]
fn readiness_is_false_while_a_watched_kind_cannot_be_listed() {
    install_crds();
    let ns = Namespace::new("health-list");
    let (_dir, kubeconfig, account) = account_without_statefulsets(&ns.0);
    let rules = database_and_cache_rules();
    let operator = Operator::spawn_on(&kubeconfig, rules.path(), &templates(), &ns.0, &[]);
    wait_until(WAIT, "/readyz to name the kind that cannot be listed", || {
        not_ready_because(&operator, "watch of StatefulSet (apps/v1) failing for")
    });
    let (code, body) = operator.get_status("/readyz").expect("readyz");
    assert!(body.contains("forbidden"), "{code}: {body}");
    assert_eq!(operator.get_status("/healthz").map(|(code, _)| code), Some(200));

    kubectl_ok(&[
        "create",
        "role",
        "statefulsets",
        "-n",
        &ns.0,
        "--verb=get,list,watch,create,patch,delete",
        "--resource=statefulsets.apps",
    ]);
    kubectl_ok(&[
        "create",
        "rolebinding",
        "statefulsets",
        "-n",
        &ns.0,
        "--role=statefulsets",
        &account,
    ]);
    wait_until(Duration::from_secs(60), "/readyz once the kind can be listed", || {
        operator.ready()
    });
}

#[test]
fn a_reconcile_waiting_for_a_cache_that_cannot_sync_does_not_block_shutdown() {
    install_crds();
    let ns = Namespace::new("health-stop");
    let (_dir, kubeconfig, _) = account_without_statefulsets(&ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    let rules = database_and_cache_rules();
    let operator = Operator::spawn_on(&kubeconfig, rules.path(), &templates(), &ns.0, &[]);
    wait_until(WAIT, "a reconcile waiting for the StatefulSet cache", || {
        operator.log_text().contains("waiting for the child caches to sync")
    });
    let stopping = std::time::Instant::now();
    assert!(operator.stop(), "ruleop did not exit within 20 s of SIGTERM");
    eprintln!(
        "SIGTERM to exit with a reconcile waiting on an unsyncable cache: {:?}",
        stopping.elapsed()
    );
}

#[test]
fn sigterm_at_a_random_point_of_start_up_ends_the_process_within_the_shutdown_timeout() {
    install_crds();
    let ns = Namespace::new("health-sigterm");
    apply_yaml(&ns.0, &database("orders", 1, ""));
    let mut timings = RandomTimings::new("sigterm_at_a_random_point_of_start_up");
    let bound = Duration::from_secs(3);
    for round in 0..6 {
        let delay = Duration::from_millis(timings.below(2_500));
        let operator = Operator::launch(
            &control_plane().kubeconfig,
            &root().join("rules"),
            &templates(),
            &ns.0,
            &["--shutdown-timeout", "3s"],
        );
        std::thread::sleep(delay);
        let took = operator.terminate_within(bound + Duration::from_secs(2));
        eprintln!("round {round}: SIGTERM {delay:?} after the start, exit after {took:?}");
        let took = took
            .unwrap_or_else(|| panic!("round {round}: still running 5 s after SIGTERM (the seed is printed above)"));
        assert!(
            took <= bound + Duration::from_millis(500),
            "round {round}: {took:?} (the seed is printed above)"
        );
    }
}

#[test]
fn a_watch_lists_first_by_streaming_or_page_by_page_as_told_and_is_ready_only_once_listed() {
    install_crds();
    for (flag, expected) in [("auto", "streaming"), ("streaming", "streaming"), ("paged", "paged")] {
        let ns = Namespace::new(&format!("health-list-{flag}"));
        apply_yaml(&ns.0, &database("orders", 1, ""));
        let operator = Operator::start_with(&root().join("rules"), &templates(), &ns.0, &["--initial-list", flag]);
        // Ready means every watch listed: the Database created before the start is seen and converges.
        wait_until(WAIT, "the Database listed at start to get its children", || {
            kubectl(&["get", "service", "orders-svc", "-n", &ns.0]).status.success()
        });
        let log = operator.log_text();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("a watch lists its kind first"))
            .collect();
        assert!(
            !lines.is_empty(),
            "--initial-list {flag}: no watch said how it lists:\n{log}"
        );
        assert!(
            lines.iter().all(|l| l.contains(&format!("initial_list={expected}"))),
            "--initial-list {flag}: expected {expected}:\n{}",
            lines.join("\n")
        );
    }
}
