//! Hot reload of rules mounted like a ConfigMap: edits reach every parent, a bad edit never
//! replaces the last good rules, and rules for new kinds start and stop at runtime.

use std::time::{Duration, Instant};

use crate::support::custom::CustomKind;
use crate::support::metrics::percentile;
use crate::support::mount::{Mount, files_under};
use crate::support::*;

const RELOAD_FLAGS: &[&str] = &["--reload-debounce", "100ms", "--reload-interval", "30s"];

fn with_edit(files: &[(String, String)], path: &str, edit: impl Fn(&str) -> String) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, c)| (p.clone(), if p == path { edit(c) } else { c.clone() }))
        .collect()
}

fn status(ns: &str, key: &str) -> String {
    get(ns, "configmap/ruleop-status", &format!("{{.data.{key}}}"))
}

#[test]
fn an_edited_template_reaches_every_parent_through_an_atomic_swap() {
    install_crds();
    let ns = Namespace::new("reload-swap");
    let rules = Mount::from_dir(&root().join("rules"));
    let template_files = files_under(&templates());
    let mut templates_mount = Mount::new(&template_files);
    let _operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    for name in ["a", "b", "c"] {
        apply_yaml(&ns.0, &database(name, 1, ""));
    }
    wait_until(Duration::from_secs(30), "three Services", || {
        kubectl_ok(&["get", "services", "-n", &ns.0, "-o", "name"])
            .lines()
            .count()
            == 3
    });
    let mut first_update = Vec::new();
    for edition in 1..=20 {
        let files = with_edit(&template_files, "database/service.yaml.j2", |text| {
            text.replace(
                "    app: {{ metadata.name }}\nspec:",
                &format!("    app: {{{{ metadata.name }}}}\n    edition: \"{edition}\"\nspec:"),
            )
        });
        let swapped = Instant::now();
        templates_mount.swap(&files);
        let selector = format!("edition={edition}");
        wait_until(Duration::from_secs(20), "the first Service with the new label", || {
            !kubectl_ok(&["get", "services", "-n", &ns.0, "-l", &selector, "-o", "name"]).is_empty()
        });
        first_update.push(swapped.elapsed());
        wait_until(Duration::from_secs(20), "every Service with the new label", || {
            kubectl_ok(&["get", "services", "-n", &ns.0, "-l", &selector, "-o", "name"])
                .lines()
                .count()
                == 3
        });
    }
    first_update.sort();
    eprintln!(
        "swap -> first child updated over 20 swaps (debounce 100ms, kubectl polling adds ~50ms): p50 {:?}, p95 {:?}, max {:?}",
        percentile(&first_update, 50.0).unwrap_or_default(),
        percentile(&first_update, 95.0).unwrap_or_default(),
        first_update[19]
    );
    assert_eq!(status(&ns.0, "state"), "Loaded");
}

#[test]
fn an_invalid_edit_keeps_the_last_good_rules_and_a_later_valid_edit_is_taken() {
    install_crds();
    let ns = Namespace::new("reload-bad");
    let rule_files = files_under(&root().join("rules"));
    let template_files = files_under(&templates());
    let mut rules = Mount::new(&rule_files);
    let mut templates_mount = Mount::new(&template_files);
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    wait_until(Duration::from_secs(10), "the status ConfigMap", || {
        status(&ns.0, "state") == "Loaded"
    });

    // The parser stops two lines below the broken `watch: [`, at the first nested key.
    let watch_line = std::fs::read_to_string(root().join("rules/database.yaml"))
        .expect("shipped rule")
        .lines()
        .position(|line| line == "  watch:")
        .expect("a watch line")
        + 1;
    let broken_yaml = format!(
        "database.yaml:{}:9: error: while parsing a flow mapping",
        watch_line + 2
    );
    let cases: [(&str, &str); 3] = [
        ("broken YAML", &broken_yaml),
        (
            "template syntax error",
            "database/service.yaml.j2:5:3: error: template syntax error",
        ),
        ("unknown field", "unknown field `replica`"),
    ];
    for (i, (what, expected)) in cases.iter().enumerate() {
        match *what {
            "broken YAML" => rules.swap(&with_edit(&rule_files, "database.yaml", |t| {
                t.replace("  watch:\n", "  watch: [\n")
            })),
            "template syntax error" => {
                rules.swap(&rule_files);
                templates_mount.swap(&with_edit(&template_files, "database/service.yaml.j2", |t| {
                    t.replace("{{ metadata.name }}-svc", "{{ metadata.name -svc")
                }));
            }
            _ => {
                templates_mount.swap(&template_files);
                rules.swap(&with_edit(&rule_files, "database.yaml", |t| {
                    t.replace(
                        "  maxConcurrentReconciles: 5\n",
                        "  maxConcurrentReconciles: 5\n  replica: 3\n",
                    )
                }));
            }
        }
        // The previous case left `Rejected` behind: wait for this case's own error.
        let waited = std::panic::catch_unwind(|| {
            wait_until(Duration::from_secs(10), &format!("the {what} to be rejected"), || {
                status(&ns.0, "state") == "Rejected" && status(&ns.0, "errors").contains(expected)
            })
        });
        let errors = status(&ns.0, "errors");
        assert!(
            waited.is_ok(),
            "{what}: expected {expected:?}, ruleop-status says: {errors}"
        );
        eprintln!("{what}: {}", errors.lines().next().unwrap_or_default());
        let name = format!("new{i}");
        apply_yaml(&ns.0, &database(&name, 1, ""));
        wait_until(
            Duration::from_secs(20),
            "a new parent's children under the old rules",
            || exists(&ns.0, &format!("statefulset/{name}")),
        );
    }
    assert!(operator.metric("ruleop_rule_reloads_total", &[("result", "invalid")]) >= 3);

    rules.swap(&with_edit(&rule_files, "database.yaml", |t| {
        t.replace("  resync: 10m\n", "  resync: 5m\n")
    }));
    wait_until(Duration::from_secs(10), "the valid edit to load", || {
        status(&ns.0, "state") == "Loaded"
    });
    assert!(operator.log_text().contains("rules reloaded"));
}

#[test]
fn a_rule_for_a_new_kind_starts_and_stops_at_runtime() {
    install_crds();
    // A kind of its own: the API server's count of open watches on it is this test's alone.
    let kind = CustomKind::new("reload-kind", "Gadget");
    kind.install();
    let ns = Namespace::new("reload-kind");
    let shipped_rules = files_under(&root().join("rules"));
    let (gadget_rule, gadget_template) = kind.config_map_rule_files("gadget");
    let mut with_gadget = shipped_rules.clone();
    with_gadget.extend(gadget_rule);
    let mut template_files = files_under(&templates());
    template_files.extend(gadget_template);
    let mut rules = Mount::new(&shipped_rules);
    let templates_mount = Mount::new(&template_files);
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    let gadget_watches = || apiserver_watches(&kind.plural(), "namespace");

    apply_yaml(&ns.0, &kind.object("before", r#"{"size": "1"}"#));
    assert_eq!(gadget_watches(), 0, "no rule watches Gadget yet");

    rules.swap(&with_gadget);
    wait_until(
        Duration::from_secs(20),
        "the Gadget rule to reconcile the existing Gadget",
        || exists(&ns.0, "configmap/before-cm"),
    );
    assert!(gadget_watches() >= 1, "the Gadget rule watches Gadgets");

    // A stopped controller must close its watch: a removed rule's reconciles would do nothing
    // anyway (the rule is gone from the set), so only the API server can tell that it stopped.
    rules.swap(&shipped_rules);
    wait_until(Duration::from_secs(10), "the Gadget controller to stop", || {
        operator.log_text().contains("controller stopped rule=gadget")
    });
    wait_until(Duration::from_secs(10), "the Gadget watch to be closed", || {
        gadget_watches() == 0
    });
    apply_yaml(&ns.0, &kind.object("after", r#"{"size": "2"}"#));
    operator.reconciled_after("database", || apply_yaml(&ns.0, &database("touch", 1, "")));
    assert!(
        !exists(&ns.0, "configmap/after-cm"),
        "the removed rule no longer reconciles"
    );
    assert!(
        exists(&ns.0, "configmap/before-cm"),
        "children of a removed rule are left in place"
    );
    drop(operator);
    kind.uninstall();
}

#[test]
fn a_rule_for_a_kind_not_served_yet_is_rejected_then_loads_once_its_crd_exists() {
    install_crds();
    let kind = CustomKind::new("reload-late", "Widget");
    kind.uninstall();
    let ns = Namespace::new("reload-late");
    let rule_files = files_under(&root().join("rules"));
    let (widget_rule, widget_template) = kind.config_map_rule_files("widget");
    let mut template_files = files_under(&templates());
    template_files.extend(widget_template);
    let mut rules = Mount::new(&rule_files);
    let templates_mount = Mount::new(&template_files);
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    wait_until(Duration::from_secs(10), "the status ConfigMap", || {
        status(&ns.0, "state") == "Loaded"
    });

    let mut with_widget = rule_files.clone();
    with_widget.extend(widget_rule);
    rules.swap(&with_widget);
    wait_until(
        Duration::from_secs(10),
        "the rule for an unserved kind to be rejected",
        || status(&ns.0, "state") == "Rejected" && status(&ns.0, "errors").contains("Widget"),
    );

    kind.install();
    let installed = Instant::now();
    wait_until(Duration::from_secs(30), "the rules to load once the CRD exists", || {
        status(&ns.0, "state") == "Loaded" && status(&ns.0, "rulesInForce").contains("widget")
    });
    apply_yaml(&ns.0, &kind.object("w1", r#"{"size": "3"}"#));
    wait_until(Duration::from_secs(30), "the new kind's parent reconciled", || {
        get(&ns.0, "configmap/w1-cm", "{.data.size}") == "3"
    });
    eprintln!(
        "CRD created -> rule loaded and first parent reconciled in {:?}",
        installed.elapsed()
    );
    assert!(operator.metric("ruleop_rule_reloads_total", &[("result", "retrying")]) >= 1);
    assert!(operator.metric("ruleop_rule_reloads_total", &[("result", "ok")]) >= 1);
    drop(operator);
    kind.uninstall();
}

#[test]
fn rules_are_checked_against_the_live_crd_at_reload_and_again_when_the_crd_changes() {
    let kind = CustomKind::new("reload-schema", "Gadget");
    let with_size = kind.crd_with_typed_spec(r#"{"size": {"type": "string"}, "color": {"type": "string"}}"#);
    kind.install_crd(&with_size);
    let ns = Namespace::new("reload-schema");
    let (rule_files, template_files) = kind.config_map_rule_files("gadget");
    let rules = Mount::new(&rule_files);
    let mut templates_mount = Mount::new(&template_files);
    let flags = ["--reload-debounce", "100ms", "--reload-interval", "1s"];
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, &flags);
    wait_until(Duration::from_secs(10), "the rules to load", || {
        status(&ns.0, "state") == "Loaded"
    });

    // An edit reading a field the live CRD lacks is rejected with its place and the nearest name.
    templates_mount.swap(&with_edit(&template_files, "gadget-cm.yaml.j2", |t| {
        format!("{t}  colour: {{{{ spec.colour | tojson }}}}\n")
    }));
    wait_until(Duration::from_secs(10), "the edit to be rejected", || {
        status(&ns.0, "state") == "Rejected"
    });
    let errors = status(&ns.0, "errors");
    assert!(
        errors.contains(
            "gadget-cm.yaml.j2:7:19: error: spec.colour reads `colour`, which the Gadget schema does not have at spec"
        ),
        "{errors}"
    );
    assert!(errors.contains("did you mean `color`?"), "{errors}");
    // The last good rules keep running.
    apply_yaml(&ns.0, &kind.object("g1", r#"{"size": "3"}"#));
    wait_until(
        Duration::from_secs(20),
        "a parent reconciled by the last good rules",
        || get(&ns.0, "configmap/g1-cm", "{.data.size}") == "3",
    );
    templates_mount.swap(&template_files);
    wait_until(Duration::from_secs(10), "the valid files to load", || {
        status(&ns.0, "state") == "Loaded"
    });

    // A CRD change removing a field the rules in force read is found at the next reload tick
    // (--reload-interval): the rules are reported Rejected, and keep running.
    kind.install_crd(&kind.crd_with_typed_spec(r#"{"color": {"type": "string"}}"#));
    let changed = Instant::now();
    wait_until(Duration::from_secs(15), "the CRD change to be found", || {
        status(&ns.0, "state") == "Rejected"
    });
    eprintln!("CRD changed -> rules reported Rejected in {:?}", changed.elapsed());
    let errors = status(&ns.0, "errors");
    assert!(
        errors.contains("spec.size reads `size`, which the Gadget schema does not have at spec"),
        "{errors}"
    );
    assert!(status(&ns.0, "rulesInForce").contains("gadget"));
    kind.install_crd(&with_size);
    wait_until(Duration::from_secs(15), "the restored CRD to match again", || {
        status(&ns.0, "state") == "Loaded"
    });
    assert!(operator.log_text().contains("the rules in force no longer match it"));
    drop(operator);
    kind.uninstall();
}

#[test]
fn the_crd_ruleop_crd_prints_from_spec_schema_is_served_with_its_defaults_and_the_rule_runs_on_it() {
    let kind = CustomKind::new("reload-generated", "Gizmo");
    let ns = Namespace::new("reload-generated");
    let spec_body = "  schema:\n    shortNames: [gz]\n    spec:\n      type: object\n      required: [size]\n      properties:\n        size: {type: string, maxLength: 16}\n        replicas: {type: integer, minimum: 0, default: 1}\n    status:\n      type: object\n      properties:\n        replicas: {type: integer}\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: gizmo/cm.yaml.j2\n  status:\n    fields:\n      replicas: {value: spec.replicas}\n";
    let (rules, templates) = kind.rule_files(
        "gizmo",
        spec_body,
        &[("gizmo/cm.yaml.j2", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-cm\ndata:\n  replicas: \"{{ spec.replicas }}\"\n")],
    );
    let out = ruleop_command(&["crd"], rules.path(), templates.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    kind.install_crd(&text(&out.stdout));
    let _operator = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    // No replicas given: the API server applies the generated CRD's default, the rule reads it.
    apply_yaml(&ns.0, &kind.object("g1", r#"{"size": "small"}"#));
    wait_until(Duration::from_secs(20), "the child and the typed status", || {
        get(&ns.0, "configmap/g1-cm", "{.data.replicas}") == "1"
            && get(&ns.0, &format!("{}/g1", kind.resource()), "{.status.replicas}") == "1"
    });
    let columns = kubectl_ok(&["get", "-n", &ns.0, "gz"]);
    assert!(
        columns.starts_with("NAME") && columns.contains("REPLICAS") && columns.contains("READY"),
        "{columns}"
    );
    kind.uninstall();
}

#[test]
fn at_start_up_a_rule_whose_crd_is_missing_waits_alone_while_the_other_rules_run() {
    install_crds();
    let kind = CustomKind::new("startup-missing", "Widget");
    kind.uninstall();
    let ns = Namespace::new("startup-missing");
    let mut rule_files = files_under(&root().join("rules"));
    let (widget_rule, widget_template) = kind.config_map_rule_files("widget");
    rule_files.extend(widget_rule);
    let mut template_files = files_under(&templates());
    template_files.extend(widget_template);
    let rules = Mount::new(&rule_files);
    let templates_mount = Mount::new(&template_files);
    let operator = Operator::spawn_on(
        &control_plane().kubeconfig,
        rules.path(),
        templates_mount.path(),
        &ns.0,
        RELOAD_FLAGS,
    );
    wait_until(
        Duration::from_secs(30),
        "the waiting rule named in ruleop-status",
        || {
            status(&ns.0, "state") == "Rejected"
                && status(&ns.0, "errors").contains("Widget")
                && status(&ns.0, "rulesInForce").contains("database")
        },
    );
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(Duration::from_secs(30), "the Database reconciled meanwhile", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
    });
    let (code, body) = operator.get_status("/readyz").expect("/readyz answers");
    assert_eq!(code, 503, "not ready while a rule waits: {body}");
    assert!(body.contains("widget") && body.contains("Widget"), "{body}");

    kind.install();
    wait_until(
        Duration::from_secs(30),
        "the waiting rule loaded once its CRD exists",
        || status(&ns.0, "state") == "Loaded" && status(&ns.0, "rulesInForce").contains("widget"),
    );
    apply_yaml(&ns.0, &kind.object("w1", r#"{"size": "3"}"#));
    wait_until(Duration::from_secs(30), "the new kind's parent reconciled", || {
        get(&ns.0, "configmap/w1-cm", "{.data.size}") == "3"
    });
    wait_until(Duration::from_secs(30), "/readyz once nothing waits", || {
        operator.ready()
    });
    drop(operator);
    kind.uninstall();
}

#[test]
fn a_restart_over_unchanged_rules_leaves_the_status_configmap_alone() {
    install_crds();
    let ns = Namespace::new("reload-restart");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    wait_until(Duration::from_secs(10), "the status ConfigMap", || {
        status(&ns.0, "state") == "Loaded"
    });
    let version = get(&ns.0, "configmap/ruleop-status", "{.metadata.resourceVersion}");
    assert!(operator.stop());
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    wait_until(
        Duration::from_secs(10),
        "the restarted operator to check the status ConfigMap",
        || operator.log_text().contains("ConfigMap already says so"),
    );
    assert_eq!(
        get(&ns.0, "configmap/ruleop-status", "{.metadata.resourceVersion}"),
        version,
        "the restart rewrote ruleop-status"
    );
}

#[test]
fn without_a_status_namespace_ruleop_says_where_status_goes_and_stops_if_it_may_not_write_there() {
    install_crds();
    let ns = Namespace::new("reload-forbidden");
    kubectl_ok(&["create", "serviceaccount", "ruleop-test", "-n", &ns.0]);
    kubectl_ok(&[
        "apply",
        "-f",
        &root()
            .join("deploy/helm/ruleop/files/clusterrole.yaml")
            .display()
            .to_string(),
    ]);
    let binding = format!("{}-ruleop", ns.0);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=ruleop",
        &format!("--serviceaccount={}:ruleop-test", ns.0),
    ]);
    let (_dir, kubeconfig) = service_account_kubeconfig(&ns.0, "ruleop-test");
    let admin = format!("127.0.0.1:{}", free_port());
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(["run", "--namespace", &ns.0, "--admin-addr", &admin])
        .arg("--rules")
        .arg(root().join("rules"))
        .arg("--templates")
        .arg(templates())
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("POD_NAMESPACE")
        .env_remove("RULEOP_STATUS_NAMESPACE")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().expect("log file"))
        .spawn()
        .expect("start ruleop");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let log = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("ruleop kept running although it may not write its status:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(log.path()).expect("read log");
    let _ = kubectl(&["delete", "clusterrolebinding", &binding]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state of the rules is reported in ConfigMap {}/ruleop-status (--namespace; no --status-namespace or POD_NAMESPACE given)",
            ns.0
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "error: ruleop may not write the ConfigMap {}/ruleop-status, where it reports the state of the rules",
            ns.0
        )),
        "{stderr}"
    );
    eprintln!("{}", stderr.lines().last().unwrap_or_default());
}
