//! One reconcile of one parent: wait for a worker and the caches, read the parent and its
//! children from the caches, plan, and hand the plan to `apply`.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::{Instrument, debug, info_span, warn};

use crate::apply::reconcile::{apply_plan, report_failure};
use crate::apply::{ApplyError, Cluster, ParentHandle, cleanup};
use crate::cache::discovery::Kinds;
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::context::ParentRef;
use crate::engine::plan::deletion;
use crate::engine::plan::ownership;
use crate::engine::plan::{self};
use crate::engine::rollout::select::{REVISION_ANNOTATION, Revisions};
use crate::engine::rules::{Rule, RuleSet};
use crate::ops::metrics::Outcome;
use crate::records::clock::now_rfc3339;
use crate::runtime::queue::Trigger;
use crate::runtime::rollout::staging::{Membership, Staging};

use super::policy::{after_success, requeue};
use super::{ReconcileError, RuleContext, parent_key};

/// Longest a reconcile waits for its rule's caches to sync before it is retried later.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// Longest a reconcile waits for the child caches to show our own last writes.
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// Runs one reconcile once it has a worker, in a span of its own (`rule`, `namespace`, `parent`,
/// `generation`, `trigger`), so every log line of the reconcile carries them. The trigger is
/// taken when kube starts the reconcile: what comes while it waits for a worker makes kube run
/// the parent again afterwards. The span's parent is kube's `reconciling object` span when that
/// is enabled (trace export, or `RUST_LOG` naming `kube_runtime::controller=info`; JSON logs then
/// list both).
pub(super) fn reconcile(
    parent: Arc<DynamicObject>,
    ctx: Arc<RuleContext>,
) -> impl Future<Output = Result<Action, ReconcileError>> + Send {
    let trigger = ctx.triggers.started(&parent_key(&parent));
    // Another replica's parent (`--shards`) is not reconciled here, so not counted either.
    if ctx.shared.writers.of(&parent.uid().unwrap_or_default()).held() {
        ctx.shared
            .observability
            .metrics
            .triggered(&ctx.rule_name, trigger.as_str());
    }
    async move {
        // An open circuit: only the scheduled retry runs the parent; an event is answered by
        // keeping that retry, with no worker taken and no request sent.
        if trigger != Trigger::Retry {
            let failures = ctx
                .failures
                .lock()
                .ok()
                .and_then(|f| f.get(&parent.uid().unwrap_or_default()).copied());
            let generation = parent.meta().generation.unwrap_or_default();
            if let Some(wait) = ctx
                .shared
                .circuit
                .holds(failures.as_ref(), generation, std::time::Instant::now())
            {
                ctx.shared.observability.metrics.circuit_held(&ctx.rule_name);
                return Ok(requeue(&ctx, &parent, wait, Trigger::Retry));
            }
        }
        let namespace = parent.namespace().unwrap_or_default();
        let Some(_worker) = ctx.workers.acquire(&namespace, trigger == Trigger::Reload).await else {
            // The controller is stopping.
            return Ok(Action::await_change());
        };
        // The parent as it is now: it may have changed (or gone) while it waited.
        let reference = ObjectRef::from_obj_with(parent.as_ref(), ctx.parent_kind.resource.clone());
        let Some(parent) = ctx.parents.get(&reference) else {
            return Ok(Action::await_change());
        };
        let span = info_span!(
            "reconcile",
            rule = %ctx.rule_name,
            namespace = %parent.namespace().unwrap_or_default(),
            // Not `name`: JSON logs use that key for the span's own name.
            parent = %parent.name_any(),
            generation = parent.meta().generation.unwrap_or_default(),
            trigger = trigger.as_str(),
        );
        // Boxed: a reconcile waiting for a worker holds only a pointer's worth of its state.
        Box::pin(reconcile_in_span(parent, ctx).instrument(span)).await
    }
}

async fn reconcile_in_span(parent: Arc<DynamicObject>, ctx: Arc<RuleContext>) -> Result<Action, ReconcileError> {
    // Before anything else, so before any write: another replica's shard is not ours to touch.
    // Its parents are reconciled here again when the shard is taken (`parents_of_taken_shards`).
    let writer = ctx.shared.writers.of(&parent.uid().unwrap_or_default());
    let namespace = parent.namespace().unwrap_or_default();
    // Every replica watches the moved parents of every shard, so the one that decides a halt
    // (`Writers::runs_rollouts`) sees them all, and any replica taking over from it has seen them.
    let place = rollout_place(&ctx, &parent, &namespace);
    if !writer.held() {
        return Ok(Action::await_change());
    }
    let (set, kinds) = ctx.shared.snapshot();
    let (set, refused) = match chosen_set(&ctx, &parent, place.set(), &set, &kinds).await {
        Ok(chosen) => (chosen.unwrap_or(set), None),
        // A parent being deleted is cleaned up under the rule in force, whatever its pin says.
        Err(_) if parent.meta().deletion_timestamp.is_some() => (set, None),
        Err(refused) => (set, Some(refused)),
    };
    let Some(rule) = set.rule(&ctx.rule_name) else {
        return Ok(Action::await_change());
    };
    if parent.meta().deletion_timestamp.is_some() {
        ctx.lookups.index.forget(&(namespace.clone(), parent.name_any()));
    }
    // A parent being deleted needs us only while it holds our finalizer.
    let deleting_without_us =
        parent.meta().deletion_timestamp.is_some() && !parent.finalizers().iter().any(|f| f == deletion::FINALIZER);
    // An unselected parent (`watch.annotationSelector`) is left alone, unless it is being deleted
    // with our finalizer: that cleanup must finish whatever its annotations say now.
    let unselected = parent.meta().deletion_timestamp.is_none()
        && !rule.spec.watch.annotation_selector.is_empty()
        && !rule.selects(&serde_json::json!({"metadata": {"annotations": parent.annotations()}}));
    if deleting_without_us
        || unselected
        || (!rule.spec.watch.namespaces.is_empty() && !rule.spec.watch.namespaces.contains(&namespace))
    {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let _in_flight = ctx.shared.observability.health.reconcile_started(format!(
        "rule {:?} parent {namespace}/{}",
        rule.name,
        parent.name_any()
    ));
    let _worker = ctx.shared.observability.metrics.reconcile_started(&rule.name);
    if ctx.shared.writers.is_sharded() {
        ctx.shared.observability.metrics.shard_reconciled(writer.index());
    }
    let result = reconcile_parent(&ctx, writer, &set, rule, &kinds, &parent, &namespace, refused).await;
    // The status this reconcile wrote (a failure's Ready=False among it) is watched now: its echo
    // queues no reconcile that would see it.
    if let Place::Moved(staging) = &place {
        observe_moved(&ctx, staging, &parent, &namespace);
    }
    debug!(parent = %parent.name_any(), elapsed = ?started.elapsed(), ok = result.is_ok(), "reconciled");
    let outcome = match &result {
        Ok(_) => Outcome::Ok,
        // An optimistic-concurrency retry (stale cache), not a failure.
        Err(ReconcileError::Apply(ApplyError::Conflict(_))) => Outcome::Conflict,
        Err(e) => {
            // Failures reported on the parent were logged with it (`report_failure`).
            if matches!(
                e,
                ReconcileError::NotSynced(_)
                    | ReconcileError::Apply(ApplyError::Action { .. } | ApplyError::EgressDenied { .. })
            ) {
                let error = e.to_string();
                warn!(reason = e.reason(), error = %bounded(&error, MESSAGE_LIMIT), "reconcile failed");
            }
            Outcome::Error(e.reason())
        }
    };
    ctx.shared
        .observability
        .metrics
        .reconciled(&rule.name, outcome, started.elapsed());
    result
}

/// The rule set this parent is reconciled under when it is not the one in force (`None`): the
/// kept revision its `ruleop.io/revision` annotation pins (the engine decides which, among the
/// rule's own kept revisions), else the one the rule's staged rollout gives it. A pin that cannot
/// be followed is an error on this parent alone.
async fn chosen_set(
    ctx: &RuleContext,
    parent: &DynamicObject,
    staged: Option<Arc<RuleSet>>,
    set: &RuleSet,
    kinds: &Kinds,
) -> Result<Option<Arc<RuleSet>>, ReconcileError> {
    let Some(in_force) = set.rule(&ctx.rule_name) else {
        return Ok(None);
    };
    if !parent.annotations().contains_key(REVISION_ANNOTATION) {
        return Ok(staged);
    }
    let refused = |reason: &'static str, message: String| ReconcileError::Pin { reason, message };
    let kept = ctx.shared.pins.kept(&ctx.rule_name);
    let metadata = serde_json::json!({"metadata": {"annotations": parent.annotations()}});
    let choice = Revisions::new(&kept, in_force.revision.unwrap_or_default())
        .for_parent(&metadata)
        .map_err(|e| refused(e.reason(), e.to_string()))?;
    if Some(choice.revision) == in_force.revision {
        return Ok(None);
    }
    if let Some(staging) = ctx.shared.rollouts.get(&ctx.rule_name)
        && staging.previous.rule(&ctx.rule_name).and_then(|r| r.revision) == Some(choice.revision)
    {
        return Ok(Some(staging.previous.clone()));
    }
    ctx.shared
        .pins
        .set_of(in_force, choice.revision, kinds)
        .await
        .map(Some)
        .map_err(|e| refused(e.reason(), e.to_string()))
}

/// Where a parent stands in its rule's staged rollout.
enum Place {
    /// No rollout, or the parent is pinned: the set in force (or its pin) decides.
    InForce,
    /// The current step has not moved it: reconciled under the set the change replaced.
    NotMoved(Arc<RuleSet>),
    /// Moved: reconciled under the set in force, and watched for going from ready to not ready.
    Moved(Arc<Staging>),
}

impl Place {
    /// The rule set it is reconciled under when that is not the one in force.
    fn set(&self) -> Option<Arc<RuleSet>> {
        match self {
            Place::NotMoved(previous) => Some(previous.clone()),
            Place::InForce | Place::Moved(_) => None,
        }
    }
}

/// Where a parent stands in its rule's staged rollout. A moved parent is watched as the cache
/// shows it (another replica's write may have changed its readiness).
fn rollout_place(ctx: &RuleContext, parent: &DynamicObject, namespace: &str) -> Place {
    if parent.annotations().contains_key(REVISION_ANNOTATION) {
        return Place::InForce;
    }
    let Some(staging) = ctx.shared.rollouts.get(&ctx.rule_name) else {
        return Place::InForce;
    };
    let uid = parent.uid().unwrap_or_default();
    // In this order (see `Membership`): departures, the count, then the parents.
    let membership = Membership {
        departures: ctx.bodies.departures(),
        count: ctx.parents.len(),
    };
    let uids = || {
        let parents = ctx.parents.state();
        parents.iter().filter_map(|p| p.metadata.uid.clone()).collect()
    };
    if !staging.moves(&uid, membership, uids) {
        return Place::NotMoved(staging.previous.clone());
    }
    observe_moved(ctx, &staging, parent, namespace);
    Place::Moved(staging)
}

/// Watches a moved parent for going from ready to not ready, as it is now: the newest of the
/// cache's copy and what this process's own writes returned. A halt it causes is announced.
fn observe_moved(ctx: &RuleContext, staging: &Staging, parent: &DynamicObject, namespace: &str) {
    let uid = parent.uid().unwrap_or_default();
    let name = parent.name_any();
    let cached = || ctx.bodies.get(namespace, &name, &ctx.parent_kind.resource);
    if let Some(body) = ctx.written.newest(&uid, cached)
        && staging.observe(
            &uid,
            &format!("{namespace}/{name}"),
            &body,
            ctx.shared.writers.runs_rollouts(),
        )
    {
        ctx.shared.rollouts.announce_halt(&ctx.rule_name);
    }
}

#[allow(clippy::too_many_arguments)]
async fn reconcile_parent(
    ctx: &RuleContext,
    writer: &crate::ha::shard::ShardWriter,
    set: &RuleSet,
    rule: &Rule,
    kinds: &Kinds,
    parent: &DynamicObject,
    namespace: &str,
    refused: Option<ReconcileError>,
) -> Result<Action, ReconcileError> {
    let uid = parent.uid().unwrap_or_default();
    // Planning against a child cache that has not listed yet would see every child missing. The
    // wait is bounded: a kind that cannot be listed must not hold a reconcile (and so a
    // controller's shutdown, and the reloads waiting on it) forever; the parent is retried.
    if !*ctx.children_synced.borrow() {
        debug!(parent = %parent.name_any(), "waiting for the child caches to sync");
    }
    let synced = async {
        let _ = ctx.children_synced.clone().wait_for(|synced| *synced).await;
        ctx.lookups.wait_synced().await;
    };
    if tokio::time::timeout(SYNC_WAIT, synced).await.is_err() {
        return Err(ReconcileError::NotSynced(SYNC_WAIT));
    }
    let cached = || ctx.bodies.get(namespace, &parent.name_any(), &ctx.parent_kind.resource);
    let Some(parent_json) = ctx.written.newest(&uid, cached) else {
        // Deleted a moment ago: its delete event is on its way.
        return Ok(Action::await_change());
    };
    let now = now_rfc3339();
    // Every write of this reconcile goes through the parent's shard, fenced by its lease.
    let cluster = Cluster {
        client: &writer.client,
        kinds,
        recorder: &writer.recorder,
        observability: &ctx.shared.observability,
        written: &ctx.written,
        drift: &ctx.drift,
        events: &ctx.events,
        egress: &ctx.shared.egress_deny,
        deliveries: &ctx.deliveries,
    };
    let mut observed: Vec<Value> = if parent.meta().deletion_timestamp.is_some() {
        // The finalizer is removed on what this says: read it fresh, not from a lagging cache.
        cleanup::list_owned(&cluster, &rule.owned_kinds(), &uid).await?
    } else {
        cached_children(ctx, &uid).await
    };
    // The caches and the fresh list select by label, which anyone can copy: only objects proven
    // to be this parent's count, for the plan and for the live view the applies compare with.
    if let Ok(parent_ref) = ParentRef::read(&parent_json) {
        ownership::retain_owned(rule, &parent_ref, &mut observed, &ctx.lookups);
    }
    let handle = ParentHandle {
        api: if ctx.parent_kind.namespaced {
            Api::namespaced_with(writer.client.clone(), namespace, &ctx.parent_kind.resource)
        } else {
            Api::all_with(writer.client.clone(), &ctx.parent_kind.resource)
        },
        name: parent.name_any(),
        kind: ctx.parent_kind.resource.kind.clone(),
        reference: parent.object_ref(&ctx.parent_kind.resource),
    };
    if let Some(refused) = refused {
        // Nothing is planned under a revision the parent did not ask for: Ready=False says why.
        report_failure(
            &cluster,
            &handle,
            rule,
            &parent_json,
            refused.reason(),
            &refused.to_string(),
            &now,
        )
        .await;
        return Err(refused);
    }
    debug!(parent = %parent.name_any(), children = observed.len(), "planning");
    let read = ctx.lookups.recording();
    let plan = plan::plan_with(&set.renderer, rule, &parent_json, &observed, &read, &now);
    read.commit((namespace.to_owned(), parent.name_any()));
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            let (reason, message) = ctx.failure_report(&uid, e.reason(), &e.to_string());
            report_failure(&cluster, &handle, rule, &parent_json, reason, &message, &now).await;
            return Err(e.into());
        }
    };
    if plan.paused {
        ctx.shared.observability.metrics.paused(&rule.name);
    }
    for problem in &plan.status_problems {
        warn!(parent = %handle.name, problem = %bounded(problem, MESSAGE_LIMIT), "status expression failed");
    }
    let retry = plan.next_retry();
    match apply_plan(&cluster, &handle, rule, plan, parent_json.clone(), &observed, &now).await {
        Ok(actions_ran) => {
            if let Ok(mut failures) = ctx.failures.lock() {
                failures.remove(&uid);
            }
            let resync = rule.resync.unwrap_or(ctx.shared.default_resync);
            // Drift left uncorrected by the rate limit is corrected when the budget allows.
            let drift_wait = ctx.drift.wait(&uid, std::time::Instant::now());
            Ok(
                after_success(resync, actions_ran, drift_wait, retry).map_or_else(Action::await_change, |after| {
                    requeue(ctx, parent, after, Trigger::Requeue)
                }),
            )
        }
        Err(e @ ApplyError::Immutable { .. }) => {
            let (reason, message) = ctx.failure_report(&uid, e.reason(), &e.to_string());
            report_failure(&cluster, &handle, rule, &parent_json, reason, &message, &now).await;
            // Retried at its resync (the rule's resync wheel), or when it changes.
            Ok(Action::await_change())
        }
        // The action layer already recorded these in status (and an Event); Ready is about children.
        Err(e @ (ApplyError::Action { .. } | ApplyError::EgressDenied { .. } | ApplyError::Conflict(_))) => {
            Err(e.into())
        }
        Err(e) => {
            let (reason, message) = ctx.failure_report(&uid, e.reason(), &e.to_string());
            report_failure(&cluster, &handle, rule, &parent_json, reason, &message, &now).await;
            Err(e.into())
        }
    }
}

/// The parent's children from the caches, once they show this process's own last writes to
/// them: a reconcile right after ours (triggered by our own status or finalizer write) would
/// otherwise apply a child again that it does not see yet. The watch is usually milliseconds
/// behind; the wait is bounded (a child deleted by someone else meanwhile never shows).
async fn cached_children(ctx: &RuleContext, uid: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
    loop {
        let cached: Vec<Value> = ctx
            .children
            .iter()
            .flat_map(|(resource, index)| {
                index.children_of(uid).into_iter().map(move |mut child| {
                    set_type(&mut child, resource);
                    child
                })
            })
            .collect();
        if !ctx.written.children_unseen(uid, &cached) || tokio::time::Instant::now() >= deadline {
            return cached;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sets a cached object's apiVersion and kind: objects that came from a LIST carry no type
/// fields, and a child without them would never match its desired self.
fn set_type(json: &mut Value, resource: &kube::discovery::ApiResource) {
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".to_owned(), Value::from(resource.api_version.clone()));
        map.insert("kind".to_owned(), Value::from(resource.kind.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};

    #[test]
    fn a_listed_child_gets_the_type_fields_a_list_leaves_out() {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        let mut child = serde_json::json!({"metadata": {"name": "web"}});
        set_type(&mut child, &resource);
        assert_eq!(child["apiVersion"], "apps/v1");
        assert_eq!(child["kind"], "Deployment");
        assert_eq!(child["metadata"]["name"], "web");
    }
}
