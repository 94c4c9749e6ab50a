//! `ruleop trace` against the real control plane: a reconciled Database shows its children,
//! existing, ready and without drift; a child edited by hand shows drift, and only that child;
//! the exit code follows the parent's Ready condition (no kubelet runs here, so a Database's
//! StatefulSet never becomes ready: 1), a missing parent or an unwatched kind exits 2 naming
//! what exists; and the audit log shows no persisted write by trace, only dry runs. A forEach of
//! 50 items is traced within a time budget, folded after 20. `ruleop status` names the last
//! reload and counts a namespace's parents by Ready, naming the failing ones.

use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::audit::{AuditMark, AuditedWrite, listing};
use crate::support::custom::CustomKind;
use crate::support::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// The tests read the audit log and time trace, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn ruleop_trace(rules: &std::path::Path, templates: &std::path::Path, args: &[&str]) -> Output {
    let args: Vec<&str> = std::iter::once("trace").chain(args.iter().copied()).collect();
    ruleop_command(&args, rules, templates)
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "trace -o json prints JSON ({e}): {}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn child<'a>(trace: &'a Value, id: &str) -> &'a Value {
    trace["children"]
        .as_array()
        .and_then(|children| children.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("child {id} in {trace:#}"))
}

#[test]
fn a_reconciled_database_shows_its_children_then_the_one_edited_child_drifts_and_trace_writes_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("trace-db");
    install_crds();
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "the Database to be reconciled", || {
        exists(&ns.0, "service/orders-svc")
            && exists(&ns.0, "statefulset/orders")
            && get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
    });
    operator.idle_reconciles("database");
    assert!(operator.stop(), "the operator exits cleanly");
    let rules = root().join("rules");

    let mark = AuditMark::now();
    let out = ruleop_trace(&rules, &templates(), &["database/orders", "-n", &ns.0, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "not Ready: {}", text(&out.stderr));
    let trace = json_of(&out);
    assert_eq!(trace["rule"]["name"], "database");
    assert_eq!(trace["parent"]["generation"], 1);
    assert_eq!(trace["parent"]["observedGeneration"], 1);
    assert_eq!(trace["ready"], false);
    let ready = trace["parent"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .expect("a Ready condition");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "0/1 replicas ready");
    for (id, name) in [("service", "orders-svc"), ("statefulset", "orders")] {
        let c = child(&trace, id);
        assert_eq!(c["desired"], true, "{c:#}");
        assert_eq!(c["ready"], true, "exists, no readyWhen: {c:#}");
        let objects = c["objects"].as_array().expect("objects");
        assert_eq!(objects.len(), 1, "{c:#}");
        assert_eq!(objects[0]["name"], name);
        assert_eq!(objects[0]["namespace"], ns.0.as_str());
        assert_eq!(objects[0]["exists"], true);
        assert_eq!(objects[0]["drift"], false, "{c:#}");
        assert_eq!(objects[0]["ownedBy"], "ownerReference");
    }
    assert_eq!(child(&trace, "backups")["desired"], false, "backups are off");
    let events = trace["events"].as_array().expect("events");
    assert!(
        events.iter().any(|e| e["reason"] == "ChildCreated"),
        "the parent's Events, found by the involvedObject.uid field selector: {events:?}"
    );

    kubectl_ok(&[
        "-n",
        &ns.0,
        "patch",
        "service/orders-svc",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/ports/0/targetPort","value":5439}]"#,
    ]);
    let out = ruleop_trace(&rules, &templates(), &["database/orders", "-n", &ns.0, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let trace = json_of(&out);
    let service = &child(&trace, "service")["objects"][0];
    assert_eq!(service["drift"], true, "{service:#}");
    let diff = service["driftDiff"].as_str().expect("the drift diff");
    assert!(
        diff.contains("-    targetPort: 5439\n+    targetPort: 5432\n"),
        "{diff}"
    );
    assert_eq!(child(&trace, "statefulset")["objects"][0]["drift"], false);

    let tree = ruleop_trace(&rules, &templates(), &["database/orders", "-n", &ns.0]);
    assert_eq!(tree.status.code(), Some(1));
    let shown = text(&tree.stdout);
    assert!(
        shown.contains(&format!("Service {}/orders-svc: exists, DRIFT", ns.0)),
        "{shown}"
    );
    assert!(!shown.contains('\u{1b}'), "plain text when piped: {shown}");

    // The audit log is written as each request completes: wait for the Service's dry run.
    let dry_runs = |requests: &[AuditedWrite]| {
        requests
            .iter()
            .filter(|w| w.dry_run && w.resource == "services" && w.object == format!("{}/orders-svc", ns.0))
            .count()
    };
    wait_until(WAIT, "the audit log to show trace's dry runs", || {
        dry_runs(&mark.ruleop_requests()) >= 2
    });
    let persisted: Vec<AuditedWrite> = mark.ruleop_requests().into_iter().filter(|w| !w.dry_run).collect();
    assert!(persisted.is_empty(), "trace wrote nothing, yet:{}", listing(&persisted));
    assert_eq!(
        get(&ns.0, "service/orders-svc", "{.spec.ports[0].targetPort}"),
        "5439",
        "the dry run changed nothing"
    );

    let missing = ruleop_trace(&rules, &templates(), &["database/nope", "-n", &ns.0]);
    assert_eq!(missing.status.code(), Some(2));
    let error = text(&missing.stderr);
    assert!(
        error.contains(&format!("Database \"nope\" not found in namespace \"{}\"", ns.0)) && error.contains("orders"),
        "{error}"
    );
    let unwatched = ruleop_trace(&rules, &templates(), &["widget/orders", "-n", &ns.0]);
    assert_eq!(unwatched.status.code(), Some(2));
    let error = text(&unwatched.stderr);
    assert!(
        error.contains("no rule watches \"widget\"") && error.contains("Database (myorg.io/v1, rule database)"),
        "{error}"
    );
}

const CONFIG_MAP_PER_ITEM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-{{ item_key }}\ndata:\n  k: v\n";

#[test]
fn a_for_each_of_fifty_items_is_traced_quickly_folded_after_twenty_with_its_drift_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("trace-fifty");
    let kind = CustomKind::new("trace-fifty", "App");
    kind.install();
    let rule = "  children:\n    - id: item\n      apiVersion: v1\n      kind: ConfigMap\n      template: app/cm.yaml.j2\n      forEach: spec.items\n      key: \"{{ item }}\"\n";
    let (rules, templates) = kind.rule_files("app", rule, &[("app/cm.yaml.j2", CONFIG_MAP_PER_ITEM)]);
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let items: Vec<String> = (0..50).map(|i| format!("\"i{i:02}\"")).collect();
    apply_yaml(
        &ns.0,
        &kind.object("web", &format!("{{\"items\":[{}]}}", items.join(","))),
    );
    let app = format!("{}/web", kind.resource());
    wait_until(WAIT, "the App to be Ready", || {
        get(&ns.0, &app, "{.status.conditions[?(@.type==\"Ready\")].status}") == "True"
    });
    operator.idle_reconciles("app");
    assert!(operator.stop(), "the operator exits cleanly");

    let target = format!("{}/web", kind.resource());
    let run = || {
        let start = Instant::now();
        let out = ruleop_trace(rules.path(), templates.path(), &[&target, "-n", &ns.0, "-o", "json"]);
        (out, start.elapsed())
    };
    let (out, converged) = run();
    assert_eq!(out.status.code(), Some(0), "Ready: {}", text(&out.stderr));
    let trace = json_of(&out);
    let item = child(&trace, "item");
    let objects = item["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), 20, "{item:#}");
    assert_eq!(objects[0]["itemKey"], "i00");
    assert!(
        objects.iter().all(|o| o["exists"] == true && o["drift"] == false),
        "{item:#}"
    );
    assert_eq!(item["folded"]["count"], 30);
    assert_eq!(item["folded"]["missing"], 0);

    // Every item edited by another manager: trace then dry-runs all 50.
    let edited: Vec<String> = (0..50)
        .map(|i| format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"web-i{i:02}\"}},\"data\":{{\"k\":\"edited\"}}}}"))
        .collect();
    let list = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{}]}}",
        edited.join(",")
    );
    let applied = kubectl_with_stdin(
        &[
            "-n",
            &ns.0,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=by-hand",
            "-f",
            "-",
        ],
        Some(&list),
    );
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let (out, drifting) = run();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let trace = json_of(&out);
    let item = child(&trace, "item");
    let shown = item["objects"].as_array().expect("objects");
    assert!(shown.iter().all(|o| o["drift"] == true), "{item:#}");
    assert_eq!(item["folded"]["drifted"], 30);
    eprintln!(
        "ruleop trace of a forEach of 50 ConfigMaps: {} ms converged (no dry run needed), {} ms with all 50 drifting (50 dry runs); process start, discovery and every request included",
        converged.as_millis(),
        drifting.as_millis()
    );
    assert!(
        drifting < Duration::from_secs(3),
        "trace took {drifting:?} (target 300 ms; the bound leaves room for a busy machine)"
    );
}

#[test]
fn status_names_the_last_reload_and_counts_the_parents_by_ready_with_the_failing_ones() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    install_crds();
    let ns = Namespace::new("status");
    let _operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    for name in ["a", "b"] {
        apply_yaml(&ns.0, &database(name, 1, ""));
    }
    wait_until(WAIT, "both Databases reconciled", || {
        ["a", "b"].iter().all(|name| {
            get(
                &ns.0,
                &format!("database/{name}"),
                "{.status.conditions[?(@.type==\"Ready\")].reason}",
            ) == "ReplicasNotReady"
        })
    });
    let args = ["status", "--status-namespace", &ns.0, "-n", &ns.0, "-o", "json"];
    let out = ruleop_command(&args, &root().join("rules"), &templates());
    assert_eq!(
        out.status.code(),
        Some(1),
        "not every parent is Ready: {}",
        text(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).expect("status -o json prints JSON");
    assert_eq!(status["reload"]["state"], "Loaded", "{status:#}");
    assert_eq!(status["reload"]["rulesInForce"], "cache,database,tenant", "{status:#}");
    let database = status["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "database"))
        .expect("the database rule");
    assert_eq!(database["ready"], serde_json::json!({"False": 2}), "{status:#}");
    let failing: Vec<&str> = database["failing"]
        .as_array()
        .expect("failing")
        .iter()
        .filter_map(|p| p["reason"].as_str())
        .collect();
    assert_eq!(failing, vec!["ReplicasNotReady", "ReplicasNotReady"], "{status:#}");
    let out = ruleop_command(&args[..5], &root().join("rules"), &templates());
    let shown = text(&out.stdout);
    assert!(shown.starts_with("reload: Loaded at "), "{shown}");
    assert!(
        shown.contains(&format!(
            "rule database (myorg.io/v1 Database): 2 Ready=False\n  not ready: {}/",
            ns.0
        )),
        "{shown}"
    );
}
