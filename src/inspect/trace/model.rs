//! The [`Trace`] of one parent: what `ruleop trace` prints, as one serializable value (the tree
//! text, `-o json` and `-o yaml` all show it), built by [`build`], a pure function of the rule,
//! the live parent, its live children, the plan, the dry-run drift checks and the Events.
//!
//! Everything here may come from a tenant (names, keys, messages, notes), so every string is
//! bounded and stripped of control characters before it enters the model, and a Secret child
//! shows its name and data keys only.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::children::{ChildUpdate, ObjectRef};
use crate::engine::plan::context::{LABEL_CHILD, ParentRef};
use crate::engine::plan::deletion;
use crate::engine::plan::lookups::LookupRead;
use crate::engine::plan::{Plan, PlanError, READY, actions, foreach, label};
use crate::engine::rules::Rule;
use crate::engine::rules::model::{Scaling, UpdateStrategy};
use crate::inspect::tenant_text::clean;

/// Objects of one `forEach` child shown one by one; the rest are folded into counts.
pub(crate) const ITEMS_SHOWN: usize = 20;
/// Events shown, newest last.
pub(crate) const EVENTS_SHOWN: usize = 10;
/// Longest name, key or short value shown.
const SHORT_LIMIT: usize = 253;
/// Longest drift diff shown.
const DIFF_LIMIT: usize = 8192;
/// Data keys of a Secret child shown.
const KEYS_SHOWN: usize = 50;

/// Everything `ruleop trace` shows about one parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Trace {
    /// The parent itself.
    pub parent: ParentTrace,
    /// The rule that watches its kind.
    pub rule: RuleTrace,
    /// Whether the parent's `Ready` condition is `True` (exit code 0, else 1).
    pub ready: bool,
    /// Why no plan could be made (every child is then shown as declared, nothing planned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_error: Option<String>,
    /// One entry per child the rule declares, in rule order.
    pub children: Vec<ChildTrace>,
    /// Live objects of this parent the plan would delete (no longer desired).
    pub prune: Vec<ObjectShown>,
    /// One entry per action of the rule that the plan decided on, with its record.
    pub actions: Vec<ActionTrace>,
    /// What each lookup read.
    pub lookups: Vec<LookupRead>,
    /// The parent's last Events, oldest first.
    pub events: Vec<EventTrace>,
    /// Status fields or conditions whose evaluation failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_problems: Vec<String>,
}

/// The parent's identity, generation, conditions and deletion.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ParentTrace {
    /// apiVersion, kind, namespace (empty for a cluster-scoped parent), name, uid and
    /// `metadata.generation`, each shortened and cleaned.
    #[serde(flatten)]
    pub identity: ParentRef,
    /// `status.observedGeneration`, when written.
    pub observed_generation: Option<i64>,
    /// Every status condition, with its full message.
    pub conditions: Vec<ConditionTrace>,
    /// Whether it carries the `ruleop.io/cleanup` finalizer.
    pub cleanup_finalizer: bool,
    /// `metadata.deletionTimestamp`, when it is being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// What holds the deletion, when it is being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion: Option<DeletionTrace>,
    /// Whether it is paused (`ruleop.io/paused: "true"`).
    pub paused: bool,
}

/// One status condition.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConditionTrace {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message (bounded at the size the engine itself writes, so never cut for an engine message).
    pub message: String,
    /// lastTransitionTime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// What a deletion waits for (the plan's `deletion`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeletionTrace {
    /// Why the finalizer stays (children still there, actions not done).
    pub waiting: Vec<String>,
    /// `on: delete` actions given up on after their timeout.
    pub timed_out: Vec<String>,
    /// The finalize phase's deadline passed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalize_timed_out: Option<String>,
}

/// The rule that watches the parent's kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuleTrace {
    /// Its name.
    pub name: String,
    /// The digest of the rule and its templates as loaded from `--rules/--templates` (the
    /// parent carries no record of the revision it was reconciled with).
    pub digest: String,
    /// `apiVersion kind` it watches.
    pub watches: String,
}

/// One child of the rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildTrace {
    /// The child's id.
    pub id: String,
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Whether the plan wants it (`when` holds; false when the plan failed).
    pub desired: bool,
    /// Whether it is ready (every object exists and `readyWhen` holds).
    pub ready: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// The `readyWhen` expression that decides readiness (none: existing is ready).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_when: Option<String>,
    /// The `dependsOn` list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// The dependency it waits for, when `dependsOn` holds it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingTrace>,
    /// `updateStrategy`, unless the default (InPlace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<String>,
    /// `scaling`, unless the default (Parallel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling: Option<String>,
    /// Whether it is a `forEach` child.
    pub for_each: bool,
    /// Its objects (for a `forEach` child, the first [`ITEMS_SHOWN`] items).
    pub objects: Vec<ObjectTrace>,
    /// The items beyond [`ITEMS_SHOWN`], counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded: Option<Folded>,
}

/// What `dependsOn` waits for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WaitingTrace {
    /// The first dependency that is not ready.
    pub on: String,
    /// Why it is not.
    pub reason: String,
}

/// Objects of a `forEach` child not shown one by one.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Folded {
    /// How many.
    pub count: usize,
    /// How many of them do not exist.
    pub missing: usize,
    /// How many drift.
    pub drifted: usize,
    /// How many are held back (by `updateStrategy` or `scaling: Ordered`).
    pub held: usize,
}

/// An object's identity as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectShown {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectShown {
    fn of(target: &ObjectRef) -> Self {
        ObjectShown {
            api_version: short(&target.api_version),
            kind: short(&target.kind),
            namespace: short(&target.namespace),
            name: short(&target.name),
        }
    }
}

/// One object of a child.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectTrace {
    /// Its identity.
    #[serde(flatten)]
    pub object: ObjectShown,
    /// The item's key (`forEach` children).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item_key: Option<String>,
    /// Whether it exists.
    pub exists: bool,
    /// Whether the plan still wants it (false: an old item a `scaling: Ordered` removal holds).
    pub desired: bool,
    /// What this reconcile would do with it when not a plain apply (`keep`, `recreate`, `wait`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update: Option<String>,
    /// Why it is held back (`scaling: Ordered` removal, `updateStrategy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Whether its live managed fields differ from what the rules render now (`None`: not
    /// checked, e.g. it does not exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<bool>,
    /// The managed fields that differ, live vs a dry-run apply (never for a Secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_diff: Option<String>,
    /// Why the drift check gave no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_error: Option<String>,
    /// How the live object is proven this parent's: `ownerReference` or `labels` (with the
    /// `ruleop.io/parent` annotation, for objects outside the parent's namespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<String>,
    /// A Secret's data keys (its values are never shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_keys: Option<Vec<String>>,
}

/// One action's decision and record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActionTrace {
    /// Action id.
    pub id: String,
    /// Whether the next reconcile runs it.
    pub would_run: bool,
    /// Why it runs or not.
    pub reason: String,
    /// The recorded phase (`Pending`, `Done`, `Failed`), when it ever ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Runs started (distinct keys).
    pub runs: u64,
    /// Attempts of the current key.
    pub attempts: u64,
    /// The guard value of the last run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_value: Option<String>,
    /// The object the last run created (`create` actions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<ObjectShown>,
    /// The last attempt's failure time, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
    /// The last attempt's error (`status.actions.<id>.error`), when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One Event about the parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventTrace {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// The note (message).
    pub note: String,
    /// How many times it happened.
    pub count: u64,
    /// When it last happened.
    pub last_seen: String,
    /// Who reported it.
    pub reporter: String,
}

/// The outcome of one dry-run drift check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Drift {
    /// The live object already holds what the rules render (no dry run needed).
    Covered,
    /// Compared through a dry run: the unified diff of managed fields, empty when equal.
    Compared(String),
    /// The dry run failed.
    Failed(String),
}

/// What [`build`] reads.
pub(crate) struct Inputs<'a> {
    /// The rule watching the parent's kind.
    pub rule: &'a Rule,
    /// The live parent.
    pub parent: &'a Value,
    /// The live children carrying the rule's labels for this parent.
    pub observed: &'a [Value],
    /// The plan, or why there is none.
    pub plan: Result<&'a Plan, &'a PlanError>,
    /// The drift check of each desired child that exists.
    pub drift: &'a BTreeMap<ObjectRef, Drift>,
    /// The parent's Events (any order; core v1 or events.k8s.io/v1 shape).
    pub events: &'a [Value],
}

/// Builds the trace.
pub(crate) fn build(inputs: &Inputs<'_>) -> Trace {
    let Inputs {
        rule,
        parent,
        observed,
        plan,
        drift,
        events,
    } = *inputs;
    let text = |p: &str| parent.pointer(p).and_then(Value::as_str).map(short);
    let conditions = conditions(parent);
    let ready = conditions.iter().any(|c| c.type_ == READY && c.status == "True");
    let plan_ok = plan.ok();
    // Not `ParentRef::read`: a trace shows a parent that planning would refuse as well.
    let identity = ParentRef {
        api_version: text("/apiVersion").unwrap_or_default(),
        kind: text("/kind").unwrap_or_default(),
        namespace: text("/metadata/namespace").unwrap_or_default(),
        name: text("/metadata/name").unwrap_or_default(),
        uid: text("/metadata/uid").unwrap_or_default(),
        generation: parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    };
    let parent_trace = ParentTrace {
        identity,
        observed_generation: parent.pointer("/status/observedGeneration").and_then(Value::as_i64),
        conditions,
        cleanup_finalizer: deletion::has_finalizer(parent),
        deletion_timestamp: text("/metadata/deletionTimestamp"),
        deletion: plan_ok.and_then(|p| p.deletion.as_ref()).map(|d| DeletionTrace {
            waiting: d.waiting.iter().map(|w| message(w)).collect(),
            timed_out: d.timed_out.iter().map(|w| message(w)).collect(),
            finalize_timed_out: d.finalize_timed_out.as_deref().map(message),
        }),
        paused: plan_ok.is_some_and(|p| p.paused),
    };
    let children = rule
        .spec
        .children
        .iter()
        .map(|spec| child(spec, plan_ok, observed, drift, &parent_trace))
        .collect();
    let prune = plan_ok
        .map(|p| p.prune.iter().map(ObjectShown::of).collect())
        .unwrap_or_default();
    let actions = plan_ok
        .map(|p| p.actions.iter().map(|d| action(d, parent)).collect())
        .unwrap_or_default();
    Trace {
        rule: RuleTrace {
            name: short(&rule.name),
            digest: rule.digest.clone(),
            watches: format!("{} {}", rule.spec.watch.api_version, rule.spec.watch.kind),
        },
        parent: parent_trace,
        ready,
        plan_error: plan.err().map(|e| message(&e.to_string())),
        children,
        prune,
        actions,
        lookups: plan_ok.map(|p| p.lookups.clone()).unwrap_or_default(),
        events: last_events(events),
        status_problems: plan_ok
            .map(|p| p.status_problems.iter().map(|s| message(s)).collect())
            .unwrap_or_default(),
    }
}

fn conditions(parent: &Value) -> Vec<ConditionTrace> {
    let Some(Value::Array(items)) = parent.pointer("/status/conditions") else {
        return Vec::new();
    };
    items
        .iter()
        .map(|c| {
            let text = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
            ConditionTrace {
                type_: short(text("type")),
                status: short(text("status")),
                reason: short(text("reason")),
                message: message(text("message")),
                last_transition_time: c.get("lastTransitionTime").and_then(Value::as_str).map(short),
            }
        })
        .collect()
}

fn child(
    spec: &crate::engine::rules::model::ChildSpec,
    plan: Option<&Plan>,
    observed: &[Value],
    drift: &BTreeMap<ObjectRef, Drift>,
    parent: &ParentTrace,
) -> ChildTrace {
    let id = spec.id.value.as_str();
    let live: Vec<&Value> = observed.iter().filter(|o| label(o, LABEL_CHILD) == Some(id)).collect();
    let find_live = |target: &ObjectRef| live.iter().copied().find(|o| ObjectRef::of(o).as_ref() == Some(target));
    let readiness = plan.and_then(|p| p.readiness.get(id));
    let waiting = plan.and_then(|p| p.waiting.iter().find(|w| w.id == id));
    let planned: Vec<_> = plan
        .map(|p| p.children.iter().filter(|c| c.id == id).collect())
        .unwrap_or_default();
    let mut objects: Vec<ObjectTrace> = planned
        .iter()
        .map(|desired| {
            let live = find_live(&desired.target);
            let item_key = spec
                .for_each
                .is_some()
                .then(|| short(&foreach::observed_key(&desired.object)));
            let (drift_flag, drift_diff, drift_error) = match (live, drift.get(&desired.target)) {
                (None, _) | (_, None) => (None, None, None),
                (Some(_), Some(Drift::Covered)) => (Some(false), None, None),
                (Some(_), Some(Drift::Compared(diff))) => {
                    let shown =
                        (!diff.is_empty() && !is_secret(&desired.target)).then(|| clean(&bounded(diff, DIFF_LIMIT)));
                    (Some(!diff.is_empty()), shown, None)
                }
                (Some(_), Some(Drift::Failed(e))) => (None, None, Some(message(e))),
            };
            let (update, held) = match desired.update {
                ChildUpdate::Apply => (None, None),
                ChildUpdate::Keep => (Some("keep"), Some(held_by(spec, "kept as it is"))),
                ChildUpdate::Recreate => (Some("recreate"), Some(held_by(spec, "deleted to be recreated"))),
                ChildUpdate::Wait => (
                    Some("wait"),
                    Some("scaling: Ordered: waits until every item before it exists and is ready".to_owned()),
                ),
            };
            ObjectTrace {
                object: ObjectShown::of(&desired.target),
                item_key,
                exists: live.is_some(),
                desired: true,
                update: update.map(str::to_owned),
                held,
                drift: drift_flag,
                drift_diff,
                drift_error,
                owned_by: live.map(|o| owned_by(o, &parent.identity.uid)),
                secret_keys: live.filter(|_| is_secret(&desired.target)).map(secret_keys),
            }
        })
        .collect();
    for removal in plan.map(|p| p.held_removals.as_slice()).unwrap_or_default() {
        let Some(live) = find_live(&removal.target) else {
            continue;
        };
        objects.push(ObjectTrace {
            object: ObjectShown::of(&removal.target),
            item_key: spec.for_each.is_some().then(|| short(&foreach::observed_key(live))),
            exists: true,
            desired: false,
            update: None,
            held: Some(message(&removal.reason)),
            drift: None,
            drift_diff: None,
            drift_error: None,
            owned_by: Some(owned_by(live, &parent.identity.uid)),
            secret_keys: is_secret(&removal.target).then(|| secret_keys(live)),
        });
    }
    let deleting = parent.deletion_timestamp.is_some();
    if planned.is_empty() && (waiting.is_some() || deleting) {
        // Held back by dependsOn (what exists is kept, nothing is rendered for it), or the
        // parent's teardown: what exists goes in reverse dependsOn order.
        let pruned = |target: &ObjectRef| plan.is_some_and(|p| p.prune.contains(target));
        for object in &live {
            let Some(target) = ObjectRef::of(object) else { continue };
            let held = (waiting.is_none()).then(|| {
                if pruned(&target) {
                    "the parent is being deleted: the next reconcile deletes it".to_owned()
                } else if owned_by(object, &parent.identity.uid) == "ownerReference" {
                    "the parent is being deleted: garbage collection deletes it with the parent".to_owned()
                } else {
                    "the parent is being deleted: it waits for its turn in the teardown".to_owned()
                }
            });
            objects.push(ObjectTrace {
                object: ObjectShown::of(&target),
                item_key: spec.for_each.is_some().then(|| short(&foreach::observed_key(object))),
                exists: true,
                desired: waiting.is_some(),
                update: None,
                held,
                drift: None,
                drift_diff: None,
                drift_error: None,
                owned_by: Some(owned_by(object, &parent.identity.uid)),
                secret_keys: is_secret(&target).then(|| secret_keys(object)),
            });
        }
    }
    let folded = (spec.for_each.is_some() && objects.len() > ITEMS_SHOWN).then(|| {
        let rest = objects.split_off(ITEMS_SHOWN);
        Folded {
            count: rest.len(),
            missing: rest.iter().filter(|o| !o.exists).count(),
            drifted: rest.iter().filter(|o| o.drift == Some(true)).count(),
            held: rest.iter().filter(|o| o.held.is_some()).count(),
        }
    });
    ChildTrace {
        id: short(id),
        api_version: spec.api_version.clone(),
        kind: spec.kind.clone(),
        desired: !planned.is_empty() || waiting.is_some(),
        ready: readiness.is_some_and(|r| r.ready),
        not_ready: readiness.filter(|r| !r.ready).map(|r| message(&r.why)),
        ready_when: spec.ready_when.as_ref().map(|e| e.value.clone()),
        depends_on: spec.depends_on.iter().map(|d| d.value.clone()).collect(),
        waiting: waiting.map(|w| WaitingTrace {
            on: short(&w.on),
            reason: message(&w.reason),
        }),
        update_strategy: (spec.update_strategy != UpdateStrategy::InPlace)
            .then(|| format!("{:?}", spec.update_strategy)),
        scaling: (spec.scaling != Scaling::Parallel).then(|| format!("{:?}", spec.scaling)),
        for_each: spec.for_each.is_some(),
        objects,
        folded,
    }
}

fn held_by(spec: &crate::engine::rules::model::ChildSpec, what: &str) -> String {
    format!("updateStrategy: {:?}: {what}", spec.update_strategy)
}

fn owned_by(object: &Value, parent_uid: &str) -> String {
    let controller = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o.get("uid").and_then(Value::as_str) == Some(parent_uid)
                    && o.get("controller") == Some(&Value::Bool(true))
            })
        });
    if controller { "ownerReference" } else { "labels" }.to_owned()
}

fn is_secret(target: &ObjectRef) -> bool {
    target.api_version == "v1" && target.kind == "Secret"
}

/// The keys of a Secret's `data` and `stringData`, never their values.
fn secret_keys(object: &Value) -> Vec<String> {
    let mut keys: Vec<String> = ["data", "stringData"]
        .iter()
        .filter_map(|field| object.get(*field).and_then(Value::as_object))
        .flat_map(|map| map.keys().map(|k| short(k)))
        .collect();
    keys.sort();
    keys.dedup();
    keys.truncate(KEYS_SHOWN);
    keys
}

fn action(decision: &actions::ActionDecision, parent: &Value) -> ActionTrace {
    let record = actions::RunRecord::read(parent, &decision.id);
    let created = record.as_ref().and_then(|r| created_object(decision, parent, r));
    let failed = record.as_ref().is_some_and(|r| r.phase == actions::phase::FAILED);
    ActionTrace {
        id: short(&decision.id),
        would_run: decision.run,
        reason: message(&decision.reason),
        phase: record.as_ref().map(|r| short(&r.phase)).filter(|p| !p.is_empty()),
        runs: record.as_ref().map_or(0, |r| r.runs),
        attempts: record.as_ref().map_or(0, |r| r.attempts),
        guard_value: record.as_ref().map(|r| short(&r.guard_value)).filter(|g| !g.is_empty()),
        created,
        failed_at: record.as_ref().and_then(|r| r.failed_at.as_deref()).map(short),
        last_error: failed.then(|| last_error(parent, &decision.id)).flatten(),
    }
}

/// The object the recorded run of a `create` action made: its name derives from the run's key.
fn created_object(
    decision: &actions::ActionDecision,
    parent: &Value,
    record: &actions::RunRecord,
) -> Option<ObjectShown> {
    let Some(actions::Effect::Create(object)) = decision.effect.as_ref() else {
        return None;
    };
    if record.key.is_empty() {
        return None;
    }
    let parent_name = parent.pointer("/metadata/name").and_then(Value::as_str)?;
    let mut target = ObjectRef::of(object)?;
    target.name = actions::object_name(parent_name, &decision.id, &record.key);
    Some(ObjectShown::of(&target))
}

/// The error a failed run recorded in `status.actions.<id>.error` (what the apply layer writes
/// beside `failedAt`; [`actions::RunRecord`] does not carry it).
fn last_error(parent: &Value, id: &str) -> Option<String> {
    let pointer = format!("/status/actions/{}/error", id.replace('~', "~0").replace('/', "~1"));
    parent
        .pointer(&pointer)
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
        .map(message)
}

/// The newest [`EVENTS_SHOWN`] Events, oldest first.
fn last_events(events: &[Value]) -> Vec<EventTrace> {
    let mut shown: Vec<EventTrace> = events.iter().map(event).collect();
    shown.sort_by(|a, b| a.last_seen.cmp(&b.last_seen));
    let skip = shown.len().saturating_sub(EVENTS_SHOWN);
    shown.split_off(skip)
}

fn event(e: &Value) -> EventTrace {
    let text = |p: &str| e.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
    let last_seen = text("/series/lastObservedTime")
        .or_else(|| text("/lastTimestamp"))
        .or_else(|| text("/deprecatedLastTimestamp"))
        .or_else(|| text("/eventTime"))
        .or_else(|| text("/firstTimestamp"))
        .or_else(|| text("/metadata/creationTimestamp"))
        .unwrap_or_default();
    let count = e
        .pointer("/series/count")
        .or_else(|| e.get("count"))
        .or_else(|| e.get("deprecatedCount"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    EventTrace {
        type_: short(text("/type").unwrap_or("Normal")),
        reason: short(text("/reason").unwrap_or_default()),
        note: message(text("/note").or_else(|| text("/message")).unwrap_or_default()),
        count,
        last_seen: short(last_seen),
        reporter: short(
            text("/reportingController")
                .or_else(|| text("/reportingComponent"))
                .or_else(|| text("/source/component"))
                .unwrap_or_default(),
        ),
    }
}

/// A tenant's short text (names, keys, reasons), bounded and without control characters.
fn short(text: &str) -> String {
    clean(&bounded(text, SHORT_LIMIT))
}

/// A tenant's long text (messages, notes), bounded and without control characters but newlines.
fn message(text: &str) -> String {
    clean(&bounded(text, MESSAGE_LIMIT))
}

#[cfg(test)]
mod tests;
