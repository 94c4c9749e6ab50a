//! Applying one plan, in its order: the finalizer before any label-owned child, the children
//! side by side (drift repairs held while a fight's budget is spent), prune and release, the parent's own
//! metadata, actions, the status write last, then the finalizer's removal; and reporting a
//! failed reconcile on the parent.

use kube::runtime::events::EventType;
use serde_json::Value;
use tracing::{debug, warn};

use super::children::{self, ChildOutcome, apply_child, delete, with_desired_hash};
use super::{ApplyError, Cluster, ParentHandle, actions, api_error, cleanup, drift_limit, events};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::children::ObjectRef as ChildRef;
use crate::engine::plan::deletion::FinalizerStep;
use crate::engine::plan::{self, Plan};
use crate::engine::rules::Rule;

/// Applies a plan: children, prune, actions, then status. Returns whether an action's run was
/// recorded (its status writes supersede the plan's status patch, which the next reconcile
/// recomputes); a request still in flight queues the parent itself when it is answered.
pub(crate) async fn apply_plan(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    rule: &Rule,
    plan: Plan,
    mut parent: Value,
    observed: &[Value],
    now: &str,
) -> Result<bool, ApplyError> {
    // Before the first label-owned child exists: nothing may outlive an untracked parent.
    if plan.finalizer == FinalizerStep::Add {
        cleanup::set_finalizer(cluster, handle, &mut parent, FinalizerStep::Add).await?;
    }
    let lives: Vec<Option<&Value>> = plan
        .children
        .iter()
        .map(|child| {
            observed
                .iter()
                .find(|o| ChildRef::of(o).as_ref() == Some(&child.target))
        })
        .collect();
    // Each child as it is sent: the rendered object stamped with its digest, made once.
    let stamped: Vec<Value> = plan.children.iter().map(with_desired_hash).collect();
    let hold = hold_drift_repairs(cluster, handle, &plan, &stamped, &lives);
    // Children are independent: apply them side by side, one round trip instead of one each.
    let applied = futures::future::join_all(plan.children.iter().zip(&stamped).zip(&lives).zip(&hold).map(
        |(((child, desired), live), hold)| async move {
            if *hold {
                return Ok(ChildOutcome::Unchanged);
            }
            apply_child(cluster, child, desired, *live).await
        },
    ))
    .await;
    // One Event for the whole reconcile, sent whether or not a later step fails (what was
    // done stays done), after the writes it reports.
    let mut summary = events::Summary::default();
    let result = apply_plan_steps(cluster, handle, rule, plan, &mut parent, applied, now, &mut summary).await;
    summary.publish(cluster, handle);
    result
}

/// [`apply_plan`] after the children's applies, noting every change in `summary`.
#[allow(clippy::too_many_arguments)]
async fn apply_plan_steps(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    rule: &Rule,
    plan: Plan,
    parent: &mut Value,
    applied: Vec<Result<ChildOutcome, ApplyError>>,
    now: &str,
    summary: &mut events::Summary,
) -> Result<bool, ApplyError> {
    let mut child_error = None;
    // Whether this reconcile changes the parent's children: then it records its revision.
    let mut changed = !plan.prune.is_empty() || !plan.release.is_empty();
    for (child, result) in plan.children.iter().zip(applied) {
        match result {
            Ok(outcome) => {
                changed |= outcome != ChildOutcome::Unchanged;
                summary.child(&child.target, &outcome);
            }
            // Other children still converge; the first failure is reported after them.
            Err(e) => {
                child_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = child_error {
        return Err(e);
    }
    for target in &plan.prune {
        delete(cluster, target).await?;
        if let Some(uid) = &handle.reference.uid {
            cluster.written.record_child(uid, target, None);
        }
        summary.deleted(target);
    }
    for release in &plan.release {
        children::release(cluster, release).await?;
        if let Some(uid) = &handle.reference.uid {
            cluster.written.record_child(uid, &release.target, None);
        }
        summary.released(&release.target);
    }
    debug!(parent = %handle.name, "children applied");
    if let Some(apply) = &plan.parent_metadata {
        cluster.apply_parent_metadata(handle, apply).await?;
    }
    let runs: Vec<_> = plan
        .actions
        .iter()
        .filter(|d| d.run)
        .filter_map(|d| Some((d, rule.spec.actions.iter().find(|a| a.id.value == d.id)?)))
        .collect();
    // Whether a recorded run also wrote the plan's status (the last one does, see `finish`).
    let (mut first_error, mut recorded, mut status_written) = (None, false, false);
    for (i, (decision, spec)) in runs.iter().enumerate() {
        debug!(parent = %handle.name, action = %decision.id, reason = %decision.reason, "running action");
        let finish = (i + 1 == runs.len() && first_error.is_none()).then_some(&plan.status);
        let result = actions::run(cluster, handle, parent, spec, decision, finish, now).await;
        if matches!(result, Ok(actions::Acted::InFlight)) {
            // Its answer queues the parent; that reconcile records and counts the run.
            continue;
        }
        recorded = true;
        status_written |= finish.is_some() && result.is_ok();
        cluster
            .observability
            .metrics
            .action_ran(&rule.name, &decision.id, result.is_ok());
        if matches!(result, Ok(actions::Acted::Now)) && decision.skipped_slots > 0 {
            cluster
                .observability
                .metrics
                .slots_skipped(&rule.name, &decision.id, decision.skipped_slots);
        }
        match result {
            // Only a run that acted now is news; an object that already existed was reported
            // by the reconcile that created it.
            Ok(actions::Acted::Now) => summary.ran(decision),
            Ok(actions::Acted::Before | actions::Acted::InFlight) => {}
            Err(e) => {
                if !matches!(e, ApplyError::Conflict(_)) {
                    // A Warning of its own; the same error again joins its series.
                    events::publish(cluster, handle, None, EventType::Warning, e.reason(), e.to_string());
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Changed children with an unchanged status: the revision that changed them is recorded.
    let status_patch = match &plan.status_patch {
        Some(patch) => Some(patch.clone()),
        None if changed => plan.status.revision_patch(parent),
        None => None,
    };
    if !status_written && let Some(patch) = &status_patch {
        crate::apply::status_write::write_status(cluster, handle, parent, patch, now)
            .await
            .map_err(|e| ApplyError::Status(Box::new(e)))?;
    }
    let timed_out = plan.deletion.iter().flat_map(|d| {
        let actions = d.timed_out.iter().map(|m| ("DeleteActionTimedOut", m));
        actions.chain(d.finalize_timed_out.iter().map(|m| ("FinalizeTimedOut", m)))
    });
    for (reason, message) in timed_out {
        events::publish(cluster, handle, None, EventType::Warning, reason, message.clone());
    }
    // The conditions are written: a transition the rule asks to hear of (`warnOn`).
    for warning in &plan.warnings {
        let note = format!("{}: {}", warning.type_, warning.message);
        events::publish(cluster, handle, None, EventType::Warning, &warning.reason, note);
    }
    // Last: every cleanup delete above succeeded and no action is outstanding.
    if plan.finalizer == FinalizerStep::Remove && runs.is_empty() {
        cleanup::set_finalizer(cluster, handle, parent, FinalizerStep::Remove).await?;
        debug!(parent = %handle.name, "finalizer removed; the deletion completes");
    }
    Ok(recorded)
}

/// Which children's drift repairs wait for the parent's budget (a fight with another writer):
/// when any child drifted and the budget is spent, every drifted child waits; the first time in
/// a fight it is reported.
fn hold_drift_repairs(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    plan: &Plan,
    stamped: &[Value],
    lives: &[Option<&Value>],
) -> Vec<bool> {
    let drifted: Vec<bool> = plan
        .children
        .iter()
        .zip(stamped)
        .zip(lives)
        .map(|((child, desired), live)| {
            child.update.is_apply() && live.is_some_and(|live| drift_limit::is_drift(desired, live))
        })
        .collect();
    let Some(first) = drifted.iter().position(|d| *d) else {
        return drifted.iter().map(|_| false).collect();
    };
    let uid = handle.reference.uid.clone().unwrap_or_default();
    match cluster.drift.decide(&uid, std::time::Instant::now()) {
        drift_limit::Decision::Repair => drifted.iter().map(|_| false).collect(),
        drift_limit::Decision::Wait { wait, report } => {
            debug!(parent = %handle.name, ?wait, "drift repair deferred: the parent's budget is spent");
            cluster
                .observability
                .metrics
                .drift_repair_deferred(plan.children[first].target.kind.as_str());
            if report {
                drift_limit::report_fight(cluster, handle, &plan.children[first].target);
            }
            drifted
        }
    }
}

/// Writes `Ready=False` with the reason (only when that changes the status) and an Event then;
/// for a rule that writes no status, the Event alone (repeats join its series).
pub(crate) async fn report_failure(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    rule: &Rule,
    parent: &Value,
    reason: &str,
    message: &str,
    now: &str,
) {
    let message = bounded(message, MESSAGE_LIMIT);
    // Not `message`: JSON logs would put it under the same key as the log line's own message.
    warn!(parent = %handle.name, reason, error = %message, "reconcile failed");
    if !rule.writes_status() {
        events::publish(cluster, handle, None, EventType::Warning, reason, message.into_owned());
        return;
    }
    let Some(patch) = plan::failure_status_patch(parent, reason, &message, now) else {
        return;
    };
    if let Err(e) = cluster.patch_status(handle, parent, &patch).await {
        warn!(parent = %handle.name, error = %api_error::describe(&e), "writing the failure status failed");
    }
    events::publish(cluster, handle, None, EventType::Warning, reason, message.into_owned());
}
