//! The control plane the benchmark runs against (tests/apiserver, via its ctl.sh), and kubectl.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, ensure};
use tokio::process::Command;

use crate::convergence::settings::Settings;

/// The Service ClusterIP range of the benchmark's plane: a /12 (1,048,574 addresses, the most
/// kube-apiserver takes) for N = 100,000. The plane has no node, so no address is ever routed.
const SERVICE_CIDR_ARG: &str = "--service-cidr=10.0.0.0/12";

/// A control plane this run started; stopped (and its data removed) on drop.
pub struct ControlPlane {
    ctl: PathBuf,
    state: PathBuf,
    /// The kubeconfig `ctl.sh start` printed.
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// Starts a fresh one (stopping a leftover of an interrupted run first).
    pub fn start(settings: &Settings) -> Result<Self> {
        let ctl = settings.ctl.clone();
        let state = settings.state.clone();
        let run = |args: &[&str]| {
            std::process::Command::new(&ctl)
                .args(args)
                .env("RULEOP_APISERVER_STATE", &state)
                .stdin(Stdio::null())
                .output()
        };
        if !ctl.with_file_name("bin").join("apiserver").exists() {
            let status = std::process::Command::new(&ctl).arg("build").status()?;
            ensure!(status.success(), "ctl.sh build failed");
        }
        let _ = run(&["stop"]);
        // One Service (one ClusterIP) per parent: the default /16 holds 65,534.
        let out = run(&["start", SERVICE_CIDR_ARG])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "ctl.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .context("ctl.sh start printed no KUBECONFIG")?;
        eprintln!("== control plane up (state {})", state.display());
        Ok(ControlPlane {
            ctl,
            state,
            kubeconfig: PathBuf::from(kubeconfig.trim()),
        })
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.ctl)
            .arg("stop")
            .env("RULEOP_APISERVER_STATE", &self.state)
            .stdin(Stdio::null())
            .status();
    }
}

impl ControlPlane {
    /// The CPU seconds of its process (kube-apiserver, etcd and the controllers run in one),
    /// from the pid `ctl.sh` keeps; `None` when it is not running.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let pid = std::fs::read_to_string(self.state.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        crate::convergence::process::cpu_seconds(pid)
    }
}

/// Runs kubectl against the plane; its stdout, or an error with its stderr.
pub async fn kubectl(plane: &ControlPlane, args: &[&str]) -> Result<String> {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &plane.kubeconfig)
        .stdin(Stdio::null())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
