//! What a rule writes into the parent's status: fields from templates, expressions or children,
//! and conditions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Located;

/// The parent's status written by the engine.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusSpec {
    /// Top-level status fields: a Jinja template string, a typed `{value: <expression>}`, or
    /// `{child, jsonPath}` from a child.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, FieldSource>")]
    pub fields: BTreeMap<String, Located<FieldSource>>,
    /// Conditions in the standard Kubernetes shape. `Ready` is managed by the engine unless defined here.
    #[serde(default)]
    pub conditions: Vec<ConditionSpec>,
    /// Whether the engine writes the watched object's status at all (`Ready`,
    /// `observedGeneration`, fields, conditions, action records). Default: `true` for custom
    /// resources, `false` for built-in kinds (`v1`, `apps/v1`, `*.k8s.io`, ...), whose status
    /// belongs to their own controller: a rule that decorates a StatefulSet must not reset its
    /// `observedGeneration`. Without it the rule can have no status fields, conditions or actions.
    #[serde(default)]
    pub write: Option<bool>,
}

/// Where a status field's value comes from.
#[derive(Debug, Clone, JsonSchema)]
#[serde(untagged)]
pub enum FieldSource {
    /// A Jinja template rendered to a string, e.g. `"{{ metadata.name }}-svc"`.
    Template(String),
    /// A value read from an observed child.
    FromChild(ChildField),
    /// A Jinja expression whose value keeps its type (number, boolean, list, mapping, null).
    Expression(ExpressionField),
}

/// A value read from an observed child.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChildField {
    /// The child's id.
    pub child: String,
    /// A JSONPath (RFC 9535) into the child, e.g. `$.status.readyReplicas`. No match gives null.
    pub json_path: String,
}

/// A typed status value: `{value: "children.copies | length"}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpressionField {
    /// A Jinja expression (no `{{ }}`); its value is written as it is: `spec.replicas * 10` is a
    /// number, `children.db is defined` a boolean, `spec.regions | list` a list.
    pub value: String,
}

/// The keys a status field's mapping may have; which ones it has says which source it is.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldMapping {
    child: Option<String>,
    json_path: Option<String>,
    value: Option<String>,
}

impl<'de> Deserialize<'de> for FieldSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> serde::de::Visitor<'de> for SourceVisitor {
            type Value = FieldSource;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a template string, a mapping {value} or a mapping {child, jsonPath}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<FieldSource, A::Error> {
                let mapping = FieldMapping::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                match mapping {
                    FieldMapping {
                        child: None,
                        json_path: None,
                        value: Some(value),
                    } => Ok(FieldSource::Expression(ExpressionField { value })),
                    FieldMapping {
                        child: Some(child),
                        json_path: Some(json_path),
                        value: None,
                    } => Ok(FieldSource::FromChild(ChildField { child, json_path })),
                    _ => Err(serde::de::Error::custom(
                        "a status field mapping is either {value: <expression>} or {child: <id>, jsonPath: <path>}",
                    )),
                }
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<FieldSource, E> {
                Ok(FieldSource::Template(value.to_owned()))
            }
        }
        deserializer.deserialize_any(SourceVisitor)
    }
}

/// A condition computed from a Jinja expression.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConditionSpec {
    /// Condition type, e.g. `Ready` (PascalCase).
    #[serde(rename = "type")]
    pub type_: String,
    /// Jinja expression: true gives status `True`, false gives `False`.
    #[schemars(with = "String")]
    pub when: Located<String>,
    /// Reason when true (default `AsExpected`); a Jinja template.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub reason: Option<Located<String>>,
    /// Reason when false (default `NotYet`); a Jinja template.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub false_reason: Option<Located<String>>,
    /// Message (a Jinja template), default empty.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub message: Option<Located<String>>,
    /// Reasons (as `falseReason` renders them, e.g. `BackoffLimitExceeded`) that, when the
    /// condition turns `False` with one of them, also publish a Warning Event on the parent with
    /// that reason and the condition's message: once per transition, not on every reconcile.
    #[serde(default)]
    pub warn_on: Vec<String>,
}
