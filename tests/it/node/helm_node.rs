//! The Helm chart on the test cluster's node: `helm install` of deploy/helm/ruleop gives a ruleop
//! Pod that reconciles a Database, and `helm upgrade` with a changed template rolls the rules
//! (through the kubelet's ConfigMap volume and ruleop's hot reload, in the same Pod). The chart's
//! objects take the node's patches of the kustomize installation through Helm's post-renderer
//! (`tests/node/overlay.sh --post-render`). The test takes the installation's turn without it
//! (`node::without_ruleop`: Helm refuses objects it did not create) and uninstalls its release;
//! the next `node::ruleop()` installs the kustomize one again.

use crate::support::helm::{CHART, helm, helm_ok};
use crate::support::mount::files_under;
use crate::support::node::{self, create_database, ms};
use crate::support::{Namespace, control_plane, exists, get, kubectl_ok, root, wait_until};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The label the upgrade's Service template adds.
const LABEL: &str = "helm.ruleop.io/upgraded";

/// The release `ruleop` in ruleop-system, uninstalled (and its pod gone) when dropped, also when
/// the test fails.
struct Release {
    kubeconfig: PathBuf,
}

impl Release {
    /// `helm install` (or `helm upgrade` with `extra`) with the image `make image` built and
    /// the node's post-renderer.
    fn helm(&self, command: &str, extra: &[&str]) {
        let tag = std::fs::read_to_string(root().join("target/ruleop-image.tag")).expect("image tag");
        let tag = format!("image.tag={}", tag.trim());
        let post_renderer = root().join("tests/node/overlay.sh").display().to_string();
        let mut args = vec![
            command,
            "ruleop",
            CHART,
            "-n",
            "ruleop-system",
            "--set",
            &tag,
            "--post-renderer",
            &post_renderer,
            "--post-renderer-args=--post-render",
        ];
        if command == "install" {
            args.push("--create-namespace");
        }
        args.extend_from_slice(extra);
        helm_ok(Some(&self.kubeconfig), &args);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let out = helm(
            Some(&self.kubeconfig),
            &["uninstall", "ruleop", "-n", "ruleop-system", "--wait"],
        );
        if !std::thread::panicking() {
            assert!(
                out.status.success(),
                "helm uninstall: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            wait_until(Duration::from_secs(120), "no ruleop pod left", || {
                node::pods().is_empty()
            });
        }
    }
}

/// Values with the chart's shipped rules and templates inline (`rules.files`,
/// `rules.templates`), the database Service template labelled with [`LABEL`].
fn values_with_a_changed_service_template() -> Value {
    let files = root().join(CHART).join("files");
    let rules: Map<String, Value> = files_under(&files.join("rules"))
        .into_iter()
        .map(|(name, text)| (name, Value::from(text)))
        .collect();
    let mut templates = Map::new();
    for (path, mut text) in files_under(&files.join("templates")) {
        if path == "database/service.yaml.j2" {
            let edited = text.replacen("  labels:\n", &format!("  labels:\n    {LABEL}: \"1\"\n"), 1);
            assert_ne!(text, edited, "the Service template has labels");
            text = edited;
        }
        let (dir, name) = path.rsplit_once('/').expect("a template in a directory");
        templates
            .entry(dir)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .expect("a directory")
            .insert(name.to_owned(), Value::from(text));
    }
    serde_json::json!({"rules": {"files": rules, "templates": templates}})
}

/// The Service's [`LABEL`] (empty when it has none).
fn label(namespace: &str) -> String {
    get(
        namespace,
        "service/orders-svc",
        &format!("{{.metadata.labels.{}}}", LABEL.replace('.', "\\.")),
    )
}

#[test]
fn helm_install_on_the_node_reconciles_a_database_and_helm_upgrade_rolls_a_changed_template() {
    let _turn = node::without_ruleop();
    let start = Instant::now();
    let release = Release {
        kubeconfig: control_plane().kubeconfig.clone(),
    };
    release.helm("install", &[]);
    wait_until(Duration::from_secs(180), "the ruleop pod of the release Ready", || {
        matches!(node::pods().as_slice(), [(_, _, true)])
    });
    eprintln!("helm install -> ruleop pod Ready in {} ms", ms(start));
    let pod = node::pods()[0].0.clone();
    assert_eq!(
        get(
            "ruleop-system",
            "deployment/ruleop",
            "{.metadata.annotations.meta\\.helm\\.sh/release-name}"
        ),
        "ruleop",
        "the Deployment is the release's"
    );
    wait_until(Duration::from_secs(120), "ruleop-status Loaded", || {
        node::status("state") == "Loaded"
    });
    assert_eq!(node::status("rulesInForce"), "cache,database,tenant");
    let shipped = node::status("fingerprint");

    let ns = Namespace::new("helm-node");
    let start = Instant::now();
    create_database(&ns.0, "orders", 1, false);
    wait_until(
        Duration::from_secs(180),
        "Database orders Ready with its Service",
        || {
            get(
                &ns.0,
                "database/orders",
                "{.status.conditions[?(@.type==\"Ready\")].status}",
            ) == "True"
                && exists(&ns.0, "service/orders-svc")
        },
    );
    eprintln!("Database orders Ready (1 replica) with its Service in {} ms", ms(start));
    assert_eq!(label(&ns.0), "", "the shipped template has no {LABEL}");

    let values_dir = tempfile::tempdir().expect("values dir");
    let values = values_dir.path().join("values.json");
    std::fs::write(&values, values_with_a_changed_service_template().to_string()).expect("write values");
    let start = Instant::now();
    release.helm("upgrade", &["-f", &values.display().to_string()]);
    wait_until(
        Duration::from_secs(120),
        "the Service labelled by the upgraded template",
        || label(&ns.0) == "1",
    );
    eprintln!(
        "helm upgrade -> Service labelled in {} ms (kubelet syncFrequency 10s)",
        ms(start)
    );
    assert_eq!(
        node::pods()[0].0,
        pod,
        "the same pod: the rules were reloaded, not restarted"
    );
    assert_eq!(node::status("state"), "Loaded");
    assert_ne!(node::status("fingerprint"), shipped);

    // The Database's finalizer needs ruleop: it goes before the release does.
    kubectl_ok(&["-n", &ns.0, "delete", "database", "orders", "--timeout=120s"]);
}
