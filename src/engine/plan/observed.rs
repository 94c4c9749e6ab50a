//! Observed children grouped by child id: one object, or for a `forEach` child a map from item
//! key to object (what `children.<id>` shows templates).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::context::LABEL_CHILD;
use super::foreach;
use crate::engine::rules::Rule;

/// The observed objects of one child id (serialised as `children.<id>` shows it: the object, or
/// a map from item key to object).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum Group<'a> {
    /// A plain child.
    One(&'a Value),
    /// A `forEach` child: item key -> object.
    Items(BTreeMap<String, &'a Value>),
}

/// A parent's observed children, by child id (serialised as the `children` context entry).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub(crate) struct Observed<'a> {
    by_id: BTreeMap<String, Group<'a>>,
}

impl<'a> Observed<'a> {
    /// Groups objects already known to be this parent's children. Every `forEach` child gets a
    /// (possibly empty) map, so `children.<id> | length` works before anything exists.
    pub(crate) fn group(rule: &Rule, ours: &[&'a Value]) -> Self {
        let mut by_id = BTreeMap::new();
        for child in rule.spec.children.iter().filter(|c| c.for_each.is_some()) {
            by_id.insert(child.id.value.clone(), Group::Items(BTreeMap::new()));
        }
        for object in ours {
            let Some(id) = label(object, LABEL_CHILD) else {
                continue;
            };
            match by_id.get_mut(id) {
                Some(Group::Items(items)) => {
                    items.insert(foreach::observed_key(object), *object);
                }
                _ => {
                    by_id.insert(id.to_owned(), Group::One(object));
                }
            }
        }
        Observed { by_id }
    }

    /// The observed object of a plain child.
    pub(crate) fn one(&self, id: &str) -> Option<&'a Value> {
        match self.by_id.get(id) {
            Some(Group::One(object)) => Some(object),
            _ => None,
        }
    }

    /// The observed object of one item of a `forEach` child.
    pub(crate) fn item(&self, id: &str, key: &str) -> Option<&'a Value> {
        match self.by_id.get(id) {
            Some(Group::Items(items)) => items.get(key).copied(),
            _ => None,
        }
    }

    /// Plain children only, by id (what actions' guards read).
    pub(crate) fn singles(&self) -> BTreeMap<String, &'a Value> {
        self.by_id
            .iter()
            .filter_map(|(id, group)| match group {
                Group::One(object) => Some((id.clone(), *object)),
                Group::Items(_) => None,
            })
            .collect()
    }

    /// `children.<id>` as a value: the object, or a map from item key to object.
    pub(crate) fn value(&self, id: &str) -> Option<Cow<'a, Value>> {
        self.by_id.get(id).map(|group| match group {
            Group::One(object) => Cow::Borrowed(*object),
            Group::Items(items) => Cow::Owned(Value::Object(
                items
                    .iter()
                    .map(|(key, object)| (key.clone(), (*object).clone()))
                    .collect(),
            )),
        })
    }

    /// Every child as the `children` context entry, converted once.
    pub(crate) fn to_context(&self) -> minijinja::Value {
        crate::engine::template::to_value(self)
    }
}

fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object.pointer("/metadata/labels")?.get(key)?.as_str()
}
