//! Hot reload of rules mounted like a ConfigMap: edits reach every parent, a bad edit never
//! replaces the last good rules, and rules for new kinds start and stop at runtime.

mod support;

use std::time::{Duration, Instant};

use support::mount::{Mount, files_under};
use support::*;

const RELOAD_FLAGS: &[&str] = &["--reload-debounce", "100ms", "--reload-interval", "30s"];

fn with_edit(files: &[(String, String)], path: &str, edit: impl Fn(&str) -> String) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, c)| (p.clone(), if p == path { edit(c) } else { c.clone() }))
        .collect()
}

/// The shipped rules without the Cache rule. Only `a_rule_for_a_new_kind_starts_and_stops_at_runtime`
/// watches Caches in this test binary, so the API server's count of namespaced Cache watches is
/// its own.
fn database_rules() -> Vec<(String, String)> {
    files_under(&root().join("rules"))
        .into_iter()
        .filter(|(path, _)| path != "cache.yaml")
        .collect()
}

/// Open namespaced watches on Caches, from the API server's own gauge.
fn cache_watches() -> u64 {
    apiserver_watches("caches", "namespace")
}

fn status(ns: &str, key: &str) -> String {
    get(ns, "configmap/ruleop-status", &format!("{{.data.{key}}}"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn an_edited_template_reaches_every_parent_through_an_atomic_swap() {
    install_crds();
    let ns = Namespace::new("reload-swap");
    let rules = Mount::new(&database_rules());
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
        percentile(&first_update, 0.5),
        percentile(&first_update, 0.95),
        first_update[19]
    );
    assert_eq!(status(&ns.0, "state"), "Loaded");
}

#[test]
fn an_invalid_edit_keeps_the_last_good_rules_and_a_later_valid_edit_is_taken() {
    install_crds();
    let ns = Namespace::new("reload-bad");
    let rule_files = database_rules();
    let template_files = files_under(&templates());
    let mut rules = Mount::new(&rule_files);
    let mut templates_mount = Mount::new(&template_files);
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    wait_until(Duration::from_secs(10), "the status ConfigMap", || {
        status(&ns.0, "state") == "Loaded"
    });

    let cases: [(&str, &str); 3] = [
        ("broken YAML", "database.yaml:10:9: error: while parsing a flow mapping"),
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
        wait_until(Duration::from_secs(10), &format!("the {what} to be rejected"), || {
            status(&ns.0, "state") == "Rejected"
        });
        let errors = status(&ns.0, "errors");
        assert!(errors.contains(expected), "{what}: {errors}");
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
    let ns = Namespace::new("reload-kind");
    let all_rules = files_under(&root().join("rules"));
    let database_only = database_rules();
    let mut rules = Mount::new(&database_only);
    let templates_mount = Mount::new(&files_under(&templates()));
    let operator = Operator::start_with(rules.path(), templates_mount.path(), &ns.0, RELOAD_FLAGS);
    let cache = |name: &str| {
        format!("apiVersion: myorg.io/v1\nkind: Cache\nmetadata: {{name: {name}}}\nspec: {{maxMemory: 64mb}}\n")
    };

    apply_yaml(&ns.0, &cache("before"));
    assert_eq!(cache_watches(), 0, "no rule watches Cache yet");

    rules.swap(&all_rules);
    wait_until(
        Duration::from_secs(20),
        "the Cache rule to reconcile the existing Cache",
        || exists(&ns.0, "deployment/before-cache"),
    );
    assert!(cache_watches() >= 1, "the Cache rule watches Caches");

    // A stopped controller must close its watch: a removed rule's reconciles do nothing anyway
    // (the rule is gone from the set), so only the API server can tell whether it stopped.
    rules.swap(&database_only);
    wait_until(Duration::from_secs(10), "the Cache controller to stop", || {
        operator.log_text().contains("controller stopped rule=cache")
    });
    wait_until(Duration::from_secs(10), "the Cache watch to be closed", || {
        cache_watches() == 0
    });
    apply_yaml(&ns.0, &cache("after"));
    operator.reconciled_after("database", || apply_yaml(&ns.0, &database("touch", 1, "")));
    assert!(
        !exists(&ns.0, "deployment/after-cache"),
        "the removed rule no longer reconciles"
    );
    assert!(
        exists(&ns.0, "deployment/before-cache"),
        "children of a removed rule are left in place"
    );
}
