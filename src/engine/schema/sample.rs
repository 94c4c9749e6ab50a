//! A sample value built from a schema: its `example`, else its `default`, else the least value
//! that fits (the first enum value, the minimum, a short string, the required fields only). What
//! `ruleop check` plans when it validates a rule's custom resource children before any parent
//! exists.

use serde_json::{Map, Value, json};

use super::Schema;

/// The sample of `schema`.
pub(crate) fn of(schema: &Schema) -> Value {
    if let Some(example) = &schema.example {
        return example.clone();
    }
    if let Some(default) = &schema.default {
        return default.clone();
    }
    if let Some(first) = schema.enum_.first() {
        return first.clone();
    }
    if schema.int_or_string {
        return json!(1);
    }
    match schema
        .type_
        .as_deref()
        .unwrap_or(if schema.is_object() { "object" } else { "" })
    {
        "object" => {
            let mut map = Map::new();
            for name in &schema.required {
                if let Some(field) = schema.properties.get(name) {
                    map.insert(name.clone(), of(field));
                }
            }
            Value::Object(map)
        }
        "array" => {
            let count = schema.min_items.unwrap_or(0) as usize;
            let item = schema.items.as_deref().map_or(Value::Null, of);
            Value::Array(vec![item; count])
        }
        "string" => {
            let length = schema.min_length.unwrap_or(0).max(6) as usize;
            let length = schema.max_length.map_or(length, |max| length.min(max as usize));
            json!("sample"[..length.min(6)].to_owned() + &"x".repeat(length.saturating_sub(6)))
        }
        "integer" => json!(bound(schema).round() as i64),
        "number" => json!(bound(schema)),
        "boolean" => json!(false),
        _ => json!({}),
    }
}

/// The least number in bounds, 1 when that is allowed.
fn bound(schema: &Schema) -> f64 {
    let mut value = schema
        .minimum
        .map_or(1.0, |min| if schema.exclusive_minimum { min + 1.0 } else { min });
    if let Some(max) = schema.maximum {
        value = value.min(max);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_fields_get_the_least_value_that_fits_and_optional_ones_are_left_out() {
        let schema = Schema::from_yaml(
            "type: object
required: [version, storage, mode, count, tags]
properties:
  version: {type: string, example: '16'}
  storage: {type: object, required: [size], properties: {size: {type: string, maxLength: 3}, class: {type: string}}}
  mode: {type: string, enum: [fast, safe]}
  count: {type: integer, minimum: 2}
  tags: {type: array, minItems: 1, items: {type: string}}
  replicas: {type: integer, default: 1}
",
        );
        assert_eq!(
            of(&schema),
            json!({"version": "16", "storage": {"size": "sam"}, "mode": "fast", "count": 2, "tags": ["sample"]})
        );
    }
}
