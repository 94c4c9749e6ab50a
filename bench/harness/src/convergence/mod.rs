//! Convergence benchmark against the real control plane (tests/apiserver): ruleop, a floor (the
//! bare writes, no watching or planning), a kopf peer and a kro peer.
//!
//! Run it with `make bench` (builds and installs everything first, see bench/run.sh) or
//! `bench/tool.sh convergence`. It starts its own control plane (state in
//! target/control-plane-bench), stops everything it started on exit or failure, and writes
//! Markdown, JSON and an SVG per N under bench/results/. What each number means: bench/README.md.
//!
//! The modules follow one run: [`settings`] (the environment), [`plane`] (the control plane),
//! [`contenders`] (one file per contender), [`phases`] (one contender at one N: [`parents`],
//! [`observer`], [`process`], [`writes`], [`reload_floor`]), [`report`] (Markdown, JSON, SVG).

mod contenders;
mod fairness;
mod observer;
mod parents;
mod phases;
mod plane;
mod process;
mod reload_floor;
mod report;
mod rollout;
mod settings;
mod writes;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, ensure};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use phases::{Ctx, RunResult, run_contender};
use plane::{ControlPlane, kubectl};
use report::Report;
use report::machine::{MachineInfo, loadavg, plan_throughput};
use settings::Settings;

pub(crate) fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("convergence bench: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("convergence bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let settings = Settings::from_env()?;
    ensure!(
        settings.ruleop_bin.exists(),
        "{} missing",
        settings.ruleop_bin.display()
    );
    std::fs::create_dir_all(&settings.state)?;
    std::fs::create_dir_all(&settings.out)?;
    // One benchmark at a time (bench/run.sh holds the same lock and says so in BENCH_LOCKED): a
    // second one would stop this one's control plane and wipe its state directory.
    let _lock = if std::env::var_os("BENCH_LOCKED").is_some() {
        None
    } else {
        let file = std::fs::File::create(settings.root.join("target/bench.lock"))?;
        file.try_lock()
            .map_err(|_| anyhow!("another benchmark run holds target/bench.lock"))?;
        Some(file)
    };
    let _ = std::fs::remove_file(settings.state.join("bench-pids"));

    let plane = ControlPlane::start(&settings)?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let result = tokio::select! {
        r = tokio::time::timeout(settings.total_timeout, bench(&settings, &plane)) => {
            r.map_err(|_| anyhow!("the whole run exceeded BENCH_TIMEOUT_S={}s", settings.total_timeout.as_secs()))
                .and_then(|r| r)
        }
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted (SIGINT)")),
        _ = sigterm.recv() => Err(anyhow!("terminated (SIGTERM)")),
    };
    // Everything started inside `bench` (operators, watchers) is dropped by now; stop the plane.
    drop(plane);
    result
}

async fn bench(settings: &Settings, plane: &ControlPlane) -> Result<()> {
    let kubeconfig = Kubeconfig::read_from(&plane.kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config.clone())?;
    let served = client.apiserver_version().await?.git_version;
    let go_mod = std::fs::read_to_string(settings.root.join("tests/apiserver/go.mod")).unwrap_or_default();
    let k8s_version = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
        .map_or(served.clone(), |v| {
            format!(
                "{} (k8s.io/kubernetes in tests/apiserver/go.mod; /version says {served})",
                v.trim()
            )
        });
    let crds = settings.root.join("deploy/crds").display().to_string();
    kubectl(plane, &["apply", "-f", &crds]).await?;
    kubectl(
        plane,
        &["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
    )
    .await?;

    let ctx = Ctx {
        settings,
        plane,
        client: client.clone(),
        config: config.clone(),
        resync_rules: resync_rules_dir(settings)?,
    };
    let mut unprepared = Vec::new();
    for contender in &settings.contenders {
        if let Err(e) = contender.prepare(&ctx).await {
            eprintln!("== {} cannot run: {e:#}", contender.name());
            unprepared.push((contender.name(), format!("{e:#}")));
        }
    }
    let plan = plan_throughput(settings);
    let mut info = MachineInfo::collect(&ctx, &k8s_version).await;
    eprintln!("== {}", info.summary());

    // Warm-up (not recorded): the first server-side applies of a kind on a fresh API server are
    // slow (type converters are built), whoever sends them.
    eprintln!("== warm-up: floor with N=10 (not recorded)");
    let warm = run_contender(&ctx, contenders::warm_up(), 10, false).await;
    if let Some(e) = warm.error {
        return Err(anyhow!(e)).context("warm-up");
    }

    let mut runs: Vec<RunResult> = Vec::new();
    let rounds = settings.ns.len() * settings.contenders.len();
    for (i, &n) in settings.ns.iter().enumerate() {
        for (j, &contender) in settings.contenders.iter().enumerate() {
            let last = i * settings.contenders.len() + j + 1 == rounds;
            eprintln!("== N={n}: {}", contender.name());
            if let Some((_, why)) = unprepared.iter().find(|(name, _)| *name == contender.name()) {
                runs.push(phases::RunResult {
                    contender: contender.name(),
                    n,
                    error: Some(format!("not prepared: {why}")),
                    ..Default::default()
                });
                continue;
            }
            let r = run_contender(&ctx, contender, n, last).await;
            match &r.error {
                None => eprintln!(
                    "   converged in {:.2}s (p50 {:.0} ms, p99 {:.0} ms), {} writes, {} CPU s",
                    r.converge.as_secs_f64(),
                    r.p50_ms,
                    r.p99_ms,
                    writes::total(&r.writes_converge),
                    r.cpu_converge_s.map_or("-".to_owned(), |c| format!("{c:.2}"))
                ),
                Some(e) => eprintln!("   {}: {e}", if r.skipped { "skipped" } else { "FAILED" }),
            }
            runs.push(r);
        }
    }
    info.loadavg_end = loadavg();
    let report = Report {
        info,
        settings,
        runs,
        plan,
    };
    write_report(settings, &report)
}

/// Writes `convergence-<stamp>-N<list>.{md,json}` and an SVG per N, and the latest copies:
/// `latest.{md,json}` and `latest-N<n>.svg` for runs up to N = 1,000; a run with a larger N
/// (`BENCH_N=10000`) writes `latest-N<list>.{md,json}` instead, and latest.md ends with every such
/// report (spliced in after a marker, whichever run came last).
fn write_report(settings: &Settings, report: &Report<'_>) -> Result<()> {
    let out = &settings.out;
    let stamp = jiff::Zoned::now().strftime("%Y%m%d-%H%M%S").to_string();
    let list = settings
        .ns
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("-");
    let large = settings.ns.iter().any(|&n| n >= 10_000);
    let base = format!("convergence-{stamp}-N{list}");
    let latest = if large {
        format!("latest-N{list}")
    } else {
        "latest".to_owned()
    };
    for &n in &settings.ns {
        let runs: Vec<&RunResult> = settings
            .contenders
            .iter()
            .filter_map(|c| report.run(n, c.name()))
            .collect();
        let svg = report::svg::chart(n, &report.info.date, &runs);
        std::fs::write(out.join(format!("{base}-N{n}.svg")), &svg)?;
        std::fs::write(out.join(format!("latest-N{n}.svg")), &svg)?;
    }
    let json = serde_json::to_string_pretty(&report.json())? + "\n";
    std::fs::write(out.join(format!("{base}.json")), &json)?;
    std::fs::write(out.join(format!("{latest}.json")), &json)?;
    let stamped = report.markdown(&|n| format!("{base}-N{n}.svg"));
    std::fs::write(out.join(format!("{base}.md")), &stamped)?;
    std::fs::write(
        out.join(format!("{latest}.md")),
        report.markdown(&|n| format!("latest-N{n}.svg")),
    )?;
    splice_large_runs(out)?;
    if ruleop_testkit::figures::is_results_dir(out) {
        crate::write_figures().map_err(|e| anyhow!(e))?;
    }
    eprintln!("wrote {}", out.join(format!("{base}.md")).display());
    println!("{stamped}");
    Ok(())
}

/// The line after which latest.md repeats the large runs' reports.
const LARGE_MARKER: &str = "<!-- large runs (BENCH_N >= 10000) below, spliced in by ruleop-bench convergence -->";

/// latest.md = its own run + every `latest-N<list>.md` (the large runs), after [`LARGE_MARKER`].
fn splice_large_runs(out: &Path) -> Result<()> {
    let path = out.join("latest.md");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let mut md = text.split(LARGE_MARKER).next().unwrap_or("").trim_end().to_owned();
    let mut large: Vec<_> = std::fs::read_dir(out)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("latest-N") && name.ends_with(".md"))
        .collect();
    large.sort();
    if large.is_empty() {
        return Ok(());
    }
    md.push_str(&format!("\n\n{LARGE_MARKER}\n"));
    for name in large {
        let body = std::fs::read_to_string(out.join(&name))?;
        let body = body.replacen(
            "# ruleop convergence benchmark",
            &format!("# Separate run: [{name}]({name})"),
            1,
        );
        md.push_str(&format!("\n{}\n", body.trim_end()));
    }
    std::fs::write(&path, md)?;
    Ok(())
}

/// rules/ with every `resync: 10m` replaced by BENCH_RESYNC.
fn resync_rules_dir(settings: &Settings) -> Result<std::path::PathBuf> {
    let dir = settings.state.join("rules-resync");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut replaced = false;
    for entry in std::fs::read_dir(settings.root.join("rules"))? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        let edited = text.replace("resync: 10m", &format!("resync: {}", settings.resync));
        replaced |= edited != text && entry.file_name() == "database.yaml";
        std::fs::write(dir.join(entry.file_name()), edited)?;
    }
    ensure!(replaced, "rules/database.yaml has no `resync: 10m` to shorten");
    Ok(dir)
}
