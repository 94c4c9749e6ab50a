//! kubectl as the outside client, and a namespace per test.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::*;

/// Runs kubectl against the control plane.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_with_stdin(args, None)
}

/// Runs kubectl with `input` on stdin.
pub fn kubectl_with_stdin(args: &[&str], input: Option<&str>) -> Output {
    kubectl_at(&control_plane().kubeconfig, args, input)
}

/// Runs kubectl with `input` on stdin against the control plane of `kubeconfig`.
pub fn kubectl_at(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("kubectl finishes")
}

/// Runs kubectl and returns stdout, panicking with stderr on failure.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -f -` of some YAML.
pub fn apply_yaml(namespace: &str, yaml: &str) {
    let out = kubectl_with_stdin(&["apply", "-n", namespace, "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl patch --type=merge` of one object.
pub fn merge_patch(namespace: &str, what: &str, patch: &str) {
    kubectl_ok(&["patch", "-n", namespace, what, "--type=merge", "-p", patch]);
}

/// `kubectl patch --subresource=status --type=merge` of one object.
pub fn merge_patch_status(namespace: &str, what: &str, patch: &str) {
    kubectl_ok(&[
        "patch",
        "-n",
        namespace,
        what,
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    ]);
}

/// A JSONPath read of an object; empty if it does not exist.
pub fn get(namespace: &str, what: &str, jsonpath: &str) -> String {
    let out = kubectl(&["get", "-n", namespace, what, "-o", &format!("jsonpath={jsonpath}")]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A JSONPath read of the Events in `namespace` whose fields match `selector` (e.g.
/// `reason=RolloutHalted`).
pub fn events(namespace: &str, selector: &str, jsonpath: &str) -> String {
    kubectl_ok(&[
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        selector,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// Whether an object exists.
pub fn exists(namespace: &str, what: &str) -> bool {
    kubectl(&["get", "-n", namespace, what]).status.success()
}

/// A namespace of its own for one test, deleted when dropped.
pub struct Namespace(pub String);

impl Namespace {
    /// Creates `<prefix>-<random>`.
    pub fn new(prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{prefix}-{:x}", nanos ^ std::process::id());
        kubectl_ok(&["create", "namespace", &name]);
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// `(name, deletionTimestamp)` of every Namespace whose name starts with `prefix`.
pub fn namespaces_named(prefix: &str) -> Vec<(String, String)> {
    kubectl_ok(&[
        "get",
        "namespaces",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ])
    .lines()
    .filter(|l| l.starts_with(prefix))
    .map(|l| {
        let (name, deleting) = l.split_once(' ').unwrap_or((l, ""));
        (name.to_owned(), deleting.trim().to_owned())
    })
    .collect()
}

/// Whether an object carries ruleop's cleanup finalizer.
pub fn has_cleanup_finalizer(namespace: &str, what: &str) -> bool {
    get(namespace, what, "{.metadata.finalizers}").contains("ruleop.io/cleanup")
}
