//! Structural defaulting, as the API server does it before storing a custom resource: an absent
//! field (or a `null` one that is not nullable) with a `default` gets it, and defaults inside
//! defaulted or present objects, list items and map values are applied too. Offline `render`
//! and `ruleop test` call it so that their output equals what the live parent renders.

use serde_json::Value;

use super::{AdditionalProperties, Schema};

/// Applies `schema`'s defaults to `value` in place.
pub(crate) fn apply(schema: &Schema, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (name, field) in &schema.properties {
                let missing = match map.get(name) {
                    None => true,
                    Some(Value::Null) => !field.nullable,
                    Some(_) => false,
                };
                if missing && let Some(default) = &field.default {
                    map.insert(name.clone(), default.clone());
                }
                if let Some(present) = map.get_mut(name) {
                    apply(field, present);
                }
            }
            if let Some(AdditionalProperties::Schema(values)) = &schema.additional_properties {
                for (name, present) in map.iter_mut() {
                    if !schema.properties.contains_key(name) {
                        apply(values, present);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &schema.items {
                items.iter_mut().for_each(|v| apply(item, v));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Schema {
        Schema::from_yaml(
            "type: object
properties:
  spec:
    type: object
    properties:
      replicas: {type: integer, default: 1}
      backup:
        type: object
        default: {}
        properties: {enabled: {type: boolean, default: false}}
      users:
        type: array
        items: {type: object, properties: {role: {type: string, default: reader}}}
      labels:
        type: object
        additionalProperties: {type: object, properties: {v: {type: string, default: x}}}
      note: {type: string, nullable: true, default: none}
",
        )
    }

    #[test]
    fn absent_fields_get_defaults_and_nested_defaults_apply_inside_them() {
        let mut parent = json!({"spec": {"users": [{"name": "a"}, {"role": "admin"}], "labels": {"k": {}}}});
        apply(&schema(), &mut parent);
        assert_eq!(
            parent["spec"],
            json!({"users": [{"name": "a", "role": "reader"}, {"role": "admin"}], "labels": {"k": {"v": "x"}},
                   "replicas": 1, "backup": {"enabled": false}, "note": "none"})
        );
    }

    #[test]
    fn present_values_are_kept_and_null_is_defaulted_only_when_not_nullable() {
        let mut parent = json!({"spec": {"replicas": null, "note": null, "backup": {"enabled": true}}});
        apply(&schema(), &mut parent);
        assert_eq!(parent["spec"]["replicas"], 1);
        assert_eq!(parent["spec"]["note"], Value::Null);
        assert_eq!(parent["spec"]["backup"], json!({"enabled": true}));
    }
}
