//! `spec.parentMetadata`: labels and annotations ruleop writes onto the watched object itself (a
//! decorator marking what it decorated), rendered over the plan's context and sent only when
//! the live object differs, by server-side apply under ruleop's field manager.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::PlanError;
use super::relocate::relocate;
use crate::engine::rules::Rule;
use crate::engine::rules::model::Located;
use crate::engine::template::Renderer;

/// The apply configuration for the parent's labels and annotations, or `None` when the rule has
/// none or the parent already carries every one.
pub(crate) fn plan(
    renderer: &Renderer,
    rule: &Rule,
    parent: &Value,
    context: &minijinja::Value,
) -> Result<Option<Value>, PlanError> {
    let Some(wanted) = &rule.spec.parent_metadata else {
        return Ok(None);
    };
    let labels = render(renderer, rule, "labels", &wanted.labels, context)?;
    let annotations = render(renderer, rule, "annotations", &wanted.annotations, context)?;
    let holds = |field: &str, rendered: &Map<String, Value>| {
        rendered
            .iter()
            .all(|(key, value)| parent.pointer(&format!("/metadata/{field}")).and_then(|m| m.get(key)) == Some(value))
    };
    if holds("labels", &labels) && holds("annotations", &annotations) {
        return Ok(None);
    }
    let text = |pointer: &str| parent.pointer(pointer).cloned().unwrap_or(Value::Null);
    let mut metadata = json!({"name": text("/metadata/name")});
    if let Some(namespace) = parent.pointer("/metadata/namespace") {
        metadata["namespace"] = namespace.clone();
    }
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    Ok(Some(json!({
        "apiVersion": text("/apiVersion"),
        "kind": text("/kind"),
        "metadata": metadata,
    })))
}

fn render(
    renderer: &Renderer,
    rule: &Rule,
    field: &str,
    templates: &BTreeMap<String, Located<String>>,
    context: &minijinja::Value,
) -> Result<Map<String, Value>, PlanError> {
    let mut rendered = Map::new();
    for (key, template) in templates {
        let name = rule.inline_template(&format!("parentMetadata.{field}.{key}"));
        let value = renderer
            .render_text(&name, context)
            .map_err(|e| relocate(rule, template, e))?;
        rendered.insert(key.clone(), Value::String(value));
    }
    Ok(rendered)
}
