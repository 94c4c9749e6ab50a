//! The report header: machine, versions, and the render benchmark's figure.

use std::path::Path;

use tokio::process::Command;

use crate::convergence::phases::Ctx;
use crate::convergence::settings::Settings;

/// Where and with what the run was taken.
pub struct MachineInfo {
    pub date: String,
    pub nproc: usize,
    pub memory_gib: f64,
    pub cpu: String,
    /// /proc/loadavg at the start of the run.
    pub loadavg: String,
    /// /proc/loadavg at the end of the run.
    pub loadavg_end: String,
    pub rustc: String,
    pub rev: String,
    pub k8s: String,
    /// The peers' versions ("kopf 1.45.2 (Python 3.11.7)", "kro v0.9.4").
    pub peers: Vec<String>,
}

async fn output(program: &str, args: &[&str], dir: &Path) -> String {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// /proc/loadavg, trimmed.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

impl MachineInfo {
    /// Collects it at the start of a run.
    pub async fn collect(ctx: &Ctx<'_>, k8s: &str) -> MachineInfo {
        let settings = ctx.settings;
        let root = &settings.root;
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kb: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let mut rev = output("git", &["rev-parse", "--short=12", "HEAD"], root).await;
        let dirty = output(
            "git",
            &["status", "--porcelain", "--", "src", "rules", "templates", "Cargo.toml"],
            root,
        )
        .await;
        if !dirty.is_empty() {
            rev.push_str(" + uncommitted changes in src/rules/templates");
        }
        MachineInfo {
            date: jiff::Zoned::now().strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_gib: mem_kb / 1024.0 / 1024.0,
            cpu: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map_or("?".to_owned(), |(_, m)| m.trim().to_owned()),
            loadavg: loadavg(),
            loadavg_end: String::new(),
            rustc: output("rustc", &["-V"], root).await,
            rev,
            k8s: k8s.to_owned(),
            peers: settings.contenders.iter().filter_map(|c| c.version(ctx)).collect(),
        }
    }

    /// One line for stderr.
    pub fn summary(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB, load {}; {}; ruleop {}; kube-apiserver {}; {}",
            self.nproc,
            self.cpu,
            self.memory_gib,
            self.loadavg,
            self.rustc,
            self.rev,
            self.k8s,
            self.peers.join(", ")
        )
    }
}

/// Plans per second from the output of `cargo bench --bench plan` (criterion's thrpt line).
pub fn plan_throughput(settings: &Settings) -> Option<f64> {
    let text = std::fs::read_to_string(settings.plan_log.as_ref()?).ok()?;
    let line = text
        .lines()
        .skip_while(|l| !l.contains("plan/database"))
        .find(|l| l.contains("thrpt:"))?;
    let inner = line.split_once('[')?.1.split_once(']')?.0;
    let parts: Vec<&str> = inner.split_whitespace().collect();
    // [low unit mid unit high unit]
    let (value, unit) = (parts.get(2)?.parse::<f64>().ok()?, *parts.get(3)?);
    let scale = match unit {
        "elem/s" => 1.0,
        "Kelem/s" => 1e3,
        "Melem/s" => 1e6,
        "Gelem/s" => 1e9,
        _ => return None,
    };
    Some(value * scale)
}
