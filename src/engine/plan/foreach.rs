//! `forEach` children: one object per item of a list or map, identified by its key (never by its
//! position), so reordering the items changes nothing and removing one prunes exactly its object.

use std::collections::BTreeMap;

use minijinja::context;
use serde_json::{Value, json};

use super::PlanError;
use super::context::layer;
use super::relocate::relocate;
use crate::engine::base::digest::sha256_hex_prefix;
use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::Rule;
use crate::engine::rules::model::{ChildSpec, DEFAULT_MAX_ITEMS, Located};
use crate::engine::template::Renderer;

/// Label holding an item's key (or a hash of it when the key is not a valid label value).
pub(crate) const LABEL_ITEM: &str = "ruleop.io/item";
/// Annotation holding an item's key as written, what `children.<id>` is keyed by.
pub(crate) const ANNOTATION_ITEM_KEY: &str = "ruleop.io/item-key";

/// Longest item or key quoted in an error message.
const SHOWN_CHARS: usize = 60;

/// One item of a `forEach`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    /// Its identity: from `key`, the string item itself, or the map key.
    pub key: String,
    /// The item (`item` in templates).
    pub value: Value,
}

/// The items of a `forEach` child, with unique keys, at most `maxItems` of them.
pub(crate) fn items(
    renderer: &Renderer,
    rule: &Rule,
    child: &ChildSpec,
    for_each: &Located<String>,
    context: &minijinja::Value,
) -> Result<Vec<Item>, PlanError> {
    let id = child.id.value.as_str();
    let fail = |message: String| PlanError::ForEach {
        id: id.to_owned(),
        at: SourceLocation::from_span(&rule.file, &for_each.referenced).to_string(),
        message,
    };
    let label = rule.inline_template(&format!("children.{id}.forEach"));
    let evaluated = renderer
        .eval(&label, &for_each.value, context)
        .map_err(|e| relocate(rule, for_each, e))?;
    let entries: Vec<(Option<String>, Value)> = match serde_json::to_value(&evaluated) {
        Ok(Value::Null) => Vec::new(),
        Ok(Value::Array(list)) => list.into_iter().map(|v| (None, v)).collect(),
        Ok(Value::Object(map)) => map.into_iter().map(|(k, v)| (Some(k), v)).collect(),
        Ok(other) => {
            return Err(fail(format!("forEach gave {}, not a list or a map", kind_of(&other))));
        }
        Err(e) => return Err(fail(format!("forEach gave a value that is not data: {e}"))),
    };
    let max = child.max_items.unwrap_or(DEFAULT_MAX_ITEMS);
    if entries.len() > max as usize {
        return Err(fail(format!(
            "forEach gave {} items, more than maxItems {max}",
            entries.len()
        )));
    }
    let mut items = Vec::with_capacity(entries.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, (map_key, value)) in entries.into_iter().enumerate() {
        let key = match (&child.key, &map_key, &value) {
            (Some(_), _, _) => {
                let scope = match &map_key {
                    Some(k) => context! { item => crate::engine::template::to_value(&value), item_key => k },
                    None => context! { item => crate::engine::template::to_value(&value) },
                };
                let name = rule.inline_template(&format!("children.{id}.key"));
                let at = child.key.as_ref().unwrap_or(for_each);
                renderer
                    .render_text(&name, &layer(context, scope))
                    .map_err(|e| relocate(rule, at, e))?
            }
            (None, Some(k), _) => k.clone(),
            (None, None, Value::String(s)) => s.clone(),
            (None, None, Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            (None, None, other) => {
                return Err(fail(format!(
                    "item {index} is {} ({}), not a string: set `key` on the child, e.g. key: \"{{{{ item.name }}}}\"",
                    kind_of(other),
                    shown(&other.to_string())
                )));
            }
        };
        if key.is_empty() {
            return Err(fail(format!(
                "item {index} ({}) has an empty key",
                shown(&value.to_string())
            )));
        }
        if let Some(first) = seen.insert(key.clone(), index) {
            let first_item: &Item = &items[first];
            return Err(fail(format!(
                "items {first} ({}) and {index} ({}) have the same key {:?}; keys must be unique",
                shown(&first_item.value.to_string()),
                shown(&value.to_string()),
                shown(&key)
            )));
        }
        items.push(Item { key, value });
    }
    Ok(items)
}

/// The context of one item's template: `item` and `item_key` over the rule's context.
pub(crate) fn item_context(base: &minijinja::Value, item: &Item) -> minijinja::Value {
    layer(
        base,
        context! { item => crate::engine::template::to_value(&item.value), item_key => &item.key },
    )
}

/// Marks a rendered object as the object of one item: its key as label (hashed when it is not
/// a valid label value) and as annotation (as written).
pub(crate) fn mark(object: &mut Value, key: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.insert(LABEL_ITEM.to_owned(), json!(label_value(key)));
    }
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(ANNOTATION_ITEM_KEY.to_owned(), json!(key));
    }
}

/// The `ruleop.io/item` label value of a key: the key itself when it is a valid label value,
/// else the first 16 hex digits of its SHA-256.
pub(crate) fn label_value(key: &str) -> String {
    let valid = !key.is_empty()
        && key.len() <= 63
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && key.starts_with(|c: char| c.is_ascii_alphanumeric())
        && key.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        key.to_owned()
    } else {
        sha256_hex_prefix(key.as_bytes(), 8)
    }
}

/// The item key of an observed object: its annotation, else its label, else its name.
pub(crate) fn observed_key(object: &Value) -> String {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    text(&format!(
        "/metadata/annotations/{}",
        ANNOTATION_ITEM_KEY.replace('/', "~1")
    ))
    .or_else(|| text(&format!("/metadata/labels/{}", LABEL_ITEM.replace('/', "~1"))))
    .or_else(|| text("/metadata/name"))
    .unwrap_or_default()
    .to_owned()
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// `text`, cut to a readable length: error messages stay bounded whatever the parent holds.
fn shown(text: &str) -> String {
    if text.chars().count() <= SHOWN_CHARS {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(SHOWN_CHARS).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_the_key_when_valid_and_a_hash_otherwise() {
        assert_eq!(label_value("http"), "http");
        assert_eq!(label_value("a.b_c-1"), "a.b_c-1");
        let hashed = label_value("alice@example.com");
        assert_eq!(hashed.len(), 16);
        assert_ne!(hashed, label_value("bob@example.com"));
        assert_eq!(label_value(&"x".repeat(64)).len(), 16);
    }

    #[test]
    fn observed_objects_are_keyed_by_annotation_then_label() {
        let object = json!({"metadata": {"name": "n", "labels": {LABEL_ITEM: "h"}, "annotations": {ANNOTATION_ITEM_KEY: "a@b"}}});
        assert_eq!(observed_key(&object), "a@b");
        let object = json!({"metadata": {"name": "n", "labels": {LABEL_ITEM: "h"}}});
        assert_eq!(observed_key(&object), "h");
    }
}
