//! Hostile and unlucky input against the real control plane: huge values, children the API
//! server rejects, status expressions that cannot be evaluated yet.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

fn ready(ns: &str, what: &str, field: &str) -> String {
    get(
        ns,
        what,
        &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
    )
}

#[test]
fn a_child_the_api_server_rejects_is_reported_with_its_field_while_the_others_are_applied() {
    install_crds();
    let ns = Namespace::new("harden-reject");
    let _operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    // Offline checks pass (any string may be a secret name to the typed check); the API server
    // refuses it in the StatefulSet's env, while the Service is valid.
    apply_yaml(&ns.0, &database("orders", 1, "  credentialsSecret: Not_A_Secret\n"));
    wait_until(WAIT, "Ready=False with ApplyFailed", || {
        ready(&ns.0, "database/orders", "reason") == "ApplyFailed"
    });
    assert!(exists(&ns.0, "service/orders-svc"), "the valid child is applied");
    assert!(!exists(&ns.0, "statefulset/orders"), "the rejected child is not");
    let message = ready(&ns.0, "database/orders", "message");
    assert!(
        message.starts_with(&format!("applying StatefulSet {}/orders failed: ", ns.0)),
        "{message}"
    );
    assert!(
        message.contains(
            "spec.template.spec.containers[0].env[1].valueFrom.secretKeyRef.name: Invalid value: \"Not_A_Secret\""
        ),
        "{message}"
    );
    assert!(
        !message.contains("Status {") && !message.contains("ApiError"),
        "not a debug dump: {message}"
    );
}

#[test]
fn a_huge_value_in_a_rejected_child_gives_a_bounded_ready_false_and_bounded_log_lines() {
    // The shipped CRDs bound every tenant string (a 900 KB credentialsSecret is refused by the
    // API server), so the huge value comes through a kind that keeps any field, with the size
    // cap raised to let its 900 KB parent be reconciled.
    let kind = custom::CustomKind::new("harden-huge", "Huge");
    kind.install();
    let ns = Namespace::new("harden-huge");
    let (rules, templates) = kind.rule_files(
        "huge",
        "  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: huge/cm.yaml.j2\n    - id: svc\n      apiVersion: v1\n      kind: Service\n      template: huge/svc.yaml.j2\n",
        &[
            ("huge/cm.yaml.j2", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-ok\n"),
            (
                "huge/svc.yaml.j2",
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ metadata.name }}-svc\nspec:\n  type: ExternalName\n  externalName: {{ spec.value | tojson }}\n",
            ),
        ],
    );
    let operator = Operator::start_with(rules.path(), templates.path(), &ns.0, &["--max-object-size", "2Mi"]);
    let huge = "x".repeat(900_000);
    // `create`, not `apply`: client-side apply would copy the 900 KB into an annotation.
    let out = kubectl_with_stdin(
        &["create", "-n", &ns.0, "-f", "-"],
        Some(&kind.object("orders", &format!(r#"{{"value": "{huge}"}}"#))),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parent = format!("{}/orders", kind.resource());
    wait_until(WAIT, "Ready=False with ApplyFailed", || {
        ready(&ns.0, &parent, "reason") == "ApplyFailed"
    });
    let message = ready(&ns.0, &parent, "message");
    assert!(message.len() <= 4096, "status message is {} bytes", message.len());
    assert!(
        message.contains("bytes in all)"),
        "says it was cut: {}",
        &message[message.len().saturating_sub(200)..]
    );
    assert!(exists(&ns.0, "configmap/orders-ok"), "the other child is applied");

    let log = operator.log_text();
    assert!(log.contains("reconcile failed"), "the failure is logged");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= 8192, "longest log line is {longest} bytes");
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].reason}"]);
    assert!(
        events.contains("ApplyFailed"),
        "a Warning Event was published: {events}"
    );
}

#[test]
fn a_deployment_is_created_while_its_ready_expression_is_undefined() {
    install_crds();
    let ns = Namespace::new("harden-status");
    // A natural condition that is undefined until the Deployment exists (strict mode).
    let rules = rules_dir(|text| {
        text.replace(
            r#"when: (children | dig("deployment.status.availableReplicas", 0)) >= 1"#,
            "when: children.deployment.status.availableReplicas >= 1",
        )
    });
    let rule = std::fs::read_to_string(rules.path().join("cache.yaml")).expect("cache rule");
    assert!(rule.contains("when: children.deployment.status"), "the edit applied");
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(
        &ns.0,
        "apiVersion: myorg.io/v1\nkind: Cache\nmetadata: {name: sessions}\nspec: {maxMemory: 64mb}\n",
    );
    wait_until(WAIT, "the Deployment and the Service", || {
        exists(&ns.0, "deployment/sessions-cache") && exists(&ns.0, "service/sessions-cache")
    });
    wait_until(WAIT, "Ready=Unknown", || {
        ready(&ns.0, "cache/sessions", "status") == "Unknown"
    });
    assert_eq!(ready(&ns.0, "cache/sessions", "reason"), "ExpressionFailed");
    let message = ready(&ns.0, "cache/sessions", "message");
    let line = rule
        .lines()
        .position(|l| l.contains("when: children.deployment.status"))
        .map_or(0, |i| i + 1);
    assert!(
        message.contains(&format!("cache.yaml:{line}:")) && message.contains("status.conditions[Ready].when"),
        "the message cites the rule file line {line}: {message}"
    );
    assert_eq!(
        get(&ns.0, "cache/sessions", "{.status.address}"),
        format!("sessions-cache.{}.svc:6379", ns.0),
        "the other status fields are written"
    );
}
