//! ruleop's fairness phase: one namespace creates N parents while another creates one, halfway
//! through; how long the quiet namespace's parent takes to converge (target: under 2 s).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, ListParams};
use tokio::sync::mpsc;

use crate::convergence::contenders::{Contender, Setup};
use crate::convergence::observer::Observer;
use crate::convergence::parents::{create_namespace, create_parents, delete_namespace, release_finalizers};
use crate::convergence::phases::Ctx;
use crate::convergence::process::Operator;

/// The quiet parent against the busy namespace's burst.
#[derive(Default)]
pub struct Fairness {
    /// The quiet parent: create to converged.
    pub quiet: Duration,
    /// The busy namespace: first create to its last parent converged.
    pub busy_all: Duration,
}

/// Runs the phase in two fresh namespaces (deleted afterwards), with the contender watching
/// every namespace.
pub async fn fairness(ctx: &Ctx<'_>, contender: &'static dyn Contender, n: usize) -> Result<(Fairness, Vec<String>)> {
    let busy = format!("bench-fair-busy-{n}");
    let quiet = format!("bench-fair-quiet-{n}");
    create_namespace(&ctx.client, &busy).await?;
    create_namespace(&ctx.client, &quiet).await?;
    let measured = measure(ctx, contender, n, &busy, &quiet).await;
    let mut notes = Vec::new();
    for ns in [&busy, &quiet] {
        if let Err(e) = release_finalizers(&ctx.client, contender.parent(), ns).await {
            notes.push(format!("releasing finalizers in {ns}: {e:#}"));
        }
        if let Err(e) = delete_namespace(&ctx.client, ns, n).await {
            notes.push(format!("namespace deletion: {e:#}"));
        }
    }
    let (fairness, note) = measured?;
    notes.extend(note);
    Ok((fairness, notes))
}

async fn measure(
    ctx: &Ctx<'_>,
    contender: &'static dyn Contender,
    n: usize,
    busy: &str,
    quiet: &str,
) -> Result<(Fairness, Option<String>)> {
    let setup = Setup {
        all_namespaces: true,
        ..Setup::default()
    };
    let kind = contender.parent();
    // The parents other phases left (the converged namespace of this N) are reconciled once at
    // start-up; the burst starts after those, with the queue empty and the API server's writes
    // still (a phase before may have left children or status this process's rules write back,
    // each write queueing its parent once more).
    let existing = Api::<DynamicObject>::all_with(ctx.client.clone(), &kind.resource())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let timeout = ctx.settings.converge_timeout(n + existing);
    let mut op = Operator::start(ctx, contender, busy, &setup)?;
    op.wait_ready(Duration::from_secs(90)).await?;
    op.wait_reconciles(existing as u64, timeout).await?;
    crate::convergence::writes::settle(&ctx.client, Duration::from_secs(3), Duration::from_secs(120)).await?;
    let busy_seen = Observer::start(&ctx.client, busy, contender).await?;
    let quiet_seen = Observer::start(&ctx.client, quiet, contender).await?;
    let (handover, mut created) = mpsc::unbounded_channel();
    let start = Instant::now();
    let burst = create_parents(&ctx.client, kind, busy, n, ctx.settings.in_flight, Some(handover));
    let quiet_created = async {
        // Halfway through the burst, when the busy namespace's backlog is largest.
        let mut count = 0;
        while created.recv().await.is_some() {
            count += 1;
            if count >= n / 2 {
                break;
            }
        }
        drop(created);
        create_parents(&ctx.client, kind, quiet, 1, 1, None).await
    };
    let (burst, quiet_created) = tokio::join!(burst, quiet_created);
    burst?;
    let quiet_sent = quiet_created?
        .into_values()
        .next()
        .context("the quiet parent was not created")?;
    let mut alive = || op.exited();
    let quiet_done = quiet_seen.wait_all(1, quiet_sent, timeout, &mut alive).await?;
    let busy_done = busy_seen.wait_all(n, start, timeout, &mut alive).await?;
    let fairness = Fairness {
        quiet: quiet_done.values().max().copied().unwrap_or(quiet_sent) - quiet_sent,
        busy_all: busy_done.values().max().copied().unwrap_or(start) - start,
    };
    Ok((fairness, op.stop("fairness").await))
}
