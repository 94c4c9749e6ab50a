//! Validating a value against a structural schema: types, required fields, enums, patterns,
//! lengths, bounds and fields the schema does not declare (which the API server would prune
//! without a word). What `render`, `ruleop test` and `check` say about a rendered custom
//! resource child or a status write before the API server sees it.

use serde_json::Value;

use super::{AdditionalProperties, Schema};

/// At most this many violations are reported for one object.
pub(crate) const MAX_VIOLATIONS: usize = 20;

/// One way a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The field, as a dotted path from the object's top (`spec.ports[0].port`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// How a whole object is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Top {
    /// A Kubernetes object: `apiVersion`, `kind` and `metadata` are implied at the top.
    Object,
    /// A part of one (a status write), checked as it is.
    Part,
}

/// Every violation of `schema` by `value` (at most [`MAX_VIOLATIONS`]); `prefix` starts the
/// paths (e.g. `status`).
pub(crate) fn validate(schema: &Schema, value: &Value, top: Top, prefix: &str) -> Vec<Violation> {
    let mut walk = Walk { found: Vec::new() };
    walk.node(schema, value, prefix, top == Top::Object);
    walk.found
}

struct Walk {
    found: Vec<Violation>,
}

impl Walk {
    fn report(&mut self, path: &str, message: String) {
        if self.found.len() < MAX_VIOLATIONS {
            self.found.push(Violation {
                path: if path.is_empty() {
                    "(top)".to_owned()
                } else {
                    path.to_owned()
                },
                message,
            });
        }
    }

    fn node(&mut self, schema: &Schema, value: &Value, path: &str, embedded: bool) {
        if self.found.len() >= MAX_VIOLATIONS {
            return;
        }
        if value.is_null() {
            if !schema.nullable {
                self.report(path, "must not be null".to_owned());
            }
            return;
        }
        if !schema.enum_.is_empty() && !schema.enum_.contains(value) {
            let allowed: Vec<String> = schema.enum_.iter().map(Value::to_string).collect();
            self.report(path, format!("{} is not one of {}", short(value), allowed.join(", ")));
        }
        if schema.int_or_string {
            if !(value.is_string() || is_integer(value)) {
                self.report(
                    path,
                    format!("must be an integer or a string, found {}", type_name(value)),
                );
            }
            if let Value::String(text) = value {
                self.string(schema, text, path);
            }
            return;
        }
        let wanted = schema.type_.as_deref().unwrap_or_default();
        let fits = match wanted {
            "" => true,
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => is_integer(value),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !fits {
            self.report(
                path,
                format!(
                    "must be {}, found {} {}",
                    article(wanted),
                    type_name(value),
                    short(value)
                ),
            );
            return;
        }
        match value {
            Value::String(text) => self.string(schema, text, path),
            Value::Number(number) => self.number(schema, number.as_f64().unwrap_or_default(), path),
            Value::Array(items) => self.array(schema, items, path),
            Value::Object(map) => self.object(schema, map, path, embedded || schema.embedded_resource),
            _ => {}
        }
    }

    fn string(&mut self, schema: &Schema, text: &str, path: &str) {
        let length = text.chars().count() as u64;
        if let Some(max) = schema.max_length.filter(|max| length > *max) {
            self.report(path, format!("{length} characters, more than maxLength {max}"));
        }
        if let Some(min) = schema.min_length.filter(|min| length < *min) {
            self.report(path, format!("{length} characters, fewer than minLength {min}"));
        }
        if let Some(pattern) = &schema.pattern
            && let Ok(regex) = regex::Regex::new(pattern)
            && !regex.is_match(text)
        {
            self.report(
                path,
                format!("{} does not match the pattern {pattern:?}", short(&Value::from(text))),
            );
        }
    }

    fn number(&mut self, schema: &Schema, number: f64, path: &str) {
        if let Some(min) = schema.minimum
            && (number < min || (schema.exclusive_minimum && number == min))
        {
            self.report(path, format!("{number} is less than the minimum {min}"));
        }
        if let Some(max) = schema.maximum
            && (number > max || (schema.exclusive_maximum && number == max))
        {
            self.report(path, format!("{number} is more than the maximum {max}"));
        }
    }

    fn array(&mut self, schema: &Schema, items: &[Value], path: &str) {
        let count = items.len() as u64;
        if let Some(max) = schema.max_items.filter(|max| count > *max) {
            self.report(path, format!("{count} items, more than maxItems {max}"));
        }
        if let Some(min) = schema.min_items.filter(|min| count < *min) {
            self.report(path, format!("{count} items, fewer than minItems {min}"));
        }
        if let Some(item) = &schema.items {
            for (i, value) in items.iter().enumerate() {
                self.node(item, value, &format!("{path}[{i}]"), false);
            }
        }
    }

    fn object(&mut self, schema: &Schema, map: &serde_json::Map<String, Value>, path: &str, embedded: bool) {
        for name in &schema.required {
            if !map.contains_key(name) {
                self.report(&join(path, name), "required, and missing".to_owned());
            }
        }
        for (name, value) in map {
            let field = join(path, name);
            if embedded && name == "metadata" {
                // The API server checks ObjectMeta itself; a CRD may only narrow the name.
                if let (Some(declared), Some(object_name)) = (
                    schema.properties.get("metadata").and_then(|m| m.properties.get("name")),
                    value.get("name"),
                ) {
                    self.node(declared, object_name, &join(&field, "name"), false);
                }
            } else if let Some(declared) = schema.properties.get(name) {
                self.node(declared, value, &field, false);
            } else if embedded && matches!(name.as_str(), "apiVersion" | "kind") {
                continue;
            } else if let Some(AdditionalProperties::Schema(values)) = &schema.additional_properties {
                self.node(values, value, &field, false);
            } else if !(schema.preserve_unknown_fields
                || matches!(schema.additional_properties, Some(AdditionalProperties::Any(true))))
            {
                let known: Vec<&str> = schema.properties.keys().map(String::as_str).collect();
                self.report(
                    &field,
                    format!(
                        "not in the schema, so the API server would drop it ({})",
                        super::did_you_mean(name, &known)
                    ),
                );
            }
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn article(type_: &str) -> String {
    match type_ {
        "object" | "array" | "integer" => format!("an {type_}"),
        _ => format!("a {type_}"),
    }
}

/// A value as shown in a message: scalars in full up to 64 bytes, containers by their type.
fn short(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => String::new(),
        other => crate::engine::diagnostic::bounded(&other.to_string(), 64).into_owned(),
    }
    .trim()
    .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Schema {
        Schema::from_yaml(
            "type: object
required: [spec]
properties:
  spec:
    type: object
    required: [size]
    properties:
      size: {type: string, maxLength: 4, pattern: '^[0-9]+Gi$'}
      replicas: {type: integer, minimum: 0, maximum: 9}
      mode: {type: string, enum: [fast, safe]}
      port: {x-kubernetes-int-or-string: true}
      tags: {type: array, maxItems: 2, items: {type: string}}
      extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
",
        )
    }

    fn messages(value: Value) -> Vec<String> {
        validate(&schema(), &value, Top::Object, "")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_valid_object_with_implied_top_fields_has_no_violations() {
        let object = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                            "spec": {"size": "10Gi", "replicas": 2, "mode": "safe", "port": "http", "tags": ["a"],
                                     "extra": {"anything": {"goes": 1}}}});
        assert!(messages(object).is_empty());
    }

    #[test]
    fn metadata_is_the_api_servers_except_a_narrowed_name() {
        let mut schema = schema();
        schema.properties.insert(
            "metadata".into(),
            Schema::from_yaml("type: object\nproperties: {name: {type: string, maxLength: 3}}"),
        );
        let object = json!({"metadata": {"name": "long", "uid": "u", "labels": {"a": "b"}}, "spec": {"size": "1Gi"}});
        let found: Vec<String> = validate(&schema, &object, Top::Object, "")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, vec!["metadata.name: 4 characters, more than maxLength 3"]);
    }

    #[test]
    fn types_bounds_enums_patterns_lengths_and_unknown_fields_are_named_by_path() {
        let object = json!({"spec": {"size": "10Gix", "replicas": "three", "mode": "slow", "port": 1.5,
                                     "tags": ["a", 2, "c"], "replcias": 1}});
        assert_eq!(
            messages(object),
            vec![
                "spec.size: 5 characters, more than maxLength 4",
                "spec.size: \"10Gix\" does not match the pattern \"^[0-9]+Gi$\"",
                "spec.replicas: must be an integer, found string \"three\"",
                "spec.mode: \"slow\" is not one of \"fast\", \"safe\"",
                "spec.port: must be an integer or a string, found number",
                "spec.tags: 3 items, more than maxItems 2",
                "spec.tags[1]: must be a string, found integer 2",
                "spec.replcias: not in the schema, so the API server would drop it (did you mean `replicas`?)",
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"replicas": 10}})),
            vec![
                "spec.size: required, and missing",
                "spec.replicas: 10 is more than the maximum 9"
            ]
        );
        assert_eq!(messages(json!({})), vec!["spec: required, and missing"]);
    }

    #[test]
    fn a_part_is_checked_without_implied_fields_and_violations_are_bounded() {
        let status: Schema = Schema::from_yaml("type: object\nproperties: {phase: {type: string}}");
        let found = validate(&status, &json!({"phase": "x", "metadata": 1}), Top::Part, "status");
        assert_eq!(found[0].path, "status.metadata");
        let many: serde_json::Map<String, Value> = (0..50).map(|i| (format!("f{i}"), json!(1))).collect();
        assert_eq!(
            validate(&status, &Value::Object(many), Top::Part, "status").len(),
            MAX_VIOLATIONS
        );
    }
}
