//! The kustomize install: `kubectl apply -k .` at the repository root (the generated
//! kustomization.yaml: deploy/crds, the chart rendered into deploy/base, and rules/ and
//! templates/ as ConfigMaps) succeeds on the real control plane, the ClusterRole grants what the
//! rules need and nothing beyond, and the mounted ConfigMaps project into directories `ruleop
//! check` accepts.

use std::process::Command;
use std::time::Duration;

use crate::support::mount::files_under;
use crate::support::*;
use serde_json::Value;

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

/// `kubectl apply -k .` in the repository root, once for all tests of this file: two applies at
/// once race (both find the Namespace missing, the second create meets AlreadyExists).
fn apply_deploy() {
    static APPLIED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut applied = APPLIED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !*applied {
        let out = kubectl(&["apply", "-k", &root().display().to_string()]);
        assert!(
            out.status.success(),
            "kubectl apply -k .: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        *applied = true;
    }
}

#[test]
fn apply_k_deploy_installs_everything_with_least_privilege() {
    apply_deploy();
    // The admin port the NetworkPolicy names is the container's.
    assert_eq!(
        get(
            "ruleop-system",
            "networkpolicy/ruleop",
            "{.spec.ingress[0].ports[0].port}"
        ),
        get(
            "ruleop-system",
            "deployment/ruleop",
            "{.spec.template.spec.containers[0].ports[0].name}"
        )
    );
    for object in [
        "deployment/ruleop",
        "serviceaccount/ruleop",
        "configmap/ruleop-rules",
        "configmap/ruleop-templates-database",
        "configmap/ruleop-templates-cache",
        "role/ruleop-status",
        "role/ruleop-leader-election",
        "poddisruptionbudget/ruleop",
        "networkpolicy/ruleop",
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
        ["patch", "configmaps/ruleop-status", "-n=ruleop-system"],
        ["create", "configmaps/ruleop-status", "-n=ruleop-system"],
        ["list", "configmaps", "-n=ruleop-system"],
        // The Database rule's pod lookup (a missing credentials Secret, named in Ready).
        ["list", "pods", "--all-namespaces"],
        ["create", "configmaps", "-n=ruleop-system"],
        ["delete", "configmaps", "-n=ruleop-system"],
        ["get", "leases.coordination.k8s.io", "-n=ruleop-system"],
        ["create", "leases.coordination.k8s.io", "-n=ruleop-system"],
        ["update", "leases.coordination.k8s.io", "-n=ruleop-system"],
    ] {
        assert!(can_i(&granted), "should be allowed: {granted:?}");
    }
    for denied in [
        ["create", "clusterrolebindings", "--all-namespaces"],
        ["get", "secrets", "-n=shop"],
        ["delete", "jobs.batch", "-n=shop"],
        ["delete", "databases.myorg.io", "-n=shop"],
        ["patch", "configmaps", "-n=shop"],
        ["patch", "configmaps/ruleop-rules", "-n=ruleop-system"],
        ["create", "pods", "-n=shop"],
        ["delete", "pods", "-n=shop"],
        ["update", "databases.myorg.io", "-n=shop"],
        ["update", "leases.coordination.k8s.io", "-n=shop"],
        ["delete", "leases.coordination.k8s.io", "-n=ruleop-system"],
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

/// Writes what the kubelet would mount for the Deployment's container: each ConfigMap volume's
/// keys as files under its mountPath, below `root`.
fn project_mounts(deployment: &Value, root: &std::path::Path) {
    let spec = &deployment["spec"]["template"]["spec"];
    let volumes = spec["volumes"].as_array().expect("volumes");
    for mount in spec["containers"][0]["volumeMounts"].as_array().expect("volumeMounts") {
        assert!(
            mount.get("subPath").is_none(),
            "a subPath mount never sees updates: {mount}"
        );
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).expect("volume");
        assert!(
            volume["configMap"]["items"].is_null(),
            "each template is listed once: {volume}"
        );
        let name = volume["configMap"]["name"].as_str().expect("configMap");
        let cm: Value = serde_json::from_str(&kubectl_ok(&[
            "get",
            "configmap",
            name,
            "-n",
            "ruleop-system",
            "-o",
            "json",
        ]))
        .expect("json");
        let dir = root.join(mount["mountPath"].as_str().expect("mountPath").trim_start_matches('/'));
        std::fs::create_dir_all(&dir).expect("mount dir");
        for (key, text) in cm["data"].as_object().expect("data") {
            std::fs::write(dir.join(key), text.as_str().expect("text")).expect("write");
        }
    }
}

#[test]
fn the_mounted_configmaps_are_a_valid_rule_set() {
    apply_deploy();
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
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        container["image"], "ruleop:0.1.0",
        "the kustomize images entry names the image"
    );
    let mounted = tempfile::tempdir().expect("tempdir");
    project_mounts(&deployment, mounted.path());
    let (rules, templates) = (
        mounted.path().join("etc/ruleop/rules"),
        mounted.path().join("etc/ruleop/templates"),
    );
    let out = ruleop(&[
        "check",
        "--rules",
        &rules.display().to_string(),
        "--templates",
        &templates.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut mounted_templates = files_under(&templates);
    let mut shipped = files_under(&root().join("templates"));
    mounted_templates.sort();
    shipped.sort();
    assert_eq!(mounted_templates, shipped, "every template is mounted at its path");
}

#[test]
fn ruleop_run_as_the_deploy_service_account_converges_a_database() {
    apply_deploy();
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
    // What the Deployment mounts: the ConfigMaps the root kustomization makes of these.
    let operator = Operator::start_on(
        &kubeconfig,
        &root().join("rules"),
        &root().join("templates"),
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
    for child in ["service/orders-svc", "statefulset/orders", "pvc/orders-backups"] {
        assert!(exists(&ns.0, child), "{child} missing");
    }
    assert_eq!(
        kubectl_ok(&["get", "jobs", "-n", &ns.0, "-o", "name"]).lines().count(),
        1,
        "one backup Job"
    );
    // One Event for the reconcile that created the children and ran the backup.
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "-o",
        "jsonpath={.items[*].reason} {.items[*].message}",
    ]);
    assert!(
        events.contains("ActionRan")
            && events.contains(
                "created Service orders-svc, StatefulSet orders, PersistentVolumeClaim orders-backups; ran backup"
            ),
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

/// Every string and list a tenant can set in `node` (a CRD's schema of `spec`) is bounded: the
/// paths of those that are not.
fn unbounded(node: &Value, path: &str) -> Vec<String> {
    let mut found = Vec::new();
    let has = |key: &str| node.get(key).is_some();
    let is = |ty: &str| node.get("type").and_then(Value::as_str) == Some(ty);
    if has("x-kubernetes-preserve-unknown-fields") {
        found.push(format!("{path} (keeps unknown fields)"));
    }
    if (is("string") || has("x-kubernetes-int-or-string")) && !has("maxLength") && !has("enum") {
        found.push(format!("{path} (string without maxLength)"));
    }
    if is("array") && !has("maxItems") {
        found.push(format!("{path} (list without maxItems)"));
    }
    if let Some(items) = node.get("items") {
        found.extend(unbounded(items, &format!("{path}[]")));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            found.extend(unbounded(child, &format!("{path}.{name}")));
        }
    }
    found
}

#[test]
fn every_string_and_list_a_tenant_sets_in_the_shipped_crds_is_bounded() {
    apply_deploy();
    for crd in ["databases.myorg.io", "caches.myorg.io", "tenants.myorg.io"] {
        let served: Value = serde_json::from_str(&kubectl_ok(&["get", "crd", crd, "-o", "json"])).expect("CRD as JSON");
        for version in served["spec"]["versions"].as_array().expect("versions") {
            let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
            assert!(spec.is_object(), "{crd}: no spec schema");
            let found = unbounded(spec, "spec");
            assert!(found.is_empty(), "{crd} {}: unbounded {found:?}", version["name"]);
        }
    }
    // The API server holds tenants to them.
    let ns = Namespace::new("deploy-bounded");
    let long = "1".repeat(129);
    let out = kubectl_with_stdin(
        &["create", "-n", &ns.0, "-f", "-"],
        Some(&format!(
            "apiVersion: myorg.io/v1\nkind: Database\nmetadata: {{name: long}}\nspec: {{version: \"{long}\", storage: {{size: 1Gi}}}}\n"
        )),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("spec.version"), "{stderr}");
}

/// Deletes the admission policy's binding and the policy when the test ends, pass or fail: other
/// tests run ruleop as the same ServiceAccount.
struct AdmissionPolicy;

impl Drop for AdmissionPolicy {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "-k",
            &root().join("deploy/admission").display().to_string(),
            "--wait=false",
        ]);
    }
}

#[test]
fn the_admission_policy_holds_ruleops_service_account_to_its_namespaces_and_bindings() {
    apply_deploy();
    let dir = root().join("deploy/admission").display().to_string();
    kubectl_ok(&["apply", "-k", &dir]);
    let _policy = AdmissionPolicy;
    // What RBAC alone allows, which the policy narrows.
    for granted in [
        ["create", "namespaces", "--all-namespaces"],
        ["delete", "namespaces", "--all-namespaces"],
        ["patch", "namespaces", "--all-namespaces"],
        [
            "bind",
            "clusterroles.rbac.authorization.k8s.io/edit",
            "--all-namespaces",
        ],
    ] {
        assert!(can_i(&granted), "RBAC should allow {granted:?}");
    }
    let as_ruleop = |args: &[&str], yaml: &str| {
        let mut all = vec![SA];
        all.extend_from_slice(args);
        let out = kubectl_with_stdin(&all, Some(yaml));
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let namespace = |name: &str, labelled: bool| {
        let labels = if labelled {
            "\n  labels: {ruleop.io/rule: tenant}"
        } else {
            ""
        };
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}{labels}\n")
    };
    // The API server loads a new policy within about a second; a dry run meets admission too.
    let mut refused = String::new();
    wait_until(
        Duration::from_secs(60),
        "the policy to refuse an unlabelled Namespace",
        || {
            let (ok, err) = as_ruleop(
                &["create", "--dry-run=server", "-f", "-"],
                &namespace("vap-unlabelled", false),
            );
            refused = err;
            !ok && refused.contains("ruleop-limits")
        },
    );
    assert!(
        refused.contains("ruleop may create only Namespaces carrying its ruleop.io/rule label"),
        "{refused}"
    );
    // Labelled: created and deleted. RBAC alone allowed both for any Namespace.
    let ours = format!("vap-ours-{}", std::process::id());
    let (ok, err) = as_ruleop(&["create", "-f", "-"], &namespace(&ours, true));
    assert!(ok, "a labelled Namespace: {err}");
    let (ok, err) = as_ruleop(&["delete", "namespace", &ours, "--wait=false"], "");
    assert!(ok, "deleting its own Namespace: {err}");
    // A Namespace someone else made: neither changed nor deleted, even to add the label.
    let theirs = Namespace::new("vap-theirs");
    for args in [
        vec!["label", "namespace", theirs.0.as_str(), "ruleop.io/rule=tenant"],
        vec!["delete", "namespace", theirs.0.as_str(), "--wait=false"],
    ] {
        let (ok, err) = as_ruleop(&args, "");
        assert!(
            !ok && err.contains("ruleop-limits") && err.contains(&theirs.0),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        get("", &format!("namespace/{}", theirs.0), "{.status.phase}"),
        "Active",
        "the Namespace is still there, not terminating"
    );
    // RoleBindings: edit to a person is fine; edit to every authenticated user, or to
    // kube-system's ServiceAccount, is not, though RBAC lets ruleop bind edit.
    let binding = |name: &str, role: &str, subject: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{subject}]\n",
            ns = theirs.0
        )
    };
    let person = "{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice@example.com}";
    let (ok, err) = as_ruleop(
        &["create", "--dry-run=server", "-f", "-"],
        &binding("alice", "edit", person),
    );
    assert!(ok, "edit for a person: {err}");
    for (name, role, subject, why) in [
        (
            "everyone",
            "edit",
            "{apiGroup: rbac.authorization.k8s.io, kind: Group, name: 'system:authenticated'}",
            "system: user or group",
        ),
        (
            "controller",
            "view",
            "{kind: ServiceAccount, name: default, namespace: kube-system}",
            "ServiceAccount of kube-system",
        ),
    ] {
        let (ok, err) = as_ruleop(
            &["create", "--dry-run=server", "-f", "-"],
            &binding(name, role, subject),
        );
        assert!(!ok && err.contains(why), "{name}: {err}");
    }
    // The policy's ClusterRoles are the ones RBAC lets ruleop bind (the chart's
    // rbac.bindableClusterRoles, rendered into the ClusterRole ruleop-tenant-bind).
    let policy = std::fs::read_to_string(root().join("deploy/admission/policy.yaml")).expect("policy.yaml");
    let bind = std::fs::read_to_string(root().join("deploy/helm/ruleop/values.yaml")).expect("values.yaml");
    assert!(
        bind.contains("bindableClusterRoles: [admin, edit, view]"),
        "the chart's rbac.bindableClusterRoles changed"
    );
    assert!(
        policy.contains("object.roleRef.name in ['admin', 'edit', 'view']"),
        "the policy's ClusterRoles differ from the chart's rbac.bindableClusterRoles"
    );
    // Cluster admins are not matched.
    kubectl_ok(&["label", "namespace", &theirs.0, "team=payments"]);
}
