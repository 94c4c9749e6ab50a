//! The rule language's collections against the real control plane: `forEach` children keyed by
//! item, `dependsOn`/`readyWhen` ordering, and lookups that re-reconcile their readers. Every
//! rule and template here is written by the test, for an `App` CRD of its own.

use std::time::{Duration, Instant};

use crate::support::custom::CustomKind;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

const SERVICE_PER_PORT: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: {{ metadata.name }}-{{ item_key }}
spec:
  selector: {app: {{ metadata.name }}}
  ports:
    - name: {{ item.name }}
      port: {{ item.port }}
"#;

/// One test's App kind, its rule (`rule_spec`: the rest of the spec of rule `app`) and ruleop.
struct Setup {
    kind: CustomKind,
    operator: Operator,
    dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Setup {
    fn start(ns: &Namespace, test: &str, rule_spec: &str, templates: &[(&str, &str)]) -> Self {
        Self::start_with(ns, test, rule_spec, templates, &[])
    }

    fn start_with(ns: &Namespace, test: &str, rule_spec: &str, templates: &[(&str, &str)], flags: &[&str]) -> Self {
        let kind = CustomKind::new(test, "App");
        kind.install();
        let dirs = kind.rule_files("app", rule_spec, templates);
        let operator = Operator::start_with(dirs.0.path(), dirs.1.path(), &ns.0, flags);
        Setup { kind, operator, dirs }
    }

    /// `<resource>/<name>` of an App, for kubectl.
    fn app(&self, name: &str) -> String {
        format!("{}/{name}", self.kind.resource())
    }

    fn ready(&self, ns: &str, name: &str, field: &str) -> String {
        get(
            ns,
            &self.app(name),
            &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
        )
    }

    fn observed_generation_is_current(&self, ns: &str, name: &str) -> bool {
        let generation = get(ns, &self.app(name), "{.metadata.generation}");
        !generation.is_empty() && get(ns, &self.app(name), "{.status.observedGeneration}") == generation
    }
}

#[test]
fn for_each_prunes_exactly_the_removed_item_and_a_reorder_writes_nothing() {
    let ns = Namespace::new("coll-foreach");
    let rule = "  children:\n    - id: port\n      apiVersion: v1\n      kind: Service\n      template: app/service.yaml.j2\n      forEach: spec.ports\n      key: \"{{ item.name }}\"\n";
    let setup = Setup::start(&ns, "coll-foreach", rule, &[("app/service.yaml.j2", SERVICE_PER_PORT)]);
    let ports = |names: &[(&str, u16)]| {
        let items: Vec<String> = names
            .iter()
            .map(|(name, port)| format!("{{\"name\":\"{name}\",\"port\":{port}}}"))
            .collect();
        format!("{{\"ports\":[{}]}}", items.join(","))
    };
    apply_yaml(
        &ns.0,
        &setup
            .kind
            .object("web", &ports(&[("http", 80), ("https", 443), ("metrics", 9090)])),
    );
    wait_until(WAIT, "three Services and Ready", || {
        setup.ready(&ns.0, "web", "status") == "True"
    });
    let uid = |name: &str| get(&ns.0, &format!("service/{name}"), "{.metadata.uid}");
    let uids: Vec<String> = ["web-http", "web-https", "web-metrics"]
        .iter()
        .map(|n| uid(n))
        .collect();
    assert!(uids.iter().all(|u| !u.is_empty()), "{uids:?}");
    assert_eq!(
        get(&ns.0, "service/web-https", "{.metadata.labels.ruleop\\.io/item}"),
        "https"
    );
    assert_eq!(setup.ready(&ns.0, "web", "message"), "every child is ready (3 objects)");

    let mark = audit::AuditMark::now();
    let ours = setup.operator.metric("ruleop_api_writes_total", &[("kind", "Service")]);
    let spec = |ports: String| format!("{{\"spec\":{ports}}}");
    merge_patch(
        &ns.0,
        &setup.app("web"),
        &spec(ports(&[("metrics", 9090), ("https", 443), ("http", 80)])),
    );
    wait_until(WAIT, "the reordered spec to be reconciled", || {
        setup.observed_generation_is_current(&ns.0, "web")
    });
    let writes = mark.ruleop_writes(&ns.0, &["services"]);
    assert!(
        writes.is_empty(),
        "a reorder writes no Service:{}",
        audit::listing(&writes)
    );
    assert_eq!(
        setup.operator.metric("ruleop_api_writes_total", &[("kind", "Service")]),
        ours
    );

    let deletes = setup
        .operator
        .metric("ruleop_api_writes_total", &[("verb", "DELETE"), ("kind", "Service")]);
    merge_patch(
        &ns.0,
        &setup.app("web"),
        &spec(ports(&[("metrics", 9090), ("http", 80)])),
    );
    wait_until(WAIT, "the https Service to be pruned", || {
        !exists(&ns.0, "service/web-https")
    });
    wait_until(WAIT, "the spec to be reconciled", || {
        setup.observed_generation_is_current(&ns.0, "web")
    });
    assert_eq!(uid("web-http"), uids[0], "web-http untouched");
    assert_eq!(uid("web-metrics"), uids[2], "web-metrics untouched");
    assert_eq!(
        setup
            .operator
            .metric("ruleop_api_writes_total", &[("verb", "DELETE"), ("kind", "Service")]),
        deletes + 1,
        "exactly one Service deleted"
    );
}

#[test]
fn depends_on_holds_a_child_back_until_its_dependency_is_ready_and_never_prunes_it() {
    let ns = Namespace::new("coll-depends");
    let rule = r#"  children:
    - id: config
      apiVersion: v1
      kind: ConfigMap
      template: app/config.yaml.j2
      readyWhen: object.data | dig("ready") == "yes"
    - id: secret
      apiVersion: v1
      kind: Secret
      template: app/secret.yaml.j2
      dependsOn: [config]
"#;
    let config =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-config\ndata:\n  greeting: hello\n";
    // A Secret, not a Service: the reorder test counts the API server's Service writes.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ metadata.name }}\nstringData:\n  token: t\n";
    let setup = Setup::start(
        &ns,
        "coll-depends",
        rule,
        &[("app/config.yaml.j2", config), ("app/secret.yaml.j2", secret)],
    );
    apply_yaml(&ns.0, &setup.kind.object("web", "{}"));
    // The default Ready names the first child in rule order that is not ready: the config.
    let config_not_ready = || {
        setup.ready(&ns.0, "web", "reason") == "ChildNotReady"
            && setup
                .ready(&ns.0, "web", "message")
                .contains("child \"config\" is not ready: readyWhen is false")
    };
    wait_until(WAIT, "Ready=False on the existing, unready config", config_not_ready);
    assert!(exists(&ns.0, "configmap/web-config"));
    assert!(!exists(&ns.0, "secret/web"), "the Secret waits for the config");

    merge_patch(&ns.0, "configmap/web-config", r#"{"data":{"ready":"yes"}}"#);
    wait_until(WAIT, "the Secret once the config is ready", || {
        exists(&ns.0, "secret/web")
    });
    wait_until(WAIT, "Ready=True", || setup.ready(&ns.0, "web", "status") == "True");

    merge_patch(&ns.0, "configmap/web-config", r#"{"data":{"ready":"no"}}"#);
    wait_until(WAIT, "Ready=False on the unready config again", config_not_ready);
    assert!(
        exists(&ns.0, "secret/web"),
        "a child waiting for its dependency is not pruned"
    );
}

#[test]
fn editing_a_looked_up_configmap_updates_exactly_the_parents_that_read_it() {
    let ns = Namespace::new("coll-lookup");
    let rule = r#"  lookups:
    - id: defaults
      apiVersion: v1
      kind: ConfigMap
      name: "{{ spec | dig('defaults', 'app-defaults') }}"
  children:
    - id: settings
      apiVersion: v1
      kind: ConfigMap
      template: app/settings.yaml.j2
"#;
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-settings\ndata:\n  color: {{ lookups.defaults | dig(\"data.color\", \"none\") }}\n";
    let setup = Setup::start(&ns, "coll-lookup", rule, &[("app/settings.yaml.j2", settings)]);
    let color = |app: &str| get(&ns.0, &format!("configmap/{app}-settings"), "{.data.color}");
    // One request for every settings ConfigMap, so the latency measured is mostly ruleop's.
    let all_colors = || {
        get(
            &ns.0,
            "configmaps",
            "{range .items[*]}{.metadata.name}={.data.color}{\"\\n\"}{end}",
        )
    };
    let readers = ["a1", "a2", "a3"];
    for name in readers {
        apply_yaml(&ns.0, &setup.kind.object(name, "{}"));
    }
    apply_yaml(&ns.0, &setup.kind.object("other", r#"{"defaults":"other-defaults"}"#));
    wait_until(WAIT, "settings while the lookups are absent", || {
        readers.iter().chain(["other"].iter()).all(|a| color(a) == "none")
    });

    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other-defaults}\ndata: {color: green}\n",
    );
    wait_until(WAIT, "a created lookup to reach its reader", || {
        color("other") == "green"
    });
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-defaults}\ndata: {color: blue}\n",
    );
    wait_until(WAIT, "every reader to see blue", || {
        readers.iter().all(|a| color(a) == "blue")
    });

    let reconciles_of = |app: &str| {
        setup
            .operator
            .log_text()
            .lines()
            .filter(|l| l.contains(" reconciled ") && l.contains(&format!("parent={app} ")))
            .count()
    };
    let other_before = reconciles_of("other");
    assert!(other_before > 0, "the log names reconciled parents");
    merge_patch(&ns.0, "configmap/app-defaults", r#"{"data":{"color":"red"}}"#);
    let started = Instant::now();
    wait_until(Duration::from_secs(10), "every reader to see red", || {
        let colors = all_colors();
        readers.iter().all(|a| colors.contains(&format!("{a}-settings=red\n")))
    });
    let took = started.elapsed();
    eprintln!("looked-up ConfigMap edit -> 3 readers updated in {took:?}");
    assert!(took < Duration::from_secs(3), "readers updated in {took:?}");
    assert_eq!(color("other"), "green");
    assert_eq!(
        reconciles_of("other"),
        other_before,
        "a parent that did not read it is not re-reconciled"
    );

    kubectl_ok(&["delete", "-n", &ns.0, "configmap/app-defaults"]);
    wait_until(WAIT, "a deleted lookup to become none", || {
        readers.iter().all(|a| color(a) == "none")
    });
}

// A cluster-scoped parent's reference has no namespace: an edit of what it looked up must find
// it in the parents' store (an empty namespace names no parent there).
#[test]
fn a_cluster_scoped_parent_follows_edits_of_what_it_looked_up() {
    let ns = Namespace::new("coll-cluster");
    let rule = format!(
        r#"apiVersion: ruleop.io/v1alpha1
kind: Rule
metadata:
  name: namespace-settings
spec:
  watch:
    apiVersion: v1
    kind: Namespace
    scope: Cluster
    annotationSelector: {{ruleop-test/settings: "{}"}}
  lookups:
    - id: settings
      apiVersion: v1
      kind: ConfigMap
      name: settings
  children:
    - id: copy
      apiVersion: v1
      kind: ConfigMap
      template: ns/copy.yaml.j2
"#,
        ns.0
    );
    let copy = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-copy\n  namespace: {{ metadata.name }}\ndata:\n  color: {{ lookups.settings | dig(\"data.color\", \"none\") }}\n";
    let (rules, templates) = (
        written(&[("namespace-settings.yaml", &rule)]),
        written(&[("ns/copy.yaml.j2", copy)]),
    );
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
    );
    kubectl_ok(&[
        "annotate",
        "namespace",
        &ns.0,
        &format!("ruleop-test/settings={}", ns.0),
    ]);
    let color = || get(&ns.0, "configmap/settings-copy", "{.data.color}");
    wait_until(WAIT, "the copy of the looked-up settings", || color() == "blue");

    // The rule's resync is the default 10 minutes: only the lookup's watch can bring this.
    merge_patch(&ns.0, "configmap/settings", r#"{"data":{"color":"red"}}"#);
    wait_until(Duration::from_secs(10), "an edit of the looked-up settings", || {
        color() == "red"
    });
}

#[test]
fn a_lookup_added_by_a_reload_starts_its_cache_and_follows_edits() {
    let ns = Namespace::new("coll-reload");
    let children = "  children:\n    - id: settings\n      apiVersion: v1\n      kind: ConfigMap\n      template: app/settings.yaml.j2\n";
    let plain =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-settings\ndata:\n  color: plain\n";
    let setup = Setup::start_with(
        &ns,
        "coll-reload",
        children,
        &[("app/settings.yaml.j2", plain)],
        &["--reload-debounce", "100ms", "--reload-interval", "30s"],
    );
    let color = || get(&ns.0, "configmap/web-settings", "{.data.color}");
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-defaults}\ndata: {color: blue}\n",
    );
    apply_yaml(&ns.0, &setup.kind.object("web", "{}"));
    wait_until(WAIT, "the settings without a lookup", || color() == "plain");

    // The rule first (a lookup nothing uses yet), then the template reading it.
    let lookups =
        "  lookups:\n    - id: defaults\n      apiVersion: v1\n      kind: ConfigMap\n      name: app-defaults\n";
    let rule = std::fs::read_to_string(setup.dirs.0.path().join("app.yaml")).expect("rule");
    std::fs::write(setup.dirs.0.path().join("app.yaml"), format!("{rule}{lookups}")).expect("rule");
    let reading = plain.replace(
        "color: plain",
        "color: {{ lookups.defaults | dig(\"data.color\", \"none\") }}",
    );
    std::fs::write(setup.dirs.1.path().join("app/settings.yaml.j2"), reading).expect("template");
    wait_until(WAIT, "the reloaded rule to read the lookup", || color() == "blue");

    merge_patch(&ns.0, "configmap/app-defaults", r#"{"data":{"color":"red"}}"#);
    wait_until(Duration::from_secs(10), "an edit of the looked-up object", || {
        color() == "red"
    });
}

#[test]
fn a_list_lookup_propagates_every_labelled_configmap_and_follows_new_matches_and_removals() {
    let ns = Namespace::new("coll-list");
    let rule = r#"  lookups:
    - id: shared
      apiVersion: v1
      kind: ConfigMap
      list: true
      matchLabels: {propagate: "true"}
  children:
    - id: copies
      apiVersion: v1
      kind: ConfigMap
      forEach: lookups.shared
      key: "{{ item.metadata.name }}"
      template: app/copy.yaml.j2
  status:
    fields:
      copied: {value: "lookups.shared | length"}
"#;
    let copy = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-{{ item.metadata.name }}\ndata: {{ item.data | tojson }}\n";
    let setup = Setup::start(&ns, "coll-list", rule, &[("app/copy.yaml.j2", copy)]);
    let labelled = |name: &str, value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{propagate: \"true\"}}\ndata: {{v: {value}}}\n"
        )
    };
    apply_yaml(&ns.0, &labelled("tls", "pem"));
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private}\ndata: {v: x}\n",
    );
    apply_yaml(&ns.0, &setup.kind.object("web", "{}"));
    let copied = || get(&ns.0, &setup.app("web"), "{.status.copied}");
    wait_until(WAIT, "the one labelled ConfigMap copied", || {
        exists(&ns.0, "configmap/web-tls") && copied() == "1"
    });
    assert!(
        !exists(&ns.0, "configmap/web-private"),
        "an unlabelled ConfigMap is not read"
    );

    // A new match: no parent read it by name, the list brings it.
    apply_yaml(&ns.0, &labelled("logging", "info"));
    wait_until(WAIT, "the new match copied", || {
        get(&ns.0, "configmap/web-logging", "{.data.v}") == "info" && copied() == "2"
    });
    // A match that loses its label leaves the list: its copy is pruned.
    kubectl_ok(&["label", "-n", &ns.0, "configmap/tls", "propagate-"]);
    wait_until(WAIT, "the copy of the unlabelled one pruned", || {
        !exists(&ns.0, "configmap/web-tls") && copied() == "1"
    });
    assert_eq!(get(&ns.0, "configmap/web-logging", "{.data.v}"), "info");
}

#[test]
fn a_namespace_selector_lets_children_into_every_labelled_namespace_and_no_other() {
    let ns = Namespace::new("coll-sel");
    let (team_dev, team_prod, stranger) = (
        Namespace::new("coll-sel-dev"),
        Namespace::new("coll-sel-prod"),
        Namespace::new("coll-sel-other"),
    );
    // Unique to this run: no other namespace carries it.
    let value = ns.0.rsplit('-').next().unwrap_or_default().to_owned();
    let label = format!("coll-sel-team={value}");
    kubectl_ok(&["label", "namespace", &team_dev.0, &label]);
    let rule = format!(
        r#"  allowedNamespaceSelector: {{coll-sel-team: "{value}"}}
  lookups:
    - {{id: namespaces, apiVersion: v1, kind: Namespace, list: true, matchLabels: {{coll-sel-team: "{value}"}}}}
  children:
    - id: copies
      apiVersion: v1
      kind: ConfigMap
      forEach: "(lookups.namespaces | map(attribute='metadata.name') | list) + ([spec.extra] if spec | dig('extra', '') else [])"
      template: app/copy.yaml.j2
"#
    );
    let copy = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: team-settings\n  namespace: {{ item }}\ndata: {tier: gold}\n";
    let setup = Setup::start(&ns, "coll-sel", &rule, &[("app/copy.yaml.j2", copy)]);
    apply_yaml(&ns.0, &setup.kind.object("team", "{}"));
    wait_until(WAIT, "the copy in the labelled namespace", || {
        exists(&team_dev.0, "configmap/team-settings")
    });
    // A namespace labelled later (by whoever may label Namespaces) gets its copy.
    kubectl_ok(&["label", "namespace", &team_prod.0, &label]);
    wait_until(WAIT, "the copy in the newly labelled namespace", || {
        exists(&team_prod.0, "configmap/team-settings")
    });
    // The tenant names a namespace the selector does not match: refused, nothing written there.
    merge_patch(
        &ns.0,
        &setup.app("team"),
        &format!(r#"{{"spec":{{"extra":"{}"}}}}"#, stranger.0),
    );
    wait_until(WAIT, "NamespaceNotAllowed", || {
        setup.ready(&ns.0, "team", "reason") == "NamespaceNotAllowed"
    });
    assert!(!exists(&stranger.0, "configmap/team-settings"));
}
