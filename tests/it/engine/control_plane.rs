//! The real control plane behaves as ruleop relies on: readiness, CRDs with a status
//! subresource, generation semantics, cascading and namespace deletion, server-side apply.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

#[test]
fn kubectl_sees_a_ready_api_server() {
    assert_eq!(kubectl_ok(&["get", "--raw", "/readyz"]), "ok");
}

#[test]
fn database_crd_serves_objects_and_a_status_subresource() {
    install_crds();
    let ns = Namespace::new("cp-crd");
    apply_yaml(&ns.0, &database("orders", 1, ""));
    assert_eq!(get(&ns.0, "database/orders", "{.spec.version}"), "16");
    assert_eq!(get(&ns.0, "database/orders", "{.metadata.generation}"), "1");

    merge_patch_status(&ns.0, "database/orders", r#"{"status":{"endpoint":"x"}}"#);
    assert_eq!(get(&ns.0, "database/orders", "{.status.endpoint}"), "x");
    assert_eq!(
        get(&ns.0, "database/orders", "{.metadata.generation}"),
        "1",
        "a status change keeps the generation"
    );

    merge_patch(&ns.0, "database/orders", r#"{"spec":{"replicas":2}}"#);
    assert_eq!(
        get(&ns.0, "database/orders", "{.metadata.generation}"),
        "2",
        "a spec change bumps the generation"
    );

    let out = kubectl_with_stdin(
        &["apply", "-n", &ns.0, "-f", "-"],
        Some(&database("bad", 1, "").replace("\"16\"", "16")),
    );
    assert!(!out.status.success(), "the CRD schema rejects a numeric version");
}

#[test]
fn deleting_a_parent_cascades_to_its_owned_child() {
    install_crds();
    let ns = Namespace::new("cp-gc");
    apply_yaml(&ns.0, &database("owner", 1, ""));
    let uid = get(&ns.0, "database/owner", "{.metadata.uid}");
    apply_yaml(
        &ns.0,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: child\n  ownerReferences:\n  - {{apiVersion: myorg.io/v1, kind: Database, name: owner, uid: {uid}, controller: true, blockOwnerDeletion: true}}\n"
        ),
    );
    kubectl_ok(&["delete", "-n", &ns.0, "database/owner", "--wait=false"]);
    let took = wait_until(
        Duration::from_secs(60),
        "the garbage collector to delete the child",
        || !exists(&ns.0, "configmap/child"),
    );
    eprintln!("cascading deletion took {took:?}");
}

#[test]
fn namespace_deletion_completes() {
    install_crds();
    let namespace = Namespace::new("cp-ns");
    let ns = namespace.0.clone();
    apply_yaml(&ns, &database("a", 1, ""));
    apply_yaml(&ns, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n");
    kubectl_ok(&["delete", "namespace", &ns, "--wait=false"]);
    let took = wait_until(Duration::from_secs(60), "the namespace to be gone", || {
        !exists("", &format!("namespace/{ns}"))
    });
    eprintln!("namespace deletion took {took:?}");
}

async fn client() -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(&control_plane().kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test]
async fn server_side_apply_is_idempotent_and_reports_conflicts() {
    let ns = Namespace::new("cp-ssa");
    let api: Api<ConfigMap> = Api::namespaced(client().await, &ns.0);
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k": "1"}});
    let first = api
        .patch("ssa", &PatchParams::apply("one"), &Patch::Apply(&object))
        .await
        .expect("apply");
    let again = api
        .patch("ssa", &PatchParams::apply("one"), &Patch::Apply(&object))
        .await
        .expect("re-apply");
    assert_eq!(
        first.metadata.resource_version, again.metadata.resource_version,
        "a no-op apply changes nothing"
    );

    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k": "2"}});
    match api
        .patch("ssa", &PatchParams::apply("two"), &Patch::Apply(&other))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
        other => panic!("expected a 409 conflict, got {other:?}"),
    }
    let forced = api
        .patch("ssa", &PatchParams::apply("two").force(), &Patch::Apply(&other))
        .await
        .expect("forced");
    assert_eq!(forced.data.and_then(|d| d.get("k").cloned()).as_deref(), Some("2"));
}

#[test]
fn a_stopped_control_plane_leaves_no_process_and_no_temp_dir() {
    let (mut child, stdin, kubeconfig) = start_apiserver(&[]);
    let data_dir = kubeconfig.parent().expect("data dir").to_path_buf();
    assert!(data_dir.exists());
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let status = child.wait().expect("exits");
    drop(stdin);
    assert!(status.success(), "clean exit, got {status:?}");
    assert!(!data_dir.exists(), "{} was not removed", data_dir.display());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} is still there"
    );
}

/// SIGTERMs a control plane process and returns how long it took to exit.
fn terminate(child: &mut std::process::Child) -> Duration {
    let start = std::time::Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let status = child.wait().expect("exits");
    assert!(status.success(), "clean exit, got {status:?}");
    start.elapsed()
}

#[test]
fn sigterm_stops_the_control_plane_promptly_even_with_watches_open() {
    let (mut child, _stdin, kubeconfig) = start_apiserver(&[]);
    let mut watches: Vec<_> = ["configmaps", "namespaces", "services"]
        .iter()
        .map(|resource| {
            std::process::Command::new("kubectl")
                .args(["get", resource, "--all-namespaces", "--watch"])
                .env("KUBECONFIG", &kubeconfig)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("kubectl watch")
        })
        .collect();
    // Each watch has listed (the header line) before the stop.
    for watch in &mut watches {
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(watch.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("first line");
    }
    let took = terminate(&mut child);
    for mut watch in watches {
        let _ = watch.kill();
        let _ = watch.wait();
    }
    eprintln!("SIGTERM to exit with 3 watches open: {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: open watches must not hold the shutdown"
    );
}

#[test]
fn a_restart_on_the_same_data_dir_keeps_the_port_credentials_tokens_and_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().display().to_string();
    let (mut child, _stdin, kubeconfig) = start_apiserver(&["--data-dir", &data_dir]);
    let kubectl_at = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    kubectl_at(&["create", "configmap", "kept", "-n", "default", "--from-literal=k=v"]);
    kubectl_at(&["create", "serviceaccount", "robot", "-n", "default"]);
    let token = kubectl_at(&["create", "token", "robot", "-n", "default"]);
    let before = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    terminate(&mut child);

    let (mut child, _stdin2, again) = start_apiserver(&["--data-dir", &data_dir]);
    assert_eq!(again, kubeconfig);
    assert_eq!(
        std::fs::read_to_string(&kubeconfig).expect("kubeconfig"),
        before,
        "same URL (port), CA and admin token"
    );
    assert_eq!(
        kubectl_at(&["get", "configmap", "kept", "-n", "default", "-o", "jsonpath={.data.k}"]),
        "v",
        "etcd data survives"
    );
    assert_eq!(
        kubectl_at(&[
            "auth",
            "whoami",
            "--token",
            token.trim(),
            "-o",
            "jsonpath={.status.userInfo.username}"
        ]),
        "system:serviceaccount:default:robot",
        "a ServiceAccount token from before the restart still authenticates"
    );
    terminate(&mut child);
    assert!(dir.path().join("etcd").exists(), "--data-dir is kept");
}
