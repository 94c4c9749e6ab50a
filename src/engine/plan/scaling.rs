//! `scaling: Ordered` for a `forEach` child, like a StatefulSet's `OrderedReady`: items are
//! created one at a time in item order, each once every item before it exists and is ready;
//! removed items go one at a time, the greatest key first, once every remaining item is ready.

use std::cmp::Ordering;

use serde::Serialize;
use serde_json::Value;

use super::children::{ChildUpdate, DesiredChild, ObjectRef};
use super::context::{LABEL_CHILD, is_deleting};
use super::foreach::observed_key;
use super::label;
use super::lifecycle::Release;
use super::observed::Observed;
use super::order::{self, Selected};
use crate::engine::rules::Rule;
use crate::engine::rules::model::Scaling;
use crate::engine::template::Renderer;

/// A removal an ordered `forEach` holds back this reconcile.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldRemoval {
    /// The object kept for now.
    #[serde(flatten)]
    pub target: ObjectRef,
    /// Why it is not removed yet.
    pub reason: String,
}

/// What planning an ordered `forEach` reads.
pub(crate) struct Inputs<'a> {
    /// Evaluates `readyWhen`.
    pub renderer: &'a Renderer,
    /// The rule.
    pub rule: &'a Rule,
    /// The selected children with their items.
    pub selected: &'a [Selected<'a>],
    /// The observed children, by id and item key.
    pub observed: &'a Observed<'a>,
    /// Every live object proven to be this parent's.
    pub ours: &'a [&'a Value],
    /// The template context of readiness (`readyWhen` sees it).
    pub context: &'a minijinja::Value,
}

/// Applies `scaling: Ordered`: items not to be created yet get [`ChildUpdate::Wait`]; removals
/// (deletes and releases) of every item but the next one are taken out and returned as held.
pub(crate) fn order(
    inputs: &Inputs<'_>,
    desired: &mut [DesiredChild],
    prune: &mut Vec<ObjectRef>,
    release: &mut Vec<Release>,
) -> Vec<HeldRemoval> {
    let mut held = Vec::new();
    for Selected { child, items } in inputs.selected {
        let (Scaling::Ordered, Some(items)) = (child.scaling, items) else {
            continue;
        };
        let id = child.id.value.as_str();
        let mut earlier_settled = true;
        let mut all_settled = true;
        for item in items {
            let live = inputs.observed.item(id, &item.key);
            let settled = live.is_some_and(|object| {
                !is_deleting(object)
                    && order::item_ready(inputs.renderer, inputs.rule, child, object, item, inputs.context).is_ok()
            });
            if live.is_none() {
                if !earlier_settled {
                    let waiting = desired
                        .iter_mut()
                        .filter(|d| d.id == id && observed_key(&d.object) == item.key);
                    for d in waiting {
                        d.update = ChildUpdate::Wait;
                    }
                }
                earlier_settled = false;
            } else if !settled {
                earlier_settled = false;
            }
            all_settled &= settled;
        }
        let leaving: Vec<(&Value, String)> = inputs
            .ours
            .iter()
            .copied()
            .filter(|o| label(o, LABEL_CHILD) == Some(id) && !is_deleting(o))
            .filter_map(|o| {
                let target = ObjectRef::of(o)?;
                let removed = prune.contains(&target) || release.iter().any(|r| r.target == target);
                removed.then(|| (o, observed_key(o)))
            })
            .collect();
        let deleting = inputs
            .ours
            .iter()
            .any(|o| label(o, LABEL_CHILD) == Some(id) && is_deleting(o));
        let next = leaving
            .iter()
            .max_by(|a, b| compare_keys(&a.1, &b.1))
            .filter(|_| all_settled && !deleting)
            .and_then(|(o, _)| ObjectRef::of(o));
        for (object, key) in &leaving {
            let Some(target) = ObjectRef::of(object) else {
                continue;
            };
            if Some(&target) == next.as_ref() {
                continue;
            }
            prune.retain(|p| *p != target);
            release.retain(|r| r.target != target);
            let reason = if deleting {
                "removed once the item being deleted is gone (scaling: Ordered)".to_owned()
            } else if !all_settled {
                "removed once every remaining item exists and is ready (scaling: Ordered)".to_owned()
            } else {
                format!(
                    "removed after the items with greater keys (scaling: Ordered; item {:?})",
                    order::shown_key(key)
                )
            };
            held.push(HeldRemoval { target, reason });
        }
    }
    held
}

/// Item keys in order: as numbers when both are integers (so `10` comes after `9`), else as text.
pub(crate) fn compare_keys(a: &str, b: &str) -> Ordering {
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_compare_as_numbers_and_others_as_text() {
        assert_eq!(compare_keys("10", "9"), Ordering::Greater);
        assert_eq!(compare_keys("b", "a"), Ordering::Greater);
        assert_eq!(compare_keys("10", "9x"), Ordering::Less);
    }
}
