//! Backpressure against a real API server that says no: ruleop runs as a ServiceAccount whose
//! requests API Priority and Fairness puts in a priority level of our own with almost no seats
//! and no queue, so a burst of reconciles really gets 429 answers. ruleop retries them after the
//! server's Retry-After, converges, and sends no more than its client-side limit allows.

use std::time::{Duration, Instant};

use crate::support::custom::CustomKind;
use crate::support::metrics::sum_metric;
use crate::support::*;

const PARENTS: usize = 40;
const QPS: u64 = 20;
const BURST: u64 = 40;

/// A priority level with the least share of seats and no queue (rejects with 429 at once), and
/// a flow schema sending every request of `namespace/account` to it.
fn starve(namespace: &str, account: &str) -> String {
    format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: {namespace}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: {namespace}
spec:
  priorityLevelConfiguration: {{name: {namespace}}}
  matchingPrecedence: 500
  distinguisherMethod: {{type: ByUser}}
  rules:
    - subjects: [{{kind: ServiceAccount, serviceAccount: {{namespace: {namespace}, name: {account}}}}}]
      resourceRules:
        - {{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}}
      nonResourceRules:
        - {{verbs: ["*"], nonResourceURLs: ["*"]}}
"#
    )
}

/// What the API server counts for the priority level `level`: (dispatched, rejected).
fn server_counts(level: &str) -> (u64, u64) {
    let text = kubectl_ok(&["get", "--raw", "/metrics"]);
    let filter = [("priority_level", level)];
    (
        sum_metric(&text, "apiserver_flowcontrol_dispatched_requests_total", &filter),
        sum_metric(&text, "apiserver_flowcontrol_rejected_requests_total", &filter),
    )
}

#[test]
fn rejected_with_429_ruleop_waits_as_told_converges_and_stays_within_its_client_limit() {
    let kind = CustomKind::new("backpressure", "Throttled");
    kind.install();
    let ns = Namespace::new("backpressure");
    let account = "ruleop-throttled";
    kubectl_ok(&["create", "serviceaccount", "-n", &ns.0, account]);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &ns.0,
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={}:{account}", ns.0),
    ]);
    apply_yaml(&ns.0, &starve(&ns.0, account));
    let (_dir, kubeconfig) = service_account_kubeconfig(&ns.0, account);
    for i in 0..PARENTS {
        apply_yaml(&ns.0, &kind.object(&format!("p{i}"), &format!(r#"{{"size": "{i}"}}"#)));
    }
    let (rules, templates) = kind.config_map_rule("throttled");
    // 20 reconciles at once: the first burst puts more requests in flight than the priority
    // level's few seats, however quickly this machine answers each one.
    let rule_file = rules.path().join("throttled.yaml");
    let text = std::fs::read_to_string(&rule_file).expect("rule");
    std::fs::write(
        &rule_file,
        text.replacen("spec:\n", "spec:\n  maxConcurrentReconciles: 20\n", 1),
    )
    .expect("rule");
    let before = server_counts(&ns.0);
    let started = Instant::now();
    let operator = Operator::start_on(
        &kubeconfig,
        rules.path(),
        templates.path(),
        &ns.0,
        &["--kube-qps", &QPS.to_string(), "--kube-burst", &BURST.to_string()],
    );
    wait_until(Duration::from_secs(120), "every parent's ConfigMap", || {
        let listed = kubectl_ok(&[
            "get",
            "configmaps",
            "-n",
            &ns.0,
            "-l",
            "ruleop.io/rule=throttled",
            "-o",
            "name",
        ]);
        listed.lines().count() == PARENTS
    });
    operator.idle_reconciles("throttled");
    // The counts are read before the clock: ruleop keeps running while they are read, and a
    // request it sends meanwhile is counted, so the window counted is the window timed.
    let after = server_counts(&ns.0);
    let elapsed = started.elapsed();
    let (dispatched, rejected) = (after.0 - before.0, after.1 - before.1);
    let seen_by_ruleop = operator.metric("ruleop_api_rejected_total", &[]);
    let waited = operator.metric("ruleop_api_client_throttled_total", &[]);
    eprintln!(
        "{PARENTS} parents in {elapsed:?}: the server dispatched {dispatched} and rejected {rejected} of ruleop's requests; \
         ruleop saw {seen_by_ruleop} 429s and waited for its bucket {waited} times"
    );
    // The server really said no, and ruleop heard every no (a retry, not a failed reconcile).
    assert!(
        rejected > 0,
        "the priority level never rejected: the test did not exercise 429s"
    );
    assert_eq!(
        seen_by_ruleop, rejected,
        "every 429 the server sent reached the retry layer"
    );
    assert_eq!(operator.metric("ruleop_reconciles_total", &[("result", "error")]), 0);
    // No hot loop: every request, retries included, took a token of the client-side bucket.
    let allowed = BURST + QPS * elapsed.as_secs().saturating_add(1);
    assert!(
        dispatched + rejected <= allowed,
        "{} requests in {elapsed:?} is over the limit of {allowed} (qps {QPS}, burst {BURST})",
        dispatched + rejected
    );
    drop(operator);
    kubectl_ok(&["delete", "clusterrolebinding", &ns.0]);
    kubectl_ok(&["delete", "flowschema,prioritylevelconfiguration", &ns.0]);
    kind.uninstall();
}

/// The reason of a parent's Ready condition.
fn ready_reason(namespace: &str, what: &str) -> String {
    get(namespace, what, r#"{.status.conditions[?(@.type=="Ready")].reason}"#)
}

#[test]
fn a_parent_that_keeps_failing_opens_its_circuit_ignores_its_events_and_a_fixed_spec_closes_it() {
    let kind = CustomKind::new("circuit", "Breaker");
    kind.install();
    let ns = Namespace::new("circuit");
    let (rules, templates) = kind.config_map_rule("breaker");
    let operator = Operator::start_with(rules.path(), templates.path(), &ns.0, &["--circuit-failures", "3"]);
    // No spec.size: the template fails to render, every time.
    apply_yaml(&ns.0, &kind.object("broken", "{}"));
    let parent = format!("{}/broken", kind.resource());
    wait_until(
        Duration::from_secs(30),
        "the circuit to open (3 failures: about 3 s of backoff)",
        || ready_reason(&ns.0, &parent) == "CircuitOpen",
    );
    let message = get(&ns.0, &parent, r#"{.status.conditions[?(@.type=="Ready")].message}"#);
    assert!(message.starts_with("3 failed reconciles in a row"), "{message}");
    assert_eq!(
        operator.metric("ruleop_circuits_opened_total", &[("rule", "breaker")]),
        1
    );

    // A storm of events that change nothing of the spec: none of them runs the parent.
    let reconciles = operator.metric("ruleop_reconciles_total", &[("rule", "breaker")]);
    for i in 0..10 {
        kubectl_ok(&["annotate", "--overwrite", "-n", &ns.0, &parent, &format!("storm={i}")]);
    }
    wait_until(Duration::from_secs(30), "the storm's events to be held", || {
        operator.metric("ruleop_circuit_held_events_total", &[("rule", "breaker")]) >= 1
    });
    operator.idle_reconciles("breaker");
    assert_eq!(
        operator.metric("ruleop_reconciles_total", &[("rule", "breaker")]),
        reconciles,
        "an open circuit runs the parent only at its retry, 5 minutes on"
    );

    // Fixing the spec is a new try at once, well before the 5-minute retry.
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        &parent,
        "--type=merge",
        "-p",
        r#"{"spec":{"size":"1"}}"#,
    ]);
    wait_until(Duration::from_secs(30), "the fixed parent's child", || {
        exists(&ns.0, "configmap/broken-cm")
    });
    wait_until(Duration::from_secs(30), "Ready back to True", || {
        get(&ns.0, &parent, r#"{.status.conditions[?(@.type=="Ready")].status}"#) == "True"
    });
    kind.uninstall();
}
