//! Peer projects' own examples (Metacontroller, kro) ported to ruleop in examples/peers/, each
//! checked against what the original's test or README asserts, on the real control plane; an
//! example's RuleTests (its `tests/`) run offline.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

/// The directory of one ported example.
fn example(name: &str) -> PathBuf {
    root().join("examples/peers").join(name)
}

/// A file of an example, as text.
fn example_file(name: &str, file: &str) -> String {
    std::fs::read_to_string(example(name).join(file)).expect("read an example file")
}

/// Installs an example's CRDs (if it has any) and waits until they are served, then starts
/// ruleop on its rules and templates for `namespace`.
fn start_example(name: &str, namespace: &str) -> Operator {
    let dir = example(name);
    let crds = dir.join("crds");
    if crds.exists() {
        let crds = crds.display().to_string();
        kubectl_ok(&["apply", "-f", &crds]);
        kubectl_ok(&["wait", "--for=condition=Established", "-f", &crds, "--timeout=60s"]);
    }
    Operator::start(&dir.join("rules"), &dir.join("templates"), namespace)
}

/// An example's objects with its fixed namespace names replaced by this test's namespaces.
fn with_namespaces(yaml: &str, names: &[(&str, &Namespace)]) -> String {
    names.iter().fold(yaml.to_owned(), |text, (from, to)| {
        text.replace(&format!(": {from}\n"), &format!(": {}\n", to.0))
    })
}

/// Whether a ruleop finalizer is on an object.
fn has_ruleop_finalizer(namespace: &str, what: &str) -> bool {
    get(namespace, what, "{.metadata.finalizers}").contains("ruleop.io/")
}

#[test]
fn every_ported_example_passes_ruleop_check() {
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(root().join("examples/peers"))
        .expect("examples/peers")
        .flatten()
    {
        if !entry.path().is_dir() {
            continue;
        }
        let dir = entry.path();
        let (rules, templates) = (dir.join("rules"), dir.join("templates"));
        let out = ruleop_command(&["check"], &rules, &templates);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("ok: "),
            "ruleop check failed for {}:\n{stdout}{}",
            dir.display(),
            text(&out.stderr)
        );
        assert!(dir.join("README.md").exists(), "{} has no README.md", dir.display());
        let tests = dir.join("tests");
        if tests.exists() {
            let out = ruleop_command(&["test", &tests.display().to_string()], &rules, &templates);
            assert!(
                out.status.success(),
                "ruleop test failed for {}:\n{}{}",
                dir.display(),
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        checked.push(entry.file_name().to_string_lossy().into_owned());
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "kro-cel-functions",
            "kro-ingress-fan-in",
            "kro-namespace-decorator",
            "metacontroller-catset",
            "metacontroller-clusteredparent",
            "metacontroller-configmap-list-v2",
            "metacontroller-configmappropagation",
            "metacontroller-globalconfigmap",
            "metacontroller-service-per-pod",
            "metacontroller-update-strategy",
        ]
    );
}

// Metacontroller's examples/service-per-pod/test.sh, step by step.
#[test]
fn service_per_pod_gives_each_pod_a_service_that_goes_on_opt_out_and_with_the_statefulset() {
    const NAME: &str = "metacontroller-service-per-pod";
    let ns = Namespace::new("peers-spp");
    let operator = start_example(NAME, &ns.0);
    apply_yaml(&ns.0, &example_file(NAME, "statefulset.yaml"));
    let selects = |pod: &str| get(&ns.0, &format!("service/{pod}"), "{.spec.selector.pod-name}") == pod;

    // 1. "Wait for per-pod Service": nginx-2 selects its Pod by the pod-name label (and so do
    // the Services of the other two Pods, with the annotation's port mapping).
    wait_until(WAIT, "a Service per Pod", || {
        ["nginx-0", "nginx-1", "nginx-2"].iter().all(|pod| selects(pod))
    });
    assert_eq!(
        get(
            &ns.0,
            "service/nginx-2",
            "{.spec.ports[0].name} {.spec.ports[0].port} {.spec.ports[0].targetPort}"
        ),
        "port-80 80 80"
    );
    // 2. "Wait for pod-name label" on Pod nginx-2: not ported (the README: ruleop does not write
    // the watched object's own labels, and this control plane runs no StatefulSet controller).

    // 3. Opting out (one annotation removed) prunes the Services; the StatefulSet stays.
    kubectl_ok(&["annotate", "-n", &ns.0, "statefulset/nginx", "service-per-pod-label-"]);
    wait_until(WAIT, "the per-pod Services pruned on opt-out", || {
        ["nginx-0", "nginx-1", "nginx-2"]
            .iter()
            .all(|pod| !exists(&ns.0, &format!("service/{pod}")))
    });
    assert!(exists(&ns.0, "statefulset/nginx"));
    // 4. No decorator finalizer is left on it (ruleop added none).
    assert!(!has_ruleop_finalizer(&ns.0, "statefulset/nginx"));

    // 5. Opting in again brings them back.
    kubectl_ok(&[
        "annotate",
        "-n",
        &ns.0,
        "statefulset/nginx",
        "service-per-pod-label=pod-name",
    ]);
    wait_until(WAIT, "the per-pod Service back on opt-in", || selects("nginx-2"));

    // 6. Deleted while another finalizer holds it: the original's finalize hook deletes the
    // Services at once. ruleop leaves children beside their parent to the garbage collector,
    // which (background deletion) takes them only once the StatefulSet is gone.
    let held = "metacontroller.io/service-per-pod-test";
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "statefulset/nginx",
        "--type=json",
        "-p",
        &format!(r#"[{{"op":"add","path":"/metadata/finalizers","value":["{held}"]}}]"#),
    ]);
    kubectl_ok(&["delete", "-n", &ns.0, "statefulset/nginx", "--wait=false"]);
    wait_until(WAIT, "the StatefulSet to be deleting", || {
        !get(&ns.0, "statefulset/nginx", "{.metadata.deletionTimestamp}").is_empty()
    });
    operator.idle_reconciles("service-per-pod");
    assert!(
        exists(&ns.0, "service/nginx-2"),
        "the Service stays while another finalizer holds the StatefulSet (the difference)"
    );
    // 7. No decorator finalizer holds the deletion.
    assert!(!has_ruleop_finalizer(&ns.0, "statefulset/nginx"));
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "statefulset/nginx",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_until(WAIT, "the Services to go with the StatefulSet", || {
        !exists(&ns.0, "statefulset/nginx")
            && ["nginx-0", "nginx-1", "nginx-2"]
                .iter()
                .all(|pod| !exists(&ns.0, &format!("service/{pod}")))
    });
}

/// The environment of a Deployment's first container, by name.
fn container_env(namespace: &str, deployment: &str) -> BTreeMap<String, String> {
    let json = get(
        namespace,
        &format!("deployment/{deployment}"),
        "{.spec.template.spec.containers[0].env}",
    );
    let env: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap_or_default();
    env.iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
        .collect()
}

// kro's examples/kubernetes/cel-functions: what each expression of its Deployment, Service and
// status evaluates to, plus kro's e2e check that an instance turns Ready.
#[test]
fn cel_functions_render_the_values_kro_computes_and_typed_status() {
    const NAME: &str = "kro-cel-functions";
    let ns = Namespace::new("peers-cel");
    let _operator = start_example(NAME, &ns.0);
    let instance = example_file(NAME, "instance.yaml");
    apply_yaml(&ns.0, &instance);
    wait_until(WAIT, "the Deployment and the Service", || {
        exists(&ns.0, "deployment/app") && exists(&ns.0, "service/app")
    });

    let env = container_env(&ns.0, "app");
    let value = |name: &str| env.get(name).cloned().unwrap_or_default();
    assert_eq!(
        get(&ns.0, "deployment/app", "{.spec.template.spec.containers[0].name}"),
        "app-deployment"
    );
    // The original's ten values (the CRD defaulted fullDNSName, as kro's `default=` does).
    assert_eq!(value("FULL_DNS_NAME"), "a.b.c.d.example.com");
    assert_eq!(value("DNS_FIRST_PART"), "a");
    assert_eq!(value("DNS_PARTIALS"), "a");
    let seeded = value("RANDOM_SEEDED_STRING");
    assert!(
        seeded.len() == 10 && seeded.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
        "{seeded:?}"
    );
    assert_eq!(value("LISTS_SUM"), "600");
    assert_eq!(value("JSON_UNMARSHAL_EXAMPLE"), "exampleJSONValue");
    // The same JSON as kro's `{"name":"app"}`; minijinja's tojson puts a space after the colon.
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&value("JSON_MARSHAL_EXAMPLE")).ok(),
        Some(serde_json::json!({"name": "app"}))
    );
    assert_eq!(value("QUANTITY_COMPARISON"), "small");
    assert_eq!(
        value("HASH_SHA256"),
        "a172cedcae47474b615c54d510a5d84a8dea3032e958587430b413538be3f333"
    );
    // Additions: base64, semver, an annotation read with a list path, a spec checksum.
    assert_eq!(value("BASE64_ENCODED"), "YXBw");
    assert_eq!(value("BASE64_ROUND_TRIP"), "app");
    assert_eq!(value("SEMVER_NEWER"), "true");
    assert_eq!(value("ANNOTATION_TEST"), "annotation-value");
    let checksum = get(
        &ns.0,
        "deployment/app",
        "{.spec.template.metadata.annotations.checksum/spec}",
    );
    assert_eq!(checksum.len(), 16, "{checksum:?}");

    // The Service's four labels.
    assert_eq!(
        get(
            &ns.0,
            "service/app",
            "{.metadata.labels.app} {.metadata.labels.dns} {.metadata.labels.partials} {.metadata.labels.first_part}"
        ),
        "deployment a.b.c.d.example.com a.b.c a"
    );

    // Status: absent until the Deployment reports, then its conditions (an array) and ten times
    // its available replicas (an integer). No Deployment controller runs here: the test writes
    // what it would.
    let something = "something/my-instance-will-cel-functions";
    wait_until(WAIT, "Ready=True (kro's e2e check)", || {
        get(&ns.0, something, "{.status.conditions[?(@.type==\"Ready\")].status}") == "True"
    });
    assert_eq!(get(&ns.0, something, "{.status.availableReplicas}"), "");
    merge_patch_status(
        &ns.0,
        "deployment/app",
        r#"{"status":{"replicas":1,"readyReplicas":1,"availableReplicas":1,"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"ok"}]}}"#,
    );
    wait_until(WAIT, "the status fields", || {
        get(&ns.0, something, "{.status.availableReplicas}") == "10"
    });
    let status: serde_json::Value = serde_json::from_str(&get(&ns.0, something, "{.status}")).expect("status is JSON");
    assert_eq!(status["availableReplicas"], serde_json::json!(10), "an integer");
    assert_eq!(status["deploymentConditions"][0]["type"], "Available");

    // The seeded string is stable for one instance and differs for another.
    merge_patch(&ns.0, something, r#"{"spec":{"fullDNSName":"x.y.example.com"}}"#);
    wait_until(WAIT, "the edited DNS name", || {
        container_env(&ns.0, "app").get("FULL_DNS_NAME").map(String::as_str) == Some("x.y.example.com")
    });
    assert_eq!(container_env(&ns.0, "app")["RANDOM_SEEDED_STRING"], seeded);
    assert_eq!(get(&ns.0, "service/app", "{.metadata.labels.partials}"), "x.y.example");
    apply_yaml(
        &ns.0,
        &instance
            .replace("my-instance-will-cel-functions", "another")
            .replace("name: app", "name: app2"),
    );
    wait_until(WAIT, "the second instance's Deployment", || {
        exists(&ns.0, "deployment/app2")
    });
    let other = container_env(&ns.0, "app2")["RANDOM_SEEDED_STRING"].clone();
    assert!(other.len() == 10 && other != seeded, "{other:?} vs {seeded:?}");
}

// Metacontroller's examples/globalconfigmap: test.sh and the README's claim about new namespaces,
// plus sync.py's clean-up when the source ConfigMap is deleted.
#[test]
fn globalconfigmap_copies_the_source_into_every_labelled_namespace_and_reports_fine() {
    const NAME: &str = "metacontroller-globalconfigmap";
    let global = Namespace::new("peers-gcm-global");
    let (first, second, third) = (
        Namespace::new("peers-gcm-first"),
        Namespace::new("peers-gcm-second"),
        Namespace::new("peers-gcm-third"),
    );
    let _operator = start_example(NAME, &global.0);
    let objects = with_namespaces(
        &example_file(NAME, "example.yaml"),
        &[
            ("global", &global),
            ("first", &first),
            ("second", &second),
            ("third", &third),
        ],
    );
    apply_yaml(&global.0, &objects);

    // "Wait for ConfigMap propagation" into first, second and third.
    let copied = |ns: &Namespace| get(&ns.0, "configmap/globalsettings", "{.data.some}") == "value";
    wait_until(WAIT, "the copies", || {
        [&first, &second, &third].iter().all(|ns| copied(ns))
    });
    assert_eq!(get(&first.0, "configmap/globalsettings", "{.data.other}"), "value");
    // "Check status update on parent".
    wait_until(WAIT, "status.working", || {
        get(&global.0, "globalconfigmap/globalsettings", "{.status.working}") == "fine"
    });
    // The source namespace is not a target: its ConfigMap is the source itself, not a child.
    assert_eq!(
        get(
            &global.0,
            "configmap/globalsettings",
            "{.metadata.labels.ruleop\\.io/rule}"
        ),
        ""
    );

    // The README: "adding new namespace will trigger controller" (here: labelling one).
    let fourth = Namespace::new("peers-gcm-fourth");
    kubectl_ok(&[
        "label",
        "namespace",
        &fourth.0,
        "peers.ruleop.io/globalconfigmap=enabled",
    ]);
    wait_until(WAIT, "a copy in the new namespace", || copied(&fourth));

    // sync.py: once the source is deleted, the copies are cleaned up.
    kubectl_ok(&["delete", "-n", &global.0, "configmap/globalsettings"]);
    wait_until(WAIT, "the copies removed with the source", || {
        [&first, &second, &third, &fourth]
            .iter()
            .all(|ns| !exists(&ns.0, "configmap/globalsettings"))
    });
    // Its cleanup finalizer is released while ruleop runs (before the namespaces go).
    kubectl_ok(&[
        "delete",
        "-n",
        &global.0,
        "globalconfigmap/globalsettings",
        "--timeout=30s",
    ]);
}

// Metacontroller's examples/configmappropagation: test.sh and the counts its sync hook reports.
#[test]
fn configmappropagation_copies_the_source_into_each_target_namespace_and_counts_them() {
    const NAME: &str = "metacontroller-configmappropagation";
    let original = Namespace::new("peers-cmp-original");
    let (one, two, three) = (
        Namespace::new("peers-cmp-one"),
        Namespace::new("peers-cmp-two"),
        Namespace::new("peers-cmp-three"),
    );
    let _operator = start_example(NAME, &original.0);
    let objects = with_namespaces(
        &example_file(NAME, "example.yaml"),
        &[("original", &original), ("one", &one), ("two", &two), ("three", &three)],
    )
    .replace(
        "targetNamespaces: [one, two, three]",
        &format!("targetNamespaces: [{}, {}, {}]", one.0, two.0, three.0),
    );
    apply_yaml(&original.0, &objects);

    // "Wait for ConfigMap propagation" into one, two and three.
    wait_until(WAIT, "the copies", || {
        [&one, &two, &three]
            .iter()
            .all(|ns| get(&ns.0, "configmap/settings", "{.data.some}") == "value")
    });
    // The counts the sync hook writes, as integers.
    let propagation = "configmappropagation/settings-propagation";
    wait_until(WAIT, "expected_copies and actual_copies", || {
        get(
            &original.0,
            propagation,
            "{.status.expected_copies} {.status.actual_copies}",
        ) == "3 3"
    });

    // Not in the original: a target the namespace selector does not match is refused.
    let stranger = Namespace::new("peers-cmp-stranger");
    merge_patch(
        &original.0,
        propagation,
        &format!(
            r#"{{"spec":{{"targetNamespaces":["{}","{}","{}","{}"]}}}}"#,
            one.0, two.0, three.0, stranger.0
        ),
    );
    wait_until(WAIT, "NamespaceNotAllowed", || {
        get(
            &original.0,
            propagation,
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        ) == "NamespaceNotAllowed"
    });
    assert!(!exists(&stranger.0, "configmap/settings"));

    // Not in test.sh: deleting it deletes the copies (the original's garbage collection), before
    // its cleanup finalizer is released.
    kubectl_ok(&["delete", "-n", &original.0, propagation, "--timeout=30s"]);
    assert!(
        [&one, &two, &three]
            .iter()
            .all(|ns| !exists(&ns.0, "configmap/settings")),
        "the copies are deleted before the ConfigMapPropagation goes"
    );
}

// kro's KREP-003 (decorators) example 2, "decorating a Namespace": what the example and its
// motivation say the decorator does, with the namespaces an admin labelled as the selection.
#[test]
fn namespace_decorator_gives_every_labelled_namespace_a_default_limitrange() {
    const NAME: &str = "kro-namespace-decorator";
    let platform = Namespace::new("peers-nsd-platform");
    let (team_a, team_b) = (Namespace::new("peers-nsd-team-a"), Namespace::new("peers-nsd-team-b"));
    let _operator = start_example(NAME, &platform.0);
    let objects = with_namespaces(
        &example_file(NAME, "example.yaml"),
        &[("platform", &platform), ("team-a", &team_a), ("team-b", &team_b)],
    );
    let unlabelled = Namespace::new("peers-nsd-unlabelled");
    apply_yaml(&platform.0, &objects);
    let limits = |ns: &Namespace| format!("limitrange/{}-limits", ns.0);
    let decorated = |ns: &Namespace| exists(&ns.0, &limits(ns));

    // 1. Every selected namespace gets its LimitRange `<namespace>-limits` (the decorator's own
    // namespace is one of them, as every namespace is in kro's).
    wait_until(WAIT, "a LimitRange in each namespace", || {
        [&platform, &team_a, &team_b].iter().all(|ns| decorated(ns))
    });
    // 2. Its limits: containers' minimum cpu and memory.
    assert_eq!(
        get(
            &team_a.0,
            &limits(&team_a),
            "{.spec.limits[0].type} {.spec.limits[0].min.cpu} {.spec.limits[0].min.memory}"
        ),
        "Container 100m 128Mi"
    );
    // Added: the count in status, an integer, and Ready.
    let decorator = "namespacedecorator/limitranges";
    wait_until(WAIT, "status.decoratedNamespaces", || {
        get(&platform.0, decorator, "{.status.decoratedNamespaces}") == "3"
    });
    assert_eq!(
        get(
            &platform.0,
            decorator,
            "{.status.conditions[?(@.type==\"Ready\")].status}"
        ),
        "True"
    );
    // The difference: a namespace without the label is not decorated.
    assert!(!decorated(&unlabelled));

    // 3. "Dynamically create these objects when namespaces are created": a namespace created
    // (and labelled) later gets its own.
    let late = Namespace::new("peers-nsd-late");
    kubectl_ok(&[
        "label",
        "namespace",
        &late.0,
        "peers.ruleop.io/namespace-decorator=enabled",
    ]);
    wait_until(WAIT, "a LimitRange in the new namespace", || decorated(&late));
    wait_until(WAIT, "the count to follow", || {
        get(&platform.0, decorator, "{.status.decoratedNamespaces}") == "4"
    });

    // 4. Deleting the decorator deletes what it created (kro deletes an instance's resources),
    // before its cleanup finalizer is released (the LimitRanges are in other namespaces).
    assert!(has_ruleop_finalizer(&platform.0, decorator));
    kubectl_ok(&["delete", "-n", &platform.0, decorator, "--timeout=30s"]);
    wait_until(WAIT, "the LimitRanges gone with the decorator", || {
        [&platform, &team_a, &team_b, &late].iter().all(|ns| !decorated(ns))
    });
}

// kro's KREP-003 (decorators) example 3, "decorating multiple resources into a single aggregated
// resource": one Ingress that routes to every Service with an http port, following them.
#[test]
fn ingress_fan_in_routes_every_http_service_and_follows_them() {
    const NAME: &str = "kro-ingress-fan-in";
    let ns = Namespace::new("peers-ing");
    let _operator = start_example(NAME, &ns.0);
    apply_yaml(&ns.0, &example_file(NAME, "example.yaml"));
    let ingress = "ingress/services-ingress";
    let paths = || get(&ns.0, ingress, "{.spec.rules[0].http.paths[*].path}");
    let route = |service: &str| format!("/{}/{service}", ns.0);

    // 1-4. The Ingress exists, with a path per Service that has a port named http (web, api),
    // none for the Service without one (grpc), sorted by path.
    wait_until(WAIT, "the Ingress with both http Services", || {
        paths() == format!("{} {}", route("api"), route("web"))
    });
    // 5. Each path: Prefix, to its Service's port named http.
    assert_eq!(
        get(
            &ns.0,
            ingress,
            "{.spec.rules[0].http.paths[1].pathType} {.spec.rules[0].http.paths[1].backend.service.name} {.spec.rules[0].http.paths[1].backend.service.port.name}"
        ),
        "Prefix web http"
    );
    // Added: the number of routes in status, an integer, and Ready.
    let parent = "servicesingress/services";
    wait_until(WAIT, "status.routes", || get(&ns.0, parent, "{.status.routes}") == "2");
    assert_eq!(
        get(&ns.0, parent, "{.status.conditions[?(@.type==\"Ready\")].status}"),
        "True"
    );

    // 6. A Service that comes is routed, in path order.
    apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: billing\nspec:\n  ports: [{name: http, port: 80}]\n",
    );
    wait_until(WAIT, "the new Service routed", || {
        paths() == format!("{} {} {}", route("api"), route("billing"), route("web"))
    });
    // 7. A Service that goes is no longer routed, and one that loses its http port neither.
    kubectl_ok(&["delete", "-n", &ns.0, "service/web"]);
    merge_patch(
        &ns.0,
        "service/api",
        r#"{"spec":{"ports":[{"name":"metrics","port":9090}]}}"#,
    );
    wait_until(WAIT, "the gone Services unrouted", || paths() == route("billing"));

    // The difference: with no http Service left there is no Ingress (one without paths is
    // invalid), and it comes back with one.
    kubectl_ok(&["delete", "-n", &ns.0, "service/billing"]);
    wait_until(WAIT, "the Ingress pruned", || !exists(&ns.0, ingress));
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "service/grpc",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/ports/-","value":{"name":"http","port":80}}]"#,
    ]);
    wait_until(WAIT, "the Ingress back", || paths() == route("grpc"));
    // Its children are all in its own namespace (owner references): no cleanup finalizer.
    assert!(!has_ruleop_finalizer(&ns.0, parent));
    kubectl_ok(&["delete", "-n", &ns.0, parent, "--timeout=30s"]);
}

// Metacontroller's examples/update-strategy/test.sh, step by step: the same child under
// updateStrategy OnDelete and Recreate.
#[test]
fn update_strategies_on_delete_withholds_a_change_until_deleted_and_recreate_recreates_once() {
    const NAME: &str = "metacontroller-update-strategy";
    let ns = Namespace::new("peers-upd");
    let operator = start_example(NAME, &ns.0);
    apply_yaml(&ns.0, &example_file(NAME, "example.yaml"));
    let value = |cm: &str| get(&ns.0, &format!("configmap/{cm}"), "{.data.value}");
    let uid = |cm: &str| get(&ns.0, &format!("configmap/{cm}"), "{.metadata.uid}");

    // Phase 1: both children appear with v1.
    wait_until(WAIT, "odd-instance-data with v1", || value("odd-instance-data") == "v1");
    wait_until(WAIT, "rcd-instance-data with v1", || value("rcd-instance-data") == "v1");
    let (odd_first, rcd_first) = (uid("odd-instance-data"), uid("rcd-instance-data"));

    // Phase 2: configData v2 in both. Recreate: deleted and created again with v2.
    operator.reconciled_after("on-delete-demo", || {
        merge_patch(&ns.0, "ondeletedemo/odd-instance", r#"{"spec":{"configData":"v2"}}"#);
    });
    merge_patch(&ns.0, "recreatedemo/rcd-instance", r#"{"spec":{"configData":"v2"}}"#);
    wait_until(WAIT, "rcd-instance-data recreated with v2", || {
        value("rcd-instance-data") == "v2"
    });
    let rcd_second = uid("rcd-instance-data");
    assert_ne!(
        rcd_second, rcd_first,
        "Recreate deleted the ConfigMap and created a new one"
    );
    // No recreation loop: three more reconciles (each caused by a parent edit that leaves the
    // rendering as it is) keep the same object and v2. The original waits 30 s instead.
    for round in 0..3 {
        operator.reconciled_after("recreate-demo", || {
            kubectl_ok(&[
                "annotate",
                "-n",
                &ns.0,
                "recreatedemo/rcd-instance",
                &format!("peers.ruleop.io/nudge={round}"),
                "--overwrite",
            ]);
        });
        operator.idle_reconciles("recreate-demo");
        assert_eq!(
            uid("rcd-instance-data"),
            rcd_second,
            "no recreation loop (round {round})"
        );
    }
    assert_eq!(value("rcd-instance-data"), "v2");

    // OnDelete: the change is withheld (the parent was reconciled after it), the object kept.
    operator.idle_reconciles("on-delete-demo");
    assert_eq!(value("odd-instance-data"), "v1", "OnDelete withholds the update");
    assert_eq!(uid("odd-instance-data"), odd_first);
    assert_eq!(
        get(&ns.0, "ondeletedemo/odd-instance", "{.status.observedConfigData}"),
        "v2",
        "status follows the parent (sync.py's observedConfigData)"
    );

    // Phase 3: deleting the OnDelete child lets the next reconcile create it with v2.
    kubectl_ok(&["delete", "-n", &ns.0, "configmap/odd-instance-data"]);
    wait_until(WAIT, "odd-instance-data recreated with v2", || {
        value("odd-instance-data") == "v2"
    });
    assert_ne!(uid("odd-instance-data"), odd_first);
}

// Metacontroller's examples/clusteredparent/test.sh: a cluster-scoped parent (a ClusterRole)
// with a namespaced child (a RoleBinding in `default`), recreated when deleted, and deleted by the
// garbage collector with the ClusterRole through its ownerReference.
#[test]
fn clusteredparent_binds_an_annotated_cluster_role_and_the_binding_goes_with_it() {
    const NAME: &str = "metacontroller-clusteredparent";
    let ns = Namespace::new("peers-cp");
    // The example's fixed names: clear what an earlier run on this control plane left.
    kubectl_ok(&[
        "delete",
        "clusterrole",
        "my-clusterrole",
        "plain-clusterrole",
        "--ignore-not-found",
    ]);
    kubectl_ok(&[
        "delete",
        "rolebinding",
        "-n",
        "default",
        "my-clusterrole",
        "plain-clusterrole",
        "--ignore-not-found",
    ]);
    let operator = start_example(NAME, &ns.0);
    kubectl_ok(&[
        "apply",
        "-f",
        &example(NAME).join("clusterrole.yaml").display().to_string(),
    ]);
    // Not opted in: no binding.
    kubectl_ok(&[
        "create",
        "clusterrole",
        "plain-clusterrole",
        "--verb=get",
        "--resource=nodes",
    ]);
    let binding = || get("default", "rolebinding/my-clusterrole", "{.metadata.uid}");

    // 1. "Wait for Namespaced child", with what sync.py puts in it.
    wait_until(WAIT, "the RoleBinding of the ClusterRole", || !binding().is_empty());
    assert_eq!(
        get(
            "default",
            "rolebinding/my-clusterrole",
            "{.roleRef.kind}/{.roleRef.name} {.subjects[0].kind} {.subjects[0].namespace}/{.subjects[0].name}"
        ),
        "ClusterRole/my-clusterrole ServiceAccount default/default"
    );
    assert_eq!(
        get(
            "default",
            "rolebinding/my-clusterrole",
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"
        ),
        "ClusterRole/my-clusterrole"
    );

    // 2. "Delete Namespaced child" and "Wait for Namespaced child to be recreated": the deletion
    // of a child in another namespace reaches the cluster-scoped parent.
    let first = binding();
    kubectl_ok(&[
        "delete",
        "rolebinding",
        "-n",
        "default",
        "my-clusterrole",
        "--wait=true",
    ]);
    wait_until(WAIT, "the RoleBinding recreated", || {
        let now = binding();
        !now.is_empty() && now != first
    });

    operator.idle_reconciles("clusteredparent");
    assert!(
        !exists("default", "rolebinding/plain-clusterrole"),
        "a ClusterRole without the annotation is not decorated"
    );

    // 3. "Deleting ClusterRole" and "Wait for Namespaced child cleanup": the garbage collector
    // follows the ownerReference from `default` to the cluster-scoped owner (no finalizer).
    assert!(get("", "clusterrole/my-clusterrole", "{.metadata.finalizers}").is_empty());
    kubectl_ok(&["delete", "clusterrole", "my-clusterrole"]);
    wait_until(WAIT, "the RoleBinding to go with its ClusterRole", || {
        !exists("default", "rolebinding/my-clusterrole")
    });
    kubectl_ok(&["delete", "clusterrole", "plain-clusterrole"]);
}

// Metacontroller's examples/configmap-list-v2/test.sh: a list of the ConfigMaps of another
// namespace that carry the parent's labels, and their count in status.
#[test]
fn configmap_list_lists_the_labelled_configmaps_of_the_source_namespace_and_counts_them() {
    const NAME: &str = "metacontroller-configmap-list-v2";
    // In full: kubectl reads a bare `configmaplist` as a ConfigMap list.
    const PARENT: &str = "configmaplists.peers.ruleop.io/my-config-list";
    let (source, target) = (Namespace::new("peers-cml-source"), Namespace::new("peers-cml-target"));
    let operator = start_example(NAME, &target.0);
    let objects = with_namespaces(
        &example_file(NAME, "example.yaml"),
        &[("source-ns", &source), ("target-ns", &target)],
    );
    // Objects in two namespaces, each naming its own.
    let out = kubectl_with_stdin(&["apply", "-f", "-"], Some(&objects));
    assert!(out.status.success(), "kubectl apply: {}", text(&out.stderr));
    let listed = || get(&target.0, "configmap/my-config-list-list", "{.data.configmaps}");

    // "Wait for ConfigMap list generation": exactly cm-1 and cm-2, sorted, one per line.
    let expected = format!("{0}/cm-1\n{0}/cm-2", source.0);
    wait_until(WAIT, "the list of my-app's ConfigMaps", || listed() == expected);
    // "Check status update on parent": the count, an integer.
    wait_until(WAIT, "status.count 2", || {
        get(&target.0, PARENT, "{.status.count}") == "2"
    });

    // v2's related resources: a new match re-reconciles the reader, and a ConfigMap the platform
    // did not mark listable is never read, whatever its labels.
    kubectl_ok(&[
        "create",
        "configmap",
        "-n",
        &source.0,
        "cm-3",
        "--from-literal=key=value4",
    ]);
    kubectl_ok(&[
        "label",
        "configmap",
        "-n",
        &source.0,
        "cm-3",
        "app=my-app",
        "peers.ruleop.io/listable=true",
    ]);
    kubectl_ok(&[
        "create",
        "configmap",
        "-n",
        &source.0,
        "cm-unlisted",
        "--from-literal=key=value5",
    ]);
    kubectl_ok(&["label", "configmap", "-n", &source.0, "cm-unlisted", "app=my-app"]);
    let expected = format!("{0}/cm-1\n{0}/cm-2\n{0}/cm-3", source.0);
    wait_until(WAIT, "cm-3 added to the list", || listed() == expected);
    wait_until(WAIT, "status.count 3", || {
        get(&target.0, PARENT, "{.status.count}") == "3"
    });
    operator.idle_reconciles("configmaplist");
    assert_eq!(listed(), expected, "cm-unlisted is not listable, so never listed");
}
