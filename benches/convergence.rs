//! Convergence benchmark against the real control plane (tests/apiserver): ruleop, a floor (the
//! bare writes, no watching or planning) and a kopf peer (bench/kopf/database_operator.py).
//!
//! Run it with `make bench` (builds everything first, see bench/run.sh) or
//! `cargo bench --bench convergence`. It starts its own control plane (state in
//! target/control-plane-bench), stops everything it started on exit or failure, and writes
//! Markdown and JSON under bench/results/. What each number means: bench/README.md.
//!
//! Environment: BENCH_N (default "100,1000"), BENCH_CONTENDERS (default "floor,ruleop,kopf"),
//! BENCH_IN_FLIGHT (parents created concurrently, default 32), BENCH_FLOOR_CONCURRENCY (default:
//! the database rule's maxConcurrentReconciles), BENCH_RESYNC (default 5s), BENCH_STEADY_S
//! (default 5), BENCH_TIMEOUT_S (whole run, default 5400), BENCH_PLAN_LOG (output of
//! `cargo bench --bench plan`), BENCH_VENV (default target/bench-venv), BENCH_OUT (default
//! bench/results), BENCH_CTL (the control plane's ctl.sh; default tests/apiserver/ctl.sh, which
//! serves only 254 Service ClusterIPs: bench/run.sh builds a copy with a /16 range for N=1000).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Write verbs counted from `apiserver_request_total` (server-side apply is reported as APPLY).
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];
/// Resources whose writes are counted.
const RESOURCES: [&str; 5] = ["services", "statefulsets", "jobs", "databases", "events"];
/// Placeholders for the floor's rendered objects.
const PLACEHOLDER_NAME: &str = "bnchparentplaceholder";
const PLACEHOLDER_UID: &str = "00000000-0000-4000-8000-0000b3c4a11d";

fn main() -> ExitCode {
    // `cargo test --all-targets` runs harness=false benches without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("convergence: skipped outside `cargo bench` (run `make bench`)");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("convergence bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// settings

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Contender {
    Floor,
    Ruleop,
    Kopf,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Floor => "floor",
            Contender::Ruleop => "ruleop",
            Contender::Kopf => "kopf",
        }
    }
}

struct Settings {
    root: PathBuf,
    state: PathBuf,
    ns: Vec<usize>,
    contenders: Vec<Contender>,
    in_flight: usize,
    floor_concurrency: usize,
    resync: String,
    steady: Duration,
    total_timeout: Duration,
    plan_log: Option<PathBuf>,
    venv: PathBuf,
    out: PathBuf,
    ruleop_bin: PathBuf,
    ctl: PathBuf,
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

impl Settings {
    fn from_env() -> Result<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let ns = env_or("BENCH_N", "100,1000")
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .with_context(|| format!("BENCH_N: bad number {s:?}"))
            })
            .collect::<Result<Vec<_>>>()?;
        ensure!(ns.iter().all(|&n| n > 0), "BENCH_N: every N must be > 0");
        let contenders = env_or("BENCH_CONTENDERS", "floor,ruleop,kopf")
            .split(',')
            .map(|s| match s.trim() {
                "floor" => Ok(Contender::Floor),
                "ruleop" => Ok(Contender::Ruleop),
                "kopf" => Ok(Contender::Kopf),
                other => Err(anyhow!("BENCH_CONTENDERS: unknown contender {other:?}")),
            })
            .collect::<Result<Vec<_>>>()?;
        let rule = std::fs::read_to_string(root.join("rules/database.yaml")).context("rules/database.yaml")?;
        let max_concurrent = rule
            .lines()
            .find_map(|l| l.trim().strip_prefix("maxConcurrentReconciles:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(5);
        Ok(Settings {
            state: root.join("target/control-plane-bench"),
            ns,
            contenders,
            in_flight: env_num("BENCH_IN_FLIGHT", 32)? as usize,
            floor_concurrency: env_num("BENCH_FLOOR_CONCURRENCY", max_concurrent)? as usize,
            resync: env_or("BENCH_RESYNC", "5s"),
            steady: Duration::from_secs(env_num("BENCH_STEADY_S", 5)?),
            total_timeout: Duration::from_secs(env_num("BENCH_TIMEOUT_S", 5400)?),
            plan_log: std::env::var_os("BENCH_PLAN_LOG").map(PathBuf::from),
            venv: std::env::var_os("BENCH_VENV").map_or_else(|| root.join("target/bench-venv"), PathBuf::from),
            out: std::env::var_os("BENCH_OUT").map_or_else(|| root.join("bench/results"), PathBuf::from),
            ruleop_bin: PathBuf::from(env!("CARGO_BIN_EXE_ruleop")),
            ctl: std::env::var_os("BENCH_CTL").map_or_else(|| root.join("tests/apiserver/ctl.sh"), PathBuf::from),
            root,
        })
    }

    fn converge_timeout(&self, n: usize) -> Duration {
        Duration::from_secs(120 + n as u64 * 3 / 5)
    }
}

// ---------------------------------------------------------------------------------------------
// the run

async fn run() -> Result<()> {
    let settings = Settings::from_env()?;
    ensure!(
        settings.ruleop_bin.exists(),
        "{} missing",
        settings.ruleop_bin.display()
    );
    if settings.contenders.contains(&Contender::Kopf) {
        ensure!(
            settings.venv.join("bin/kopf").exists(),
            "{}/bin/kopf missing: run bench/run.sh (make bench), which installs bench/kopf/requirements.txt",
            settings.venv.display()
        );
    }
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
    kubectl(
        plane,
        &["apply", "-f", &settings.root.join("deploy/crds").display().to_string()],
    )
    .await?;
    kubectl(
        plane,
        &["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
    )
    .await?;

    let resync_rules = resync_rules_dir(settings)?;
    let plan = plan_throughput(settings);
    let info = machine_info(settings, &k8s_version).await;
    eprintln!("== {}", info.summary());

    // Warm-up (not recorded): the first server-side applies of a kind on a fresh API server are
    // slow (type converters are built), whoever sends them.
    let ctx = Ctx {
        settings,
        plane,
        client: client.clone(),
        config: config.clone(),
        resync_rules: resync_rules.clone(),
    };
    eprintln!("== warm-up: floor with N=10 (not recorded)");
    run_contender(&ctx, Contender::Floor, 10).await.context("warm-up")?;

    let mut runs: Vec<RunResult> = Vec::new();
    for &n in &settings.ns {
        for &contender in &settings.contenders {
            eprintln!("== N={n}: {}", contender.name());
            let result = run_contender(&ctx, contender, n).await;
            match result {
                Ok(r) => {
                    eprintln!(
                        "   converged in {:.2}s (p50 {:.0} ms, p99 {:.0} ms), {} operator writes",
                        r.converge.as_secs_f64(),
                        r.p50_ms,
                        r.p99_ms,
                        total(&r.writes_converge)
                    );
                    runs.push(r);
                }
                Err(e) => {
                    // Record the failure and go on with the next contender (the namespace is gone).
                    eprintln!("   FAILED: {e:#}");
                    runs.push(RunResult::failed(contender, n, format!("{e:#}")));
                }
            }
        }
    }
    let report = Report {
        info,
        settings,
        runs,
        plan,
    };
    let (md, json) = (report.markdown(), report.json());
    let stamp = jiff::Zoned::now().strftime("%Y%m%d-%H%M%S").to_string();
    let ns = settings
        .ns
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("-");
    for (name, text) in [
        (format!("convergence-{stamp}-N{ns}.md"), md.clone()),
        (
            format!("convergence-{stamp}-N{ns}.json"),
            serde_json::to_string_pretty(&json)? + "\n",
        ),
    ] {
        std::fs::write(settings.out.join(&name), &text)?;
        let latest = if name.ends_with(".md") {
            "latest.md"
        } else {
            "latest.json"
        };
        std::fs::write(settings.out.join(latest), &text)?;
        eprintln!("wrote {}", settings.out.join(&name).display());
    }
    println!("{md}");
    Ok(())
}

struct Ctx<'a> {
    settings: &'a Settings,
    plane: &'a ControlPlane,
    client: Client,
    config: Config,
    resync_rules: PathBuf,
}

#[derive(Default)]
struct Startup {
    ready: Duration,
    first: Duration,
    all: Duration,
    writes: Counts,
    /// VmRSS of the restarted process once all N are reconciled and writes are still.
    rss_kb: Option<u64>,
}

#[derive(Default)]
struct Resync {
    reconciles: u64,
    took: Duration,
    writes: Counts,
    writes_restart: Counts,
}

#[derive(Default)]
struct RunResult {
    contender: Option<Contender>,
    n: usize,
    error: Option<String>,
    converge: Duration,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    writes_converge: Counts,
    rss_empty_kb: Option<u64>,
    rss_peak_kb: Option<u64>,
    rss_steady_kb: Option<u64>,
    startup: Option<Startup>,
    resync: Option<Resync>,
    reload: Option<Duration>,
    notes: Vec<String>,
}

impl RunResult {
    fn failed(contender: Contender, n: usize, error: String) -> Self {
        RunResult {
            contender: Some(contender),
            n,
            error: Some(error),
            ..Default::default()
        }
    }
}

async fn run_contender(ctx: &Ctx<'_>, contender: Contender, n: usize) -> Result<RunResult> {
    let ns = format!("bench-{}-{n}", contender.name());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    let result = measure(ctx, contender, n, &ns).await;
    // ruleop puts its cleanup finalizer on Databases with backups (the final backup on delete);
    // with ruleop stopped nothing would remove it, and the namespace would never go.
    if let Err(e) = release_finalizers(&ctx.client, &ns).await {
        eprintln!("   releasing finalizers in {ns}: {e:#}");
    }
    // Between contenders: the namespace (and with it every object) must be gone.
    let deleted = delete_namespace(&namespaces, &ns).await;
    let mut result = result?;
    match deleted {
        Ok(took) => eprintln!("   namespace {ns} deleted in {:.1}s", took.as_secs_f64()),
        Err(e) => result.notes.push(format!("namespace deletion: {e:#}")),
    }
    Ok(result)
}

async fn measure(ctx: &Ctx<'_>, contender: Contender, n: usize, ns: &str) -> Result<RunResult> {
    let settings = ctx.settings;
    let mut result = RunResult {
        contender: Some(contender),
        n,
        ..Default::default()
    };
    let observer = Observer::start(&ctx.client, ns).await?;

    // The contender, idle in its empty namespace.
    let mut operator = None;
    let mut floor = None;
    let floor_error = Arc::new(Mutex::new(None::<String>));
    let (floor_tx, floor_rx) = mpsc::unbounded_channel();
    match contender {
        Contender::Floor => {
            let floor_client = Client::try_from(ctx.config.clone())?;
            let templates = FloorTemplates::render(settings, ns).await?;
            let (slot, concurrency) = (floor_error.clone(), settings.floor_concurrency);
            let ns = ns.to_owned();
            floor = Some(tokio::spawn(async move {
                let result = run_floor(floor_client, ns, templates, floor_rx, concurrency).await;
                if let Err(e) = &result {
                    *slot.lock().unwrap() = Some(format!("{e:#}"));
                }
                result
            }));
        }
        Contender::Ruleop | Contender::Kopf => {
            let op = Operator::start(ctx, contender, ns, &settings.root.join("rules"))?;
            op.wait_ready(Duration::from_secs(90)).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            result.rss_empty_kb = op.proc_status("VmRSS");
            operator = Some(op);
        }
    }
    let sampler = operator.as_ref().map(|op| RssSampler::start(op.pid));

    // Convergence: create N parents, wait until every one is converged.
    let before = apiserver_writes(&ctx.client).await?;
    let start = Instant::now();
    let tx = (contender == Contender::Floor).then_some(floor_tx);
    let sent = create_parents(&ctx.client, ns, n, settings.in_flight, tx).await?;
    // Fail fast when the contender dies (process exit, floor error) or makes no progress.
    let mut alive = || -> Option<String> {
        if let Some(e) = floor_error.lock().unwrap().clone() {
            return Some(format!("the floor failed: {e}"));
        }
        let op = operator.as_mut()?;
        match op.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited: {status} (log {})",
                contender.name(),
                op.log.display()
            )),
            _ => None,
        }
    };
    let converged = observer
        .wait_all(n, start, settings.converge_timeout(n), &mut alive)
        .await;
    let converged = match converged {
        Ok(c) => c,
        Err(e) => {
            if let Some(op) = &operator {
                result.notes.push(format!("log: {}", op.log.display()));
            }
            return Err(e.context(format!("{} did not converge", contender.name())));
        }
    };
    result.converge = converged.values().max().copied().unwrap_or(start) - start;
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(name, at)| Some((*converged.get(name)? - *at).as_secs_f64() * 1000.0))
        .collect();
    latencies.sort_by(f64::total_cmp);
    result.p50_ms = percentile(&latencies, 50.0);
    result.p99_ms = percentile(&latencies, 99.0);
    result.max_ms = latencies.last().copied().unwrap_or_default();
    if let Some(floor) = floor {
        floor.await??;
    }
    let after = settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(60)).await?;
    let mut writes = diff(&after, &before);
    // The benchmark's own N creates are not the operator's.
    if let Some(posts) = writes.get_mut(&("POST".to_owned(), "databases".to_owned())) {
        *posts = posts.saturating_sub(n as u64);
    }
    writes.retain(|_, v| *v > 0);
    result.writes_converge = writes;

    let Some(op) = operator else {
        observer.stop();
        return Ok(result);
    };
    // Memory once idle again.
    tokio::time::sleep(settings.steady).await;
    result.rss_steady_kb = op.proc_status("VmRSS");
    result.rss_peak_kb = op.proc_status("VmHWM").max(sampler.map(|s| s.stop()));
    result.notes.extend(op.stop("convergence").await);

    // Start-up with N converged parents.
    let (startup, note) = startup(ctx, contender, ns, n).await?;
    result.startup = Some(startup);
    result.notes.extend(note);

    // Full resync of N converged parents (ruleop only).
    if contender == Contender::Ruleop {
        let (resync, note) = resync(ctx, ns, n).await?;
        result.resync = Some(resync);
        result.notes.extend(note);
        let (reload, note) = reload(ctx, ns, n).await?;
        result.reload = Some(reload);
        result.notes.extend(note);
    }
    observer.stop();
    Ok(result)
}

async fn startup(ctx: &Ctx<'_>, contender: Contender, ns: &str, n: usize) -> Result<(Startup, Option<String>)> {
    let before = apiserver_writes(&ctx.client).await?;
    let op = Operator::start(ctx, contender, ns, &ctx.settings.root.join("rules"))?;
    let (mut ready, mut first) = (None, None);
    let deadline = op.started + ctx.settings.converge_timeout(n);
    let all = loop {
        if ready.is_none() && op.ready().await {
            ready = Some(op.started.elapsed());
        }
        let count = op.reconciles().await.unwrap_or(0);
        if first.is_none() && count >= 1 {
            first = Some(op.started.elapsed());
        }
        if count >= n as u64 && ready.is_some() {
            break op.started.elapsed();
        }
        if Instant::now() > deadline {
            bail!(
                "start-up: {count}/{n} reconciles after {:?} (log {})",
                op.started.elapsed(),
                op.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let after = settle(&ctx.client, Duration::from_secs(2), Duration::from_secs(60)).await?;
    let rss_kb = op.proc_status("VmRSS");
    let note = op.stop("start-up").await;
    let startup = Startup {
        ready: ready.unwrap_or_default(),
        first: first.unwrap_or_default(),
        all,
        writes: nonzero(diff(&after, &before)),
        rss_kb,
    };
    Ok((startup, note))
}

/// Restart with the short resync: after the N start-up reconciles (and a short settle, shorter
/// than the resync period), count the writes until N more reconciles have completed. The
/// reconcile counter moves when a reconcile has finished, so its writes are in the window.
async fn resync(ctx: &Ctx<'_>, ns: &str, n: usize) -> Result<(Resync, Option<String>)> {
    let before = apiserver_writes(&ctx.client).await?;
    let op = Operator::start(ctx, Contender::Ruleop, ns, &ctx.resync_rules)?;
    op.wait_ready(Duration::from_secs(90)).await?;
    let timeout = ctx.settings.converge_timeout(n);
    op.wait_reconciles(n as u64, timeout).await?;
    let mid = settle(&ctx.client, Duration::from_secs(1), Duration::from_secs(3)).await?;
    let base = op.reconciles().await.unwrap_or(0);
    let start = Instant::now();
    op.wait_reconciles(base + n as u64, timeout).await?;
    let took = start.elapsed();
    let after = apiserver_writes(&ctx.client).await?;
    let reconciles = op.reconciles().await.unwrap_or(0) - base;
    let note = op.stop("resync").await;
    let resync = Resync {
        reconciles,
        took,
        writes: nonzero(diff(&after, &mid)),
        writes_restart: nonzero(diff(&mid, &before)),
    };
    Ok((resync, note))
}

/// Hot reload (ruleop only): with N converged parents, replace the Service template by one
/// adding a label (written aside, then renamed over, as an editor or the kubelet would) and
/// time until all N Services carry it. Includes ruleop's default 500 ms debounce.
async fn reload(ctx: &Ctx<'_>, ns: &str, n: usize) -> Result<(Duration, Option<String>)> {
    let templates = ctx.settings.state.join("templates-reload");
    let _ = std::fs::remove_dir_all(&templates);
    copy_tree(&ctx.settings.root.join("templates"), &templates)?;
    let op = Operator::start_with(ctx, Contender::Ruleop, ns, &ctx.settings.root.join("rules"), &templates)?;
    op.wait_ready(Duration::from_secs(90)).await?;
    let timeout = ctx.settings.converge_timeout(n);
    op.wait_reconciles(n as u64, timeout).await?;
    settle(&ctx.client, Duration::from_secs(1), Duration::from_secs(10)).await?;
    let service = templates.join("database/service.yaml.j2");
    let text = std::fs::read_to_string(&service)?;
    let edited = text.replacen(
        "    app: {{ metadata.name }}\n",
        "    app: {{ metadata.name }}\n    reload: \"1\"\n",
        1,
    );
    ensure!(
        edited != text,
        "the Service template has no `app:` label line to extend"
    );
    let aside = templates.join("database/.service.yaml.j2.tmp");
    std::fs::write(&aside, edited)?;
    let api: Api<PartialObjectMeta<Service>> = Api::namespaced(ctx.client.clone(), ns);
    let start = Instant::now();
    std::fs::rename(&aside, &service)?;
    loop {
        let labelled = api
            .list_metadata(&ListParams::default().labels("reload=1"))
            .await?
            .items
            .len();
        if labelled >= n {
            break;
        }
        if start.elapsed() > timeout {
            bail!(
                "reload: {labelled}/{n} Services updated after {:?} (log {})",
                start.elapsed(),
                op.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed();
    let note = op.stop("reload").await;
    Ok((took, note))
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Removes every finalizer from the Databases of a namespace (after the measurement).
async fn release_finalizers(client: &Client, ns: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &database_ar());
    let held: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|d| d.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()))
        .filter_map(|d| d.metadata.name)
        .collect();
    let patch = json!({"metadata": {"finalizers": null}});
    stream::iter(held)
        .map(|name| {
            let (api, patch) = (api.clone(), patch.clone());
            async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn delete_namespace(api: &Api<Namespace>, ns: &str) -> Result<Duration> {
    let start = Instant::now();
    api.delete(ns, &DeleteParams::default()).await?;
    let deadline = start + Duration::from_secs(900);
    loop {
        match api.get_opt(ns).await? {
            None => return Ok(start.elapsed()),
            Some(_) if Instant::now() > deadline => bail!("namespace {ns} still exists after 900s"),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------------
// parents

fn database_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("myorg.io", "v1", "Database"), "databases")
}

fn database(name: &str) -> Value {
    json!({
        "apiVersion": "myorg.io/v1",
        "kind": "Database",
        "metadata": {"name": name},
        "spec": {"version": "16", "replicas": 1, "storage": {"size": "1Gi"}, "backup": {"enabled": true}},
    })
}

fn parent_name(i: usize) -> String {
    format!("db-{i:05}")
}

/// Creates N Databases, `in_flight` at a time; returns each one's send time. Hands each created
/// parent (name, uid, generation) to the floor when it is the contender.
async fn create_parents(
    client: &Client,
    ns: &str,
    n: usize,
    in_flight: usize,
    floor: Option<mpsc::UnboundedSender<(String, String, i64)>>,
) -> Result<HashMap<String, Instant>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &database_ar());
    let sent = stream::iter(0..n)
        .map(|i| {
            let (api, floor) = (api.clone(), floor.clone());
            async move {
                let name = parent_name(i);
                let object: DynamicObject = serde_json::from_value(database(&name))?;
                let at = Instant::now();
                let created = api
                    .create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("create Database {name}"))?;
                if let Some(floor) = floor {
                    let uid = created.metadata.uid.clone().unwrap_or_default();
                    let _ = floor.send((name.clone(), uid, created.metadata.generation.unwrap_or(1)));
                }
                anyhow::Ok((name, at))
            }
        })
        .buffer_unordered(in_flight.max(1))
        .try_collect::<HashMap<_, _>>()
        .await?;
    Ok(sent)
}

// ---------------------------------------------------------------------------------------------
// the observer: watches on databases, services, statefulsets and jobs in the namespace

#[derive(Default)]
struct Seen {
    status: HashMap<String, Instant>,
    service: HashMap<String, Instant>,
    statefulset: HashMap<String, Instant>,
    job: HashMap<String, Instant>,
}

struct Observer {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Observer {
    async fn start(client: &Client, ns: &str) -> Result<Observer> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
        let mut tasks = Vec::new();

        // Parents: converged when status.observedGeneration == metadata.generation.
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &database_ar());
        let (s, ready) = (seen.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        let generation = o.metadata.generation;
                        let observed = o.data.pointer("/status/observedGeneration").and_then(Value::as_i64);
                        if generation.is_some()
                            && generation == observed
                            && let Some(name) = o.metadata.name
                        {
                            s.lock().unwrap().status.entry(name).or_insert_with(Instant::now);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        let _ = ready.send(());
                    }
                    _ => {}
                }
            }
        }));
        tasks.push(watch_children::<Service>(
            client,
            ns,
            seen.clone(),
            ready_tx.clone(),
            |s| &mut s.service,
        ));
        tasks.push(watch_children::<StatefulSet>(
            client,
            ns,
            seen.clone(),
            ready_tx.clone(),
            |s| &mut s.statefulset,
        ));
        tasks.push(watch_children::<Job>(client, ns, seen.clone(), ready_tx, |s| {
            &mut s.job
        }));
        for _ in 0..4 {
            tokio::time::timeout(Duration::from_secs(30), ready_rx.recv())
                .await
                .context("watches did not sync within 30s")?;
        }
        Ok(Observer { seen, tasks })
    }

    /// Waits until all N parents are converged; returns when each one was.
    async fn wait_all(
        &self,
        n: usize,
        start: Instant,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<HashMap<String, Instant>> {
        let (mut progress, mut last_count) = (Instant::now(), 0);
        loop {
            let done = {
                let seen = self.seen.lock().unwrap();
                let mut done = HashMap::new();
                for i in 0..n {
                    let name = parent_name(i);
                    let times = [
                        seen.status.get(&name),
                        seen.service.get(&name),
                        seen.statefulset.get(&name),
                        seen.job.get(&name),
                    ];
                    if let [Some(a), Some(b), Some(c), Some(d)] = times {
                        done.insert(name, *a.max(b).max(c).max(d));
                    }
                }
                done
            };
            if done.len() == n {
                return Ok(done);
            }
            if let Some(dead) = alive() {
                bail!("{dead}; {}/{n} converged", done.len());
            }
            if done.len() > last_count {
                (progress, last_count) = (Instant::now(), done.len());
            }
            if start.elapsed() > timeout || progress.elapsed() > Duration::from_secs(120) {
                let seen = self.seen.lock().unwrap();
                bail!(
                    "after {:?} ({:?} without progress): {}/{n} converged (status {}, services {}, statefulsets {}, \
                     jobs {})",
                    start.elapsed(),
                    progress.elapsed(),
                    done.len(),
                    seen.status.len(),
                    seen.service.len(),
                    seen.statefulset.len(),
                    seen.job.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Records when a child labelled `app=<parent>` was first seen.
fn watch_children<K>(
    client: &Client,
    ns: &str,
    seen: Arc<Mutex<Seen>>,
    ready: mpsc::UnboundedSender<()>,
    pick: fn(&mut Seen) -> &mut HashMap<String, Instant>,
) -> JoinHandle<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Some(app) = o.metadata.labels.as_ref().and_then(|l| l.get("app")) {
                        pick(&mut seen.lock().unwrap())
                            .entry(app.clone())
                            .or_insert_with(Instant::now);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = ready.send(());
                }
                _ => {}
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// the floor

/// The objects `ruleop render` produces for a placeholder parent, as JSON text.
struct FloorTemplates {
    service: String,
    statefulset: String,
    job: String,
    status: String,
}

impl FloorTemplates {
    async fn render(settings: &Settings, ns: &str) -> Result<Self> {
        let parent = settings.state.join("floor-parent.yaml");
        let mut db = database(PLACEHOLDER_NAME);
        db["metadata"]["namespace"] = json!(ns);
        db["metadata"]["uid"] = json!(PLACEHOLDER_UID);
        db["metadata"]["generation"] = json!(1);
        std::fs::write(&parent, serde_json::to_string(&db)?)?;
        let out = Command::new(&settings.ruleop_bin)
            .args([
                "render",
                "-o",
                "json",
                "--rules",
                "rules",
                "--templates",
                "templates",
                "-f",
            ])
            .arg(&parent)
            .current_dir(&settings.root)
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "ruleop render: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let child = |id: &str| -> Result<String> {
            let children = v.pointer("/plan/children").and_then(Value::as_array);
            let c = children
                .into_iter()
                .flatten()
                .find(|c| c["id"] == id)
                .with_context(|| format!("render output has no child {id}"))?;
            Ok(c["object"].to_string())
        };
        let actions = v.pointer("/plan/actions").and_then(Value::as_array);
        let job = actions
            .into_iter()
            .flatten()
            .find(|a| a["id"] == "backup")
            .and_then(|a| a.pointer("/effect/create"))
            .context("render output has no backup Job")?;
        let mut status = v
            .pointer("/plan/statusPatch")
            .context("render output has no statusPatch")?
            .clone();
        if let Some(conditions) = status.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
            conditions.push(
                json!({"type": "BackupInitiated", "status": "True", "reason": "AsExpected",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}),
            );
        }
        Ok(FloorTemplates {
            service: child("service")?,
            statefulset: child("statefulset")?,
            job: job.to_string(),
            status: status.to_string(),
        })
    }

    fn instantiate(text: &str, name: &str, uid: &str) -> Result<Value> {
        Ok(serde_json::from_str(
            &text.replace(PLACEHOLDER_NAME, name).replace(PLACEHOLDER_UID, uid),
        )?)
    }
}

/// For each created parent: server-side apply of its Service and StatefulSet, create the backup
/// Job, one status write. `concurrency` parents at a time. No watching, no planning.
async fn run_floor(
    client: Client,
    ns: String,
    templates: FloorTemplates,
    rx: mpsc::UnboundedReceiver<(String, String, i64)>,
    concurrency: usize,
) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let databases: Api<DynamicObject> = Api::namespaced_with(client, &ns, &database_ar());
    let apply = PatchParams::apply("ruleop-floor").force();
    let parents = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    parents
        .map(Ok)
        .try_for_each_concurrent(concurrency.max(1), |(name, uid, generation)| {
            let (services, statefulsets, jobs, databases, apply, templates) =
                (&services, &statefulsets, &jobs, &databases, &apply, &templates);
            async move {
                let service = FloorTemplates::instantiate(&templates.service, &name, &uid)?;
                services
                    .patch(&format!("{name}-svc"), apply, &Patch::Apply(&service))
                    .await?;
                let statefulset = FloorTemplates::instantiate(&templates.statefulset, &name, &uid)?;
                statefulsets.patch(&name, apply, &Patch::Apply(&statefulset)).await?;
                let job: Job = serde_json::from_value(FloorTemplates::instantiate(&templates.job, &name, &uid)?)?;
                jobs.create(&PostParams::default(), &job).await?;
                let mut status = FloorTemplates::instantiate(&templates.status, &name, &uid)?;
                status["status"]["observedGeneration"] = json!(generation);
                databases
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .await
}

// ---------------------------------------------------------------------------------------------
// operators (ruleop, kopf) as child processes

struct Operator {
    child: Child,
    pid: u32,
    contender: Contender,
    started: Instant,
    admin: String,
    marks: PathBuf,
    log: PathBuf,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Operator {
    fn start(ctx: &Ctx<'_>, contender: Contender, ns: &str, rules: &Path) -> Result<Operator> {
        Self::start_with(ctx, contender, ns, rules, &ctx.settings.root.join("templates"))
    }

    fn start_with(ctx: &Ctx<'_>, contender: Contender, ns: &str, rules: &Path, templates: &Path) -> Result<Operator> {
        let settings = ctx.settings;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let stamp = jiff::Timestamp::now().as_millisecond();
        let log = settings.state.join(format!("{}-{ns}-{stamp}.log", contender.name()));
        let marks = settings.state.join(format!("kopf-marks-{ns}-{stamp}.txt"));
        let mut command = match contender {
            Contender::Ruleop => {
                let mut c = Command::new(&settings.ruleop_bin);
                c.arg("run")
                    .arg("--rules")
                    .arg(rules)
                    .arg("--templates")
                    .arg(templates)
                    .args(["--namespace", ns, "--admin-addr", &admin])
                    .env_remove("RUST_LOG")
                    .env("NO_COLOR", "1");
                c
            }
            Contender::Kopf => {
                let mut c = Command::new(settings.venv.join("bin/kopf"));
                c.args(["run", "--standalone", "--namespace", ns])
                    .arg(format!("--liveness=http://{admin}/healthz"))
                    .arg(settings.root.join("bench/kopf/database_operator.py"))
                    .env("BENCH_KOPF_MARKS", &marks);
                c
            }
            Contender::Floor => bail!("the floor is not a process"),
        };
        let started = Instant::now();
        let child = command
            .env("KUBECONFIG", &ctx.plane.kubeconfig)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?.try_clone()?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", contender.name()))?;
        let pid = child.id().context("child pid")?;
        record_pid(settings, pid);
        Ok(Operator {
            child,
            pid,
            contender,
            started,
            admin,
            marks,
            log,
        })
    }

    async fn ready(&self) -> bool {
        match self.contender {
            Contender::Ruleop => http_get(&self.admin, "/readyz")
                .await
                .is_some_and(|(code, body)| code == 200 && body.starts_with("ok")),
            _ => http_get(&self.admin, "/healthz")
                .await
                .is_some_and(|(code, _)| code == 200),
        }
    }

    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.ready().await {
            ensure!(
                Instant::now() < deadline,
                "{} not ready within {timeout:?} (log {})",
                self.contender.name(),
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Reconciles so far: ruleop_reconciles_total{rule="database"}, or kopf handler runs.
    async fn reconciles(&self) -> Option<u64> {
        match self.contender {
            Contender::Ruleop => {
                let (_, body) = http_get(&self.admin, "/metrics").await?;
                Some(sum_metric(&body, "ruleop_reconciles_total", &[("rule", "database")]))
            }
            _ => Some(std::fs::read_to_string(&self.marks).map_or(0, |t| t.lines().count() as u64)),
        }
    }

    async fn wait_reconciles(&self, count: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.reconciles().await.unwrap_or(0);
            if now >= count {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{}: {now}/{count} reconciles after {timeout:?} (log {})",
                self.contender.name(),
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A `Vm*` line of /proc/<pid>/status, in kB.
    fn proc_status(&self, key: &str) -> Option<u64> {
        proc_status(self.pid, key)
    }

    /// SIGTERM, then SIGKILL after 30 s; returns a note when it did not exit by itself.
    async fn stop(mut self, phase: &str) -> Option<String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_ok()
        {
            return None;
        }
        let _ = self.child.kill().await;
        let note = format!(
            "{} did not exit within 30 s of SIGTERM after the {phase} phase; killed (log {})",
            self.contender.name(),
            self.log.display()
        );
        eprintln!("   {note}");
        Some(note)
    }
}

fn record_pid(settings: &Settings, pid: u32) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(settings.state.join("bench-pids"))
    {
        let _ = writeln!(f, "{pid}");
    }
}

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples VmRSS every 100 ms; `stop` returns the maximum seen.
struct RssSampler {
    max: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let max = Arc::new(AtomicU64::new(0));
        let m = max.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(kb) = proc_status(pid, "VmRSS") {
                    m.fetch_max(kb, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        RssSampler { max, task }
    }

    fn stop(self) -> u64 {
        self.task.abort();
        self.max.load(Ordering::Relaxed)
    }
}

/// A plain HTTP/1.1 GET on loopback: (status code, body).
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(5), fetch).await.ok().flatten()
}

// ---------------------------------------------------------------------------------------------
// metrics

/// Requests by (verb, resource[/subresource]).
type Counts = BTreeMap<(String, String), u64>;

fn labels(line: &str) -> (HashMap<&str, &str>, Option<f64>) {
    let mut map = HashMap::new();
    let Some((head, value)) = line.rsplit_once(' ') else {
        return (map, None);
    };
    if let Some(inner) = head.split_once('{').and_then(|(_, rest)| rest.strip_suffix('}')) {
        let mut rest = inner;
        while let Some((key, after)) = rest.split_once("=\"") {
            let Some(end) = after.find('"') else { break };
            map.insert(key.trim_start_matches(','), &after[..end]);
            rest = &after[end + 1..];
        }
    }
    (map, value.parse().ok())
}

/// Sums a Prometheus counter over the series whose labels include every `(key, value)`.
fn sum_metric(text: &str, name: &str, filter: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| {
            let (labels, value) = labels(l);
            filter.iter().all(|(k, v)| labels.get(k) == Some(v)).then_some(value?)
        })
        .sum::<f64>() as u64
}

/// Write requests served by the API server so far, from its `apiserver_request_total`.
async fn apiserver_writes(client: &Client) -> Result<Counts> {
    let request = kube::core::Request::new("/metrics").list(&ListParams::default())?;
    let text = client.request_text(request).await.context("GET /metrics")?;
    let mut counts = Counts::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let (labels, value) = labels(line);
        let (Some(verb), Some(resource), Some(value)) = (labels.get("verb"), labels.get("resource"), value) else {
            continue;
        };
        if !WRITE_VERBS.contains(verb) || !RESOURCES.contains(resource) {
            continue;
        }
        let mut resource = match labels.get("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub}"),
            None => (*resource).to_owned(),
        };
        // Failed requests (409 AlreadyExists, conflicts) count too; show them apart.
        if let Some(code) = labels.get("code").filter(|c| !c.starts_with('2')) {
            resource = format!("{resource} [{code}]");
        }
        *counts.entry(((*verb).to_owned(), resource)).or_default() += value as u64;
    }
    Ok(counts)
}

/// Waits until the write counters have not moved for `quiet` (at most `cap`); returns them.
async fn settle(client: &Client, quiet: Duration, cap: Duration) -> Result<Counts> {
    let start = Instant::now();
    let mut last = apiserver_writes(client).await?;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = apiserver_writes(client).await?;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet || start.elapsed() >= cap {
            return Ok(last);
        }
    }
}

fn diff(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .collect()
}

fn nonzero(mut counts: Counts) -> Counts {
    counts.retain(|_, v| *v > 0);
    counts
}

fn total(counts: &Counts) -> u64 {
    counts.values().sum()
}

// ---------------------------------------------------------------------------------------------
// the control plane, the rules for the resync, the render benchmark

struct ControlPlane {
    ctl: PathBuf,
    state: PathBuf,
    kubeconfig: PathBuf,
}

impl ControlPlane {
    fn start(settings: &Settings) -> Result<Self> {
        let ctl = settings.ctl.clone();
        let state = settings.state.clone();
        let run = |arg: &str| {
            std::process::Command::new(&ctl)
                .arg(arg)
                .env("RULEOP_APISERVER_STATE", &state)
                .stdin(Stdio::null())
                .output()
        };
        if !ctl.with_file_name("bin").join("apiserver").exists() {
            let status = std::process::Command::new(&ctl).arg("build").status()?;
            ensure!(status.success(), "ctl.sh build failed");
        }
        let _ = run("stop"); // a leftover from an interrupted run
        let out = run("start")?;
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

async fn kubectl(plane: &ControlPlane, args: &[&str]) -> Result<String> {
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

/// rules/ with every `resync: 10m` replaced by BENCH_RESYNC.
fn resync_rules_dir(settings: &Settings) -> Result<PathBuf> {
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

/// Plans per second from the output of `cargo bench --bench plan` (criterion's thrpt line).
fn plan_throughput(settings: &Settings) -> Option<f64> {
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

// ---------------------------------------------------------------------------------------------
// the report

struct MachineInfo {
    date: String,
    nproc: usize,
    memory_gib: f64,
    cpu: String,
    loadavg: String,
    rustc: String,
    rev: String,
    k8s: String,
    kopf: String,
    python: String,
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

async fn machine_info(settings: &Settings, k8s: &str) -> MachineInfo {
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
    let requirements = std::fs::read_to_string(root.join("bench/kopf/requirements.txt")).unwrap_or_default();
    let kopf = requirements
        .lines()
        .find_map(|l| l.strip_prefix("kopf=="))
        .unwrap_or("?")
        .to_owned();
    let python = output(
        &settings.venv.join("bin/python").display().to_string(),
        &["--version"],
        root,
    )
    .await;
    MachineInfo {
        date: jiff::Zoned::now().strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        memory_gib: mem_kb / 1024.0 / 1024.0,
        cpu: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("?".to_owned(), |(_, m)| m.trim().to_owned()),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        rustc: output("rustc", &["-V"], root).await,
        rev,
        k8s: k8s.to_owned(),
        kopf,
        python,
    }
}

impl MachineInfo {
    fn summary(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB, load {}; {}; ruleop {}; kube-apiserver {}; kopf {} ({})",
            self.nproc, self.cpu, self.memory_gib, self.loadavg, self.rustc, self.rev, self.k8s, self.kopf, self.python
        )
    }
}

struct Report<'a> {
    info: MachineInfo,
    settings: &'a Settings,
    runs: Vec<RunResult>,
    plan: Option<f64>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    }
}

fn counts_text(counts: &Counts) -> String {
    if counts.is_empty() {
        return "0".to_owned();
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|((verb, res), v)| format!("{verb} {res} {v}"))
        .collect();
    format!("{} ({})", total(counts), parts.join(", "))
}

/// Reads one value of a run.
type Getter = Box<dyn Fn(&RunResult) -> Option<f64>>;

/// One row of the table: a value per contender, ratios ruleop/floor and ruleop/kopf where asked.
struct Row {
    name: &'static str,
    get: Getter,
    decimals: usize,
    vs_floor: bool,
    vs_kopf: bool,
    target: &'static str,
}

fn row(
    name: &'static str,
    decimals: usize,
    (vs_floor, vs_kopf): (bool, bool),
    target: &'static str,
    get: impl Fn(&RunResult) -> Option<f64> + 'static,
) -> Row {
    Row {
        name,
        get: Box::new(get),
        decimals,
        vs_floor,
        vs_kopf,
        target,
    }
}

fn rows(n: usize) -> Vec<Row> {
    let per_object = 3.0 * n as f64;
    let mb = |kb: Option<u64>| kb.map(|kb| kb as f64 / 1024.0);
    let startup_ms = |x: &RunResult, f: fn(&Startup) -> Duration| x.startup.as_ref().map(|s| f(s).as_secs_f64() * 1e3);
    vec![
        row(
            "(1) convergence of all N parents (s)",
            2,
            (true, true),
            "ruleop <= 1.3x floor; ruleop/kopf <= 0.2x",
            |x| Some(x.converge.as_secs_f64()),
        ),
        row("(1) per-parent latency p50 (ms)", 0, (true, true), "", |x| {
            Some(x.p50_ms)
        }),
        row("(1) per-parent latency p99 (ms)", 0, (true, true), "", |x| {
            Some(x.p99_ms)
        }),
        row("(1) per-parent latency max (ms)", 0, (true, true), "", |x| {
            Some(x.max_ms)
        }),
        row("(2) API writes during convergence", 0, (true, true), "", |x| {
            Some(total(&x.writes_converge) as f64)
        }),
        row("(2) API writes per parent", 1, (true, true), "", move |x| {
            Some(total(&x.writes_converge) as f64 / n as f64)
        }),
        row(
            "(2) writes, restart over N converged parents",
            0,
            (false, false),
            "",
            |x| x.startup.as_ref().map(|s| total(&s.writes) as f64),
        ),
        row(
            "(2) writes during a full resync (N reconciles)",
            0,
            (false, false),
            "0",
            |x| x.resync.as_ref().map(|s| total(&s.writes) as f64),
        ),
        row("(2) resync: reconciles counted", 0, (false, false), ">= N", |x| {
            x.resync.as_ref().map(|s| s.reconciles as f64)
        }),
        row("(3) RSS, empty namespace (MB)", 1, (false, true), "", move |x| {
            mb(x.rss_empty_kb)
        }),
        row("(3) RSS peak, VmHWM (MB)", 1, (false, true), "", move |x| {
            mb(x.rss_peak_kb)
        }),
        row(
            "(3) RSS steady after convergence (MB)",
            1,
            (false, true),
            "< 50 at N=1000",
            move |x| mb(x.rss_steady_kb),
        ),
        row(
            "(3) RSS after a restart over N converged parents (MB)",
            1,
            (false, true),
            "",
            move |x| mb(x.startup.as_ref()?.rss_kb),
        ),
        row(
            "(3) bytes per cached object (N parents + 2N children)",
            0,
            (false, true),
            "",
            move |x| Some((x.rss_steady_kb? as f64 - x.rss_empty_kb? as f64) * 1024.0 / per_object),
        ),
        row(
            "(4) start-up: process start to ready (ms)",
            0,
            (false, true),
            "",
            move |x| startup_ms(x, |s| s.ready),
        ),
        row(
            "(4) start-up: to first reconcile (ms)",
            0,
            (false, true),
            "",
            move |x| startup_ms(x, |s| s.first),
        ),
        row(
            "(4) start-up: to all N reconciled (ms)",
            0,
            (false, true),
            "",
            move |x| startup_ms(x, |s| s.all),
        ),
    ]
}

impl Report<'_> {
    fn run(&self, n: usize, c: Contender) -> Option<&RunResult> {
        self.runs
            .iter()
            .find(|r| r.n == n && r.contender == Some(c) && r.error.is_none())
    }

    fn markdown(&self) -> String {
        use std::fmt::Write;
        let s = self.settings;
        let i = &self.info;
        let mut md = String::new();
        let _ = writeln!(md, "# ruleop convergence benchmark\n");
        let _ = writeln!(md, "- date: {}", i.date);
        let _ = writeln!(
            md,
            "- machine: {} CPUs, {:.1} GiB memory, CPU `{}`; load average at start `{}`",
            i.nproc, i.memory_gib, i.cpu, i.loadavg
        );
        let _ = writeln!(
            md,
            "- versions: ruleop `{}` ({}), `{}`, kube-apiserver {} (control plane `{}`), kopf {} ({})",
            i.rev,
            s.ruleop_bin.display(),
            i.rustc,
            i.k8s,
            s.ctl.display(),
            i.kopf,
            i.python
        );
        let ns: Vec<String> = s.ns.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            md,
            "- N = {}; parents created {} in flight; floor concurrency {}; resync for the write count: {}",
            ns.join(", "),
            s.in_flight,
            s.floor_concurrency,
            s.resync
        );
        for &n in &s.ns {
            let r = self.run(n, Contender::Ruleop);
            let f = self.run(n, Contender::Floor);
            let k = self.run(n, Contender::Kopf);
            let _ = writeln!(md, "\n## N = {n}\n");
            let _ = writeln!(
                md,
                "| measurement | ruleop | floor | kopf | ruleop/floor | ruleop/kopf | target |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|");
            for row in rows(n) {
                let cell = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.*}", row.decimals));
                let (vr, vf, vk) = (r.and_then(&row.get), f.and_then(&row.get), k.and_then(&row.get));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    row.name,
                    cell(vr),
                    cell(vf),
                    cell(vk),
                    if row.vs_floor { ratio(vr, vf) } else { String::new() },
                    if row.vs_kopf { ratio(vr, vk) } else { String::new() },
                    row.target
                );
            }
            let reload = r
                .and_then(|r| r.reload)
                .map_or("-".to_owned(), |d| format!("{:.2}", d.as_secs_f64()));
            let _ = writeln!(
                md,
                "| (5) reload: template edit to all N children updated (s, incl. 0.5 s debounce) | {reload} | | | | | < 2 + debounce at N=1000 |"
            );
            let plan = self
                .plan
                .map_or("not run (BENCH_PLAN_LOG unset)".to_owned(), |p| format!("{p:.0}"));
            let _ = writeln!(
                md,
                "| (6) render: plans/s (`cargo bench --bench plan`) | {plan} | | | | | |"
            );

            let _ = writeln!(md, "\n### API writes by verb and resource, N = {n}\n");
            let _ = writeln!(md, "| phase | contender | writes (verb resource count) |");
            let _ = writeln!(md, "|---|---|---|");
            for c in [Contender::Ruleop, Contender::Floor, Contender::Kopf] {
                let Some(x) = self.run(n, c) else { continue };
                let _ = writeln!(
                    md,
                    "| convergence | {} | {} |",
                    c.name(),
                    counts_text(&x.writes_converge)
                );
                if let Some(st) = &x.startup {
                    let _ = writeln!(
                        md,
                        "| restart (start-up) | {} | {} |",
                        c.name(),
                        counts_text(&st.writes)
                    );
                }
                if let Some(rs) = &x.resync {
                    let _ = writeln!(
                        md,
                        "| restart with resync {} until N reconciled | {} | {} |",
                        s.resync,
                        c.name(),
                        counts_text(&rs.writes_restart)
                    );
                    let _ = writeln!(
                        md,
                        "| full resync: {} reconciles in {:.1}s | {} | {} |",
                        rs.reconciles,
                        rs.took.as_secs_f64(),
                        c.name(),
                        counts_text(&rs.writes)
                    );
                }
            }
            let problems: Vec<&RunResult> = self
                .runs
                .iter()
                .filter(|x| x.n == n && (x.error.is_some() || !x.notes.is_empty()))
                .collect();
            if !problems.is_empty() {
                let _ = writeln!(md, "\nProblems:\n");
                for x in problems {
                    let name = x.contender.map_or("?", Contender::name);
                    if let Some(e) = &x.error {
                        let _ = writeln!(md, "- {name}: FAILED: {e}");
                    }
                    for note in &x.notes {
                        let _ = writeln!(md, "- {name}: {note}");
                    }
                }
            }
        }
        md.push_str(&self.targets());
        md
    }

    /// The targets, checked at the largest N measured.
    fn targets(&self) -> String {
        use std::fmt::Write;
        let Some(&n) = self.settings.ns.iter().max() else {
            return String::new();
        };
        let (r, f, k) = (
            self.run(n, Contender::Ruleop),
            self.run(n, Contender::Floor),
            self.run(n, Contender::Kopf),
        );
        let verdict = |ok: Option<bool>| match ok {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        let conv = |x: Option<&RunResult>| x.map(|x| x.converge.as_secs_f64());
        let vs_floor = conv(r).zip(conv(f)).map(|(a, b)| a / b);
        let vs_kopf = conv(k).zip(conv(r)).map(|(a, b)| a / b);
        let resync = r.and_then(|x| x.resync.as_ref()).map(|x| total(&x.writes));
        let steady = r.and_then(|x| x.rss_steady_kb).map(|kb| kb as f64 / 1024.0);
        let mut md = String::new();
        let _ = writeln!(md, "\n## Targets (N = {n})\n");
        let _ = writeln!(md, "| target | measured | verdict |");
        let _ = writeln!(md, "|---|---|---|");
        let fmt = |v: Option<f64>, unit: &str| v.map_or("-".to_owned(), |v| format!("{v:.2}{unit}"));
        let _ = writeln!(
            md,
            "| convergence within 1.3x of the floor | ruleop/floor = {} | {} |",
            fmt(vs_floor, "x"),
            verdict(vs_floor.map(|v| v <= 1.3))
        );
        let _ = writeln!(
            md,
            "| convergence >= 5x faster than kopf | kopf/ruleop = {} | {} |",
            fmt(vs_kopf, "x"),
            verdict(vs_kopf.map(|v| v >= 5.0))
        );
        let _ = writeln!(
            md,
            "| zero writes on a full resync | {} | {} |",
            resync.map_or("-".to_owned(), |w| w.to_string()),
            verdict(resync.map(|w| w == 0))
        );
        let _ = writeln!(
            md,
            "| steady RSS < 50 MB | {} | {} |",
            fmt(steady, " MB"),
            verdict(steady.map(|v| v < 50.0))
        );
        md
    }

    fn json(&self) -> Value {
        let i = &self.info;
        let counts = |c: &Counts| -> Value {
            c.iter()
                .map(|((verb, res), v)| json!({"verb": verb, "resource": res, "count": v}))
                .collect()
        };
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|x| {
                json!({
                    "contender": x.contender.map(Contender::name),
                    "n": x.n,
                    "error": x.error,
                    "notes": x.notes,
                    "convergence_s": x.converge.as_secs_f64(),
                    "latency_ms": {"p50": x.p50_ms, "p99": x.p99_ms, "max": x.max_ms},
                    "writes_convergence": counts(&x.writes_converge),
                    "writes_convergence_total": total(&x.writes_converge),
                    "rss_kb": {"empty": x.rss_empty_kb, "peak_vmhwm": x.rss_peak_kb, "steady": x.rss_steady_kb},
                    "bytes_per_object": match (x.rss_empty_kb, x.rss_steady_kb) {
                        (Some(e), Some(s)) => json!((s as f64 - e as f64) * 1024.0 / (3 * x.n) as f64),
                        _ => Value::Null,
                    },
                    "startup": x.startup.as_ref().map(|s| json!({
                        "ready_ms": s.ready.as_secs_f64() * 1e3,
                        "first_reconcile_ms": s.first.as_secs_f64() * 1e3,
                        "all_reconciled_ms": s.all.as_secs_f64() * 1e3,
                        "rss_kb_after": s.rss_kb,
                        "writes": counts(&s.writes),
                    })),
                    "resync": x.resync.as_ref().map(|r| json!({
                        "reconciles": r.reconciles,
                        "seconds": r.took.as_secs_f64(),
                        "writes": counts(&r.writes),
                        "writes_total": total(&r.writes),
                        "writes_restart_until_n_reconciled": counts(&r.writes_restart),
                    })),
                })
            })
            .collect();
        json!({
            "date": i.date,
            "machine": {"nproc": i.nproc, "memory_gib": i.memory_gib, "cpu": i.cpu, "loadavg_at_start": i.loadavg},
            "versions": {"ruleop": i.rev, "rustc": i.rustc, "kubernetes": i.k8s, "kopf": i.kopf, "python": i.python},
            "n": self.settings.ns,
            "in_flight": self.settings.in_flight,
            "floor_concurrency": self.settings.floor_concurrency,
            "resync": self.settings.resync,
            "reload_s": self
                .settings
                .ns
                .iter()
                .map(|&n| json!({"n": n, "seconds": self.run(n, Contender::Ruleop).and_then(|r| r.reload).map(|d| d.as_secs_f64())}))
                .collect::<Vec<_>>(),
            "render_plans_per_s": self.plan,
            "runs": runs,
        })
    }
}
