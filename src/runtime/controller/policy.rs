//! When a parent is reconciled again: backoff after failures, short retries after conflicts and
//! fenced writes, and resyncs spread by jitter. Every requeue goes through [`requeue`], so the
//! trigger a reconcile reports (`resync`, `retry`, `requeue`) always matches what was asked.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::debug;

use crate::apply::ApplyError;
use crate::runtime::housekeeping::ParentMemory;
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

/// When, and why, a parent whose plan applied runs again: at its (jittered) `resync`, or sooner:
/// a moment after actions ran, when its plan waits for something (`retry`), or when its drift
/// budget allows the repair it held back (`drift_wait`).
pub(super) fn after_success(
    resync: Duration,
    actions_ran: bool,
    drift_wait: Option<Duration>,
    retry: Option<Duration>,
) -> (Duration, Trigger) {
    let mut next = if actions_ran { AFTER_ACTIONS } else { resync };
    if let Some(wait) = drift_wait {
        next = next.min(wait);
    }
    let after = retry.map_or(next, |retry| retry.min(next));
    let trigger = if after == resync {
        Trigger::Resync
    } else {
        Trigger::Requeue
    };
    (after, trigger)
}

/// `period` plus up to 10% spread by parent and time, so N parents do not resync in one burst.
pub(super) fn jittered(period: Duration, uid: &str) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut hasher);
    std::time::SystemTime::now().hash(&mut hasher);
    let spread = period.as_millis() as u64 / 10;
    period + Duration::from_millis(if spread == 0 { 0 } else { hasher.finish() % spread })
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
    fn jitter_adds_at_most_a_tenth_of_the_period() {
        let period = Duration::from_secs(60);
        for uid in ["a", "b", "c", "0d6f-uid"] {
            let jittered = jittered(period, uid);
            assert!(jittered >= period && jittered < period + period / 10, "{jittered:?}");
        }
    }

    #[test]
    fn a_period_too_short_to_spread_is_kept() {
        assert_eq!(jittered(Duration::from_millis(9), "a"), Duration::from_millis(9));
        assert_eq!(jittered(Duration::ZERO, "a"), Duration::ZERO);
    }

    #[test]
    fn a_quiet_parent_waits_for_its_resync() {
        let resync = Duration::from_secs(300);
        assert_eq!(after_success(resync, false, None, None), (resync, Trigger::Resync));
    }

    #[test]
    fn actions_that_ran_bring_the_parent_back_in_a_second() {
        let resync = Duration::from_secs(300);
        assert_eq!(
            after_success(resync, true, None, None),
            (AFTER_ACTIONS, Trigger::Requeue)
        );
    }

    #[test]
    fn the_earliest_of_a_plan_wait_and_a_held_back_drift_repair_wins() {
        let resync = Duration::from_secs(300);
        let (drift, wait) = (Duration::from_secs(20), Duration::from_secs(7));
        assert_eq!(
            after_success(resync, false, Some(drift), Some(wait)),
            (wait, Trigger::Requeue)
        );
        assert_eq!(
            after_success(resync, false, Some(wait), Some(drift)),
            (wait, Trigger::Requeue)
        );
        assert_eq!(
            after_success(resync, true, None, Some(drift)),
            (AFTER_ACTIONS, Trigger::Requeue)
        );
    }

    #[test]
    fn a_wait_later_than_the_resync_leaves_the_resync() {
        let resync = Duration::from_secs(30);
        let later = Some(Duration::from_secs(3600));
        assert_eq!(after_success(resync, false, later, later), (resync, Trigger::Resync));
    }
}
