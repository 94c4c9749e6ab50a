//! The run's parameters, from the environment (bench/README.md has the table).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};

use crate::convergence::contenders::{self, Contender};

/// Everything a run is parameterised by.
pub struct Settings {
    /// The repository root.
    pub root: PathBuf,
    /// The control plane's state directory; operator logs go here too.
    pub state: PathBuf,
    /// `BENCH_N`: the N values, each a full round of all contenders.
    pub ns: Vec<usize>,
    /// `BENCH_CONTENDERS`, in this order.
    pub contenders: Vec<&'static dyn Contender>,
    /// `BENCH_IN_FLIGHT`: parents created concurrently.
    pub in_flight: usize,
    /// `BENCH_RELOAD_SWEEP`: `reloadConcurrency` values the reload phase is repeated with.
    pub reload_sweep: Vec<u16>,
    /// `BENCH_ROLLOUT=1`: ruleop's staged rollout phase (10/50/100%, 5 s pauses) after the reload.
    pub rollout: bool,
    /// `BENCH_FLOOR_CONCURRENCY`: parents the floor (and kro) work on at once.
    pub floor_concurrency: usize,
    /// `BENCH_RESYNC`: the `resync:` of the rules copy used for the resync write count.
    pub resync: String,
    /// `BENCH_STEADY_S`: wait after convergence before reading steady RSS.
    pub steady: Duration,
    /// `BENCH_TIMEOUT_S`: bound of the whole run.
    pub total_timeout: Duration,
    /// `BENCH_PLAN_LOG`: the output of `cargo bench --bench plan`.
    pub plan_log: Option<PathBuf>,
    /// `BENCH_VENV`: the kopf peer's venv.
    pub venv: PathBuf,
    /// `BENCH_OUT`: where the report goes.
    pub out: PathBuf,
    /// The release binary cargo built for this bench, or `BENCH_RULEOP_BIN` (an earlier build,
    /// to measure a change against it).
    pub ruleop_bin: PathBuf,
    /// `BENCH_CTL`: the control plane's ctl.sh.
    pub ctl: PathBuf,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

fn env_num(name: &str, default: u64) -> Result<u64> {
    env_or(name, &default.to_string())
        .trim()
        .parse()
        .with_context(|| format!("{name} must be a number"))
}

/// `BENCH_PEER_MAX_N` (default 1000): the largest N the peers (kopf, kro) run at. kopf took 14 s
/// to restart over 1,000 parents; at 10,000 the peers would take most of the run's time.
pub fn peer_max_n() -> usize {
    env_num("BENCH_PEER_MAX_N", 1000).map_or(1000, |n| n as usize)
}

impl Settings {
    /// Reads the environment.
    pub fn from_env() -> Result<Self> {
        let root = ruleop_testkit::root().to_path_buf();
        let ns = env_or("BENCH_N", "100,1000")
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .with_context(|| format!("BENCH_N: bad number {s:?}"))
            })
            .collect::<Result<Vec<_>>>()?;
        ensure!(ns.iter().all(|&n| n > 0), "BENCH_N: every N must be > 0");
        let contenders = env_or("BENCH_CONTENDERS", contenders::DEFAULT)
            .split(',')
            .map(|s| contenders::by_name(s.trim()).ok_or_else(|| anyhow!("BENCH_CONTENDERS: unknown contender {s:?}")))
            .collect::<Result<Vec<_>>>()?;
        let rule = std::fs::read_to_string(root.join("rules/database.yaml")).context("rules/database.yaml")?;
        let max_concurrent = rule
            .lines()
            .find_map(|l| l.trim().strip_prefix("maxConcurrentReconciles:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(5);
        // Large N needs longer: 0.5 s per parent and contender on top of the 90 minutes.
        let default_timeout = 5400 + ns.iter().sum::<usize>() as u64 * contenders.len() as u64 / 2;
        Ok(Settings {
            state: root.join("target/control-plane-bench"),
            ns,
            contenders,
            in_flight: env_num("BENCH_IN_FLIGHT", 32)? as usize,
            reload_sweep: env_or("BENCH_RELOAD_SWEEP", "")
                .split(',')
                .filter(|v| !v.trim().is_empty())
                .map(|v| v.trim().parse().with_context(|| format!("BENCH_RELOAD_SWEEP: {v:?}")))
                .collect::<Result<_>>()?,
            rollout: env_or("BENCH_ROLLOUT", "") == "1",
            floor_concurrency: env_num("BENCH_FLOOR_CONCURRENCY", max_concurrent)? as usize,
            resync: env_or("BENCH_RESYNC", "5s"),
            steady: Duration::from_secs(env_num("BENCH_STEADY_S", 5)?),
            total_timeout: Duration::from_secs(env_num("BENCH_TIMEOUT_S", default_timeout)?),
            plan_log: std::env::var_os("BENCH_PLAN_LOG").map(PathBuf::from),
            venv: std::env::var_os("BENCH_VENV").map_or_else(|| root.join("target/bench-venv"), PathBuf::from),
            out: std::env::var_os("BENCH_OUT").map_or_else(|| root.join("bench/results"), PathBuf::from),
            ruleop_bin: std::env::var_os("BENCH_RULEOP_BIN").map_or_else(ruleop_testkit::built_binary, PathBuf::from),
            ctl: std::env::var_os("BENCH_CTL").map_or_else(|| root.join("tests/apiserver/ctl.sh"), PathBuf::from),
            root,
        })
    }

    /// How long convergence (or N reconciles) may take: 120 s + 0.6 s per parent.
    pub fn converge_timeout(&self, n: usize) -> Duration {
        Duration::from_secs(120 + n as u64 * 3 / 5)
    }
}
