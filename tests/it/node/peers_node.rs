//! Peer examples that need a node (tests/node): Metacontroller's CatSet (examples/peers/
//! metacontroller-catset), whose Pods must really run and turn Ready, checked against what the
//! original's test.sh asserts, plus the order it promises (one Pod at a time, highest ordinal
//! removed first) and what its README says of the claims (kept after a scale down, deleted with
//! the CatSet). Driven by kubectl; ruleop runs as a process on the node's control plane.

use std::time::Duration;

use crate::support::{Namespace, Operator, get, kubectl, kubectl_ok, merge_patch, root, wait_until};

const POD_READY: Duration = Duration::from_secs(180);

/// One of the CatSet's fields, read by kubectl.
fn catset(namespace: &str, jsonpath: &str) -> String {
    get(namespace, "catset/nginx-backend", jsonpath)
}

/// The CatSet's Pods or claims, `name=value` per line, sorted by name.
fn listed(namespace: &str, kind: &str, jsonpath: &str) -> Vec<String> {
    let out = kubectl_ok(&[
        "get",
        kind,
        "-n",
        namespace,
        "-l",
        "ruleop.io/rule=catset",
        "-o",
        &format!("jsonpath={{range .items[*]}}{{.metadata.name}}={jsonpath}{{\"\\n\"}}{{end}}"),
    ]);
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

fn pod_names(namespace: &str) -> Vec<String> {
    listed(namespace, "pods", "")
        .into_iter()
        .map(|l| l.trim_end_matches('=').to_owned())
        .collect()
}

fn wait_ready_replicas(namespace: &str, n: usize) -> Duration {
    wait_until(POD_READY, &format!("status.readyReplicas {n}"), || {
        catset(namespace, "{.status.readyReplicas}") == n.to_string() && pod_names(namespace).len() == n
    })
}

#[test]
fn the_catset_scales_one_ordered_pod_at_a_time_keeps_its_claims_and_scales_to_zero_before_its_finalizer_goes() {
    crate::support::node_control_plane();
    let dir = root().join("examples/peers/metacontroller-catset");
    let crds = dir.join("crds").display().to_string();
    kubectl_ok(&["apply", "-f", &crds]);
    kubectl_ok(&["wait", "--for=condition=Established", "-f", &crds, "--timeout=60s"]);
    let ns = Namespace::new("catset");
    let _operator = Operator::start(&dir.join("rules"), &dir.join("templates"), &ns.0);
    for file in ["service.yaml", "example.yaml"] {
        let yaml = std::fs::read_to_string(dir.join(file)).expect("the example's objects");
        crate::support::apply_yaml(&ns.0, &yaml);
    }

    // test.sh: "Wait for 3 Pods to be Ready".
    let took = wait_ready_replicas(&ns.0, 3);
    eprintln!("3 ordered pods Ready in {} ms", took.as_millis());
    // One at a time: each Pod was created no earlier than the one before it turned Ready
    // (both stamps are whole seconds).
    let created = listed(&ns.0, "pods", "{.metadata.creationTimestamp}");
    let ready_at = listed(
        &ns.0,
        "pods",
        "{.status.conditions[?(@.type==\"Ready\")].lastTransitionTime}",
    );
    for i in 1..3 {
        let (this, before) = (&created[i], &ready_at[i - 1]);
        let this = this.split('=').nth(1).expect("a stamp");
        let before = before.split('=').nth(1).expect("a stamp");
        assert!(
            this >= before,
            "pod {i} was created at {this}, before pod {} was Ready at {before}",
            i - 1
        );
    }
    assert_eq!(
        listed(&ns.0, "pvc", "{.spec.resources.requests.storage}"),
        [
            "www-nginx-backend-0=1Gi",
            "www-nginx-backend-1=1Gi",
            "www-nginx-backend-2=1Gi"
        ]
    );
    assert_eq!(
        get(
            &ns.0,
            "pod/nginx-backend-1",
            "{.spec.volumes[0].persistentVolumeClaim.claimName}"
        ),
        "www-nginx-backend-1"
    );
    assert_eq!(get(&ns.0, "pod/nginx-backend-1", "{.spec.subdomain}"), "nginx-backend");

    // test.sh: "Scale up to 4 replicas", "Wait for 4 Pods to be Ready".
    merge_patch(&ns.0, "catset/nginx-backend", r#"{"spec":{"replicas":4}}"#);
    wait_ready_replicas(&ns.0, 4);

    // test.sh: "Scale down to 2 replicas", "Wait for 2 Pods to be Ready". The claims stay.
    merge_patch(&ns.0, "catset/nginx-backend", r#"{"spec":{"replicas":2}}"#);
    wait_ready_replicas(&ns.0, 2);
    assert_eq!(pod_names(&ns.0), ["nginx-backend-0", "nginx-backend-1"]);
    assert_eq!(listed(&ns.0, "pvc", "").len(), 4, "claims are kept after a scale down");

    // The controller's updateStrategy (RollingRecreate, gated on Ready): a changed template
    // recreates the Pods one at a time, so one of the two stays Ready throughout.
    let before = listed(&ns.0, "pods", "{.metadata.uid}");
    merge_patch(
        &ns.0,
        "catset/nginx-backend",
        r#"{"spec":{"template":{"metadata":{"labels":{"version":"v2"}}}}}"#,
    );
    let mut fewest_ready = usize::MAX;
    wait_until(POD_READY, "both Pods recreated with the new template", || {
        let ready = listed(&ns.0, "pods", "{.status.conditions[?(@.type==\"Ready\")].status}")
            .iter()
            .filter(|l| l.ends_with("=True"))
            .count();
        fewest_ready = fewest_ready.min(ready);
        listed(&ns.0, "pods", "{.metadata.labels.version}") == ["nginx-backend-0=v2", "nginx-backend-1=v2"]
            && catset(&ns.0, "{.status.readyReplicas}") == "2"
    });
    let after = listed(&ns.0, "pods", "{.metadata.uid}");
    assert!(
        before.iter().zip(&after).all(|(b, a)| b != a),
        "every Pod was recreated: {before:?} -> {after:?}"
    );
    assert!(
        fewest_ready >= 1,
        "a Ready Pod throughout the rolling update (fewest {fewest_ready})"
    );

    // test.sh: append our own finalizer to read the final state, delete the CatSet, expect its
    // finalizer to scale it to 0 replicas, then ours to be the only one left.
    let finalizer = "metacontroller.io/catset-test";
    kubectl_ok(&[
        "patch",
        "catset",
        "nginx-backend",
        "-n",
        &ns.0,
        "--type=json",
        "-p",
        &format!(r#"[{{"op":"add","path":"/metadata/finalizers/-","value":"{finalizer}"}}]"#),
    ]);
    kubectl_ok(&["delete", "catset", "nginx-backend", "-n", &ns.0, "--wait=false"]);
    let mut seen = Vec::new();
    wait_until(POD_READY, "status.replicas 0", || {
        let pods = pod_names(&ns.0);
        if seen.last() != Some(&pods) {
            seen.push(pods);
        }
        catset(&ns.0, "{.status.replicas}") == "0"
    });
    wait_until(POD_READY, "only our finalizer left", || {
        catset(&ns.0, "{.metadata.finalizers}") == format!(r#"["{finalizer}"]"#)
    });
    // Ordinal by ordinal: the Pod sets seen while scaling to zero shrink from the top.
    for pods in &seen {
        let expected: Vec<String> = (0..pods.len()).map(|i| format!("nginx-backend-{i}")).collect();
        assert_eq!(*pods, expected, "pods while scaling to zero: {seen:?}");
    }
    // The README: the claims are deleted with the CatSet (after its Pods: reverse dependsOn).
    assert!(listed(&ns.0, "pvc", "").is_empty(), "claims deleted with the CatSet");
    merge_patch(&ns.0, "catset/nginx-backend", r#"{"metadata":{"finalizers":[]}}"#);
    wait_until(POD_READY, "the CatSet gone", || {
        !kubectl(&["get", "catset", "nginx-backend", "-n", &ns.0])
            .status
            .success()
    });
}
