//! The field path (`spec.rollout.maxFailures`) of the YAML value at a position, so that a typed
//! parse error located only by line and column (`invalid u32`) also names its field.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// One YAML node, each value with where it starts.
enum Node {
    Map(Vec<(String, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<serde_json::Value>()? {
            let key = match key {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
}

/// The path of the value that starts at 1-based `line` and `column` in one of the documents of
/// `text` (`spec.rollout.steps[1].pause`), or `None` when no value starts there (the text does
/// not parse, or the position is a key or a syntax error's).
pub(crate) fn field_at(text: &str, line: u64, column: u64) -> Option<String> {
    let documents: Vec<Spanned<Node>> =
        serde_saphyr::from_multiple_with_options(text, super::yaml::kubernetes_options()).ok()?;
    documents
        .iter()
        .find_map(|document| path_in(document, line, column, String::new()))
}

/// Depth first: a value's own position wins over its parent's (a map starts where its first
/// key does, on the same line and column as that key's value in a flow mapping).
fn path_in(node: &Spanned<Node>, line: u64, column: u64, path: String) -> Option<String> {
    let children: Vec<(String, &Spanned<Node>)> = match &node.value {
        Node::Map(entries) => entries.iter().map(|(key, value)| (join(&path, key), value)).collect(),
        Node::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("{path}[{i}]"), item))
            .collect(),
        Node::Scalar => Vec::new(),
    };
    let deeper = children
        .into_iter()
        .find_map(|(child_path, child)| path_in(child, line, column, child_path));
    let here = &node.referenced;
    deeper.or_else(|| (!path.is_empty() && here.line() == line && here.column() == column).then_some(path))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A plainer wording of serde-saphyr's `invalid u32` (a scalar that is not of the field's
/// type): what the field takes.
pub(crate) fn explain_scalar_error(message: &str) -> Option<&'static str> {
    Some(match message.strip_prefix("invalid ")? {
        "u8" => "not a whole number from 0 to 255",
        "u16" => "not a whole number from 0 to 65535",
        "u32" => "not a whole number from 0 to 4294967295",
        "u64" | "usize" => "not a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "not a whole number in range",
        "f32" | "f64" => "not a number",
        "bool" => "not true or false",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "kind: Rule\nspec:\n  rollout:\n    steps:\n      - {percent: 10, pause: 1m}\n      - {percent: 100}\n    maxFailures: -1\n---\nkind: Rule\nspec: {maxConcurrentReconciles: lots}\n";

    #[test]
    fn names_the_field_of_a_block_value_a_flow_value_and_a_later_document() {
        assert_eq!(field_at(TEXT, 7, 18).as_deref(), Some("spec.rollout.maxFailures"));
        assert_eq!(field_at(TEXT, 5, 30).as_deref(), Some("spec.rollout.steps[0].pause"));
        assert_eq!(field_at(TEXT, 6, 19).as_deref(), Some("spec.rollout.steps[1].percent"));
        assert_eq!(field_at(TEXT, 10, 33).as_deref(), Some("spec.maxConcurrentReconciles"));
    }

    #[test]
    fn a_position_where_no_value_starts_names_nothing() {
        assert_eq!(field_at(TEXT, 7, 5), None, "a key");
        assert_eq!(field_at(TEXT, 99, 1), None);
        assert_eq!(field_at("a: [", 1, 4), None, "not YAML");
    }

    #[test]
    fn scalar_type_errors_are_worded_as_what_the_field_takes() {
        assert_eq!(
            explain_scalar_error("invalid u32"),
            Some("not a whole number from 0 to 4294967295")
        );
        assert_eq!(explain_scalar_error("invalid bool"), Some("not true or false"));
        assert_eq!(explain_scalar_error("invalid something"), None);
        assert_eq!(explain_scalar_error("unknown field `x`"), None);
    }
}
