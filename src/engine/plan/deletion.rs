//! The parent's lifecycle: the `ruleop.io/cleanup` finalizer and what happens while the parent
//! is being deleted (`on: delete` actions, `waitFor`/`timeout`, deleting label-owned children).
//!
//! Order, and why: the finalizer is added before the first label-owned child exists (so no such
//! child can outlive an untracked parent); on deletion the `on: delete` actions run first (a
//! final backup needs the data still there), then the `spec.finalize` phase (the children are
//! still reconciled until its `until` holds: a set scales to zero), then the children are
//! deleted (in reverse `dependsOn` order, each wave gone before the next, when the rule orders
//! them; otherwise the label-owned ones here and the rest by the garbage collector), then the
//! finalizer is removed. Every step is recomputed from the live state on each reconcile, so a
//! crash at any point resumes where it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::actions::{self, ANNOTATION_KEY, DELETE_GUARD_VALUE, RunRecord, Scope, phase};
use super::children::ObjectRef;
use super::context::{self, LABEL_ACTION, LABEL_CHILD, ParentRef, is_deleting};
use super::{DesiredStatus, Plan, PlanError, label, lifecycle, scope};
use crate::engine::rules::Rule;
use crate::engine::rules::model::{ActionSpec, ActionTrigger};
use crate::engine::template::Renderer;

/// The finalizer holding a parent's deletion until its label-owned children are deleted and its
/// `on: delete` actions have run (re-exported as [`super::CLEANUP_FINALIZER`]).
pub const FINALIZER: &str = "ruleop.io/cleanup";

/// How long `waitFor` may hold a deletion when the rule gives no `timeout`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a deletion waiting on `waitFor` looks again (the created object is not watched).
const RECHECK: Duration = Duration::from_secs(1);

/// What a reconcile does with the finalizer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FinalizerStep {
    /// Nothing.
    #[default]
    Unchanged,
    /// Add it before anything else is written.
    Add,
    /// Remove it after the cleanup deletes succeeded: the deletion can complete.
    Remove,
}

/// The state of a deletion in progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deletion {
    /// What holds the deletion, for people.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// `on: delete` actions given up on after their timeout (each becomes a Warning Event).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timed_out: Vec<String>,
    /// The finalize phase given up on after its timeout (a Warning Event `FinalizeTimedOut`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalize_timed_out: Option<String>,
    /// When to look again at a `waitFor` or a finalize deadline, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recheck_in_ms: Option<u64>,
}

/// Whether the parent carries our finalizer.
pub(crate) fn has_finalizer(parent: &Value) -> bool {
    parent
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The finalizer step of a live (not deleting) parent: add it when the rule may own children
/// by labels, orders its teardown or has a finalize phase, when a desired child is to be orphaned (`orphans`: it must be released before
/// the garbage collector follows its ownerReference), or when an `on: delete` action would run
/// (its `when` is true now). Once added it stays until the deletion (a parent whose `when`
/// turned false is released quickly then).
pub(crate) fn finalizer_step(
    renderer: &Renderer,
    rule: &Rule,
    parent: &Value,
    context: &minijinja::Value,
    orphans: bool,
) -> Result<FinalizerStep, PlanError> {
    if has_finalizer(parent) {
        return Ok(FinalizerStep::Unchanged);
    }
    let mut needed = rule.always_holds_deletion() || orphans;
    for action in rule.spec.actions.iter().filter(|a| a.on == ActionTrigger::Delete) {
        if needed {
            break;
        }
        needed = match &action.when {
            None => true,
            Some(when) => {
                let label = rule.inline_template(&format!("actions.{}.when", action.id.value));
                renderer.eval_bool(&label, &when.value, context)?
            }
        };
    }
    Ok(if needed {
        FinalizerStep::Add
    } else {
        FinalizerStep::Unchanged
    })
}

/// What planning a deletion reads.
pub(crate) struct Inputs<'a> {
    /// Renders `when` and `waitFor` expressions and action templates.
    pub renderer: &'a Renderer,
    /// The rule.
    pub rule: &'a Rule,
    /// The parent (with `deletionTimestamp`).
    pub parent: &'a Value,
    /// Its identity.
    pub parent_ref: &'a ParentRef,
    /// Observed objects carrying this parent's labels: children and objects its actions created.
    pub ours: &'a [&'a Value],
    /// Observed children by id.
    pub children: &'a BTreeMap<String, &'a Value>,
    /// The base template context.
    pub context: &'a minijinja::Value,
    /// The time of this plan (RFC 3339).
    pub now: &'a str,
}

/// Where a deletion stands once its `on: delete` actions are planned.
pub(crate) enum Stage {
    /// This reconcile's whole plan: an action runs or is waited for, or the children go.
    Done(Box<Plan>),
    /// The children go after a finalize phase whose `until` holds: the plan, to which the
    /// status of the phase's end is added (the last one written reported the state before).
    Finalized(Box<Plan>),
    /// The actions are settled and the finalize phase goes on: the children are reconciled as
    /// for a live parent, with these action decisions and this deletion state.
    Finalize {
        /// The `on: delete` actions' decisions.
        actions: Vec<actions::ActionDecision>,
        /// What holds the deletion (the phase's `until`).
        deletion: Deletion,
    },
}

/// Plans one reconcile of a parent being deleted: `on: delete` actions run or are waited for;
/// once they are settled the finalize phase (if any) runs until its `until` holds; then the
/// children are deleted and the finalizer removed.
pub(crate) fn plan(inputs: &Inputs<'_>) -> Result<Stage, PlanError> {
    let Inputs { parent, parent_ref, .. } = *inputs;
    let mut deletion = Deletion::default();
    let status = DesiredStatus {
        generation: parent_ref.generation,
        ..DesiredStatus::default()
    };
    if !has_finalizer(parent) {
        deletion.waiting.push(format!(
            "no {FINALIZER} finalizer: nothing holds the deletion, nothing to do"
        ));
        return Ok(done(empty(status, deletion, FinalizerStep::Unchanged, Vec::new())));
    }
    let (decisions, settled) = delete_actions(inputs, &mut deletion)?;
    if !settled {
        return Ok(done(empty(status, deletion, FinalizerStep::Unchanged, decisions)));
    }
    match finalizing(inputs, &mut deletion) {
        Phase::Holds => Ok(Stage::Finalize {
            actions: decisions,
            deletion,
        }),
        Phase::Ended => Ok(Stage::Finalized(Box::new(teardown(
            inputs, status, deletion, decisions,
        )))),
        Phase::None => Ok(done(teardown(inputs, status, deletion, decisions))),
    }
}

fn done(plan: Plan) -> Stage {
    Stage::Done(Box::new(plan))
}

/// Plans the `on: delete` actions; `true` once none of them holds the deletion any more.
fn delete_actions(
    inputs: &Inputs<'_>,
    deletion: &mut Deletion,
) -> Result<(Vec<actions::ActionDecision>, bool), PlanError> {
    let Inputs { parent, parent_ref, .. } = *inputs;
    let scope = Scope {
        now: inputs.now,
        parent,
        parent_ref,
        children: inputs.children,
        context: inputs.context,
    };
    let mut decisions = Vec::new();
    let mut settled = true;
    for action in inputs
        .rule
        .spec
        .actions
        .iter()
        .filter(|a| a.on == ActionTrigger::Delete)
    {
        let mut decision = actions::decide(inputs.renderer, inputs.rule, action, &scope)?;
        let record = RunRecord::read(parent, &action.id.value);
        let key = actions::idempotency_key(&parent_ref.uid, &action.id.value, DELETE_GUARD_VALUE);
        let record = record.filter(|r| r.key == key);
        let left = time_left(action, record.as_ref(), inputs.now);
        if record.as_ref().is_some_and(|r| r.phase == phase::DONE) {
            settled &= wait_for_holds(inputs, action, &key, left, deletion)?;
        } else if !decision.run && decision.key.is_none() && decision.retry_in_ms.is_none() {
            // `when` is false: nothing to run, nothing to wait for.
        } else if left.is_some_and(|l| l.is_zero()) {
            // A run that keeps failing must not hold the deletion forever either.
            decision.run = false;
            decision.retry_in_ms = None;
            decision.reason = format!("gave up: not completed within its timeout (key {key})");
            deletion.timed_out.push(format!(
                "action {}: not completed within its timeout; the deletion goes on without it",
                action.id.value
            ));
        } else {
            settled = false;
            let what = if decision.run {
                "runs now; the deletion waits for it"
            } else {
                decision.reason.as_str()
            };
            deletion.waiting.push(format!("action {}: {what}", action.id.value));
        }
        decisions.push(decision);
    }
    Ok((decisions, settled))
}

/// Where the finalize phase stands.
enum Phase {
    /// The rule has none, or it timed out.
    None,
    /// It holds the deletion.
    Holds,
    /// Its `until` holds.
    Ended,
}

/// Whether the finalize phase still holds the deletion: its `until` is false (or cannot be
/// evaluated yet) and its timeout, counted from the deletion request, has not passed.
fn finalizing(inputs: &Inputs<'_>, deletion: &mut Deletion) -> Phase {
    let Some(finalize) = &inputs.rule.spec.finalize else {
        return Phase::None;
    };
    let timeout = finalize
        .timeout
        .as_ref()
        .and_then(|t| crate::engine::duration::parse(&t.value).ok())
        .unwrap_or(DEFAULT_TIMEOUT);
    let left = finalize_time_left(inputs.parent, timeout, inputs.now);
    if left.is_zero() {
        deletion.finalize_timed_out = Some(format!(
            "finalize: `{}` did not hold within {}s of the deletion; the deletion goes on",
            finalize.until.value,
            timeout.as_secs()
        ));
        return Phase::None;
    }
    let label = inputs.rule.inline_template("finalize.until");
    let verdict = match inputs.renderer.eval_bool(&label, &finalize.until.value, inputs.context) {
        Ok(true) => return Phase::Ended,
        Ok(false) => format!("until `{}` is false", finalize.until.value),
        Err(e) => format!(
            "until `{}` cannot be evaluated yet: {}",
            finalize.until.value, e.message
        ),
    };
    deletion
        .waiting
        .push(format!("finalize: {verdict}; giving up in {}s", left.as_secs().max(1)));
    // The children are watched; the deadline is not.
    deletion.recheck_in_ms = Some(left.as_millis().min(u128::from(u64::MAX)) as u64);
    Phase::Holds
}

/// Time left of a finalize phase: `timeout` after the deletion request. `deletionTimestamp` is
/// kept to whole seconds, rounded down, so a second is added: the phase gets at least `timeout`.
fn finalize_time_left(parent: &Value, timeout: Duration, now: &str) -> Duration {
    let requested: Option<jiff::Timestamp> = parent
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok());
    let (Some(requested), Ok(now)) = (requested, now.parse::<jiff::Timestamp>()) else {
        return Duration::ZERO;
    };
    let elapsed = Duration::try_from(now.duration_since(requested)).unwrap_or(Duration::ZERO);
    (timeout + Duration::from_secs(1)).saturating_sub(elapsed)
}

/// The children's removal once nothing else holds the deletion. A rule that orders its
/// children deletes them in waves (see [`waves`]); otherwise label-owned children are deleted
/// here, the others by the garbage collector once the finalizer is gone. Children to orphan
/// are released before the garbage collector could follow their ownerReference.
fn teardown(
    inputs: &Inputs<'_>,
    status: DesiredStatus,
    mut deletion: Deletion,
    decisions: Vec<actions::ActionDecision>,
) -> Plan {
    let Inputs { rule, parent_ref, .. } = *inputs;
    let children: Vec<&Value> = inputs
        .ours
        .iter()
        .copied()
        .filter(|o| label(o, LABEL_CHILD).is_some() && label(o, LABEL_ACTION).is_none())
        .collect();
    let (removing, finalizer) = if rule.tears_down_in_order() {
        let wave = waves(rule, &children, &mut deletion.waiting);
        let step = if children.is_empty() {
            FinalizerStep::Remove
        } else {
            FinalizerStep::Unchanged
        };
        (wave, step)
    } else {
        let live: Vec<&Value> = children.into_iter().filter(|o| !is_deleting(o)).collect();
        (live, FinalizerStep::Remove)
    };
    let (cleanup, release) = lifecycle::removals(rule, &parent_ref.uid, removing);
    let ordered = rule.tears_down_in_order();
    let cleanup: Vec<ObjectRef> = cleanup
        .into_iter()
        // What carries an ownerReference (every child of a cluster-scoped parent) is the
        // garbage collector's to delete once the parent is gone.
        .filter(|o| ordered || (!parent_ref.is_cluster_scoped() && scope::is_label_owned(o, &parent_ref.namespace)))
        .filter_map(ObjectRef::of)
        .collect();
    // Deleting a Namespace deletes what is in it: no request per object inside.
    let namespaces: Vec<String> = cleanup
        .iter()
        .filter(|o| o.api_version == "v1" && o.kind == "Namespace")
        .map(|o| o.name.clone())
        .collect();
    let cleanup: Vec<ObjectRef> = cleanup
        .into_iter()
        .filter(|o| !namespaces.contains(&o.namespace))
        .collect();
    let mut plan = empty(status, deletion, finalizer, decisions);
    plan.prune = cleanup;
    plan.release = release;
    plan
}

/// The wave of an ordered teardown: the live children no other remaining child depends on
/// (directly or through others), so the last created go first. A child being deleted still
/// counts as remaining until it is gone; what the others wait for goes into `waiting`.
fn waves<'a>(rule: &Rule, children: &[&'a Value], waiting: &mut Vec<String>) -> Vec<&'a Value> {
    let remaining: BTreeSet<&str> = children.iter().filter_map(|o| label(o, LABEL_CHILD)).collect();
    let dependents = |id: &str| -> Vec<&str> {
        remaining
            .iter()
            .copied()
            .filter(|other| *other != id && depends_on(rule, other, id))
            .collect()
    };
    let mut wave = Vec::new();
    let mut held = BTreeMap::new();
    for object in children {
        let Some(id) = label(object, LABEL_CHILD) else {
            continue;
        };
        let after = dependents(id);
        if !after.is_empty() {
            held.entry(id).or_insert(after);
        } else if is_deleting(object) {
            held.entry(id).or_insert_with(Vec::new);
        } else {
            wave.push(*object);
        }
    }
    for (id, after) in held {
        waiting.push(if after.is_empty() {
            format!("child {id:?}: being deleted; the children it depends on wait until it is gone")
        } else {
            let verb = if after.len() == 1 { "is" } else { "are" };
            format!(
                "child {id:?}: deleted once {} {verb} gone (reverse dependsOn order)",
                quoted(&after)
            )
        });
    }
    wave
}

/// Whether child `id` depends on child `on`, directly or through other children.
fn depends_on(rule: &Rule, id: &str, on: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut next = vec![id];
    while let Some(current) = next.pop() {
        if !seen.insert(current) {
            continue;
        }
        let Some(child) = rule.spec.children.iter().find(|c| c.id.value == current) else {
            continue;
        };
        for dependency in &child.depends_on {
            if dependency.value == on {
                return true;
            }
            next.push(dependency.value.as_str());
        }
    }
    false
}

fn quoted(ids: &[&str]) -> String {
    ids.iter().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
}

fn empty(
    status: DesiredStatus,
    deletion: Deletion,
    finalizer: FinalizerStep,
    actions: Vec<actions::ActionDecision>,
) -> Plan {
    Plan {
        actions,
        finalizer,
        deletion: Some(deletion),
        ..Plan::with_status_only(status)
    }
}

/// Time left before the action's timeout, counted from the start of its run; `None` before it
/// started.
fn time_left(action: &ActionSpec, record: Option<&RunRecord>, now: &str) -> Option<Duration> {
    let timeout = action
        .timeout
        .as_ref()
        .and_then(|t| crate::engine::duration::parse(&t.value).ok())
        .unwrap_or(DEFAULT_TIMEOUT);
    let started: jiff::Timestamp = record?.started_at.as_deref()?.parse().ok()?;
    let now: jiff::Timestamp = now.parse().ok()?;
    let elapsed = Duration::try_from(now.duration_since(started)).unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}

/// Whether a completed action's `waitFor` holds (or its timeout passed, or it has none).
fn wait_for_holds(
    inputs: &Inputs<'_>,
    action: &ActionSpec,
    key: &str,
    left: Option<Duration>,
    deletion: &mut Deletion,
) -> Result<bool, PlanError> {
    let id = action.id.value.as_str();
    let Some(wait_for) = &action.wait_for else {
        return Ok(true);
    };
    let created = inputs.ours.iter().find(|o| {
        label(o, LABEL_ACTION) == Some(id)
            && o.pointer("/metadata/annotations")
                .and_then(|a| a.get(ANNOTATION_KEY))
                .and_then(Value::as_str)
                == Some(key)
    });
    let verdict = match created {
        Some(object) => {
            let context = context::build(
                inputs.parent,
                inputs.children,
                &inputs.rule.name,
                Some(("object", (*object).clone())),
            );
            let label = inputs.rule.inline_template(&format!("actions.{id}.waitFor"));
            match inputs.renderer.eval_bool(&label, &wait_for.value, &context) {
                Ok(true) => return Ok(true),
                Ok(false) => format!("waitFor `{}` is false", wait_for.value),
                Err(e) => format!("waitFor `{}` cannot be evaluated yet: {e}", wait_for.value),
            }
        }
        None => "the object it created is not there".to_owned(),
    };
    let left = left.unwrap_or(DEFAULT_TIMEOUT);
    if left.is_zero() {
        deletion.timed_out.push(format!(
            "action {id}: {verdict} and its timeout passed; the deletion goes on without it"
        ));
        return Ok(true);
    }
    deletion.waiting.push(format!(
        "action {id}: {verdict}; giving up in {}s",
        left.as_secs().max(1)
    ));
    let recheck = left.min(RECHECK).as_millis() as u64;
    deletion.recheck_in_ms = Some(deletion.recheck_in_ms.map_or(recheck, |r| r.min(recheck)));
    Ok(false)
}

/// The merge patch adding or removing our finalizer, under the parent's resourceVersion so that
/// a concurrent change to the list (another controller's finalizer) is a conflict, not a loss.
pub(crate) fn finalizer_patch(parent: &Value, step: FinalizerStep) -> Option<Value> {
    let current: Vec<Value> = parent
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ours = json!(FINALIZER);
    let finalizers: Vec<Value> = match step {
        FinalizerStep::Unchanged => return None,
        FinalizerStep::Add if current.contains(&ours) => return None,
        FinalizerStep::Add => current.into_iter().chain([ours]).collect(),
        FinalizerStep::Remove if !current.contains(&ours) => return None,
        FinalizerStep::Remove => current.into_iter().filter(|f| *f != ours).collect(),
    };
    let resource_version = parent
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    Some(json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Rule {
        let child = |id: &str, deps: &str| {
            format!("  - {{id: {id}, apiVersion: v1, kind: ConfigMap, template: t.j2, dependsOn: [{deps}]}}\n")
        };
        Rule::from_spec_yaml(&format!(
            "watch: {{apiVersion: myorg.io/v1, kind: Database}}\nchildren:\n  - {{id: base, apiVersion: v1, kind: ConfigMap, template: t.j2}}\n{}{}",
            child("middle", "base"),
            child("top", "middle")
        ))
    }

    fn object(id: &str, deleting: bool) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": id, "namespace": "shop", "labels": {LABEL_CHILD: id}}});
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        }
        object
    }

    fn wave(rule: &Rule, children: &[Value]) -> (Vec<String>, Vec<String>) {
        let children: Vec<&Value> = children.iter().collect();
        let mut waiting = Vec::new();
        let wave = waves(rule, &children, &mut waiting);
        let names = wave
            .iter()
            .filter_map(|o| label(o, LABEL_CHILD))
            .map(str::to_owned)
            .collect();
        (names, waiting)
    }

    #[test]
    fn teardown_goes_in_reverse_depends_on_order_and_waits_for_each_wave_to_be_gone() {
        let rule = chain();
        let (first, waiting) = wave(
            &rule,
            &[object("base", false), object("middle", false), object("top", false)],
        );
        assert_eq!(first, ["top"]);
        assert_eq!(
            waiting,
            [
                "child \"base\": deleted once \"middle\", \"top\" are gone (reverse dependsOn order)",
                "child \"middle\": deleted once \"top\" is gone (reverse dependsOn order)"
            ]
        );
        let (held, _) = wave(
            &rule,
            &[object("base", false), object("middle", false), object("top", true)],
        );
        assert!(held.is_empty(), "a child being deleted holds the next wave: {held:?}");
        // Through a child that is already gone: `base` still waits for `top`.
        let (skipping, _) = wave(&rule, &[object("base", false), object("top", false)]);
        assert_eq!(skipping, ["top"]);
        let (last, waiting) = wave(&rule, &[object("base", false)]);
        assert_eq!((last, waiting), (vec!["base".to_owned()], vec![]));
    }

    #[test]
    fn a_finalize_phase_gets_at_least_its_timeout_from_a_whole_second_deletion_stamp() {
        let parent = json!({"metadata": {"deletionTimestamp": "2026-12-02T10:00:00Z"}});
        let timeout = Duration::from_secs(3);
        assert_eq!(
            finalize_time_left(&parent, timeout, "2026-12-02T10:00:02.5Z"),
            Duration::from_millis(1500)
        );
        assert_eq!(
            finalize_time_left(&parent, timeout, "2026-12-02T10:00:04Z"),
            Duration::ZERO
        );
        assert_eq!(
            finalize_time_left(&json!({}), timeout, "2026-12-02T10:00:00Z"),
            Duration::ZERO
        );
    }

    #[test]
    fn finalizer_patches_keep_other_finalizers_and_pin_the_version() {
        let parent = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other.io/x"]}});
        assert_eq!(
            finalizer_patch(&parent, FinalizerStep::Add),
            Some(json!({"metadata": {"resourceVersion": "7", "finalizers": ["other.io/x", FINALIZER]}}))
        );
        assert_eq!(finalizer_patch(&parent, FinalizerStep::Remove), None);
        let ours = json!({"metadata": {"resourceVersion": "8", "finalizers": [FINALIZER, "other.io/x"]}});
        assert_eq!(finalizer_patch(&ours, FinalizerStep::Add), None);
        assert_eq!(
            finalizer_patch(&ours, FinalizerStep::Remove),
            Some(json!({"metadata": {"resourceVersion": "8", "finalizers": ["other.io/x"]}}))
        );
    }
}
