//! When a parent is reconciled again sooner than its resync (which the rule's resync wheel
//! brings, [`super::resync`]): backoff after failures, short retries after conflicts and fenced
//! writes, follow-ups a plan asks for. Every requeue goes through [`requeue`], so the trigger a
//! reconcile reports (`retry`, `requeue`) always matches what was asked.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::debug;

use super::housekeeping::ParentMemory;
use crate::apply::ApplyError;
use crate::runtime::queue::Trigger;

use super::{Failures, ReconcileError, RuleContext, parent_key};

/// Longest wait between retries of a failing parent: a parent whose circuit is open is tried
/// this often.
const MAX_BACKOFF: Duration = super::circuit::COOLDOWN;
/// The backoff's unit: the first retry of a failing parent waits twice this.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Wait before retrying a write conflict: a stale cache, which the watch fixes in milliseconds.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);
/// Wait before retrying a write the lease fence refused.
const FENCED_RETRY: Duration = Duration::from_millis(500);
/// Wait before the next reconcile after actions ran, to read what they did.
const AFTER_ACTIONS: Duration = Duration::from_secs(1);

/// Has kube-runtime run `parent` again after `after`, and records `trigger` as the reason.
pub(super) fn requeue(ctx: &RuleContext, parent: &DynamicObject, after: Duration, trigger: Trigger) -> Action {
    ctx.triggers.schedule(parent_key(parent), after, trigger);
    Action::requeue(after)
}

pub(super) fn error_policy(parent: Arc<DynamicObject>, error: &ReconcileError, ctx: Arc<RuleContext>) -> Action {
    if matches!(error, ReconcileError::Apply(ApplyError::Conflict(_))) {
        return requeue(&ctx, &parent, CONFLICT_RETRY, Trigger::Retry);
    }
    // A write the lease fence refused: a renewal running late (the fence reopens when it lands)
    // or the lease lost (the next reconcile skips the parent). Neither is the parent's failure.
    if crate::ha::leader::is_fenced(error) {
        return requeue(&ctx, &parent, FENCED_RETRY, Trigger::Retry);
    }
    let uid = parent.uid().unwrap_or_default();
    let now = std::time::Instant::now();
    let failures = ctx.failures.lock().map_or(1, |mut failures| {
        let entry = failures.entry(uid).or_insert(Failures {
            count: 0,
            retry_at: now,
            generation: 0,
        });
        entry.count = entry.count.saturating_add(1);
        entry.retry_at = now + backoff(entry.count);
        entry.generation = parent.meta().generation.unwrap_or_default();
        entry.count
    });
    if ctx.shared.circuit.0 == failures {
        ctx.shared.observability.metrics.circuit_opened(&ctx.rule_name);
    }
    ParentMemory {
        failures: ctx.failures.clone(),
        written: ctx.written.clone(),
        drift: ctx.drift.clone(),
    }
    .publish(&ctx.shared.observability, &ctx.rule_name);
    let delay = backoff(failures);
    debug!(parent = %parent.name_any(), reason = error.reason(), ?delay, "backing off");
    requeue(&ctx, &parent, delay, Trigger::Retry)
}

/// The wait after `failures` failed reconciles in a row: [`BACKOFF_BASE`] doubled per failure,
/// at most [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_BACKOFF)
}

/// When a parent whose plan applied runs again before its resync: a moment after actions ran,
/// when its plan waits for something (`retry`), or when its drift budget allows the repair it
/// held back (`drift_wait`); the earliest of those. `None` when none comes before `resync`: the
/// resync wheel brings it back, and kube-runtime holds nothing for it until then.
pub(super) fn after_success(
    resync: Duration,
    actions_ran: bool,
    drift_wait: Option<Duration>,
    retry: Option<Duration>,
) -> Option<Duration> {
    [actions_ran.then_some(AFTER_ACTIONS), drift_wait, retry]
        .into_iter()
        .flatten()
        .min()
        .filter(|after| *after < resync)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_from_one_second_and_stops_at_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(9), Duration::from_secs(256));
        assert_eq!(backoff(10), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn a_quiet_parent_waits_for_its_resync() {
        let resync = Duration::from_secs(300);
        assert_eq!(after_success(resync, false, None, None), None);
    }

    #[test]
    fn actions_that_ran_bring_the_parent_back_in_a_second() {
        let resync = Duration::from_secs(300);
        assert_eq!(after_success(resync, true, None, None), Some(AFTER_ACTIONS));
    }

    #[test]
    fn the_earliest_of_a_plan_wait_and_a_held_back_drift_repair_wins() {
        let resync = Duration::from_secs(300);
        let (drift, wait) = (Duration::from_secs(20), Duration::from_secs(7));
        assert_eq!(after_success(resync, false, Some(drift), Some(wait)), Some(wait));
        assert_eq!(after_success(resync, false, Some(wait), Some(drift)), Some(wait));
        assert_eq!(after_success(resync, true, None, Some(drift)), Some(AFTER_ACTIONS));
    }

    #[test]
    fn a_wait_later_than_the_resync_leaves_the_resync() {
        let resync = Duration::from_secs(30);
        let later = Some(Duration::from_secs(3600));
        assert_eq!(after_success(resync, false, later, later), None);
    }
}
