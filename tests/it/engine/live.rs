//! The live engine against the real control plane: children, status, drift, pruning, errors.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

fn shipped_operator(ns: &Namespace) -> Operator {
    install_crds();
    Operator::start(&root().join("rules"), &templates(), &ns.0)
}

fn converged(ns: &str, name: &str) -> bool {
    let generation = get(ns, &format!("database/{name}"), "{.metadata.generation}");
    !generation.is_empty() && get(ns, &format!("database/{name}"), "{.status.observedGeneration}") == generation
}

#[test]
fn a_new_database_gets_its_service_statefulset_and_status() {
    let ns = Namespace::new("live-create");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 2, ""));
    wait_until(WAIT, "the children", || {
        exists(&ns.0, "service/orders-svc") && exists(&ns.0, "statefulset/orders")
    });
    wait_until(WAIT, "observedGeneration", || converged(&ns.0, "orders"));

    assert_eq!(get(&ns.0, "service/orders-svc", "{.spec.ports[0].port}"), "5432");
    assert_eq!(get(&ns.0, "service/orders-svc", "{.spec.selector.app}"), "orders");
    let uid = get(&ns.0, "database/orders", "{.metadata.uid}");
    for child in ["service/orders-svc", "statefulset/orders"] {
        assert_eq!(
            get(&ns.0, child, "{.metadata.ownerReferences[0].uid}"),
            uid,
            "{child} is owned"
        );
        assert_eq!(get(&ns.0, child, "{.metadata.ownerReferences[0].controller}"), "true");
    }
    assert_eq!(
        get(&ns.0, "statefulset/orders", "{.spec.template.spec.containers[0].image}"),
        "postgres:16"
    );
    assert_eq!(
        get(&ns.0, "database/orders", "{.status.endpoint}"),
        format!("orders-svc.{}.svc:5432", ns.0)
    );
    // No kubelet runs the pods, so the StatefulSet reports no ready replica: Ready is False for
    // that reason, and turns True once its status (written here as its controller would) says so.
    assert_eq!(
        (
            ready(&ns.0, "orders", "status"),
            ready(&ns.0, "orders", "reason"),
            ready(&ns.0, "orders", "message")
        ),
        ("False".into(), "ReplicasNotReady".into(), "0/2 replicas ready".into())
    );
    merge_patch_status(
        &ns.0,
        "statefulset/orders",
        r#"{"status":{"replicas":2,"readyReplicas":2}}"#,
    );
    wait_until(WAIT, "Ready=True once the replicas are ready", || {
        ready(&ns.0, "orders", "reason") == "AllReplicasReady"
    });
    assert_eq!(ready(&ns.0, "orders", "status"), "True");
    assert_eq!(ready(&ns.0, "orders", "message"), "2/2 replicas ready");
    assert_eq!(get(&ns.0, "database/orders", "{.status.readyReplicas}"), "2");
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].reason}"]);
    assert!(events.contains("ChildCreated"), "events: {events}");
}

#[test]
fn a_replicas_change_updates_the_statefulset_and_observed_generation() {
    let ns = Namespace::new("live-update");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "convergence", || converged(&ns.0, "orders"));
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":3}}"#);
    wait_until(WAIT, "3 replicas", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "3"
    });
    wait_until(WAIT, "observedGeneration 2", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "2"
    });
}

#[test]
fn drift_is_reverted_without_waiting_for_resync_and_foreign_fields_survive() {
    let ns = Namespace::new("live-drift");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "convergence", || {
        converged(&ns.0, "orders") && exists(&ns.0, "statefulset/orders")
    });

    kubectl_ok(&[
        "annotate",
        "-n",
        &ns.0,
        "service/orders-svc",
        "other.io/owner=someone-else",
    ]);
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "service/orders-svc",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/ports/0/port","value":6000}]"#,
    ]);
    let took = wait_until(Duration::from_secs(10), "the port to be restored", || {
        get(&ns.0, "service/orders-svc", "{.spec.ports[*].port}") == "5432"
    });
    eprintln!("port drift reverted in {took:?} (resync is 10m)");
    assert_eq!(
        get(&ns.0, "service/orders-svc", "{.metadata.annotations.other\\.io/owner}"),
        "someone-else"
    );

    let old_uid = get(&ns.0, "statefulset/orders", "{.metadata.uid}");
    kubectl_ok(&["delete", "-n", &ns.0, "statefulset/orders", "--wait=false"]);
    wait_until(Duration::from_secs(10), "the StatefulSet to be recreated", || {
        let uid = get(&ns.0, "statefulset/orders", "{.metadata.uid}");
        !uid.is_empty() && uid != old_uid
    });
}

#[test]
fn a_child_whose_when_turns_false_is_pruned_and_deleting_the_parent_removes_all() {
    let ns = Namespace::new("live-prune");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the StatefulSet", || exists(&ns.0, "statefulset/orders"));
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":0}}"#);
    wait_until(WAIT, "the StatefulSet to be pruned", || {
        !exists(&ns.0, "statefulset/orders")
    });
    assert!(exists(&ns.0, "service/orders-svc"), "the Service is still desired");

    kubectl_ok(&["delete", "-n", &ns.0, "database/orders", "--wait=false"]);
    wait_until(WAIT, "the garbage collector to remove the Service", || {
        !exists(&ns.0, "service/orders-svc")
    });
}

#[test]
fn a_template_error_on_one_parent_applies_nothing_for_it_and_others_keep_going() {
    let ns = Namespace::new("live-error");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("broken", 1, "    className: \"fast: ssd\"\n"));
    apply_yaml(&ns.0, &database("healthy", 1, ""));
    wait_until(WAIT, "the healthy parent's children", || {
        exists(&ns.0, "statefulset/healthy")
    });
    wait_until(WAIT, "Ready=False on the broken parent", || {
        get(
            &ns.0,
            "database/broken",
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        ) == "RenderFailed"
    });
    let message = get(
        &ns.0,
        "database/broken",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    );
    assert!(
        message.contains("database/statefulset.yaml.j2:56"),
        "message names the template line: {message}"
    );
    assert!(
        !exists(&ns.0, "service/broken-svc"),
        "nothing is applied for the broken parent"
    );
    assert!(!exists(&ns.0, "statefulset/broken"));
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "involvedObject.name=broken",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("RenderFailed"), "events: {events}");
}

#[test]
fn two_rules_for_two_kinds_run_side_by_side() {
    let ns = Namespace::new("live-two");
    let _operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    apply_yaml(
        &ns.0,
        "apiVersion: myorg.io/v1\nkind: Cache\nmetadata: {name: sessions}\nspec: {maxMemory: 64mb}\n",
    );
    wait_until(WAIT, "both parents' children", || {
        exists(&ns.0, "statefulset/orders")
            && exists(&ns.0, "deployment/sessions-cache")
            && exists(&ns.0, "service/sessions-cache")
    });
    wait_until(WAIT, "the Cache status", || {
        get(&ns.0, "cache/sessions", "{.status.address}") == format!("sessions-cache.{}.svc:6379", ns.0)
    });
}

fn ready(ns: &str, name: &str, field: &str) -> String {
    get(
        ns,
        &format!("database/{name}"),
        &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
    )
}

#[test]
fn an_immutable_change_is_reported_and_not_retried_hot() {
    let ns = Namespace::new("live-immutable");
    let operator = shipped_operator(&ns);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "convergence", || {
        converged(&ns.0, "orders") && exists(&ns.0, "statefulset/orders")
    });
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"storage":{"size":"2Gi"}}}"#);
    wait_until(WAIT, "Ready=False ImmutableFieldChanged", || {
        ready(&ns.0, "orders", "reason") == "ImmutableFieldChanged"
    });
    let message = ready(&ns.0, "orders", "message");
    assert!(
        message.contains("StatefulSet") && message.contains("onImmutableChange: recreate"),
        "{message}"
    );
    let storage = "{.spec.volumeClaimTemplates[0].spec.resources.requests.storage}";
    assert_eq!(get(&ns.0, "statefulset/orders", storage), "1Gi");
    // Not retried hot: the failure is not an error for the controller's backoff (which would
    // retry in 0.5 s, 1 s, 2 s, ...), so each reconcile, here one caused by a later event,
    // tries the StatefulSet once and nothing else retries it.
    let statefulset_writes = || operator.metric("ruleop_api_writes_total", &[("kind", "StatefulSet")]);
    let (writes, reconciles) = (statefulset_writes(), operator.reconciles("database"));
    operator.reconciled_after("database", || {
        kubectl_ok(&["label", "-n", &ns.0, "database/orders", "touched=yes"]);
    });
    let reconciled = operator.reconciles("database") - reconciles;
    assert!(
        statefulset_writes() - writes <= reconciled,
        "at most one StatefulSet apply per reconcile: {} writes in {reconciled} reconciles",
        statefulset_writes() - writes
    );
    assert_eq!(
        operator.metric("ruleop_reconciles_total", &[("rule", "database"), ("result", "error")]),
        0,
        "an immutable change is reported, not retried as an error"
    );
    assert_eq!(ready(&ns.0, "orders", "reason"), "ImmutableFieldChanged");
}

#[test]
fn on_immutable_change_recreate_replaces_the_child() {
    install_crds();
    let ns = Namespace::new("live-recreate");
    let rules = rules_dir(|text| {
        text.replace(
            "      when: spec.replicas > 0\n",
            "      when: spec.replicas > 0\n      onImmutableChange: recreate\n",
        )
    });
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "convergence", || {
        converged(&ns.0, "orders") && exists(&ns.0, "statefulset/orders")
    });
    let old_uid = get(&ns.0, "statefulset/orders", "{.metadata.uid}");
    merge_patch(&ns.0, "database/orders", r#"{"spec":{"storage":{"size":"2Gi"}}}"#);
    wait_until(WAIT, "the StatefulSet to be recreated with 2Gi", || {
        let uid = get(&ns.0, "statefulset/orders", "{.metadata.uid}");
        !uid.is_empty()
            && uid != old_uid
            && get(
                &ns.0,
                "statefulset/orders",
                "{.spec.volumeClaimTemplates[0].spec.resources.requests.storage}",
            ) == "2Gi"
    });
    wait_until(WAIT, "Ready not failing", || {
        ready(&ns.0, "orders", "reason") != "ImmutableFieldChanged"
    });
}

#[test]
fn typed_status_values_reach_a_typed_crd_and_a_failing_or_refused_one_costs_only_itself() {
    let kind = custom::CustomKind::new("live-typed", "Copies");
    kind.install_crd(&kind.crd_with_typed_status(
        r#"{"capacity": {"type": "integer"}, "sized": {"type": "boolean"},
            "zones": {"type": "array", "items": {"type": "string"}}, "label": {"type": "string"}}"#,
    ));
    let ns = Namespace::new("live-typed");
    let (rules, templates) = kind.rule_files(
        "copies",
        "  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: copies/cm.yaml.j2\n  status:\n    fields:\n      capacity: {value: \"spec.replicas * 10\"}\n      sized: {value: \"spec.replicas > 0\"}\n      zones: {value: \"spec.zones | sort\"}\n      label: \"{{ spec.zones | length }} zones\"\n",
        &[("copies/cm.yaml.j2", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-cm\n")],
    );
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let parent = format!("{}/orders", kind.resource());
    apply_yaml(&ns.0, &kind.object("orders", r#"{"replicas": 3, "zones": ["b", "a"]}"#));
    wait_until(WAIT, "the typed status", || {
        get(&ns.0, &parent, "{.status.capacity}") == "30"
    });
    let status: serde_json::Value =
        serde_json::from_str(&get(&ns.0, &parent, "{.status}")).expect("the status is JSON");
    assert_eq!(status["capacity"], serde_json::json!(30), "{status}");
    assert_eq!(status["sized"], serde_json::json!(true), "{status}");
    assert_eq!(status["zones"], serde_json::json!(["a", "b"]), "{status}");
    assert_eq!(status["label"], serde_json::json!("2 zones"), "{status}");

    // A tenant's mapping for a number fails `capacity` and `sized` only: the rest is written.
    apply_yaml(
        &ns.0,
        &kind.object("orders", r#"{"replicas": {"many": true}, "zones": ["c"]}"#),
    );
    wait_until(WAIT, "the other fields updated", || {
        get(&ns.0, &parent, "{.status.label}") == "1 zones"
    });
    assert_eq!(get(&ns.0, &parent, "{.status.zones}"), r#"["c"]"#);
    assert_eq!(
        get(&ns.0, &parent, "{.status.capacity}"),
        "30",
        "the failed field keeps its value"
    );
    assert_eq!(
        get(&ns.0, &parent, "{.status.conditions[?(@.type==\"Ready\")].status}"),
        "True",
        "a failed status field is no reconcile failure"
    );

    // `"three" * 10` is a string: the CRD refuses it, and only it.
    apply_yaml(
        &ns.0,
        &kind.object("orders", r#"{"replicas": "three", "zones": ["d"]}"#),
    );
    let valid = |field: &str| {
        get(
            &ns.0,
            &parent,
            &format!("{{.status.conditions[?(@.type==\"StatusFieldsValid\")].{field}}}"),
        )
    };
    wait_until(WAIT, "StatusFieldsValid=False naming status.capacity", || {
        valid("status") == "False" && valid("message").contains("status.capacity")
    });
    assert_eq!(
        get(&ns.0, &parent, "{.status.zones}"),
        r#"["d"]"#,
        "the rest is written"
    );
    assert_eq!(get(&ns.0, &parent, "{.status.capacity}"), "30");
    apply_yaml(&ns.0, &kind.object("orders", r#"{"replicas": 4, "zones": ["d"]}"#));
    wait_until(WAIT, "the fixed field written and StatusFieldsValid=True", || {
        get(&ns.0, &parent, "{.status.capacity}") == "40" && valid("status") == "True"
    });
    kind.uninstall();
}

#[test]
fn a_rule_watching_statefulsets_decorates_the_annotated_ones_and_writes_nothing_into_them() {
    let ns = Namespace::new("live-decorator");
    let (rules, templates) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    std::fs::write(
        rules.path().join("service-per-pod.yaml"),
        "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata:\n  name: service-per-pod\nspec:\n  watch:\n    apiVersion: apps/v1\n    kind: StatefulSet\n    annotationSelector: {service-per-pod/enabled: \"true\"}\n  children:\n    - id: pods\n      apiVersion: v1\n      kind: Service\n      forEach: range(spec.replicas)\n      key: \"{{ item }}\"\n      template: pod-service.yaml.j2\n  parentMetadata:\n    annotations:\n      service-per-pod/services: \"{{ spec.replicas }}\"\n",
    )
    .expect("write rule");
    std::fs::write(
        templates.path().join("pod-service.yaml.j2"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ metadata.name }}-{{ item }}\nspec:\n  selector:\n    statefulset.kubernetes.io/pod-name: {{ metadata.name }}-{{ item }}\n  ports: [{port: 80}]\n",
    )
    .expect("write template");
    let statefulset = |name: &str, annotations: &str| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: {name}\n  annotations: {annotations}\nspec:\n  replicas: 2\n  serviceName: {name}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: nginx, image: nginx}}]}}\n"
        )
    };
    apply_yaml(&ns.0, &statefulset("web", r#"{service-per-pod/enabled: "true"}"#));
    // Not opted in: the rule's annotationSelector leaves it alone.
    apply_yaml(&ns.0, &statefulset("db", "{}"));
    // What the StatefulSet controller would have written (this control plane runs none).
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "statefulset/web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"observedGeneration": 1, "replicas": 2}}"#,
    ]);
    let before = get(&ns.0, "statefulset/web", "{.status}");
    let mark = audit::AuditMark::now();
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    wait_until(WAIT, "a Service per pod", || {
        exists(&ns.0, "service/web-0") && exists(&ns.0, "service/web-1")
    });
    operator.idle_reconciles("service-per-pod");
    assert_eq!(
        get(&ns.0, "statefulset/web", "{.status}"),
        before,
        "the StatefulSet controller's status is untouched"
    );
    // Its own mark, on its own metadata; nothing into the status.
    wait_until(WAIT, "the decorator's annotation", || {
        get(
            &ns.0,
            "statefulset/web",
            "{.metadata.annotations.service-per-pod/services}",
        ) == "2"
    });
    let writes = mark.ruleop_writes(&ns.0, &["statefulsets"]);
    assert!(
        writes
            .iter()
            .all(|w| w.resource == "statefulsets" && w.object.ends_with("/web")),
        "ruleop wrote into a StatefulSet's status or into one it does not decorate:{}",
        audit::listing(&writes)
    );
    assert!(
        !exists(&ns.0, "service/db-0"),
        "a StatefulSet without the annotation is not decorated"
    );
}
