//! Structural schemas (a CRD version's `openAPIV3Schema`): the model, walking it by field name,
//! and the nearest valid names for a misspelt one. Pure values; the catalog says where they
//! come from.

pub(crate) mod catalog;
pub(crate) mod defaults;
pub(crate) mod sample;
pub(crate) mod validate;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

pub(crate) use catalog::Catalog;

/// One node of a structural schema: the subset of OpenAPI v3 the API server uses to prune,
/// default and validate a custom resource. Other keywords (`description`, `format`,
/// `x-kubernetes-list-type`, `allOf`...) are read past.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    /// `object`, `array`, `string`, `integer`, `number` or `boolean`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Declared fields of an object.
    #[serde(default)]
    pub properties: BTreeMap<String, Schema>,
    /// The schema of every value of a map (`additionalProperties: {type: string}`), or `true`.
    pub additional_properties: Option<AdditionalProperties>,
    /// The item schema of an array.
    pub items: Option<Box<Schema>>,
    /// Fields an object must have.
    #[serde(default)]
    pub required: Vec<String>,
    /// The values allowed.
    #[serde(rename = "enum", default)]
    pub enum_: Vec<Value>,
    /// A regular expression a string must match.
    pub pattern: Option<String>,
    /// Longest string, in characters.
    pub max_length: Option<u64>,
    /// Shortest string, in characters.
    pub min_length: Option<u64>,
    /// Most items of an array.
    pub max_items: Option<u64>,
    /// Fewest items of an array.
    pub min_items: Option<u64>,
    /// Smallest number.
    pub minimum: Option<f64>,
    /// Largest number.
    pub maximum: Option<f64>,
    /// Whether `minimum` itself is excluded.
    #[serde(default)]
    pub exclusive_minimum: bool,
    /// Whether `maximum` itself is excluded.
    #[serde(default)]
    pub exclusive_maximum: bool,
    /// What the API server writes where the field is absent.
    pub default: Option<Value>,
    /// Whether `null` is a value (otherwise the API server drops or refuses it).
    #[serde(default)]
    pub nullable: bool,
    /// An example value (used to build a sample parent).
    pub example: Option<Value>,
    /// Fields not declared here are kept, and nothing below is checked.
    #[serde(rename = "x-kubernetes-preserve-unknown-fields", default)]
    pub preserve_unknown_fields: bool,
    /// An integer or a string (`port: 80` or `port: http`).
    #[serde(rename = "x-kubernetes-int-or-string", default)]
    pub int_or_string: bool,
    /// A whole Kubernetes object (apiVersion, kind and metadata are implied).
    #[serde(rename = "x-kubernetes-embedded-resource", default)]
    pub embedded_resource: bool,
}

/// `additionalProperties`: `true` (any value) or the schema of every value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum AdditionalProperties {
    /// `true` keeps any value, `false` none.
    Any(bool),
    /// Every value has this schema.
    Schema(Box<Schema>),
}

/// Where reading a field name leads.
#[derive(Debug, PartialEq)]
pub enum Step<'a> {
    /// A declared field (or a map value) with this schema.
    Field(&'a Schema),
    /// Anything goes below here: preserved unknown fields, an int-or-string, a scalar's methods.
    Open,
    /// The schema has no such field: these are the names it does have.
    Unknown(Vec<&'a str>),
}

/// The fields of `metadata` every object has (ObjectMeta); a CRD's schema declares none of them.
pub(crate) const OBJECT_META_FIELDS: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

impl Schema {
    /// Whether this node is an object schema (declared as one, or with fields).
    pub fn is_object(&self) -> bool {
        self.type_.as_deref() == Some("object") || !self.properties.is_empty()
    }

    /// Reading field `name` of a value of this schema.
    pub fn field(&self, name: &str) -> Step<'_> {
        if let Some(schema) = self.properties.get(name) {
            return Step::Field(schema);
        }
        if self.preserve_unknown_fields || self.int_or_string || !self.is_object() {
            return Step::Open;
        }
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(schema)) => Step::Field(schema),
            Some(AdditionalProperties::Any(true)) => Step::Open,
            _ => Step::Unknown(self.properties.keys().map(String::as_str).collect()),
        }
    }

    /// A schema written as YAML, for tests.
    #[cfg(test)]
    pub fn from_yaml(yaml: &str) -> Schema {
        crate::engine::yaml::from_str(yaml).expect("a schema")
    }

    /// Reading an item (by index) of a value of this schema.
    pub fn item(&self) -> Step<'_> {
        match &self.items {
            Some(items) => Step::Field(items),
            None => Step::Open,
        }
    }
}

/// The names in `known` nearest to `wanted` (at most two edits, or a third of its length),
/// nearest first: the "did you mean" of an unknown field.
pub(crate) fn nearest<'a>(wanted: &str, known: &[&'a str]) -> Vec<&'a str> {
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = known
        .iter()
        .map(|name| {
            (
                strsim::damerau_levenshtein(&wanted.to_lowercase(), &name.to_lowercase()),
                *name,
            )
        })
        .filter(|(distance, _)| *distance <= limit)
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, name)| name).take(3).collect()
}

/// " (did you mean `a`?)" or the list of known names, for a message about an unknown field.
pub(crate) fn did_you_mean(wanted: &str, known: &[&str]) -> String {
    let near = nearest(wanted, known);
    let quote = |names: &[&str]| names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if !near.is_empty() {
        format!("did you mean {}?", quote(&near))
    } else if known.is_empty() {
        "the schema declares no fields here".to_owned()
    } else if known.len() <= 12 {
        format!("the schema has {}", quote(known))
    } else {
        format!("the schema has {} and {} more", quote(&known[..12]), known.len() - 12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_lead_to_their_schema_and_unknown_names_list_the_known_ones() {
        let s = Schema::from_yaml("type: object\nproperties: {replicas: {type: integer}, version: {type: string}}");
        assert_eq!(s.field("replicas"), Step::Field(&s.properties["replicas"]));
        assert_eq!(s.field("replcias"), Step::Unknown(vec!["replicas", "version"]));
    }

    #[test]
    fn preserved_maps_int_or_string_and_scalars_are_open() {
        assert_eq!(
            Schema::from_yaml("type: object\nx-kubernetes-preserve-unknown-fields: true").field("a"),
            Step::Open
        );
        assert_eq!(
            Schema::from_yaml("x-kubernetes-int-or-string: true").field("a"),
            Step::Open
        );
        assert_eq!(Schema::from_yaml("type: string").field("upper"), Step::Open);
        assert_eq!(
            Schema::from_yaml("type: object\nadditionalProperties: true").field("a"),
            Step::Open
        );
        let map = Schema::from_yaml("type: object\nadditionalProperties: {type: string}");
        assert!(matches!(map.field("any"), Step::Field(s) if s.type_.as_deref() == Some("string")));
    }

    #[test]
    fn the_nearest_names_are_suggested_and_far_ones_are_not() {
        assert_eq!(
            nearest("replcias", &["replicas", "version", "storage"]),
            vec!["replicas"]
        );
        assert!(nearest("zzz", &["replicas", "version"]).is_empty());
        assert_eq!(did_you_mean("replcias", &["replicas"]), "did you mean `replicas`?");
        assert_eq!(did_you_mean("zzz", &["a", "b"]), "the schema has `a`, `b`");
        assert_eq!(did_you_mean("zzz", &[]), "the schema declares no fields here");
    }
}
