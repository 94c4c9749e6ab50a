//! The pinned Helm (`scripts/helm.sh`, built from the Go module proxy on first use) and the
//! chart, for the chart's tests (tests/it/deploy/helm.rs) and its install on the node
//! (tests/it/node/helm_node.rs).

use std::path::Path;
use std::process::{Command, Output};

use super::*;

/// The chart, relative to the project root.
pub const CHART: &str = "deploy/helm/ruleop";

/// Runs the pinned helm in the project root; against the control plane of `kubeconfig` when
/// given (as `KUBECONFIG`, which a post-renderer inherits too).
pub fn helm(kubeconfig: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(root().join("scripts/helm.sh"));
    command.args(args).current_dir(root());
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    command.output().expect("scripts/helm.sh runs")
}

/// [`helm`], returning stdout and panicking with its output on failure.
pub fn helm_ok(kubeconfig: Option<&Path>, args: &[&str]) -> String {
    let out = helm(kubeconfig, args);
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}
