//! The report as JSON (bench/results/*.json): every figure of the Markdown, and the convergence
//! curve (at most 200 points per run).

use serde_json::{Value, json};

use super::{Report, bytes_per_object, cpu_per_1000};
use crate::convergence::process::WindowCpu;
use crate::convergence::writes::{Counts, conflicts, total};

fn counts(c: &Counts) -> Value {
    c.iter()
        .map(|((verb, res), v)| json!({"verb": verb, "resource": res, "count": v}))
        .collect()
}

fn window_cpu(cpu: &WindowCpu) -> Value {
    json!({
        "operator_s": cpu.operator_s,
        "apiserver_s": cpu.apiserver_s,
        "available_s": cpu.available_s,
    })
}

/// At most `max` points of a sorted curve, evenly spaced by rank, the last one always kept.
pub fn thin(curve: &[f64], max: usize) -> Vec<(usize, f64)> {
    let step = curve.len().div_ceil(max.max(1)).max(1);
    let mut points: Vec<(usize, f64)> = curve
        .iter()
        .enumerate()
        .filter(|(i, _)| (i + 1) % step == 0)
        .map(|(i, t)| (i + 1, *t))
        .collect();
    if let Some(&last) = curve.last()
        && points.last().map(|p| p.0) != Some(curve.len())
    {
        points.push((curve.len(), last));
    }
    points
}

pub fn report(r: &Report<'_>) -> Value {
    let i = &r.info;
    let runs: Vec<Value> = r
        .runs
        .iter()
        .map(|x| {
            json!({
                "contender": x.contender,
                "n": x.n,
                "error": x.error,
                "skipped": x.skipped,
                "notes": x.notes,
                "convergence_s": x.converge.as_secs_f64(),
                "latency_ms": {"p50": x.p50_ms, "p99": x.p99_ms, "max": x.max_ms},
                "converged_over_time": thin(&x.curve, 200)
                    .into_iter()
                    .map(|(k, t)| json!([t, k]))
                    .collect::<Vec<_>>(),
                "writes_convergence": counts(&x.writes_converge),
                "writes_convergence_total": total(&x.writes_converge),
                "conflicts_convergence": conflicts(&x.writes_converge),
                "cpu_s": {"convergence": x.cpu_converge_s, "per_1000_parents": cpu_per_1000(x),
                          "startup_to_all_reconciled": x.startup.as_ref().and_then(|s| s.cpu_s)},
                "rss_kb": {"empty": x.rss_empty_kb, "peak_vmhwm": x.rss_peak_kb, "steady": x.rss_steady_kb,
                    "anon_empty": x.rss_anon_empty_kb, "anon_steady": x.rss_anon_steady_kb},
                "bytes_per_object": bytes_per_object(x),
                "objects_per_parent": x.objects_per_parent,
                "startup": x.startup.as_ref().map(|s| json!({
                    "ready_ms": s.ready.as_secs_f64() * 1e3,
                    "first_reconcile_ms": s.first.as_secs_f64() * 1e3,
                    "all_reconciled_ms": s.all.as_secs_f64() * 1e3,
                    "rss_kb_after": s.rss_kb,
                    "writes": counts(&s.writes),
                })),
                "resync": x.resync.as_ref().map(|s| json!({
                    "reconciles": s.reconciles,
                    "seconds": s.took.as_secs_f64(),
                    "writes": counts(&s.writes),
                    "writes_total": total(&s.writes),
                    "writes_restart_until_n_reconciled": counts(&s.writes_restart),
                })),
                "reload_s": x.reload.map(|d| d.as_secs_f64()),
                "reload_floor_s": x.reload_floor.map(|(d, _)| d.as_secs_f64()),
                "reload_floor_cpu": x.reload_floor.map(|(_, cpu)| window_cpu(&cpu)),
                "reload_work": x.reload_work.as_ref().map(|w| json!({
                    "cpu_s": w.cpu_s,
                    "cpu_to_updated": window_cpu(&w.cpu_to_updated),
                    "reconciles_by_trigger": w.triggers,
                    "writes": counts(&w.writes),
                })),
                "reload_sweep": x.reload_sweep.iter().map(|(in_flight, took)| json!({
                    "reload_concurrency": in_flight,
                    "seconds": took.as_secs_f64(),
                })).collect::<Vec<_>>(),
                "reconciles_by_trigger_converge": x.triggers_converge,
                "rollout": x.rollout.as_ref().map(|r| json!({
                    "steps": r.steps.iter().map(|(percent, at)| json!({
                        "percent": percent,
                        "seconds_from_edit": at.as_secs_f64(),
                    })).collect::<Vec<_>>(),
                    "writes_staged": counts(&r.staged),
                    "writes_staged_total": total(&r.staged),
                    "writes_unstaged": counts(&r.unstaged),
                    "writes_unstaged_total": total(&r.unstaged),
                    "rss_kb_before": r.rss_before_kb,
                    "rss_kb_peak_during": r.rss_peak_kb,
                })),
                "fairness": x.fairness.as_ref().map(|f| json!({
                    "quiet_parent_s": f.quiet.as_secs_f64(),
                    "busy_namespace_all_s": f.busy_all.as_secs_f64(),
                })),
            })
        })
        .collect();
    json!({
        "date": i.date,
        "machine": {"nproc": i.nproc, "memory_gib": i.memory_gib, "cpu": i.cpu,
                    "loadavg_at_start": i.loadavg, "loadavg_at_end": i.loadavg_end},
        "versions": {"ruleop": i.rev, "rustc": i.rustc, "kubernetes": i.k8s, "peers": i.peers},
        "n": r.settings.ns,
        "contenders": r.settings.contenders.iter().map(|c| c.name()).collect::<Vec<_>>(),
        "in_flight": r.settings.in_flight,
        "floor_concurrency": r.settings.floor_concurrency,
        "resync": r.settings.resync,
        "render_plans_per_s": r.plan,
        "runs": runs,
    })
}
