//! deploy/helm/ruleop, the one hand-written description of the install (the kustomize install
//! is rendered from it by `make generate`): `helm lint` passes, values change what they say, and
//! `helm install` on a control plane of its own creates the objects and grants what the
//! kustomize install grants. Helm is the pinned one `scripts/helm.sh` builds from the Go module
//! proxy.

use std::collections::BTreeMap;

use crate::support::helm::{CHART, helm_ok};
use crate::support::mount::files_under;
use crate::support::*;
use serde_json::Value;

/// `helm template` of the chart in namespace ruleop-system, CRDs included, with `extra` args.
fn template(extra: &[&str]) -> BTreeMap<String, Value> {
    let mut args = vec!["template", "ruleop", CHART, "-n", "ruleop-system", "--include-crds"];
    args.extend_from_slice(extra);
    objects(&helm_ok(None, &args))
}

/// The objects of a multi-document YAML stream by `kind namespace/name`, parsed (so quoting,
/// key order and comments do not count).
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    documents
        .into_iter()
        .filter(|object| !object.is_null())
        .map(|object| {
            let meta = &object["metadata"];
            let key = format!(
                "{} {}/{}",
                object["kind"].as_str().expect("kind"),
                meta["namespace"].as_str().unwrap_or(""),
                meta["name"].as_str().expect("name")
            );
            (key, object)
        })
        .collect()
}

#[test]
fn helm_lint_passes() {
    let out = helm_ok(None, &["lint", "--strict", CHART]);
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
}

#[test]
fn the_default_values_install_rules_templates_and_crds_through_the_charts_symlinks() {
    let objects = template(&[]);
    for (configmap, dir) in [
        ("ruleop-rules", "rules"),
        ("ruleop-templates-cache", "templates/cache"),
        ("ruleop-templates-database", "templates/database"),
        ("ruleop-templates-tenant", "templates/tenant"),
    ] {
        let data = &objects[&format!("ConfigMap ruleop-system/{configmap}")]["data"];
        let files = files_under(&root().join(dir));
        assert_eq!(
            data.as_object().map(|data| data.len()),
            Some(files.len()),
            "{configmap}: {data}"
        );
        for (file, text) in files {
            assert_eq!(data[&file], Value::from(text), "{configmap}: {file} is {dir}/{file}");
        }
    }
    for crd in ["caches.myorg.io", "databases.myorg.io", "tenants.myorg.io"] {
        assert!(
            objects.contains_key(&format!("CustomResourceDefinition /{crd}")),
            "{crd}"
        );
    }
}

#[test]
fn values_change_the_image_replicas_shards_and_where_the_rules_come_from() {
    let objects = template(&[
        "--set",
        "image.repository=registry.example/ruleop,image.tag=0.2.0,replicas=3,shards=4",
        "--set",
        "rules.existingConfigMap=team-rules,networkPolicy.enabled=false,podDisruptionBudget.enabled=false",
        "--set-json",
        r#"rules.existingTemplateConfigMaps={"database":"team-db","team/app":"team-app"}"#,
    ]);
    let deployment = &objects["Deployment ruleop-system/ruleop"];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "registry.example/ruleop:0.2.0");
    assert!(
        pod["containers"][0]["args"]
            .as_array()
            .expect("args")
            .contains(&Value::from("--shards=4")),
        "{}",
        pod["containers"][0]["args"]
    );
    assert_eq!(
        pod["volumes"],
        serde_json::json!([
            {"name": "rules", "configMap": {"name": "team-rules"}},
            {"name": "templates-database", "configMap": {"name": "team-db"}},
            {"name": "templates-team-app", "configMap": {"name": "team-app"}},
        ])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][2]["mountPath"],
        "/etc/ruleop/templates/team/app"
    );
    let configmaps: Vec<&String> = objects.keys().filter(|key| key.starts_with("ConfigMap ")).collect();
    assert!(
        configmaps.is_empty(),
        "an existing ConfigMap is used, none made: {configmaps:?}"
    );
    for absent in [
        "NetworkPolicy ruleop-system/ruleop",
        "PodDisruptionBudget ruleop-system/ruleop",
    ] {
        assert!(!objects.contains_key(absent), "{absent}");
    }
}

#[test]
fn inline_rules_in_values_become_the_mounted_configmaps() {
    let objects = template(&[
        "--set-json",
        r#"rules.files={"app.yaml":"kind: Rule\n"}"#,
        "--set-json",
        r#"rules.templates={"app":{"svc.yaml.j2":"kind: Service\n"}}"#,
    ]);
    assert_eq!(
        objects["ConfigMap ruleop-system/ruleop-rules"]["data"],
        serde_json::json!({"app.yaml": "kind: Rule\n"})
    );
    assert_eq!(
        objects["ConfigMap ruleop-system/ruleop-templates-app"]["data"],
        serde_json::json!({"svc.yaml.j2": "kind: Service\n"})
    );
    assert!(!objects.contains_key("ConfigMap ruleop-system/ruleop-templates-database"));
    let pod = &objects["Deployment ruleop-system/ruleop"]["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][1],
        serde_json::json!({"name": "templates-app", "configMap": {"name": "ruleop-templates-app"}})
    );
}

#[test]
fn helm_install_creates_the_objects_and_helm_upgrade_rolls_a_changed_rule() {
    // A control plane of its own: kustomize.rs's `kubectl apply -k .` owns the same
    // cluster-scoped names on the shared one, and Helm refuses to adopt them.
    let plane = restartable_control_plane();
    helm_ok(
        Some(&plane.kubeconfig),
        &["install", "ruleop", CHART, "-n", "ruleop-system", "--create-namespace"],
    );
    for (namespace, object) in [
        ("", "crd/databases.myorg.io"),
        ("", "clusterrole/ruleop"),
        ("", "clusterrolebinding/ruleop-tenant-bind"),
        ("ruleop-system", "deployment/ruleop"),
        ("ruleop-system", "configmap/ruleop-rules"),
        ("ruleop-system", "configmap/ruleop-templates-database"),
        ("ruleop-system", "role/ruleop-leader-election"),
        ("ruleop-system", "networkpolicy/ruleop"),
        ("ruleop-system", "poddisruptionbudget/ruleop"),
    ] {
        assert!(exists(namespace, object), "{object} missing after helm install");
    }
    let can_i = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--as=system:serviceaccount:ruleop-system:ruleop"];
        all.extend_from_slice(args);
        text(&kubectl(&all).stdout).trim() == "yes"
    };
    assert!(can_i(&["patch", "statefulsets.apps", "-n=shop"]));
    assert!(!can_i(&["get", "secrets", "-n=shop"]));

    // An edited template reaches the mounted ConfigMap through `helm upgrade`.
    let edited = "# edited\nkind: Service\n";
    helm_ok(
        Some(&plane.kubeconfig),
        &[
            "upgrade",
            "ruleop",
            CHART,
            "-n",
            "ruleop-system",
            "--set-json",
            r#"rules.files={"app.yaml":"kind: Rule\n"}"#,
            "--set-json",
            &format!(
                r#"rules.templates={{"database":{{"service.yaml.j2":{}}}}}"#,
                Value::from(edited)
            ),
        ],
    );
    assert_eq!(
        get(
            "ruleop-system",
            "configmap/ruleop-templates-database",
            "{.data.service\\.yaml\\.j2}"
        ),
        edited
    );
    assert!(
        !exists("ruleop-system", "configmap/ruleop-templates-cache"),
        "a template directory dropped from the values is pruned"
    );
}
