//! Readiness and ordering: `readyWhen` gives each child's readiness (`ready.<id>`), `dependsOn`
//! holds a child back until its dependencies are ready, and the engine's default `Ready`
//! condition says which child is not ready yet. (The load-time check of the graph is rules/graph.rs.)

use std::collections::BTreeMap;

use minijinja::context;
use serde_json::Value;

use super::READY;
use super::context::layer;
use super::foreach::Item;
use super::observed::Observed;
use super::status::{ConditionStatus, WantedCondition};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::rules::Rule;
use crate::engine::rules::model::ChildSpec;
use crate::engine::template::Renderer;

/// A child whose `when` holds, with its items when it is a `forEach` child.
#[derive(Debug, Clone)]
pub(crate) struct Selected<'r> {
    /// The child as declared.
    pub child: &'r ChildSpec,
    /// `None` for a plain child; the items (possibly none) of a `forEach` child.
    pub items: Option<Vec<Item>>,
}

/// Whether a child is ready, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// `ready.<id>`.
    pub ready: bool,
    /// Why it is not ready (for the `Ready` message and waiting children).
    pub why: String,
}

impl Readiness {
    fn yes() -> Self {
        Readiness {
            ready: true,
            why: String::new(),
        }
    }

    fn no(why: impl Into<String>) -> Self {
        Readiness {
            ready: false,
            why: why.into(),
        }
    }
}

/// A desired child held back by `dependsOn`: nothing is written for it and its existing
/// objects are not pruned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The child's id.
    pub id: String,
    /// The first dependency that is not ready.
    pub on: String,
    /// Why that dependency is not ready.
    pub reason: String,
}

/// The readiness of every child of the rule, from the observed objects: a child is ready when
/// every object it should have exists and its `readyWhen` (default: true) holds. A child whose
/// `when` is false is not ready; a `forEach` child with no items is. An expression that fails
/// on an observed object (a status field not written yet) means not ready, with the error.
pub(crate) fn readiness(
    renderer: &Renderer,
    rule: &Rule,
    selected: &[Selected<'_>],
    observed: &Observed<'_>,
    base: &minijinja::Value,
) -> BTreeMap<String, Readiness> {
    let mut all = BTreeMap::new();
    for child in &rule.spec.children {
        let id = child.id.value.as_str();
        let state = match selected.iter().find(|s| s.child.id.value == id) {
            None => Readiness::no("it is not desired (`when` is false)"),
            Some(Selected { items: None, .. }) => match observed.one(id) {
                None => Readiness::no("it does not exist yet"),
                Some(object) => ready_when(renderer, rule, child, object, context! {}, base)
                    .map_or_else(Readiness::no, |()| Readiness::yes()),
            },
            Some(Selected { items: Some(items), .. }) => items
                .iter()
                .find_map(|item| {
                    let Some(object) = observed.item(id, &item.key) else {
                        return Some(format!("item {:?} does not exist yet", shown_key(&item.key)));
                    };
                    item_ready(renderer, rule, child, object, item, base)
                        .err()
                        .map(|why| format!("item {:?}: {why}", shown_key(&item.key)))
                })
                .map_or_else(Readiness::yes, Readiness::no),
        };
        all.insert(id.to_owned(), state);
    }
    all
}

/// An item key as messages quote it: keys come from parents, so they are cut to a readable length.
pub(crate) fn shown_key(key: &str) -> std::borrow::Cow<'_, str> {
    bounded(key, 80)
}

/// `Ok` when a `forEach` child's `readyWhen` holds on the observed object of `item`, else why not.
pub(crate) fn item_ready(
    renderer: &Renderer,
    rule: &Rule,
    child: &ChildSpec,
    object: &Value,
    item: &Item,
    base: &minijinja::Value,
) -> Result<(), String> {
    let scope = context! {
        item => crate::engine::template::to_value(&item.value),
        item_key => &item.key,
    };
    ready_when(renderer, rule, child, object, scope, base)
}

/// `Ok` when the child's `readyWhen` holds on `object` (or it has none), else why not.
fn ready_when(
    renderer: &Renderer,
    rule: &Rule,
    child: &ChildSpec,
    object: &Value,
    scope: minijinja::Value,
    base: &minijinja::Value,
) -> Result<(), String> {
    let Some(expression) = &child.ready_when else {
        return Ok(());
    };
    let label = rule.inline_template(&format!("children.{}.readyWhen", child.id.value));
    let context = layer(
        &layer(base, scope),
        context! { object => crate::engine::template::to_value(object) },
    );
    match renderer.eval_bool(&label, &expression.value, &context) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("readyWhen is false ({})", expression.value)),
        Err(e) => Err(format!("readyWhen failed: {}", e.message)),
    }
}

/// The `ready` context entry: child id -> bool.
pub(crate) fn ready_context(readiness: &BTreeMap<String, Readiness>) -> Value {
    Value::Object(
        readiness
            .iter()
            .map(|(id, r)| (id.clone(), Value::Bool(r.ready)))
            .collect(),
    )
}

/// Whether `child` must wait: its first dependency that is not ready.
pub(crate) fn waits_for(child: &ChildSpec, readiness: &BTreeMap<String, Readiness>) -> Option<Waiting> {
    child.depends_on.iter().find_map(|dep| {
        let state = readiness.get(&dep.value)?;
        (!state.ready).then(|| Waiting {
            id: child.id.value.clone(),
            on: dep.value.clone(),
            reason: state.why.clone(),
        })
    })
}

/// The engine's `Ready` (for rules that define none): True when every desired child exists and
/// is ready; otherwise False, naming the first child (in rule order) that is not.
pub(crate) fn default_ready(
    rule: &Rule,
    selected: &[Selected<'_>],
    readiness: &BTreeMap<String, Readiness>,
    waiting: &[Waiting],
    objects: usize,
) -> WantedCondition {
    let not_ready = |reason: &str, message: String| WantedCondition {
        type_: READY.to_owned(),
        status: ConditionStatus::False,
        reason: reason.to_owned(),
        message: bounded(&message, MESSAGE_LIMIT).into_owned(),
    };
    for child in &rule.spec.children {
        let id = child.id.value.as_str();
        if let Some(wait) = waiting.iter().find(|w| w.id == id) {
            return not_ready(
                "Waiting",
                format!("child {id:?} waits for {:?}: {}", wait.on, wait.reason),
            );
        }
        if !selected.iter().any(|s| s.child.id.value == id) {
            continue;
        }
        if let Some(state) = readiness.get(id).filter(|r| !r.ready) {
            return not_ready("ChildNotReady", format!("child {id:?} is not ready: {}", state.why));
        }
    }
    WantedCondition {
        type_: READY.to_owned(),
        status: ConditionStatus::True,
        reason: "ChildrenReady".to_owned(),
        message: format!("every child is ready ({objects} objects)"),
    }
}
