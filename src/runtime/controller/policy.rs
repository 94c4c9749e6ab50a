//! When a parent is reconciled again: backoff after failures, short retries after conflicts and
//! fenced writes, and resyncs spread by jitter.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use tracing::debug;

use crate::apply::ApplyError;
use crate::runtime::housekeeping::ParentMemory;
use crate::runtime::queue::Trigger;

use super::{ReconcileError, RuleContext, parent_key};

/// Longest wait between retries of a failing parent.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

pub(super) fn error_policy(parent: Arc<DynamicObject>, error: &ReconcileError, ctx: Arc<RuleContext>) -> Action {
    if matches!(error, ReconcileError::Apply(ApplyError::Conflict(_))) {
        let after = Duration::from_millis(200);
        ctx.triggers.schedule(parent_key(&parent), after, Trigger::Retry);
        return Action::requeue(after);
    }
    // A write the lease fence refused: a renewal running late (the fence reopens when it lands)
    // or the lease lost (the next reconcile skips the parent). Neither is the parent's failure.
    if crate::ha::leader::is_fenced(error) {
        let after = Duration::from_millis(500);
        ctx.triggers.schedule(parent_key(&parent), after, Trigger::Retry);
        return Action::requeue(after);
    }
    let uid = parent.uid().unwrap_or_default();
    let failures = ctx.failures.lock().map_or(1, |mut failures| {
        let count = failures.entry(uid).or_insert(0);
        *count += 1;
        *count
    });
    ParentMemory {
        failures: ctx.failures.clone(),
        written: ctx.written.clone(),
        drift: ctx.drift.clone(),
    }
    .publish(&ctx.shared.observability, &ctx.rule_name);
    let delay = Duration::from_millis(500)
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_BACKOFF);
    debug!(parent = %parent.name_any(), reason = error.reason(), ?delay, "backing off");
    ctx.triggers.schedule(parent_key(&parent), delay, Trigger::Retry);
    Action::requeue(delay)
}

/// `period` plus up to 10% spread by parent and time, so N parents do not resync in one burst.
pub(super) fn jittered(period: Duration, uid: &str) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut hasher);
    std::time::SystemTime::now().hash(&mut hasher);
    let spread = period.as_millis() as u64 / 10;
    period + Duration::from_millis(if spread == 0 { 0 } else { hasher.finish() % spread })
}
