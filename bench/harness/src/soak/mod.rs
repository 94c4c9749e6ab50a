//! The chaos soak of issue 29 (`make soak`): the shipped rules over `SOAK_PARENTS` Databases
//! with backups, three replicas with `--shards 12` on a restartable control plane, and for
//! `SOAK_MINUTES` faults at random times from a printed seed (`SOAK_SEED` replays them):
//! replica SIGKILLs, API server restarts, spec-edit and backup-request storms, rule reloads, a
//! stalled connection between one replica and the API server, etcd compaction. It checks, while
//! the faults run and at the end, one backup Job per (parent, generation) and per request value,
//! that no parent is lost or left unconverged, convergence within 30 s of the last fault, RSS
//! per replica and the logs for panics, and writes `bench/results/soak-<date>.{md,svg}`.
//! A measurement, not a test: bench/README.md ("The soak").

mod checks;
mod inject;
mod proxy;
mod replicas;
mod report;
mod schedule;
mod settings;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use checks::{Ledger, Verdict, jobs, parents, verdict};
use inject::{Chaos, Injected, services_reloaded};
use proxy::StallProxy;
use replicas::{Replicas, expired_watch_lines, panics};
use report::Outcome;
use ruleop_testkit::*;
use settings::Settings;

pub(crate) fn main() {
    let settings = Settings::from_env();
    let mut rng = RandomTimings::with_seed("soak", settings.seed);
    let seed = rng.seed();
    let schedule = schedule::plan(&settings, &mut rng);
    println!(
        "soak: SOAK_SEED={seed}, {} parents, {} min of faults, {} faults planned",
        settings.parents,
        settings.minutes,
        schedule.len()
    );
    let load_before = load_average();
    // Read now: the tree may move on during an hour's run, the binary does not.
    let source = source_state();

    let plane = restartable_control_plane();
    install_crds();
    let ns = Namespace::new("soak");
    let rules = rules_dir(str::to_owned);
    let templates = templates_with(&[]);

    // Replica 0 reaches the API server through the stall proxy.
    let kubeconfig = std::fs::read_to_string(&plane.kubeconfig).expect("the admin kubeconfig");
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .and_then(|url| url.trim().strip_prefix("https://"))
        .expect("the kubeconfig's server")
        .to_owned();
    let proxy = StallProxy::start(server.parse().expect("the server is an IP:port")).expect("the stall proxy");
    let proxied_dir = tempfile::tempdir().expect("tempdir");
    let proxied = proxied_dir.path().join("kubeconfig");
    std::fs::write(&proxied, kubeconfig.replace(&server, &proxy.addr.to_string())).expect("the proxied kubeconfig");
    let kubeconfigs: Vec<PathBuf> = vec![proxied, plane.kubeconfig.clone(), plane.kubeconfig.clone()];
    let mut fleet = Replicas::start(&kubeconfigs, rules.path(), templates.path(), &ns.0);
    let spread = fleet.wait_spread(Duration::from_secs(120));
    println!("soak: 3 replicas ready, shards 4/4/4 after {spread:.1?}");

    // The parents, then their first convergence.
    let names: Vec<String> = (0..settings.parents).map(|i| format!("db-{i:05}")).collect();
    let created = Instant::now();
    for chunk in names.chunks(200) {
        let docs: Vec<String> = chunk
            .iter()
            .map(|name| database(name, 1, "  backup:\n    enabled: true\n"))
            .collect();
        let out = kubectl_with_stdin(&["create", "-n", &ns.0, "-f", "-"], Some(&docs.join("\n---\n")));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let mut ledger = Ledger::default();
    wait_until(
        Duration::from_secs(600 + settings.parents as u64),
        "every parent's first convergence",
        || {
            let Some(all) = parents(&ns.0) else { return false };
            ledger.uids = all.iter().map(|p| (p.name.clone(), p.uid.clone())).collect();
            all.len() == settings.parents && all.iter().all(checks::Parent::converged)
        },
    );
    let initial = created.elapsed();
    println!(
        "soak: {} parents created and converged in {initial:.1?}",
        settings.parents
    );

    // The fault window.
    let mut chaos = Chaos::new(plane, &proxy, &mut fleet, &ns.0, templates.path(), &mut ledger, &names);
    let window = settings.duration();
    let start = Instant::now();
    let mut injected: Vec<Injected> = Vec::new();
    let mut converged = Vec::new();
    let mut rss = Vec::new();
    let (mut checks, mut worst_duplicates, mut worst_unexpected) = (0, 0, 0);
    let mut last_fault = Instant::now();
    // The first check since the last fault that found every parent converged and the last
    // reload applied, as time since that fault: a fault late in the window is not measured to
    // the first check after the window.
    let mut settled: Option<Duration> = None;
    let mut next_sample = Duration::ZERO;
    let mut due = schedule.iter().peekable();
    let mut stretches = Stretches::default();
    let mut look = |chaos: &mut Chaos, t: f64, converged: &mut Vec<(f64, usize, usize)>| -> Option<Verdict> {
        let (all, jobs) = (parents(chaos.ns)?, jobs(chaos.ns)?);
        let v = verdict(chaos.ledger, &all, &jobs);
        converged.push((t, v.converged, v.parents));
        stretches.saw(t, &v.unconverged);
        Some(v)
    };
    while start.elapsed() < window {
        if chaos.end_stall(false) {
            last_fault = Instant::now();
            settled = None;
            stall_ended(&mut injected, start.elapsed().as_secs_f64());
        }
        if let Some(planned) = due.next_if(|p| p.at <= start.elapsed()) {
            let at = start.elapsed().as_secs_f64();
            let detail = chaos.inject(&planned.fault);
            let done = start.elapsed().as_secs_f64();
            println!("soak: {at:7.1} s {}: {detail}", planned.fault.kind());
            injected.push(Injected {
                at,
                done,
                kind: planned.fault.kind(),
                detail,
            });
            last_fault = Instant::now();
            settled = None;
            continue;
        }
        if start.elapsed() >= next_sample {
            let t = start.elapsed().as_secs_f64();
            rss.extend(chaos.replicas.sample(t));
            if let Some(v) = look(&mut chaos, t, &mut converged) {
                checks += 1;
                worst_duplicates = worst_duplicates.max(v.duplicates);
                worst_unexpected = worst_unexpected.max(v.unexpected.len());
                if settled.is_none()
                    && v.unconverged.is_empty()
                    && v.missing.is_empty()
                    && reload_landed(
                        chaos.reloads,
                        services_reloaded(chaos.ns, chaos.reloads),
                        settings.parents,
                    )
                {
                    settled = Some(last_fault.elapsed());
                }
                println!(
                    "soak: {t:7.1} s check: {}/{} converged, {} duplicates, {} unexpected Jobs, {} lost",
                    v.converged,
                    v.parents,
                    v.duplicates,
                    v.unexpected.len(),
                    v.lost.len()
                );
            }
            next_sample = start.elapsed() + settings.sample_every;
        }
        // Waiting for the next fault or sample is the point of the window, not a condition.
        let next = due.peek().map_or(window, |p| p.at).min(next_sample).min(window);
        std::thread::sleep(next.saturating_sub(start.elapsed()).min(Duration::from_millis(500)));
    }
    if chaos.end_stall(true) {
        last_fault = Instant::now();
        settled = None;
        stall_ended(&mut injected, start.elapsed().as_secs_f64());
    }
    println!("soak: fault window over; waiting for every parent to converge");

    // After the last fault: every parent converged, every backup there, the last reload applied.
    let mut last: Option<Verdict> = None;
    let reloads = chaos.reloads;
    let mut converged_after = settled;
    let mut late = None;
    let mut told = Instant::now();
    while converged_after.is_none() && last_fault.elapsed() < settings.settle {
        let t = start.elapsed().as_secs_f64();
        rss.extend(chaos.replicas.sample(t));
        if let Some(v) = look(&mut chaos, t, &mut converged) {
            let (with, all) = services_reloaded(&ns.0, reloads);
            let reloaded = reload_landed(reloads, (with, all), settings.parents);
            let waiting: Vec<String> = v.unconverged.iter().chain(&v.missing).cloned().collect();
            if waiting.is_empty() && reloaded {
                converged_after = Some(last_fault.elapsed());
                last = Some(v);
                break;
            }
            if late.is_none() && last_fault.elapsed() > settings.converge_within {
                late = Some(waiting.clone());
            }
            if told.elapsed() >= Duration::from_secs(10) {
                println!(
                    "soak: {:.0} s after the last fault: waiting for {waiting:?}, {with} of {all} Services reloaded",
                    last_fault.elapsed().as_secs_f64()
                );
                told = Instant::now();
            }
            last = Some(v);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    chaos.count_gone();
    let last =
        last.unwrap_or_else(|| look(&mut chaos, start.elapsed().as_secs_f64(), &mut converged).unwrap_or_default());
    let gone = chaos.gone;
    let longest = stretches.longest(start.elapsed().as_secs_f64());
    let reloaded = services_reloaded(&ns.0, reloads);
    // Ready again within the convergence bound: a watch that the last fault broke reconnects
    // with a backoff, and a replica is not ready until it has (`/readyz`: watches healthy).
    let since_end = Instant::now();
    let mut ready = fleet.all_ready();
    while !ready && since_end.elapsed() < settings.converge_within {
        std::thread::sleep(Duration::from_millis(500));
        ready = fleet.all_ready();
    }
    let ready = ready.then(|| since_end.elapsed());
    let running = fleet.all_running();
    let logs = fleet.logs();
    let outcome = Outcome {
        date: jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string(),
        header: header(&settings, seed, &source, load_before, initial, spread),
        parents: settings.parents,
        injected,
        converged,
        rss,
        incarnations: fleet.incarnations(),
        checks,
        worst_duplicates,
        worst_unexpected,
        last_fault: last_fault.duration_since(start).as_secs_f64(),
        converged_after,
        late: late.unwrap_or_default(),
        longest,
        bound: settings.converge_within,
        reloads,
        reloaded,
        panics: panics(&logs),
        running,
        ready,
        gone,
        expired_lines: expired_watch_lines(&logs),
        last,
    };
    let md = report::markdown(&outcome);
    println!("{md}");
    std::fs::create_dir_all(&settings.out).expect("the results directory");
    let base = settings.out.join(format!("soak-{}", outcome.date));
    std::fs::write(base.with_extension("md"), &md).expect("write the report");
    std::fs::write(base.with_extension("svg"), report::svg(&outcome)).expect("write the picture");
    println!("soak: wrote {}.{{md,svg}}", base.display());
    if ruleop_testkit::figures::is_results_dir(&settings.out) {
        crate::write_figures().expect("the latest figures in bench/README.md");
    }
    drop(fleet);
}

/// How long each parent has been seen unconverged, from the first look that saw it so to the
/// first that saw it converged again.
#[derive(Default)]
struct Stretches {
    since: std::collections::BTreeMap<String, f64>,
    /// The longest stretch that ended: seconds and parent.
    longest: Option<(f64, String)>,
}

impl Stretches {
    fn saw(&mut self, t: f64, unconverged: &[String]) {
        let now: std::collections::BTreeSet<&String> = unconverged.iter().collect();
        let ended: Vec<String> = self.since.keys().filter(|name| !now.contains(name)).cloned().collect();
        for name in ended {
            let began = self.since.remove(&name).unwrap_or(t);
            self.note(t - began, name);
        }
        for name in now {
            self.since.entry(name.clone()).or_insert(t);
        }
    }

    fn note(&mut self, secs: f64, name: String) {
        if self.longest.as_ref().is_none_or(|(longest, _)| secs > *longest) {
            self.longest = Some((secs, name));
        }
    }

    /// The longest stretch, counting the ones still open at `t`.
    fn longest(mut self, t: f64) -> Option<(f64, String)> {
        for (name, began) in std::mem::take(&mut self.since) {
            self.note(t - began, name);
        }
        self.longest
    }
}

/// Marks the latest stall as ended at `t`.
fn stall_ended(injected: &mut [Injected], t: f64) {
    if let Some(stall) = injected.iter_mut().rev().find(|i| i.kind == schedule::KINDS[5]) {
        stall.done = t;
        println!("soak: {t:7.1} s network stall ended");
    }
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| text(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Whether this run had the size and intervals, said plainly.
fn scale(settings: &Settings) -> String {
    let defaults: Vec<(String, String)> = Settings::defaults().describe();
    let changed: Vec<String> = settings
        .describe()
        .into_iter()
        .zip(defaults)
        .filter(|((_, value), (_, default))| value != default)
        .map(|((name, value), (_, default))| format!("`{name}` {value} (default {default})"))
        .collect();
    if changed.is_empty() {
        "Size: the issue's run (60 min of faults, 1,000 parents, the issue's intervals).".to_owned()
    } else {
        format!(
            "Size: **not the issue's run** (60 min of faults over 1,000 parents at the issue's intervals); changed: {}.",
            changed.join(", ")
        )
    }
}

/// The commit the run's binary was built from, as the tree says at the start, and whether
/// src/, rules/ or templates/ had uncommitted changes then.
fn source_state() -> String {
    let dirty = !command_line("git", &["status", "--porcelain", "src", "rules", "templates"]).is_empty();
    format!(
        "`{}`{}",
        command_line("git", &["rev-parse", "--short", "HEAD"]),
        if dirty {
            " with uncommitted changes in src/, rules/ or templates/"
        } else {
            ""
        }
    )
}

/// What ran, where and how: the report's header.
fn header(
    settings: &Settings,
    seed: u64,
    source: &str,
    load_before: String,
    initial: Duration,
    spread: Duration,
) -> Vec<String> {
    let mut lines = vec![
        format!(
            "Machine: {} cores, load average {load_before} at the start, {} at the end. ruleop {source} at the start ({}), `{}`.",
            std::thread::available_parallelism().map_or(0, usize::from),
            load_average(),
            binary().display(),
            command_line("rustc", &["--version"]),
        ),
        String::new(),
        format!(
            "Replay: `SOAK_SEED={seed}` with the settings below. {} Databases with backups, the shipped rules and templates, 3 \
             replicas `ruleop run --shards 12` (leases 4 s) on a restartable control plane; replica 0 reaches the API server \
             through the harness's loopback stall proxy. Shards spread 4/4/4 {:.1} s after the replicas were ready; the parents \
             were created and first converged in {:.1} s, then the fault window began.",
            settings.parents,
            spread.as_secs_f64(),
            initial.as_secs_f64()
        ),
        String::new(),
        scale(settings),
        String::new(),
        "| setting | value |".to_owned(),
        "|---|---|".to_owned(),
    ];
    lines.extend(settings.describe().into_iter().map(|(k, v)| format!("| `{k}` | {v} |")));
    lines
}

/// Whether the last of `reloads` template reloads reached every one of the `parents` Services:
/// `with` of `all` carry its value (true before the first reload).
fn reload_landed(reloads: u64, (with, all): (usize, usize), parents: usize) -> bool {
    reloads == 0 || (with == all && all == parents)
}
