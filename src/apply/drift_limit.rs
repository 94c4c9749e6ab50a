//! Rate limit on drift repairs per parent: when another writer keeps changing a field ruleop
//! owns, ruleop keeps correcting it, but at most [`BURST`] repairs at once and then one per
//! [`REFILL`] (a token bucket per parent), and it reports the fight once per episode with an
//! Event naming the other field manager.
//!
//! Without it each change by the other writer costs one apply or more (a fight over a Service
//! port costs a failed apply, a merge patch and an apply), as fast as the other writer goes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::events::EventType;
use serde_json::Value;
use tracing::warn;

use super::{Cluster, FIELD_MANAGER, ParentHandle, compare};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::children::ANNOTATION_DESIRED_HASH;
use crate::engine::plan::children::ObjectRef;

/// Repairs allowed at once.
pub(crate) const BURST: u32 = 3;
/// Time to earn one more repair.
pub(crate) const REFILL: Duration = Duration::from_secs(5);

/// Whether `live` drifted from `desired` (both with the desired-hash annotation): it carries the
/// annotation of what we want now, so we applied this very object before, yet it no longer holds
/// every field we render. A changed template is not drift (the annotation differs).
pub(crate) fn is_drift(desired: &Value, live: &Value) -> bool {
    let hash = |v: &Value| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(ANNOTATION_DESIRED_HASH))
            .cloned()
    };
    hash(live).is_some() && hash(live) == hash(desired) && !compare::covers(live, desired)
}

#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    updated: Instant,
    /// Whether this fight has been reported (until the bucket fills up again).
    reported: bool,
}

/// What the limiter decided about one repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Repair now.
    Repair,
    /// Wait this long; `report` is true the first time in a fight.
    Wait {
        /// Until a repair is allowed.
        wait: Duration,
        /// Whether to report the fight now.
        report: bool,
    },
}

/// Token buckets by parent UID.
#[derive(Debug, Default)]
pub(crate) struct DriftLimiter(Mutex<HashMap<String, Bucket>>);

impl DriftLimiter {
    /// Asks to repair drift on the children of parent `uid` at `now`.
    pub(crate) fn decide(&self, uid: &str, now: Instant) -> Decision {
        let Ok(mut buckets) = self.0.lock() else {
            return Decision::Repair;
        };
        let bucket = buckets.entry(uid.to_owned()).or_insert(Bucket {
            tokens: f64::from(BURST),
            updated: now,
            reported: false,
        });
        refill(bucket, now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Decision::Repair;
        }
        let wait = REFILL.mul_f64(1.0 - bucket.tokens);
        let report = !bucket.reported;
        bucket.reported = true;
        Decision::Wait { wait, report }
    }

    /// How long until parent `uid` may repair again, if it is waiting.
    pub(crate) fn wait(&self, uid: &str, now: Instant) -> Option<Duration> {
        let mut buckets = self.0.lock().ok()?;
        let bucket = buckets.get_mut(uid)?;
        refill(bucket, now);
        (bucket.tokens < 1.0).then(|| REFILL.mul_f64(1.0 - bucket.tokens))
    }

    /// Drops parents whose buckets are full again: they are not fighting (keeps the map small).
    pub(crate) fn forget_settled(&self, now: Instant) {
        if let Ok(mut buckets) = self.0.lock() {
            buckets.retain(|_, bucket| {
                refill(bucket, now);
                bucket.tokens < f64::from(BURST)
            });
        }
    }

    /// Forgets one parent (it was deleted).
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut buckets) = self.0.lock() {
            buckets.remove(uid);
        }
    }

    /// Keeps only these parents (the others are gone).
    pub(crate) fn retain(&self, live: &std::collections::HashSet<String>) {
        if let Ok(mut buckets) = self.0.lock() {
            buckets.retain(|uid, _| live.contains(uid));
        }
    }

    /// Parents remembered.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().map_or(0, |buckets| buckets.len())
    }

    /// Whether no parent is remembered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn refill(bucket: &mut Bucket, now: Instant) {
    let earned = now.saturating_duration_since(bucket.updated).as_secs_f64() / REFILL.as_secs_f64();
    bucket.tokens = (bucket.tokens + earned).min(f64::from(BURST));
    bucket.updated = now;
    if bucket.tokens >= f64::from(BURST) {
        bucket.reported = false;
    }
}

/// Reports a fight over `target`: reads its managedFields (the caches drop them) and publishes
/// a Warning Event on the parent naming the other field managers, most recent first.
pub(crate) fn report_fight(cluster: &Cluster<'_>, parent: &ParentHandle, target: &ObjectRef) {
    let api = match cluster.api(&target.api_version, &target.kind, &target.namespace) {
        Ok(api) => api,
        Err(e) => {
            warn!(error = %e, "cannot report a drift fight");
            return;
        }
    };
    let name = target.name.clone();
    let (recorder_cluster, handle_name) = (cluster.recorder.clone(), parent.name.clone());
    let reference = parent.reference.clone();
    let target = target.clone();
    cluster.count_write("POST", "Event");
    tokio::spawn(async move {
        let managers = match api.get(&name).await {
            Ok(object) => other_managers(&object.metadata.managed_fields.unwrap_or_default()),
            Err(e) => {
                warn!(parent = %handle_name, error = %bounded(&e.to_string(), MESSAGE_LIMIT), "reading a fought-over child failed");
                Vec::new()
            }
        };
        let who = if managers.is_empty() {
            "another writer".to_owned()
        } else {
            format!(
                "field manager {}",
                managers.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(", ")
            )
        };
        let note = format!(
            "{target}: {who} keeps changing fields ruleop owns; ruleop keeps correcting them, at most {BURST} at once and then one every {}s",
            REFILL.as_secs()
        );
        warn!(parent = %handle_name, %note, "drift fight");
        let event = kube::runtime::events::Event {
            type_: EventType::Warning,
            reason: "DriftFight".to_owned(),
            note: Some(bounded(&note, 960).into_owned()),
            action: "Reconcile".to_owned(),
            secondary: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(target.api_version.clone()),
                kind: Some(target.kind.clone()),
                name: Some(target.name.clone()),
                namespace: Some(target.namespace.clone()),
                ..Default::default()
            }),
        };
        if let Err(e) = recorder_cluster.publish(&event, &reference).await {
            warn!(parent = %handle_name, error = %bounded(&e.to_string(), MESSAGE_LIMIT), "publishing an Event failed");
        }
    });
}

/// The field managers other than ruleop, most recent first.
fn other_managers(entries: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry]) -> Vec<String> {
    let mut others: Vec<_> = entries
        .iter()
        .filter(|e| e.manager.as_deref().is_some_and(|m| m != FIELD_MANAGER))
        .filter(|e| e.subresource.as_deref().unwrap_or_default().is_empty())
        .collect();
    others.sort_by(|a, b| b.time.as_ref().map(|t| t.0).cmp(&a.time.as_ref().map(|t| t.0)));
    let mut names: Vec<String> = Vec::new();
    for entry in others {
        if let Some(manager) = &entry.manager
            && !names.contains(manager)
        {
            names.push(manager.clone());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_repairs_at_once_then_one_per_refill_and_the_fight_reported_once() {
        let limiter = DriftLimiter::default();
        let start = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limiter.decide("p", start), Decision::Repair);
        }
        assert_eq!(
            limiter.decide("p", start),
            Decision::Wait {
                wait: REFILL,
                report: true
            }
        );
        assert!(matches!(
            limiter.decide("p", start),
            Decision::Wait { report: false, .. }
        ));
        assert_eq!(limiter.wait("p", start), Some(REFILL));
        let later = start + REFILL;
        assert_eq!(limiter.decide("p", later), Decision::Repair);
        assert!(matches!(
            limiter.decide("p", later),
            Decision::Wait { report: false, .. }
        ));
        assert_eq!(limiter.decide("other", later), Decision::Repair, "per parent");

        let settled = later + REFILL * (BURST + 1);
        limiter.forget_settled(settled);
        assert!(limiter.is_empty(), "settled parents are forgotten");
        for _ in 0..BURST {
            assert_eq!(limiter.decide("p", settled), Decision::Repair);
        }
        assert!(
            matches!(limiter.decide("p", settled), Decision::Wait { report: true, .. }),
            "a new fight is reported again"
        );
    }

    #[test]
    fn drift_is_our_own_object_changed_by_someone_else_not_a_template_change() {
        let desired = json!({"metadata": {"annotations": {ANNOTATION_DESIRED_HASH: "a"}}, "spec": {"replicas": 1}});
        let same = json!({"metadata": {"annotations": {ANNOTATION_DESIRED_HASH: "a"}}, "spec": {"replicas": 1}});
        let drifted = json!({"metadata": {"annotations": {ANNOTATION_DESIRED_HASH: "a"}}, "spec": {"replicas": 7}});
        let older = json!({"metadata": {"annotations": {ANNOTATION_DESIRED_HASH: "b"}}, "spec": {"replicas": 7}});
        assert!(!is_drift(&desired, &same));
        assert!(is_drift(&desired, &drifted));
        assert!(!is_drift(&desired, &older));
    }

    #[test]
    fn the_other_managers_are_named_most_recent_first() {
        let entries: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> = serde_json::from_value(json!([
            {"manager": "ruleop", "operation": "Apply", "time": "2026-01-01T00:00:09Z"},
            {"manager": "old-tool", "operation": "Update", "time": "2026-01-01T00:00:01Z"},
            {"manager": "kubectl-patch", "operation": "Update", "time": "2026-01-01T00:00:05Z"},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:00:08Z"},
        ]))
        .expect("entries");
        assert_eq!(other_managers(&entries), ["kubectl-patch", "old-tool"]);
    }
}
