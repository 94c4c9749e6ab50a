//! One contender at one N: the phases and what each measures (bench/README.md, "The numbers").

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::Service;
use kube::{Client, Config};
use tokio::sync::mpsc;

use crate::convergence::contenders::floor::FloorTemplates;
use crate::convergence::contenders::{Contender, Runner, Setup};
use crate::convergence::fairness::{Fairness, fairness};
use crate::convergence::observer::{Observer, wait_labelled};
use crate::convergence::parents::{create_namespace, create_parents, delete_namespace, release_finalizers};
use crate::convergence::plane::ControlPlane;
use crate::convergence::process::{CpuWindow, Operator, RssSampler, WindowCpu};
use crate::convergence::settings::Settings;
use crate::convergence::writes::{Counts, apiserver_writes, diff, settle};
use ruleop_testkit::metrics::percentile;

/// What every phase needs.
pub struct Ctx<'a> {
    /// The run's parameters.
    pub settings: &'a Settings,
    /// The control plane.
    pub plane: &'a ControlPlane,
    /// The harness's client (creates parents, watches, reads the API server's counters).
    pub client: Client,
    /// Its config, for contenders that want a client of their own (the floor).
    pub config: Config,
    /// rules/ with the short resync (ruleop's resync phase).
    pub resync_rules: PathBuf,
}

/// Start-up over N converged parents.
#[derive(Default)]
pub struct Startup {
    /// Spawn to ready.
    pub ready: Duration,
    /// Spawn to the first reconcile completed.
    pub first: Duration,
    /// Spawn to N reconciles completed.
    pub all: Duration,
    /// Writes until then (and 2 s of quiet).
    pub writes: Counts,
    /// VmRSS of the restarted process once all N are reconciled and writes are still.
    pub rss_kb: Option<u64>,
    /// CPU seconds of the restarted process by then.
    pub cpu_s: Option<f64>,
}

/// ruleop restarted with a short resync.
#[derive(Default)]
pub struct Resync {
    /// Reconciles counted in the window.
    pub reconciles: u64,
    /// How long N more reconciles took.
    pub took: Duration,
    /// Writes during those N reconciles (target 0).
    pub writes: Counts,
    /// Writes from the restart until the first N reconciles.
    pub writes_restart: Counts,
}

/// What one reload cost the operator and the API server, from the template edit until the
/// writes were still (so the echoes of its own writes, and what they queued, are in).
#[derive(Default)]
pub struct ReloadWork {
    /// The operator's CPU seconds.
    pub cpu_s: Option<f64>,
    /// Its reconciles, by what queued them.
    pub triggers: std::collections::BTreeMap<String, u64>,
    /// The writes it sent.
    pub writes: Counts,
    /// CPU from the edit until every child was updated (the reload's time, debounce included).
    pub cpu_to_updated: WindowCpu,
}

/// Everything measured for one contender at one N.
#[derive(Default)]
pub struct RunResult {
    /// Its name.
    pub contender: &'static str,
    /// N.
    pub n: usize,
    /// Why it has no figures (failed, or skipped).
    pub error: Option<String>,
    /// Whether `error` is a skip (above the contender's max N), not a failure.
    pub skipped: bool,
    /// First create to last parent converged.
    pub converge: Duration,
    /// Per-parent latency, ms.
    pub p50_ms: f64,
    /// Per-parent latency, ms.
    pub p99_ms: f64,
    /// Per-parent latency, ms.
    pub max_ms: f64,
    /// Seconds from the first create at which each parent converged, sorted.
    pub curve: Vec<f64>,
    /// Writes during convergence (the harness's own creates taken out).
    pub writes_converge: Counts,
    /// CPU seconds of the process from before the first create to write quiet after convergence.
    pub cpu_converge_s: Option<f64>,
    /// ruleop's reconciles by then, by what queued them (where the CPU went).
    pub triggers_converge: std::collections::BTreeMap<String, u64>,
    /// VmRSS 3 s after ready in the empty namespace.
    pub rss_empty_kb: Option<u64>,
    /// VmHWM / sampled peak.
    pub rss_peak_kb: Option<u64>,
    /// VmRSS after convergence and quiet.
    pub rss_steady_kb: Option<u64>,
    /// The objects of the workload an operator of it caches, per parent: the parent, the
    /// children `ruleop render` gives it, and the backup Job when the contender runs it.
    pub objects_per_parent: Option<usize>,
    /// The anonymous part of VmRSS (RssAnon: heap and stacks, not the binary's code pages),
    /// in the empty namespace and after convergence.
    pub rss_anon_empty_kb: Option<u64>,
    pub rss_anon_steady_kb: Option<u64>,
    /// The restart over N converged parents.
    pub startup: Option<Startup>,
    /// ruleop's resync phase.
    pub resync: Option<Resync>,
    /// ruleop's reload phase: template edit to all N children updated.
    pub reload: Option<Duration>,
    /// What that reload cost, from the edit to the API server's writes going still.
    pub reload_work: Option<ReloadWork>,
    /// The same N Service applies sent by the harness alone, as many at once as the reload runs (`reload_floor`).
    pub reload_floor: Option<(Duration, WindowCpu)>,
    /// The same with the rule's `reloadConcurrency` set to each of `BENCH_RELOAD_SWEEP`.
    pub reload_sweep: Vec<(u16, Duration)>,
    /// ruleop's staged rollout phase (`BENCH_ROLLOUT=1`).
    pub rollout: Option<crate::convergence::rollout::RolloutRun>,
    /// ruleop's fairness phase (N >= 1,000 only).
    pub fairness: Option<Fairness>,
    /// Anything worth a line under the table.
    pub notes: Vec<String>,
}

impl RunResult {
    fn failed(contender: &'static str, n: usize, error: String, skipped: bool) -> Self {
        RunResult {
            contender,
            n,
            error: Some(error),
            skipped,
            ..Default::default()
        }
    }
}

/// One contender at one N in a fresh namespace, which is deleted afterwards unless `last` (the
/// control plane goes next, and at N = 10,000 deleting 40,000 objects takes minutes). Never
/// fails: a failure is recorded in the result and the run goes on.
pub async fn run_contender(ctx: &Ctx<'_>, contender: &'static dyn Contender, n: usize, last: bool) -> RunResult {
    let name = contender.name();
    if let Some(max) = contender.max_n().filter(|&max| n > max) {
        let why = format!("skipped at N={n} (runs up to N={max}; BENCH_PEER_MAX_N raises it)");
        eprintln!("   {why}");
        return RunResult::failed(name, n, why, true);
    }
    let ns = format!("bench-{name}-{n}");
    if let Err(e) = create_namespace(&ctx.client, &ns).await {
        return RunResult::failed(name, n, format!("{e:#}"), false);
    }
    let result = measure(ctx, contender, n, &ns).await;
    let mut result = match result {
        Ok(r) => r,
        Err(e) => RunResult::failed(name, n, format!("{e:#}"), false),
    };
    if last {
        return result;
    }
    // Finalizers (ruleop's final backup, kro's) would hold the namespace with the operator gone.
    if let Err(e) = release_finalizers(&ctx.client, contender.parent(), &ns).await {
        eprintln!("   releasing finalizers in {ns}: {e:#}");
    }
    match delete_namespace(&ctx.client, &ns, n).await {
        Ok(took) => eprintln!("   namespace {ns} deleted in {:.1}s", took.as_secs_f64()),
        Err(e) => result.notes.push(format!("namespace deletion: {e:#}")),
    }
    result
}

async fn measure(ctx: &Ctx<'_>, contender: &'static dyn Contender, n: usize, ns: &str) -> Result<RunResult> {
    let settings = ctx.settings;
    let mut result = RunResult {
        contender: contender.name(),
        n,
        ..Default::default()
    };

    // The contender, idle in its empty namespace.
    let mut operator = None;
    let (handover, parents_rx) = mpsc::unbounded_channel();
    let mut handover = Some(handover);
    if let Runner::Process = contender.runner() {
        let op = Operator::start(ctx, contender, ns, &Setup::default())?;
        op.wait_ready(Duration::from_secs(90)).await?;
        contender.after_ready(ctx).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        result.rss_empty_kb = op.proc_status("VmRSS");
        result.rss_anon_empty_kb = op.proc_status("RssAnon");
        operator = Some(op);
        handover = None;
    }
    let observer = Observer::start(&ctx.client, ns, contender).await?;
    let sampler = operator.as_ref().map(|op| RssSampler::start(op.pid));

    // Convergence: create N parents, wait until every one is converged.
    let before = apiserver_writes(&ctx.client).await?;
    let cpu_before = operator.as_ref().and_then(Operator::cpu_seconds);
    let start = Instant::now();
    let serve_error = Arc::new(Mutex::new(None::<String>));
    let in_harness = handover.is_some();
    let serving = async {
        if in_harness && let Err(e) = contender.serve(ctx, ns, parents_rx).await {
            *serve_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("{e:#}"));
        }
    };
    let converging = async {
        let sent = create_parents(&ctx.client, contender.parent(), ns, n, settings.in_flight, handover).await?;
        // Fail fast when the contender dies (process exit, in-harness error) or makes no progress.
        let mut alive = || -> Option<String> {
            if let Some(e) = serve_error.lock().unwrap_or_else(PoisonError::into_inner).clone() {
                return Some(format!("{} failed: {e}", contender.name()));
            }
            operator.as_mut()?.exited()
        };
        let converged = observer
            .wait_all(n, start, settings.converge_timeout(n), &mut alive)
            .await;
        anyhow::Ok((sent, converged))
    };
    let (converged, ()) = tokio::join!(converging, serving);
    let (sent, converged) = converged?;
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
    result.curve = converged.values().map(|t| (*t - start).as_secs_f64()).collect();
    result.curve.sort_by(f64::total_cmp);
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(name, at)| Some((*converged.get(name)? - *at).as_secs_f64() * 1000.0))
        .collect();
    latencies.sort_by(f64::total_cmp);
    result.p50_ms = percentile(&latencies, 50.0).unwrap_or(0.0);
    result.p99_ms = percentile(&latencies, 99.0).unwrap_or(0.0);
    result.max_ms = latencies.last().copied().unwrap_or_default();
    let after = settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(60)).await?;
    let mut writes = diff(&after, &before);
    // The benchmark's own N creates are not the operator's.
    if let Some(posts) = writes.get_mut(&("POST".to_owned(), "databases".to_owned())) {
        *posts = posts.saturating_sub(n as u64);
    }
    writes.retain(|_, v| *v > 0);
    result.writes_converge = writes;

    let Some(op) = operator else {
        return Ok(result);
    };
    result.cpu_converge_s = op.cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    result.triggers_converge = op.reconcile_triggers().await;
    // Memory once idle again.
    tokio::time::sleep(settings.steady).await;
    result.rss_steady_kb = op.proc_status("VmRSS");
    result.rss_anon_steady_kb = op.proc_status("RssAnon");
    let children = FloorTemplates::render(ctx, &ctx.client, ns).await?.children.len();
    result.objects_per_parent = Some(1 + children + usize::from(contender.runs_backup()));
    result.rss_peak_kb = op.proc_status("VmHWM").max(sampler.map(RssSampler::stop));
    result.notes.extend(op.stop("convergence").await);

    let (startup, note) = startup(ctx, contender, ns, n).await?;
    result.startup = Some(startup);
    result.notes.extend(note);

    let extras = contender.extras();
    if extras.resync {
        let (resync, note) = resync(ctx, contender, ns, n).await?;
        result.resync = Some(resync);
        result.notes.extend(note);
    }
    if extras.reload && n >= 10_000 {
        result
            .notes
            .push("reload not measured at N >= 10,000 (its target is at N = 1,000)".to_owned());
    } else if extras.reload {
        let (took, work, note) = reload(ctx, contender, ns, n, None).await?;
        result.reload = Some(took);
        result.reload_work = Some(work);
        result.notes.extend(note);
        result.reload_floor = Some(crate::convergence::reload_floor::reload_floor(ctx, ns, n).await?);
        for &in_flight in &ctx.settings.reload_sweep {
            let (took, _, note) = reload(ctx, contender, ns, n, Some(in_flight)).await?;
            eprintln!(
                "   reload with reloadConcurrency {in_flight}: {:.2} s",
                took.as_secs_f64()
            );
            result.reload_sweep.push((in_flight, took));
            result.notes.extend(note);
        }
    }
    if extras.reload && ctx.settings.rollout {
        let (run, note) = crate::convergence::rollout::rollout(ctx, contender, ns, n).await?;
        result.rollout = Some(run);
        result.notes.extend(note);
    }
    if extras.fairness && n >= 10_000 {
        result
            .notes
            .push("fairness not measured at N >= 10,000 (its target is at N = 1,000)".to_owned());
    } else if extras.fairness && n >= 1000 {
        let (fair, notes) = fairness(ctx, contender, n).await?;
        result.fairness = Some(fair);
        result.notes.extend(notes);
    }
    drop(observer);
    Ok(result)
}

/// The process started again over N converged parents: to ready, to the first and to N
/// reconciles; its writes, memory and CPU by then.
async fn startup(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    ns: &str,
    n: usize,
) -> Result<(Startup, Option<String>)> {
    let before = apiserver_writes(&ctx.client).await?;
    let op = Operator::start(ctx, contender, ns, &Setup::default())?;
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
    let cpu_s = op.cpu_seconds();
    let after = settle(&ctx.client, Duration::from_secs(2), Duration::from_secs(60)).await?;
    let rss_kb = op.proc_status("VmRSS");
    let note = op.stop("start-up").await;
    let startup = Startup {
        ready: ready.unwrap_or_default(),
        first: first.unwrap_or_default(),
        all,
        writes: diff(&after, &before),
        rss_kb,
        cpu_s,
    };
    Ok((startup, note))
}

/// Restart with the short resync: after the N start-up reconciles (and a short settle, shorter
/// than the resync period), count the writes until N more reconciles have completed. The
/// reconcile counter moves when a reconcile has finished, so its writes are in the window.
async fn resync(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    ns: &str,
    n: usize,
) -> Result<(Resync, Option<String>)> {
    let before = apiserver_writes(&ctx.client).await?;
    let setup = Setup {
        rules: Some(ctx.resync_rules.clone()),
        ..Setup::default()
    };
    let op = Operator::start(ctx, contender, ns, &setup)?;
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
        writes: diff(&after, &mid),
        writes_restart: diff(&mid, &before),
    };
    Ok((resync, note))
}

/// Hot reload: with N converged parents, replace the Service template by one adding a label
/// (written aside, then renamed over, as an editor or the kubelet would) and time until all N
/// Services carry it. Includes ruleop's default 500 ms debounce. With `reload_concurrency`, the
/// rules are a copy of the contender's whose Database rule says `reloadConcurrency: <it>`, and
/// the label's value is that number, so each run of a sweep waits for its own edit. What the
/// reload cost is read once the writes are still again.
async fn reload(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    ns: &str,
    n: usize,
    reload_concurrency: Option<u16>,
) -> Result<(Duration, ReloadWork, Option<String>)> {
    let tag = reload_concurrency.map_or_else(|| "default".to_owned(), |c| c.to_string());
    let templates = ctx.settings.state.join(format!("templates-reload-{tag}"));
    let _ = std::fs::remove_dir_all(&templates);
    copy_tree(&ctx.settings.root.join("templates"), &templates)?;
    let rules = match reload_concurrency {
        Some(in_flight) => Some(rules_with_reload_concurrency(ctx, &tag, in_flight)?),
        None => None,
    };
    let setup = Setup {
        templates: Some(templates.clone()),
        rules,
        ..Setup::default()
    };
    let op = started_and_settled(ctx, contender, ns, n, &setup).await?;
    let timeout = ctx.settings.converge_timeout(n);
    let service = templates.join("database/service.yaml.j2");
    let text = std::fs::read_to_string(&service)?;
    let edited = text.replacen(
        "    app: {{ metadata.name }}\n",
        &format!("    app: {{{{ metadata.name }}}}\n    reload: \"{tag}\"\n"),
        1,
    );
    ensure!(
        edited != text,
        "the Service template has no `app:` label line to extend"
    );
    let aside = templates.join("database/.service.yaml.j2.tmp");
    std::fs::write(&aside, edited)?;
    let writes_before = apiserver_writes(&ctx.client).await?;
    let triggers_before = op.reconcile_triggers().await;
    let window = CpuWindow::start(ctx.plane, Some(&op));
    let start = Instant::now();
    std::fs::rename(&aside, &service)?;
    if let Err(e) = wait_labelled::<Service>(&ctx.client, ns, &format!("reload={tag}"), n, timeout).await {
        bail!("reload ({tag}): {e:#} (log {})", op.log.display());
    }
    let took = start.elapsed();
    let cpu_to_updated = window.stop();
    let writes_after = settle(&ctx.client, Duration::from_secs(1), Duration::from_secs(30)).await?;
    let mut triggers = op.reconcile_triggers().await;
    for (trigger, count) in &mut triggers {
        *count = count.saturating_sub(triggers_before.get(trigger).copied().unwrap_or_default());
    }
    triggers.retain(|_, count| *count > 0);
    let work = ReloadWork {
        cpu_s: window.stop().operator_s,
        triggers,
        writes: diff(&writes_after, &writes_before),
        cpu_to_updated,
    };
    let note = op.stop("reload").await;
    Ok((took, work, note))
}

/// The contender started with `setup` over the N converged parents in `ns`, once it has
/// reconciled them all and the API server's writes are still.
pub async fn started_and_settled(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    ns: &str,
    n: usize,
    setup: &Setup,
) -> Result<Operator> {
    let op = Operator::start(ctx, contender, ns, setup)?;
    op.wait_ready(Duration::from_secs(90)).await?;
    op.wait_reconciles(n as u64, ctx.settings.converge_timeout(n)).await?;
    settle(&ctx.client, Duration::from_secs(1), Duration::from_secs(10)).await?;
    Ok(op)
}

/// A copy of the shipped rules whose Database rule runs `in_flight` reconciles at once after a
/// reload.
fn rules_with_reload_concurrency(ctx: &Ctx<'_>, tag: &str, in_flight: u16) -> Result<PathBuf> {
    let rules = ctx.settings.state.join(format!("rules-reload-{tag}"));
    let _ = std::fs::remove_dir_all(&rules);
    copy_tree(&ctx.settings.root.join("rules"), &rules)?;
    let database = rules.join("database.yaml");
    let text = std::fs::read_to_string(&database)?;
    let concurrency = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("maxConcurrentReconciles:"))
        .and_then(|v| v.trim().parse::<u16>().ok())
        .unwrap_or(5);
    // At most the rule's own concurrency below it: a sweep value under it runs with both lowered.
    let edited = text.replacen(
        &format!("  maxConcurrentReconciles: {concurrency}\n"),
        &format!(
            "  maxConcurrentReconciles: {}\n  reloadConcurrency: {in_flight}\n",
            concurrency.min(in_flight)
        ),
        1,
    );
    ensure!(
        edited != text,
        "rules/database.yaml has no maxConcurrentReconciles line"
    );
    std::fs::write(&database, edited)?;
    Ok(rules)
}

/// Copies the directory tree `from` to `to`.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
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
