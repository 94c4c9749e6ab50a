//! Hostile objects and writers cost only themselves: a parent nested too deeply to decode
//! does not stall its kind, nor does one over the size cap; a parent cannot take over an existing object by naming it, forged
//! ownership labels elsewhere are neither pruned nor read, and a lookup cannot be aimed at a
//! namespace the parent does not own.

use std::time::{Duration, Instant};

use crate::support::custom::{CustomKind, nested_json};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_parent_nested_300_levels_deep_costs_only_itself() {
    let kind = CustomKind::new("hostile-deep", "Blob");
    kind.install();
    let ns = Namespace::new("hostile-deep");
    let normal = 5;
    for i in 0..normal {
        apply_yaml(
            &ns.0,
            &kind.object(&format!("blob-{i}"), &format!(r#"{{"size": "{i}"}}"#)),
        );
    }
    let deep = kind.object("deep", &format!(r#"{{"payload": {}}}"#, nested_json(300)));
    let out = kubectl_with_stdin(&["create", "-n", &ns.0, "-f", "-"], Some(&deep));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (rules, templates) = kind.config_map_rule("blob");
    let children = || {
        (0..normal)
            .filter(|i| exists(&ns.0, &format!("configmap/blob-{i}-cm")))
            .count()
    };

    for start in ["first start", "restart"] {
        let operator = Operator::start(rules.path(), templates.path(), &ns.0);
        wait_until(
            WAIT,
            &format!("every normal parent reconciled after the {start}"),
            || operator.metric("ruleop_reconciles_total", &[("rule", "blob"), ("result", "ok")]) >= normal as u64,
        );
        assert_eq!(children(), normal);
        wait_until(WAIT, "the deep parent to be reported in the log", || {
            operator.metric("ruleop_undecodable_objects_total", &[("kind", "Blob")]) == 1
        });
        let log = operator.log_text();
        let line = log
            .lines()
            .find(|l| l.contains("cannot be decoded"))
            .expect("a log line about the deep parent");
        assert!(line.contains("name=deep") && line.contains("recursion limit"), "{line}");
        assert!(line.len() < 1000, "bounded: {} bytes", line.len());
        assert!(operator.stop());
    }
    let reasons = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "involvedObject.name=deep",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(reasons.contains("Undecodable"), "Events on the deep parent: {reasons}");
    assert!(!exists(&ns.0, "configmap/deep-cm"));
}

#[test]
fn a_parent_over_the_size_cap_is_not_cached_and_is_told_so_once() {
    let kind = CustomKind::new("hostile-large", "Bulk");
    kind.install();
    let ns = Namespace::new("hostile-large");
    apply_yaml(&ns.0, &kind.object("small", r#"{"size": "1"}"#));
    // 40 KiB of spec, over the 16 KiB cap below (the shipped default is 256 KiB).
    let padding = "x".repeat(40 * 1024);
    apply_yaml(
        &ns.0,
        &kind.object("large", &format!(r#"{{"size": "2", "padding": "{padding}"}}"#)),
    );
    let (rules, templates) = kind.config_map_rule("bulk");
    let operator = Operator::start_with(rules.path(), templates.path(), &ns.0, &["--max-object-size", "16Ki"]);
    wait_until_refused(
        &kind,
        &ns.0,
        "large",
        "ObjectTooLarge",
        &["Bulk is", "over ruleop's cap of 16384 bytes"],
    );
    wait_until(WAIT, "the small parent's ConfigMap", || {
        exists(&ns.0, "configmap/small-cm")
    });
    assert!(
        !exists(&ns.0, "configmap/large-cm"),
        "the large parent is not reconciled"
    );
    assert_eq!(
        operator.metric("ruleop_objects_too_large_total", &[("kind", "Bulk")]),
        1
    );
    // Our own status write made a new version of the same generation: not reported again.
    let small_writes = || operator.metric("ruleop_reconciles_total", &[("rule", "bulk")]);
    let before = small_writes();
    apply_yaml(&ns.0, &kind.object("small", r#"{"size": "3"}"#));
    wait_until(WAIT, "the small parent's next reconcile", || small_writes() > before);
    assert_eq!(
        operator.metric("ruleop_objects_too_large_total", &[("kind", "Bulk")]),
        1,
        "reported once per generation"
    );
    let reasons = || events(&ns.0, "involvedObject.name=large", "{.items[*].reason}");
    wait_until(WAIT, "the Warning Event on the large parent", || {
        reasons().contains("ObjectTooLarge")
    });
    let reasons = reasons();
    assert_eq!(reasons.matches("ObjectTooLarge").count(), 1, "one Event: {reasons}");
    let line = operator
        .log_text()
        .lines()
        .find(|l| l.contains("over the size cap"))
        .map(str::to_owned)
        .expect("a log line about the large parent");
    assert!(line.contains("name=large") && line.len() < 1000, "{line}");
    // Made small again, it is reconciled as usual.
    apply_yaml(&ns.0, &kind.object("large", r#"{"size": "2"}"#));
    wait_until(WAIT, "the large parent's ConfigMap once it is small", || {
        exists(&ns.0, "configmap/large-cm")
    });
    assert!(operator.stop());
}

#[test]
fn a_fight_over_replicas_is_corrected_at_a_bounded_rate_and_reported() {
    install_crds();
    let ns = Namespace::new("hostile-fight");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 2, ""));
    wait_until(WAIT, "the StatefulSet", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "2"
    });
    let writes = || operator.metric("ruleop_api_writes_total", &[("kind", "StatefulSet")]);
    let before = writes();
    let started = Instant::now();
    let mut changes = 0;
    while started.elapsed() < Duration::from_secs(20) {
        let tick = Instant::now();
        changes += 1;
        merge_patch(
            &ns.0,
            "statefulset/orders",
            &format!(r#"{{"spec":{{"replicas":{}}}}}"#, 10 + changes % 5),
        );
        std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
    }
    wait_until(WAIT, "ruleop to correct the last change", || {
        get(&ns.0, "statefulset/orders", "{.spec.replicas}") == "2"
    });
    let repairs = writes() - before;
    eprintln!("{changes} changes by another writer in 20s; ruleop wrote the StatefulSet {repairs} times");
    assert!(repairs <= 12, "{repairs} writes for {changes} changes");
    let notes = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "reason=DriftFight",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(notes.contains("field manager \"kubectl-patch\""), "{notes}");
    assert!(operator.metric("ruleop_drift_repairs_deferred_total", &[("kind", "StatefulSet")]) > 0);
}

#[test]
fn failing_parents_are_forgotten_once_deleted() {
    let kind = CustomKind::new("hostile-forget", "Thing");
    kind.install();
    let ns = Namespace::new("hostile-forget");
    let (rules, templates) = kind.config_map_rule("thing");
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    let remembered = || operator.metric("ruleop_parents_remembered", &[("rule", "thing")]);
    for i in 0..4 {
        // No spec.size: the template fails, so the parent fails and backs off.
        apply_yaml(&ns.0, &kind.object(&format!("bad-{i}"), "{}"));
    }
    wait_until(WAIT, "the failing parents to be remembered", || remembered() >= 4);
    kubectl_ok(&["delete", &kind.resource(), "--all", "-n", &ns.0]);
    wait_until(WAIT, "deleted parents to be forgotten", || remembered() == 0);
}

/// The Ready condition's reason of a custom object.
/// Waits until the parent `name` is refused with `reason`, and checks that the message names
/// every one of `says`.
fn wait_until_refused(kind: &CustomKind, ns: &str, name: &str, reason: &str, says: &[&str]) {
    wait_until(WAIT, &format!("{name} to be refused with {reason}"), || {
        ready_field(kind, ns, name, "reason") == reason
    });
    let message = ready_field(kind, ns, name, "message");
    assert!(
        says.iter().all(|s| message.contains(s)),
        "{says:?} not all in: {message}"
    );
}

fn ready_field(kind: &CustomKind, ns: &str, name: &str, field: &str) -> String {
    get(
        ns,
        &format!("{}/{name}", kind.resource()),
        &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
    )
}

#[test]
fn an_existing_object_is_not_taken_over_by_a_parent_naming_it_unless_the_rule_adopts_it() {
    let kind = CustomKind::new("hostile-takeover", "Grab");
    kind.install();
    let ns = Namespace::new("hostile-takeover");
    // Someone else's object: the team's ConfigMap, with its own data and no owner.
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: payments-cm\n  labels: {app: payments}\ndata:\n  owner: payments\n",
    );
    // Without `adopt` (the default) first, so the rule is one ruleop has always accepted.
    let rule = |adopt: bool| {
        let adopt = if adopt { "      adopt: true\n" } else { "" };
        kind.rule_files(
            "grab",
            &format!(
                "  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: grab/cm.yaml.j2\n{adopt}"
            ),
            &[(
                "grab/cm.yaml.j2",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ spec.target }}\ndata:\n  owner: grab\n",
            )],
        )
    };
    let (rules, templates) = rule(false);
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &kind.object("grab", r#"{"target": "payments-cm"}"#));
    wait_until_refused(&kind, &ns.0, "grab", "ChildNotOwned", &["child \"cm\"", "adopt: true"]);
    assert_eq!(get(&ns.0, "configmap/payments-cm", "{.data.owner}"), "payments");
    assert_eq!(get(&ns.0, "configmap/payments-cm", "{.metadata.ownerReferences}"), "");
    let reasons = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.0,
        "--field-selector",
        "involvedObject.name=grab",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(reasons.contains("ChildNotOwned"), "Events on the parent: {reasons}");
    assert!(operator.stop());

    // Only the rule may allow it: with `adopt: true` the object becomes the parent's child.
    let (rules, templates) = rule(true);
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    wait_until(WAIT, "the adopted ConfigMap to be the parent's", || {
        get(&ns.0, "configmap/payments-cm", "{.metadata.ownerReferences[0].name}") == "grab"
            && get(&ns.0, "configmap/payments-cm", "{.data.owner}") == "grab"
    });
}

#[test]
fn an_object_with_forged_ownership_labels_in_another_namespace_is_neither_pruned_nor_read() {
    let kind = CustomKind::new("hostile-forged", "Claim");
    kind.install();
    let ns = Namespace::new("hostile-forged");
    let victim = Namespace::new("hostile-victim");
    // `allowedNamespaces` makes the child caches cluster-wide: the forged object is seen.
    let (rules, templates) = kind.rule_files(
        "claim",
        "  allowedNamespaces: [hostile-shared]\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: claim/cm.yaml.j2\n    - id: extra\n      apiVersion: v1\n      kind: ConfigMap\n      template: claim/cm.yaml.j2\n      when: \"false\"\n  status:\n    fields:\n      seen: \"{{ children | dig('extra.data.secret', 'none') }}\"\n",
        &[(
            "claim/cm.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-cm\ndata:\n  size: {{ spec.size | tojson }}\n",
        )],
    );
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &kind.object("c", r#"{"size": "1"}"#));
    let what = format!("{}/c", kind.resource());
    wait_until(WAIT, "the parent's own child and status", || {
        exists(&ns.0, "configmap/c-cm") && get(&ns.0, &what, "{.status.seen}") == "none"
    });
    let uid = get(&ns.0, &what, "{.metadata.uid}");
    operator.reconciled_after("claim", || {
        apply_yaml(
            &victim.0,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim\n  labels: {{ruleop.io/rule: claim, ruleop.io/parent-uid: {uid}, ruleop.io/child: extra}}\n  annotations: {{ruleop.io/parent: {}/c}}\ndata:\n  secret: stolen\n",
                ns.0
            ),
        );
        merge_patch(&ns.0, &what, r#"{"spec": {"size": "2"}}"#);
    });
    wait_until(WAIT, "the parent's child updated", || {
        get(&ns.0, "configmap/c-cm", "{.data.size}") == "2"
    });
    assert!(exists(&victim.0, "configmap/victim"), "the forged object was pruned");
    assert_eq!(
        get(&ns.0, &what, "{.status.seen}"),
        "none",
        "the forged object was read"
    );
}

#[test]
fn a_lookup_cannot_be_aimed_at_a_namespace_the_parent_does_not_own() {
    let kind = CustomKind::new("hostile-lookup", "Copy");
    kind.install();
    let ns = Namespace::new("hostile-lookup");
    let other = Namespace::new("hostile-secret");
    for namespace in [&ns.0, &other.0] {
        apply_yaml(
            namespace,
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: source\ndata:\n  value: from-{namespace}\n"),
        );
    }
    let (rules, templates) = kind.rule_files(
        "copy",
        "  lookups:\n    - id: source\n      apiVersion: v1\n      kind: ConfigMap\n      name: source\n      namespace: \"{{ spec.from }}\"\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: copy/cm.yaml.j2\n",
        &[(
            "copy/cm.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-copy\ndata:\n  value: {{ lookups.source | dig('data.value', 'none') | tojson }}\n",
        )],
    );
    let _operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &kind.object("own", &format!(r#"{{"from": "{}"}}"#, ns.0)));
    apply_yaml(&ns.0, &kind.object("stolen", &format!(r#"{{"from": "{}"}}"#, other.0)));
    wait_until(WAIT, "the copy from the parent's own namespace", || {
        get(&ns.0, "configmap/own-copy", "{.data.value}") == format!("from-{}", ns.0)
    });
    wait_until_refused(
        &kind,
        &ns.0,
        "stolen",
        "NamespaceNotAllowed",
        &["lookup \"source\"", "copy.yaml:"],
    );
    assert!(!exists(&ns.0, "configmap/stolen-copy"));
}

/// `count` Secrets named `<prefix>-<i>`, each holding `bytes` of data, created in `ns` with one
/// kubectl call.
fn create_bulky_secrets(ns: &str, prefix: &str, count: usize, bytes: usize) {
    let value = "x".repeat(bytes);
    let documents: Vec<String> = (0..count)
        .map(|i| {
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {prefix}-{i}\nstringData:\n  blob: {value}\n")
        })
        .collect();
    let out = kubectl_with_stdin(&["create", "-n", ns, "-f", "-"], Some(&documents.join("---\n")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_tenants_bulky_objects_in_another_namespace_do_not_grow_the_operators_memory() {
    let kind = CustomKind::new("hostile-memory", "Reader");
    kind.install();
    let ns = Namespace::new("hostile-memory");
    let tenant = Namespace::new("hostile-memory-tenant");
    // ConfigMaps are looked up in a namespace named by a template (the parent's), so their cache
    // watches every namespace, --namespace or not; Secrets only with a label.
    let (rules, templates) = kind.rule_files(
        "reader",
        "  lookups:\n    - {id: settings, apiVersion: v1, kind: ConfigMap, name: \"{{ metadata.name }}-settings\", namespace: \"{{ metadata.namespace }}\"}\n    - {id: credentials, apiVersion: v1, kind: Secret, name: \"{{ metadata.name }}-credentials\", matchLabels: {ruleop.io/lookup: \"true\"}}\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: reader/cm.yaml.j2\n",
        &[(
            "reader/cm.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-seen\ndata:\n  credentials: \"{{ lookups.credentials is not none }}\"\n",
        )],
    );
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &kind.object("r", "{}"));
    wait_until(WAIT, "the parent's first child", || {
        get(&ns.0, "configmap/r-seen", "{.data.credentials}") == "false"
    });
    let before = operator.rss();

    // 200 ConfigMaps of 1 MiB in the tenant's namespace: over --max-object-size, never cached.
    // (Data only: a ConfigMap holds at most 1 MiB in all.)
    let value = "x".repeat(1_000_000);
    for batch in 0..4 {
        let documents: Vec<String> = (0..50)
            .map(|i| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bulk-{batch}-{i}\ndata:\n  blob: {value}\n"
                )
            })
            .collect();
        let out = kubectl_with_stdin(&["create", "-n", &tenant.0, "-f", "-"], Some(&documents.join("---\n")));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    wait_until(
        Duration::from_secs(120),
        "the operator to skip all 200 ConfigMaps",
        || operator.metric("ruleop_objects_too_large_total", &[("kind", "ConfigMap")]) == 200,
    );
    // 100 Secrets of 100 KiB (under the cap) without the lookup's label: not even watched.
    create_bulky_secrets(&tenant.0, "bulk", 100, 100 * 1024);
    // A labelled Secret the parent looks up arrives after them in the watch's order.
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: r-credentials\n  labels: {ruleop.io/lookup: \"true\"}\nstringData: {password: p}\n",
    );
    wait_until(WAIT, "the parent to see its labelled Secret", || {
        get(&ns.0, "configmap/r-seen", "{.data.credentials}") == "true"
    });
    let cached = operator.metric("ruleop_cached_objects", &[("rule", "reader"), ("kind", "Secret")]);
    assert!(cached <= 1, "only the labelled Secret is cached, not {cached}");
    let grown = operator.rss().saturating_sub(before);
    eprintln!(
        "RSS before {} MB, grown by {:.1} MB after 200 x 1 MiB ConfigMaps and 100 x 100 KiB Secrets elsewhere",
        before >> 20,
        grown as f64 / (1 << 20) as f64
    );
    assert!(grown < 8 << 20, "RSS grew by {grown} bytes");
    assert!(operator.stop());
}
