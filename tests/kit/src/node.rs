//! The test cluster with a node (tests/node): a control plane started by `ctl.sh start --node`
//! (or reused from `RULEOP_NODE_KUBECONFIG`, which `make test` sets), and ruleop installed in it
//! as docs/operations/deploy.md says, `kubectl apply -k` of the repository (through the test overlay, see
//! tests/node/overlay.sh), running as a Pod. Tests that use the installation take it in turn
//! ([`ruleop`]), and a test that installs it another way (Helm) takes the same turn without it
//! ([`without_ruleop`]): there is one `ruleop-system` namespace.

use super::{ControlPlane, kubectl, kubectl_ok, kubectl_with_stdin, root, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where a control plane started here keeps its state (`RULEOP_APISERVER_STATE`); its node's
/// logs stay in `node-logs` below it after it stops.
fn state_dir() -> PathBuf {
    root().join("target/node-plane-test")
}

/// The control plane with a node: reused from `RULEOP_NODE_KUBECONFIG`, or started with
/// `ctl.sh start --node` and stopped once this process has exited (a guard process waits for
/// its stdin to close, in a session of its own so that ^C of the tests does not kill it first).
pub(super) fn control_plane() -> ControlPlane {
    if let Ok(path) = std::env::var("RULEOP_NODE_KUBECONFIG")
        && !path.is_empty()
    {
        return ControlPlane::new(PathBuf::from(path), None, None);
    }
    let ctl = root().join("tests/apiserver/ctl.sh");
    if ["apiserver", "coredns"]
        .iter()
        .any(|bin| !root().join("tests/apiserver/bin").join(bin).exists())
    {
        let status = Command::new(&ctl).arg("build").status().expect("ctl.sh build");
        assert!(status.success(), "building the control plane failed");
    }
    if !root().join("target/ruleop-image.tag").exists() {
        let status = Command::new(root().join("scripts/image.sh"))
            .status()
            .expect("scripts/image.sh");
        assert!(status.success(), "make image failed");
    }
    let out = Command::new(&ctl)
        .args(["start", "--node"])
        .env("RULEOP_APISERVER_STATE", state_dir())
        .stderr(Stdio::inherit())
        .output()
        .expect("ctl.sh start --node");
    assert!(
        out.status.success(),
        "ctl.sh start --node failed (one node per machine; logs in {}/node-logs)",
        state_dir().display()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kubeconfig = stdout
        .lines()
        .find_map(|line| line.strip_prefix("export KUBECONFIG="))
        .unwrap_or_else(|| panic!("no kubeconfig from ctl.sh start: {stdout:?}"));
    let mut guard = Command::new("setsid")
        .args(["sh", "-c", r#"cat >/dev/null; exec "$0" stop >/dev/null 2>&1"#])
        .arg(&ctl)
        .env("RULEOP_APISERVER_STATE", state_dir())
        .stdin(Stdio::piped())
        .spawn()
        .expect("the node's stop guard");
    let stdin = guard.stdin.take().expect("guard stdin");
    ControlPlane::new(PathBuf::from(kubeconfig), Some((guard, stdin)), None)
}

/// ruleop installed from the test overlay: the kustomization it was applied from (copies of
/// the repository's install in `repo/`, and the overlay, that a test may edit and apply again) and the fingerprint of the
/// shipped rules, which [`ruleop`] restores before each test.
pub struct Installation {
    dir: tempfile::TempDir,
    shipped: String,
}

static INSTALLATION: Mutex<Option<Installation>> = Mutex::new(None);

/// The installation, for one test at a time: installed on first use, then put back as shipped
/// (the copies rewritten, applied, the shipped rules loaded again and the Deployment available).
/// A test that failed while holding it does not stop the others.
pub fn ruleop() -> MutexGuard<'static, Option<Installation>> {
    super::node_control_plane();
    let mut guard = INSTALLATION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match guard.as_ref() {
        None => {
            // A reused cluster may run an earlier installation: without it (and its status),
            // the first `Loaded` seen is this one's, and its fingerprint that of the shipped rules.
            kubectl_ok(&[
                "-n",
                "ruleop-system",
                "delete",
                "deployment",
                "ruleop",
                "--ignore-not-found",
            ]);
            forget_status_and_wait_for_no_pod();
            let dir = tempfile::tempdir().expect("kustomization dir");
            write_overlay(dir.path());
            apply(dir.path());
            wait_available();
            wait_until(Duration::from_secs(120), "ruleop-status Loaded", || {
                status("state") == "Loaded"
            });
            let shipped = status("fingerprint");
            *guard = Some(Installation { dir, shipped });
        }
        Some(installation) => {
            write_overlay(installation.dir.path());
            apply(installation.dir.path());
            wait_available();
            installation.wait_loaded(&installation.shipped.clone(), Duration::from_secs(120));
        }
    }
    guard
}

/// The installation's turn, for a test that installs ruleop another way (Helm, under the same
/// names: Helm does not adopt objects it did not create): the kustomize installation's objects
/// are deleted, but for the Namespace and the CRDs (other tests' Databases are of those CRDs, and
/// the chart's `crds/` takes them as they are), with its `ruleop-status` and its pod, and the next
/// [`ruleop`] installs it again.
pub fn without_ruleop() -> MutexGuard<'static, Option<Installation>> {
    super::node_control_plane();
    let mut guard = INSTALLATION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // The objects from a fresh overlay: a reused cluster may run an installation this process
    // did not make.
    let dir = tempfile::tempdir().expect("kustomization dir");
    write_overlay(dir.path());
    let rendered = kubectl_ok(&["kustomize", &dir.path().display().to_string()]);
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered).expect("kustomize's YAML");
    let items: Vec<serde_json::Value> = objects
        .into_iter()
        .filter(|object| {
            !object.is_null() && !matches!(object["kind"].as_str(), Some("CustomResourceDefinition" | "Namespace"))
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = kubectl_with_stdin(&["delete", "--ignore-not-found", "-f", "-"], Some(&list.to_string()));
    assert!(
        out.status.success(),
        "deleting the kustomize installation: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    forget_status_and_wait_for_no_pod();
    *guard = None;
    guard
}

/// Deletes the last installation's `ruleop-status` and waits until no ruleop pod is left.
fn forget_status_and_wait_for_no_pod() {
    kubectl_ok(&[
        "-n",
        "ruleop-system",
        "delete",
        "configmap",
        "ruleop-status",
        "--ignore-not-found",
    ]);
    wait_until(Duration::from_secs(120), "no ruleop pod left", || pods().is_empty());
}

impl Installation {
    /// The kustomization directory (`kubectl apply -k` it); the repository's install (its
    /// kustomization.yaml, rules/, templates/, deploy/crds, deploy/base) is copied to `repo/` in it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Rewrites one file of the copies (a path relative to [`Self::dir`]) with `edit`.
    pub fn edit(&self, path: &str, edit: impl FnOnce(String) -> String) {
        let path = self.dir().join(path);
        let text = std::fs::read_to_string(&path).expect("read the file to edit");
        let edited = edit(text.clone());
        assert_ne!(text, edited, "the edit of {} changed nothing", path.display());
        std::fs::write(&path, edited).expect("write the edited file");
    }

    /// `kubectl apply -k` of the copies.
    pub fn apply(&self) {
        apply(self.dir());
    }

    /// The fingerprint of the shipped rules and templates.
    pub fn shipped_fingerprint(&self) -> &str {
        &self.shipped
    }

    /// Waits until `ruleop-status` says the rule set with `fingerprint` is loaded.
    pub fn wait_loaded(&self, fingerprint: &str, timeout: Duration) -> Duration {
        wait_until(
            timeout,
            &format!("ruleop-status Loaded with fingerprint {fingerprint}"),
            || status("state") == "Loaded" && status("fingerprint") == fingerprint,
        )
    }
}

fn write_overlay(dir: &Path) {
    let out = Command::new(root().join("tests/node/overlay.sh"))
        .arg(dir)
        .env("KUBECONFIG", &super::control_plane().kubeconfig)
        .output()
        .expect("tests/node/overlay.sh");
    assert!(
        out.status.success(),
        "overlay.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn apply(dir: &Path) {
    kubectl_ok(&["apply", "-k", &dir.display().to_string()]);
}

/// Waits until the Deployment has its one replica updated and available (Ready through its
/// probes), and no other ruleop pod is left.
pub fn wait_available() -> Duration {
    wait_until(Duration::from_secs(180), "the ruleop Deployment available", || {
        let status = kubectl(&[
            "-n",
            "ruleop-system",
            "get",
            "deployment",
            "ruleop",
            "-o",
            "jsonpath={.metadata.generation}/{.status.observedGeneration}/{.status.updatedReplicas}/{.status.availableReplicas}/{.status.replicas}",
        ]);
        let status = String::from_utf8_lossy(&status.stdout).into_owned();
        let fields: Vec<&str> = status.split('/').collect();
        fields.len() == 5 && fields[0] == fields[1] && fields[2..] == ["1", "1", "1"] && pods().len() == 1
    })
}

/// A data field of the `ruleop-status` ConfigMap (empty when absent).
pub fn status(field: &str) -> String {
    super::get(
        "ruleop-system",
        "configmap/ruleop-status",
        &format!("{{.data.{field}}}"),
    )
}

/// The ruleop pods (name, phase, ready), oldest first.
pub fn pods() -> Vec<(String, String, bool)> {
    let out = kubectl_ok(&[
        "-n",
        "ruleop-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=ruleop",
        "--sort-by=.metadata.creationTimestamp",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
    ]);
    out.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((
                fields.next()?.to_owned(),
                fields.next().unwrap_or_default().to_owned(),
                fields.next() == Some("True"),
            ))
        })
        .collect()
}

/// A Database with its credentials Secret (the StatefulSet's pods read the password from it).
pub fn create_database(namespace: &str, name: &str, replicas: u32, backup: bool) {
    super::apply_yaml(
        namespace,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-credentials}}\nstringData: {{password: e2e-secret}}\n---\n\
             apiVersion: myorg.io/v1\nkind: Database\nmetadata: {{name: {name}}}\n\
             spec: {{version: \"16\", replicas: {replicas}, storage: {{size: 1Gi}}, backup: {{enabled: {backup}}}}}\n"
        ),
    );
}

/// Elapsed time since `start`, as whole milliseconds, for reports.
pub fn ms(start: Instant) -> u128 {
    start.elapsed().as_millis()
}
