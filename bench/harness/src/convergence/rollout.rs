//! ruleop's staged rollout phase (`BENCH_ROLLOUT=1`): with N converged Databases, a Service
//! template edit rolled out 10%, 50%, 100% with 5 s pauses (issue 27's benchmark), then the same
//! kind of edit with the rollout taken out of the rule, for the writes an unstaged reload makes.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Service;

use crate::convergence::contenders::{Contender, Setup};
use crate::convergence::observer::wait_labelled;
use crate::convergence::phases::{Ctx, copy_tree, started_and_settled};
use crate::convergence::process::RssSampler;
use crate::convergence::writes::{Counts, apiserver_writes, diff, settle};

/// The steps: percent and pause (s).
const STEPS: [(u32, u64); 3] = [(10, 5), (50, 5), (100, 0)];

/// What the staged rollout took and wrote.
pub struct RolloutRun {
    /// Edit to each step's share of the Services relabelled (incl. the reload debounce).
    pub steps: Vec<(u32, Duration)>,
    /// Writes from the edit to write quiet after the last step.
    pub staged: Counts,
    /// The same for the next edit once the rule has no rollout (one unstaged reload).
    pub unstaged: Counts,
    /// VmRSS just before the edit.
    pub rss_before_kb: Option<u64>,
    /// Peak VmRSS while the rollout lasted (the rule set it replaced still loaded).
    pub rss_peak_kb: Option<u64>,
}

/// Runs the phase over the N converged parents in `ns`.
pub async fn rollout(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    ns: &str,
    n: usize,
) -> Result<(RolloutRun, Option<String>)> {
    let state = &ctx.settings.state;
    let (rules, templates) = (state.join("rules-rollout"), state.join("templates-rollout"));
    for (from, to) in [("rules", &rules), ("templates", &templates)] {
        let _ = std::fs::remove_dir_all(to);
        copy_tree(&ctx.settings.root.join(from), to)?;
    }
    let database = rules.join("database.yaml");
    let shipped = std::fs::read_to_string(&database)?;
    let mut policy = String::from("  rollout:\n    steps:\n");
    for (percent, pause) in STEPS {
        policy.push_str(&match pause {
            0 => format!("      - {{percent: {percent}}}\n"),
            s => format!("      - {{percent: {percent}, pause: {s}s}}\n"),
        });
    }
    std::fs::write(&database, format!("{shipped}{policy}"))?;
    let setup = Setup {
        rules: Some(rules.clone()),
        templates: Some(templates.clone()),
        ..Setup::default()
    };
    let op = started_and_settled(ctx, contender, ns, n, &setup).await?;
    let timeout = ctx.settings.converge_timeout(n);

    let rss_before_kb = op.proc_status("VmRSS");
    let sampler = RssSampler::start(op.pid);
    let before = apiserver_writes(&ctx.client).await?;
    let service = templates.join("database/service.yaml.j2");
    relabel(
        &service,
        "    app: {{ metadata.name }}\n",
        "    app: {{ metadata.name }}\n    rollout: \"staged\"\n",
    )?;
    let start = Instant::now();
    let mut steps = Vec::new();
    for (percent, _) in STEPS {
        let count = (n * percent as usize).div_ceil(100);
        wait_labelled::<Service>(&ctx.client, ns, "rollout=staged", count, timeout).await?;
        steps.push((percent, start.elapsed()));
        eprintln!(
            "   staged rollout: {count} of {n} Services ({percent}%) at {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }
    let after = settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(60)).await?;
    let rss_peak_kb = Some(sampler.stop());
    let staged = diff(&after, &before);

    // The rule without its rollout (a reload of its own, settled), then the next edit, unstaged.
    std::fs::write(&database, &shipped)?;
    let before = settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(60)).await?;
    relabel(&service, "    rollout: \"staged\"\n", "    rollout: \"unstaged\"\n")?;
    wait_labelled::<Service>(&ctx.client, ns, "rollout=unstaged", n, timeout).await?;
    let after = settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(60)).await?;
    let unstaged = diff(&after, &before);
    let note = op.stop("rollout").await;
    let run = RolloutRun {
        steps,
        staged,
        unstaged,
        rss_before_kb,
        rss_peak_kb,
    };
    Ok((run, note))
}

/// Replaces `from` by `to` in the template at `path`: written aside, then renamed over, as an
/// editor or the kubelet would.
fn relabel(path: &std::path::Path, from: &str, to: &str) -> Result<()> {
    let text = std::fs::read_to_string(path)?;
    let edited = text.replacen(from, to, 1);
    ensure!(edited != text, "{} has no {from:?} to edit", path.display());
    let aside = path.with_extension("j2.tmp");
    std::fs::write(&aside, edited)?;
    std::fs::rename(&aside, path)?;
    Ok(())
}
