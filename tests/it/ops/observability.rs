//! `/metrics` as Prometheus sees it: a valid exposition whose counters move with a reconcile, an
//! error and a reload, and the shipped dashboard and alerts name only metrics it exports.

use std::time::Duration;

use crate::support::exposition::Exposition;
use crate::support::mount::{Mount, files_under};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);
const RELOAD_FLAGS: &[&str] = &["--reload-debounce", "100ms", "--reload-interval", "30s"];

#[test]
fn the_metrics_endpoint_is_a_valid_exposition_whose_counters_move_with_a_reconcile_an_error_and_a_reload() {
    install_crds();
    let ns = Namespace::new("observability");
    let rule_files = files_under(&root().join("rules"));
    let mut rules = Mount::new(&rule_files);
    let operator = Operator::start_with(rules.path(), &templates(), &ns.0, RELOAD_FLAGS);
    // Families without a series yet are left out, but what is there must be valid.
    Exposition::parse(&operator.get("/metrics").expect("a scrape"));

    let success = || {
        operator.metric(
            "controller_runtime_reconcile_total",
            &[("controller", "database"), ("result", "success")],
        )
    };
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    wait_until(WAIT, "a successful reconcile", || success() >= 1);
    wait_until(WAIT, "the backup action counted", || {
        operator.metric("ruleop_actions_total", &[("action", "backup"), ("result", "ok")]) >= 1
    });
    assert!(operator.metric("ruleop_reconciles_total", &[("rule", "database"), ("result", "ok")]) >= 1);
    assert!(operator.metric("ruleop_api_writes_total", &[("kind", "StatefulSet")]) >= 1);
    assert!(
        operator.metric(
            "ruleop_last_successful_reconcile_timestamp_seconds",
            &[("rule", "database")]
        ) > 1_700_000_000
    );

    // The API server refuses this secret name in the StatefulSet: an ApplyFailed error.
    apply_yaml(&ns.0, &database("broken", 1, "  credentialsSecret: Not_A_Secret\n"));
    wait_until(WAIT, "a failed reconcile counted by reason", || {
        operator.metric(
            "ruleop_reconcile_errors_total",
            &[("rule", "database"), ("reason", "ApplyFailed")],
        ) >= 1
    });
    assert!(
        operator.metric(
            "controller_runtime_reconcile_errors_total",
            &[("controller", "database")]
        ) >= 1
    );
    assert!(
        operator.metric(
            "controller_runtime_reconcile_total",
            &[("controller", "database"), ("result", "error")]
        ) >= 1
    );

    let reloads = || operator.metric("ruleop_rule_reloads_total", &[("result", "ok")]);
    let loaded = reloads();
    rules.swap(
        &rule_files
            .iter()
            .map(|(p, c)| (p.clone(), c.replace("  resync: 10m\n", "  resync: 5m\n")))
            .collect::<Vec<_>>(),
    );
    wait_until(WAIT, "the reload counted", || reloads() > loaded);
    wait_until(WAIT, "reconciles triggered by the reload", || {
        operator.metric(
            "ruleop_reconcile_triggers_total",
            &[("rule", "database"), ("trigger", "reload")],
        ) >= 2
    });
    assert!(
        operator.metric(
            "ruleop_reconcile_triggers_total",
            &[("rule", "database"), ("trigger", "parent_event")]
        ) >= 2
    );

    let after = Exposition::parse(&operator.get("/metrics").expect("a scrape"));
    for (family, kind) in [
        ("controller_runtime_reconcile", "counter"),
        ("controller_runtime_reconcile_errors", "counter"),
        ("controller_runtime_reconcile_time_seconds", "histogram"),
        ("controller_runtime_active_workers", "gauge"),
        ("ruleop_reconciles", "counter"),
        ("ruleop_actions", "counter"),
        ("ruleop_rule_reloads", "counter"),
        ("ruleop_leader", "gauge"),
        ("workqueue_depth", "gauge"),
        ("ruleop_cached_objects", "gauge"),
        ("ruleop_reconcile_triggers", "counter"),
    ] {
        assert_eq!(after.types.get(family).map(String::as_str), Some(kind), "{family}");
    }
    let cached = |kind: &str| operator.metric("ruleop_cached_objects", &[("rule", "database"), ("kind", kind)]);
    assert_eq!(
        (cached("Database"), cached("Service")),
        (2, 2),
        "both parents and their Services"
    );
    assert!(
        after
            .scrape
            .samples
            .iter()
            .any(|s| s.metric == "workqueue_depth" && s.labels.get("controller").is_some_and(|c| c == "database")),
        "the queue depth of rule database"
    );
    let observed = after
        .scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "controller_runtime_reconcile_time_seconds"
                && s.labels.get("controller").is_some_and(|c| c == "database")
        })
        .expect("the reconcile duration histogram of rule database");
    assert!(matches!(&observed.value, prometheus_parse::Value::Histogram(b) if b.len() > 2));

    // The shipped dashboard and alerts name only metrics this scrape has.
    let names = after.names();
    for (file, exprs) in [
        ("grafana-dashboard.json", dashboard_exprs()),
        ("prometheusrule.yaml", alert_exprs()),
    ] {
        assert!(!exprs.is_empty(), "{file} has queries");
        for expr in exprs {
            let metrics = metric_names(&expr);
            assert!(!metrics.is_empty(), "{file}: {expr} names no metric");
            for metric in metrics {
                assert!(names.contains(&metric), "{file}: {metric} (in {expr}) is not exported");
            }
        }
    }
}

#[test]
fn the_observability_component_builds_with_kustomize_into_the_rule_and_the_dashboard() {
    let built = kubectl_ok(&["kustomize", &root().join("deploy/observability").display().to_string()]);
    let objects: Vec<serde_json::Value> = built
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("kustomize output parses"))
        .collect();
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(
        kinds.contains(&"PrometheusRule") && kinds.contains(&"ConfigMap"),
        "{kinds:?}"
    );
    let dashboard = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("the dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: serde_json::Value =
        serde_json::from_str(&observability_file("grafana-dashboard.json")).expect("the dashboard is JSON");
    let mounted: serde_json::Value =
        serde_json::from_str(dashboard["data"]["ruleop.json"].as_str().expect("ruleop.json")).expect("JSON");
    assert_eq!(mounted, shipped, "the ConfigMap carries the dashboard as shipped");
}

/// A file of the chart's observability sources (deploy/observability is rendered from them).
fn observability_file(name: &str) -> String {
    std::fs::read_to_string(root().join("deploy/helm/ruleop/files/observability").join(name)).expect(name)
}

/// Every panel query of the Grafana dashboard.
fn dashboard_exprs() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&observability_file("grafana-dashboard.json")).expect("the dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("a target has an expr").to_owned())
        .collect()
}

/// Every alert expression of the PrometheusRule (and the alerts the issue asks for exist).
fn alert_exprs() -> Vec<String> {
    let rule: serde_json::Value =
        serde_saphyr::from_str(&observability_file("prometheusrule.yaml")).expect("the PrometheusRule parses");
    assert_eq!(rule["kind"], "PrometheusRule");
    let rules: Vec<serde_json::Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for alert in [
        "RuleopReconcileErrors",
        "RuleopRuleSetRejected",
        "RuleopNoSuccessfulReconcile",
        "RuleopLeaderMissing",
    ] {
        assert!(alerts.contains(&alert), "{alert} in {alerts:?}");
    }
    rules
        .iter()
        .map(|r| r["expr"].as_str().expect("a rule has an expr").to_owned())
        .collect()
}

/// The ruleop, controller-runtime and workqueue metric names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| {
            ["ruleop_", "controller_runtime_", "workqueue_"]
                .iter()
                .any(|p| word.starts_with(p))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_failed_reconcile_logs_a_json_warning_carrying_the_reconcile_span_and_its_trigger() {
    install_crds();
    let ns = Namespace::new("observability-log");
    let operator = Operator::start_with(&root().join("rules"), &templates(), &ns.0, &["--log-format", "json"]);
    apply_yaml(&ns.0, &database("broken", 1, "  credentialsSecret: Not_A_Secret\n"));
    let warning = || {
        operator.log_text().lines().find_map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line).ok()?;
            (entry["level"] == "WARN" && entry["fields"]["message"] == "reconcile failed").then_some(entry)
        })
    };
    wait_until(WAIT, "a reconcile failed warning", || warning().is_some());
    let entry = warning().expect("the warning");
    assert_eq!(entry["fields"]["reason"], "ApplyFailed", "{entry}");
    assert!(
        entry["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("Not_A_Secret")),
        "{entry}"
    );
    let span = &entry["span"];
    assert_eq!(span["name"], "reconcile", "{entry}");
    assert_eq!(span["rule"], "database", "{entry}");
    assert_eq!(span["namespace"], ns.0.as_str(), "{entry}");
    assert_eq!(span["parent"], "broken", "{entry}");
    assert_eq!(span["generation"], 1, "{entry}");
    assert_eq!(
        span["trigger"], "parent_event",
        "the first reconcile follows the creation: {entry}"
    );
    let spans = entry["spans"].as_array().expect("the span list");
    let trigger = spans
        .iter()
        .find(|s| s["name"] == "reconciling object")
        .expect("kube's span with the trigger");
    assert!(trigger["object.reason"].is_string(), "{entry}");
}
