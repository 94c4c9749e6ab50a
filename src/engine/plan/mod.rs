//! Planning: `plan(rule, parent, observed children) -> Plan`, a pure function of values.
//!
//! The plan holds everything one reconcile will do: the rendered children (with labels and a
//! controller owner reference), the children to prune, each action's decision and reason, and
//! the status patch (absent when status already holds). All or nothing: any render or
//! validation error yields a [`PlanError`] and no plan, so no partial child set is ever applied.

pub mod actions;
pub(crate) mod children;
pub(crate) mod context;
pub(crate) mod deletion;
pub(crate) mod foreach;
pub(crate) mod lifecycle;
pub(crate) mod lookups;
pub(crate) mod namespace_guard;
pub(crate) mod observed;
pub(crate) mod order;
pub(crate) mod ownership;
pub(crate) mod parent_metadata;
pub(crate) mod pause;
pub(crate) mod relocate;
pub(crate) mod scaling;
pub(crate) mod scope;
pub(crate) mod status;
pub(crate) mod status_eval;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::engine::rules::Rule;
use crate::engine::rules::model::ActionTrigger;
use crate::engine::template::{self, RenderError, Renderer};
use actions::{ActionDecision, Scope};
use children::{Declared, DesiredChild, ObjectRef};
use context::{LABEL_CHILD, LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use lookups::{LookupRead, LookupSource, NoLookups};
use observed::Observed;
use order::{Selected, Waiting};
use scope::Placement;
use status::{ConditionStatus, WantedCondition};

/// The finalizer ruleop adds to a parent whose children are label-owned or whose rule has an
/// `on: delete` action (the benchmark's equal floor adds the same one).
pub use deletion::FINALIZER as CLEANUP_FINALIZER;

/// The condition type the engine manages unless a rule defines it.
pub const READY: &str = "Ready";

/// Why no plan could be made for a parent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The parent object lacks something every plan needs (spec, uid, namespace).
    #[error("invalid custom resource: {0}")]
    InvalidParent(String),
    /// A template or expression failed to render.
    #[error("render failed: {0}")]
    Render(#[from] RenderError),
    /// A child would be written into a namespace the parent may not write to (confused deputy).
    #[error(
        "child {id:?} targets namespace {namespace:?}, which is not {home}, \
         not a Namespace this parent owns, and not one the rule allows (spec.allowedNamespaces, \
         spec.allowedNamespaceSelector: {allowed})"
    )]
    NamespaceNotAllowed {
        /// Child id.
        id: String,
        /// The namespace the child rendered.
        namespace: String,
        /// The parent's home namespace, described ([`context::ParentRef::home_description`]).
        home: String,
        /// The rule's allowed namespaces, for the message.
        allowed: String,
    },
    /// A lookup would read from a namespace the parent may not read (confused deputy): its
    /// `namespace` template rendered something other than the parent's namespace or one of
    /// `spec.allowedNamespaces` (only a constant `namespace` may name any other).
    #[error(
        "lookup {id:?} (namespace at {at}) reads namespace {namespace:?}, which is not {home} \
         and not in spec.allowedNamespaces ({allowed}); only a constant namespace may name another"
    )]
    LookupNamespaceNotAllowed {
        /// Lookup id.
        id: String,
        /// Where the lookup's `namespace` is written (file:line:col).
        at: String,
        /// The namespace the template rendered.
        namespace: String,
        /// The parent's home namespace, described ([`context::ParentRef::home_description`]).
        home: String,
        /// The rule's allowed namespaces, for the message.
        allowed: String,
    },
    /// A list lookup matched more objects than its `maxItems`.
    #[error(
        "{at}: lookup {id:?} matched {count} objects, more than its maxItems ({max}); narrow its matchLabels or namespace, or raise maxItems"
    )]
    LookupTooLarge {
        /// Lookup id.
        id: String,
        /// Where the lookup is written (file:line:col).
        at: String,
        /// How many objects matched.
        count: usize,
        /// Its bound.
        max: usize,
    },
    /// A child rendered, but not as the one object its rule declares.
    #[error("child {id:?} ({template}): {message}")]
    InvalidChild {
        /// Child or action id.
        id: String,
        /// Template name.
        template: String,
        /// What is wrong with the rendered object.
        message: String,
    },
    /// The children of one plan add up to more than [`MAX_PLAN_BYTES`] (as JSON): a parent's
    /// values multiplied by a template or a `forEach` would hold that much in memory at once.
    #[error(
        "child {id:?} ({template}) brings the plan's children to {bytes} bytes of JSON, over the limit of \
         {MAX_PLAN_BYTES} bytes per parent"
    )]
    PlanTooLarge {
        /// The child whose object went over.
        id: String,
        /// Its template.
        template: String,
        /// The children's bytes so far, this one included.
        bytes: usize,
    },
    /// A `forEach` gave items that cannot become objects (duplicate or missing keys, too many).
    #[error("child {id:?} (forEach at {at}): {message}")]
    ForEach {
        /// Child id.
        id: String,
        /// Where the `forEach` is written (file:line:col).
        at: String,
        /// What is wrong with the items.
        message: String,
    },
}

impl PlanError {
    /// A CamelCase reason for conditions, Events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::InvalidParent(_) => "InvalidParent",
            PlanError::Render(_) => "RenderFailed",
            PlanError::InvalidChild { .. } => "InvalidChild",
            PlanError::NamespaceNotAllowed { .. } | PlanError::LookupNamespaceNotAllowed { .. } => {
                "NamespaceNotAllowed"
            }
            PlanError::ForEach { .. } => "InvalidForEach",
            PlanError::PlanTooLarge { .. } => "PlanTooLarge",
            PlanError::LookupTooLarge { .. } => "LookupTooLarge",
        }
    }
}

/// The most JSON the children of one plan may add up to. One template renders at most
/// [`crate::engine::template::MAX_OUTPUT_BYTES`]; this bounds what a `forEach` multiplies.
pub const MAX_PLAN_BYTES: usize = 8 << 20;

/// Everything one reconcile of one parent will do.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Desired children, in rule order.
    pub children: Vec<DesiredChild>,
    /// Observed children of this parent that are no longer desired (or, while it is being
    /// deleted, its label-owned children), to delete.
    pub prune: Vec<ObjectRef>,
    /// Children to release instead (`deletionPolicy: Orphan`), after the prune.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub release: Vec<lifecycle::Release>,
    /// Desired children held back by `dependsOn` (not applied, not pruned).
    pub waiting: Vec<Waiting>,
    /// Each child id's readiness (`readyWhen` on the observed objects), as `ready.<id>` and
    /// `dependsOn` saw it; empty when no children were planned (paused, deleted).
    #[serde(skip)]
    pub readiness: BTreeMap<String, order::Readiness>,
    /// Removals a `scaling: Ordered` forEach holds back (one item goes at a time).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_removals: Vec<scaling::HeldRemoval>,
    /// What each lookup read.
    pub lookups: Vec<LookupRead>,
    /// One decision per action, in rule order.
    pub actions: Vec<ActionDecision>,
    /// What happens to the parent's `ruleop.io/cleanup` finalizer.
    pub finalizer: deletion::FinalizerStep,
    /// The deletion in progress, when the parent is being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion: Option<deletion::Deletion>,
    /// The status merge patch, or `None` when the status already holds.
    pub status_patch: Option<Value>,
    /// What the status should hold, to merge into a later write (after actions changed it).
    #[serde(skip)]
    pub status: DesiredStatus,
    /// Status fields and conditions whose evaluation failed (located in the rule file); the
    /// children are planned regardless.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status_problems: Vec<String>,
    /// The parent is paused (`ruleop.io/paused: "true"`): nothing is written but `Paused`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The server-side apply of `spec.parentMetadata` onto the parent, or `None` when it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_metadata: Option<Value>,
    /// Warning Events on the parent, published once the status patch is written: conditions
    /// turning `False` with a reason their `warnOn` lists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<status::ConditionWarning>,
}

impl Plan {
    /// A plan that writes no child, runs no action and patches no status: `status` alone, for
    /// the caller to build on (a paused parent, a deletion's steps).
    pub(crate) fn with_status_only(status: DesiredStatus) -> Plan {
        Plan {
            children: Vec::new(),
            prune: Vec::new(),
            release: Vec::new(),
            waiting: Vec::new(),
            readiness: BTreeMap::new(),
            held_removals: Vec::new(),
            lookups: Vec::new(),
            actions: Vec::new(),
            finalizer: deletion::FinalizerStep::Unchanged,
            deletion: None,
            status_patch: None,
            status,
            status_problems: Vec::new(),
            paused: false,
            parent_metadata: None,
            warnings: Vec::new(),
        }
    }
}

/// The status fields and conditions a plan wants, independent of the status it was planned on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DesiredStatus {
    /// `metadata.generation` the status reports as observed.
    pub generation: i64,
    /// Rule fields (`null` removes one).
    pub fields: Map<String, Value>,
    /// Conditions this plan sets.
    pub conditions: Vec<WantedCondition>,
    /// The rule's revision, for `status.ruleopRevision` (rules with `spec.rollout` in `ruleop
    /// run`): written only with a write the reconcile makes anyway, never on its own.
    pub revision: Option<u64>,
}

/// The status field naming the revision of the rule that last changed the parent.
pub const REVISION_FIELD: &str = "ruleopRevision";

impl DesiredStatus {
    /// The merge patch taking `parent`'s status to this one, plus `extra` conditions; `None`
    /// if it already holds. A patch carries `status.ruleopRevision` when it names another
    /// revision than the parent's: a status that changes is a change the revision made.
    pub fn patch_against(&self, parent: &Value, extra: &[WantedCondition], now: &str) -> Option<Value> {
        let wanted: Vec<WantedCondition> = self.conditions.iter().chain(extra).cloned().collect();
        let mut patch = status_patch(parent, self.generation, self.fields.clone(), &wanted, now)?;
        if let (Some(stamp), Some(status)) = (self.revision_patch(parent), patch.get_mut("status")) {
            status[REVISION_FIELD] = stamp["status"][REVISION_FIELD].clone();
        }
        Some(patch)
    }

    /// `{"status": {"ruleopRevision": n}}` when the parent records another revision (or none),
    /// for a reconcile that changed children but not the status: what it costs is that one
    /// status write, once per revision that changes the parent's children. `None` otherwise.
    pub fn revision_patch(&self, parent: &Value) -> Option<Value> {
        let revision = self.revision?;
        let recorded = parent
            .pointer(&format!("/status/{REVISION_FIELD}"))
            .and_then(Value::as_u64);
        (recorded != Some(revision)).then(|| json!({"status": {REVISION_FIELD: revision}}))
    }
}

impl Plan {
    /// The soonest time an action waiting out a retry backoff may run again, or a deletion
    /// waiting on `waitFor` should look again.
    pub fn next_retry(&self) -> Option<std::time::Duration> {
        self.actions
            .iter()
            .filter_map(|a| a.retry_in_ms)
            .chain(self.deletion.as_ref().and_then(|d| d.recheck_in_ms))
            .min()
            .map(std::time::Duration::from_millis)
    }
}

/// Computes the plan for one parent of a rule without lookups (every lookup is `none`).
/// `observed` holds the live objects of the rule's child kinds carrying this parent's UID
/// label (only those [`ownership::owned`] proves are used); `now` (RFC 3339) stamps changed conditions.
pub fn plan(
    renderer: &Renderer,
    rule: &Rule,
    parent: &Value,
    observed: &[Value],
    now: &str,
) -> Result<Plan, PlanError> {
    plan_with(renderer, rule, parent, observed, &NoLookups, now)
}

/// Computes the plan for one parent, reading looked-up objects from `lookups`. A rule that does
/// not write status (`spec.status.write`, off for built-in kinds) plans no status patch.
pub fn plan_with(
    renderer: &Renderer,
    rule: &Rule,
    parent: &Value,
    observed: &[Value],
    lookups: &dyn LookupSource,
    now: &str,
) -> Result<Plan, PlanError> {
    let mut plan = plan_parent(renderer, rule, parent, observed, lookups, now)?;
    if !rule.writes_status() {
        plan.status_patch = None;
    }
    if plan.status_patch.is_some() {
        plan.warnings = condition_warnings(rule, parent, &plan.status.conditions);
    }
    Ok(plan)
}

/// The Warning Events the `wanted` conditions' transitions ask for (`warnOn`), against the
/// parent's current conditions.
fn condition_warnings(rule: &Rule, parent: &Value, wanted: &[WantedCondition]) -> Vec<status::ConditionWarning> {
    let current = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let warn_on = |type_: &str| -> &[String] {
        rule.spec
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.warn_on.as_slice())
            .unwrap_or_default()
    };
    status::warnings(current, wanted, warn_on)
}

fn plan_parent(
    renderer: &Renderer,
    rule: &Rule,
    parent: &Value,
    observed: &[Value],
    lookups: &dyn LookupSource,
    now: &str,
) -> Result<Plan, PlanError> {
    let parent_ref = ParentRef::read(parent)?;
    parent_ref.check_scope(rule.has_cluster_scoped_parents())?;
    if pause::is_paused(parent) {
        return Ok(pause::plan(parent, now));
    }
    // Labels are only a claim: every reader below sees only what is proven to be this parent's.
    let ours: Vec<&Value> = ownership::owned(rule, &parent_ref, observed, lookups);
    let grouped = Observed::group(rule, &ours);
    let by_id = grouped.singles();
    let parent_context = context::build(parent, &BTreeMap::new(), &rule.name, None);
    let (lookups_read, looked_up) = lookups::resolve(renderer, rule, &parent_ref, &parent_context, lookups)?;
    let runs = actions::runs_context(rule, parent, &ours);
    let base = context::extend_with(
        &parent_context,
        [
            ("children", grouped.to_context()),
            ("lookups", template::to_value(&looked_up)),
            ("actions", template::to_value(&runs)),
        ],
    );
    let live = Live {
        renderer,
        rule,
        parent,
        parent_ref: &parent_ref,
        ours: &ours,
        grouped: &grouped,
        by_id: &by_id,
        base: &base,
        runs: &runs,
        lookups,
        now,
    };
    if !context::is_deleting(parent) {
        return plan_children(&live, lookups_read);
    }
    let inputs = deletion::Inputs {
        renderer,
        rule,
        parent,
        parent_ref: &parent_ref,
        ours: &ours,
        children: &by_id,
        context: &base,
        now,
    };
    match deletion::plan(&inputs)? {
        deletion::Stage::Done(plan) => Ok(*plan),
        // The status says how the phase ended (a failing render only loses that write).
        deletion::Stage::Finalized(plan) => Ok(match plan_children(&live, lookups_read) {
            Ok(last) => Plan {
                status_patch: last.status_patch,
                status: last.status,
                status_problems: last.status_problems,
                ..*plan
            },
            Err(_) => *plan,
        }),
        // The finalize phase: the children are reconciled as for a live parent (templates see
        // `metadata.deletionTimestamp`), with the deletion's own actions and finalizer.
        deletion::Stage::Finalize { actions, deletion } => Ok(Plan {
            actions,
            finalizer: deletion::FinalizerStep::Unchanged,
            deletion: Some(deletion),
            parent_metadata: None,
            ..plan_children(&live, lookups_read)?
        }),
    }
}

/// What planning the children of a parent reads, once its observed objects and lookups are known.
struct Live<'a> {
    renderer: &'a Renderer,
    rule: &'a Rule,
    parent: &'a Value,
    parent_ref: &'a ParentRef,
    ours: &'a [&'a Value],
    grouped: &'a Observed<'a>,
    by_id: &'a BTreeMap<String, &'a Value>,
    base: &'a minijinja::Value,
    /// The `actions` entry of `base`, as JSON.
    runs: &'a Value,
    lookups: &'a dyn LookupSource,
    now: &'a str,
}

/// Plans the children, actions and status of a parent (live, or in its finalize phase).
fn plan_children(live: &Live<'_>, lookups_read: Vec<LookupRead>) -> Result<Plan, PlanError> {
    let Live {
        renderer,
        rule,
        parent,
        parent_ref,
        ours,
        grouped,
        by_id,
        base,
        runs,
        lookups,
        now,
    } = *live;
    // `when` and `forEach` see everything but `ready`, which depends on what they select.
    let mut selected = Vec::new();
    for child in &rule.spec.children {
        if let Some(when) = &child.when {
            let label = rule.inline_template(&format!("children.{}.when", child.id.value));
            let holds = renderer
                .eval_bool(&label, &when.value, base)
                .map_err(|e| relocate::relocate(rule, when, e))?;
            if !holds {
                continue;
            }
        }
        let items = match &child.for_each {
            Some(for_each) => Some(foreach::items(renderer, rule, child, for_each, base)?),
            None => None,
        };
        selected.push(Selected { child, items });
    }
    let readiness = order::readiness(renderer, rule, &selected, grouped, base);
    let ready = template::to_value(&order::ready_context(&readiness));
    let context = context::extend_with(base, [("ready", ready)]);

    let mut desired = Vec::new();
    let mut waiting = Vec::new();
    let mut plan_bytes = 0;
    for Selected { child, items } in &selected {
        if let Some(wait) = order::waits_for(child, &readiness) {
            waiting.push(wait);
            continue;
        }
        let declared = Declared {
            id: &child.id.value,
            api_version: &child.api_version,
            kind: &child.kind,
            template: &child.template.value,
            placement: Placement::Child {
                cluster_scoped: rule.is_cluster_scoped(&child.api_version, &child.kind),
            },
        };
        let mut render = |context: &minijinja::Value| {
            let rendered = children::desired_child(
                renderer,
                &declared,
                child.on_immutable_change,
                parent_ref,
                &rule.name,
                context,
            )?;
            plan_bytes += children::json_len(&rendered.object);
            if plan_bytes > MAX_PLAN_BYTES {
                return Err(PlanError::PlanTooLarge {
                    id: child.id.value.clone(),
                    template: child.template.value.clone(),
                    bytes: plan_bytes,
                });
            }
            let mut rendered = DesiredChild {
                adopt: child.adopt,
                ..rendered
            };
            lifecycle::mark(&mut rendered.object, child.deletion_policy);
            Ok(rendered)
        };
        let Some(items) = items else {
            desired.push(render(&context)?);
            continue;
        };
        let mut targets: BTreeMap<ObjectRef, &str> = BTreeMap::new();
        for item in items {
            let mut rendered = render(&foreach::item_context(&context, item))?;
            foreach::mark(&mut rendered.object, &item.key);
            if let Some(other) = targets.insert(rendered.target.clone(), &item.key) {
                return Err(PlanError::InvalidChild {
                    id: child.id.value.clone(),
                    template: child.template.value.clone(),
                    message: format!(
                        "items {:?} and {:?} both render {}; make the name depend on item_key",
                        order::shown_key(other),
                        order::shown_key(&item.key),
                        rendered.target
                    ),
                });
            }
            desired.push(rendered);
        }
    }
    let (desired, held_by_namespace) = namespace_guard::guard(rule, parent_ref, desired, ours, lookups)?;
    waiting.extend(held_by_namespace);
    let wanted: BTreeSet<&ObjectRef> = desired.iter().map(|c| &c.target).collect();
    // A child waiting for its dependencies keeps what it has: never prune because of an order.
    let held: BTreeSet<&str> = waiting.iter().map(|w| w.id.as_str()).collect();
    let unwanted = ours
        .iter()
        .copied()
        .filter(|o| label(o, LABEL_CHILD).is_some_and(|id| !held.contains(id)))
        .filter(|o| ObjectRef::of(o).is_some_and(|target| !wanted.contains(&target)));
    let (prune, mut release) = lifecycle::removals(rule, &parent_ref.uid, unwanted);
    let mut prune = prune.into_iter().filter_map(ObjectRef::of).collect();
    let mut desired = desired;
    lifecycle::update_strategies(rule, &mut desired, ours, &readiness);
    let ordered = scaling::Inputs {
        renderer,
        rule,
        selected: &selected,
        observed: grouped,
        ours,
        context: &context,
    };
    let held_removals = scaling::order(&ordered, &mut desired, &mut prune, &mut release);
    let orphans = desired.iter().any(|c| lifecycle::is_orphaned(rule, &c.object));

    let scope = Scope {
        now,
        parent,
        parent_ref,
        children: by_id,
        context: &context,
    };
    let actions = rule
        .spec
        .actions
        .iter()
        .filter(|action| action.on == ActionTrigger::Reconcile)
        .map(|action| actions::decide(renderer, rule, action, &scope))
        .collect::<Result<Vec<_>, _>>()?;

    // Status is evaluated apart from children: a failing status expression costs only its
    // own field or condition (Unknown), never the children it reports on. It sees the runs
    // decided now as done, so the status written with a run already reports it.
    let status_context = match actions::after_runs(runs, &actions, parent, now) {
        Some(after) => context::extend_with(&context, [("actions", template::to_value(&after))]),
        None => context.clone(),
    };
    let evaluated = status_eval::evaluate(renderer, rule, grouped, &status_context);
    let managed = evaluated.fields;
    let mut wanted_conditions = evaluated.conditions;
    if !wanted_conditions.iter().any(|c| c.type_ == READY) {
        wanted_conditions.push(order::default_ready(
            rule,
            &selected,
            &readiness,
            &waiting,
            desired.len(),
        ));
    }
    wanted_conditions.extend(pause::resumed(parent));
    let status = DesiredStatus {
        generation: parent_ref.generation,
        fields: managed,
        conditions: wanted_conditions,
        revision: rule.rollout.as_ref().and(rule.revision),
    };
    let status_patch = status.patch_against(parent, &[], now);
    Ok(Plan {
        children: desired,
        prune,
        release,
        waiting,
        readiness,
        held_removals,
        lookups: lookups_read,
        actions,
        finalizer: deletion::finalizer_step(renderer, rule, parent, &context, orphans)?,
        deletion: None,
        status_patch,
        status,
        status_problems: evaluated.problems,
        paused: false,
        parent_metadata: parent_metadata::plan(renderer, rule, parent, &context)?,
        warnings: Vec::new(),
    })
}

/// The status patch reporting a failed reconcile: `Ready=False` with a reason and message, or
/// `None` if the status already says so.
/// Other managed fields are left as they were (nothing was applied).
pub fn failure_status_patch(parent: &Value, reason: &str, message: &str, now: &str) -> Option<Value> {
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let wanted = [WantedCondition {
        type_: READY.to_owned(),
        status: ConditionStatus::False,
        reason: reason.to_owned(),
        message: crate::engine::diagnostic::bounded(message, crate::engine::diagnostic::MESSAGE_LIMIT).into_owned(),
    }];
    status_patch(parent, generation, Map::new(), &wanted, now)
}

/// The merge patch setting `managed` fields, observedGeneration and the wanted conditions
/// (merged into the current ones), or `None` if the status already holds them.
fn status_patch(
    parent: &Value,
    generation: i64,
    mut managed: Map<String, Value>,
    wanted: &[WantedCondition],
    now: &str,
) -> Option<Value> {
    let current = parent.get("status").cloned().unwrap_or_else(|| json!({}));
    let conditions = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    managed.insert("observedGeneration".to_owned(), json!(generation));
    managed.insert(
        "conditions".to_owned(),
        json!(status::merge_conditions(&conditions, wanted, generation, now)),
    );
    status::patch(&current, managed)
}

pub(crate) fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/labels")?.get(key)?.as_str()
}

/// Whether an observed object carries this rule's labels for this parent (a claim, not proof:
/// see [`ownership::owned`]).
pub fn is_child_of(object: &Value, rule: &str, parent_uid: &str) -> bool {
    label(object, LABEL_RULE) == Some(rule) && label(object, LABEL_PARENT_UID) == Some(parent_uid)
}

#[cfg(test)]
mod tests;
