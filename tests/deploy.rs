//! deploy/ installs the operator: `kubectl apply -k deploy/` succeeds on the real control
//! plane, the ClusterRole grants what the rules need and nothing beyond, and the mounted
//! ConfigMaps project into directories `ruleop check` accepts.

mod support;

use std::process::Command;

use serde_json::Value;
use support::mount::{Mount, files_under};
use support::*;

const SA: &str = "--as=system:serviceaccount:ruleop-system:ruleop";

fn can_i(args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i", SA];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&kubectl(&all).stdout).trim() == "yes"
}

fn ruleop(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("ruleop runs")
}

#[test]
fn apply_k_deploy_installs_everything_with_least_privilege() {
    let out = kubectl(&["apply", "-k", &root().join("deploy").display().to_string()]);
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for object in [
        "deployment/ruleop",
        "serviceaccount/ruleop",
        "configmap/ruleop-rules",
        "configmap/ruleop-templates",
        "role/ruleop-status",
    ] {
        assert!(exists("ruleop-system", object), "{object} missing");
    }
    for granted in [
        ["list", "databases.myorg.io", "--all-namespaces"],
        ["watch", "caches.myorg.io", "--all-namespaces"],
        ["patch", "databases.myorg.io", "--subresource=status"],
        ["patch", "statefulsets.apps", "-n=shop"],
        ["delete", "services", "-n=shop"],
        ["create", "jobs.batch", "-n=shop"],
        ["list", "jobs.batch", "-n=shop"],
        ["patch", "databases.myorg.io", "-n=shop"],
        ["create", "namespaces", "--all-namespaces"],
        ["delete", "namespaces", "--all-namespaces"],
        ["patch", "tenants.myorg.io", "-n=platform"],
        ["create", "rolebindings.rbac.authorization.k8s.io", "-n=tenant-acme"],
        [
            "bind",
            "clusterroles.rbac.authorization.k8s.io/edit",
            "--all-namespaces",
        ],
        ["get", "configmaps", "-n=platform"],
        ["create", "events.events.k8s.io", "-n=shop"],
        ["patch", "configmaps", "-n=ruleop-system"],
    ] {
        assert!(can_i(&granted), "should be allowed: {granted:?}");
    }
    for denied in [
        ["create", "clusterrolebindings", "--all-namespaces"],
        ["get", "secrets", "-n=shop"],
        ["delete", "jobs.batch", "-n=shop"],
        ["delete", "databases.myorg.io", "-n=shop"],
        ["patch", "configmaps", "-n=shop"],
        ["list", "pods", "--all-namespaces"],
        ["update", "databases.myorg.io", "-n=shop"],
        ["update", "tenants.myorg.io", "-n=platform"],
        ["delete", "tenants.myorg.io", "-n=platform"],
        [
            "bind",
            "clusterroles.rbac.authorization.k8s.io/cluster-admin",
            "--all-namespaces",
        ],
        ["create", "clusterroles.rbac.authorization.k8s.io", "--all-namespaces"],
        [
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            "--all-namespaces",
        ],
    ] {
        assert!(!can_i(&denied), "should be denied: {denied:?}");
    }
}

/// Projects a ConfigMap into a mount as the kubelet would, using the volume's `items` if any.
fn project(configmap: &str, items: Option<&Vec<Value>>) -> Mount {
    let cm: Value = serde_json::from_str(&kubectl_ok(&[
        "get",
        "configmap",
        configmap,
        "-n",
        "ruleop-system",
        "-o",
        "json",
    ]))
    .expect("json");
    let data = cm["data"].as_object().expect("data");
    let files: Vec<(String, String)> = match items {
        Some(items) => items
            .iter()
            .map(|i| {
                (
                    i["path"].as_str().expect("path").to_owned(),
                    data[i["key"].as_str().expect("key")].as_str().expect("text").to_owned(),
                )
            })
            .collect(),
        None => data
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_owned()))
            .collect(),
    };
    Mount::new(&files)
}

#[test]
fn the_mounted_configmaps_are_a_valid_rule_set() {
    let out = kubectl(&["apply", "-k", &root().join("deploy").display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deployment: Value = serde_json::from_str(&kubectl_ok(&[
        "get",
        "deployment",
        "ruleop",
        "-n",
        "ruleop-system",
        "-o",
        "json",
    ]))
    .expect("json");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).expect("volume");
    let rules = project(
        volume("rules")["configMap"]["name"].as_str().expect("name"),
        volume("rules")["configMap"]["items"].as_array(),
    );
    let templates = project(
        volume("templates")["configMap"]["name"].as_str().expect("name"),
        volume("templates")["configMap"]["items"].as_array(),
    );
    let out = ruleop(&[
        "check",
        "--rules",
        &rules.path().display().to_string(),
        "--templates",
        &templates.path().display().to_string(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        files_under(templates.path()).len(),
        files_under(&root().join("templates")).len(),
        "every template is mounted"
    );
}

#[test]
fn generated_deploy_files_are_fresh() {
    let out = ruleop(&["rbac"]);
    let committed = std::fs::read_to_string(root().join("deploy/rbac/clusterrole.yaml")).expect("clusterrole.yaml");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        committed,
        "stale: run `make rbac`"
    );
    assert_eq!(
        files_under(&root().join("deploy/config/rules")),
        files_under(&root().join("rules")),
        "stale: run `make deploy-config`"
    );
    assert_eq!(
        files_under(&root().join("deploy/config/templates")),
        files_under(&root().join("templates")),
        "stale: run `make deploy-config`"
    );
}

#[test]
fn ruleop_run_as_the_deploy_service_account_converges_a_database() {
    let out = kubectl(&["apply", "-k", &root().join("deploy").display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    kubectl_ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);
    let (_dir, kubeconfig) = service_account_kubeconfig("ruleop-system", "ruleop");
    let whoami = Command::new("kubectl")
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("kubectl auth whoami");
    assert_eq!(
        String::from_utf8_lossy(&whoami.stdout),
        "system:serviceaccount:ruleop-system:ruleop",
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );

    let ns = Namespace::new("deploy-sa");
    // What the Deployment mounts: deploy/config (checked equal to rules/ and templates/ above).
    let operator = Operator::start_on(
        &kubeconfig,
        &root().join("deploy/config/rules"),
        &root().join("deploy/config/templates"),
        &ns.0,
        &["--status-namespace", "ruleop-system"],
    );
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    wait_until(
        std::time::Duration::from_secs(60),
        "the Database to converge under deploy/'s RBAC",
        || {
            get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
                && get(&ns.0, "database/orders", "{.status.actions.backup.phase}") == "Done"
        },
    );
    for child in ["service/orders-svc", "statefulset/orders"] {
        assert!(exists(&ns.0, child), "{child} missing");
    }
    assert_eq!(
        kubectl_ok(&["get", "jobs", "-n", &ns.0, "-o", "name"]).lines().count(),
        1,
        "one backup Job"
    );
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].reason}"]);
    assert!(
        events.contains("ChildCreated") && events.contains("ActionRan"),
        "events: {events}"
    );
    assert_eq!(
        get("ruleop-system", "configmap/ruleop-status", "{.data.state}"),
        "Loaded"
    );
    let log = operator.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a request was forbidden:\n{log}"
    );
}
