//! YAML as Kubernetes reads it: parse text into JSON values with `kubectl apply` semantics.
//!
//! `kubectl` goes through sigs.k8s.io/yaml (YAML 1.1 scalars, then JSON), so `0755` is 493,
//! `yes`/`on`/`y` are `true`, and a float with no fraction such as `1e3` is the integer 1000.
//! serde-saphyr's defaults differ (YAML 1.2), so every caller goes through here.

use serde_json::Value;

/// A YAML syntax or type error with its 1-based position in the parsed text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct YamlError {
    /// What is wrong, without the position.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
}

impl YamlError {
    /// Converts a serde-saphyr error, splitting its position from its message.
    pub(crate) fn from_saphyr(err: &serde_saphyr::Error) -> Self {
        let plain = err.render_with_options(serde_saphyr::render_options! {
            snippets: serde_saphyr::SnippetMode::Off,
        });
        let message = match plain.rsplit_once(" at line ") {
            Some((message, _)) => message.to_owned(),
            None => plain,
        };
        let location = err.location();
        YamlError {
            message,
            line: location.map(|l| l.line()),
            column: location.map(|l| l.column()),
        }
    }
}

/// Parser options matching sigs.k8s.io/yaml's YAML 1.1 scalar resolution. Comments are
/// checked as syntax but not kept: nothing here reads them.
pub(crate) fn kubernetes_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        legacy_octal_numbers: true,
        strict_booleans: false,
        emit_comments: false,
    }
}

/// Parses a typed value with Kubernetes scalar semantics.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn from_str<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, kubernetes_options()).map_err(|e| YamlError::from_saphyr(&e))
}

/// Parses every non-empty document of a multi-document stream into JSON values.
pub(crate) fn documents(text: &str) -> Result<Vec<Value>, YamlError> {
    let mut docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, kubernetes_options()).map_err(|e| YamlError::from_saphyr(&e))?;
    docs.retain(|doc| !doc.is_null());
    docs.iter_mut().for_each(integral_floats_to_integers);
    Ok(docs)
}

/// Serialises a value as YAML for people to read (`ruleop render`).
pub(crate) fn to_string(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n{value}\n"))
}

/// Go's JSON encoder prints a float64 with no fraction as an integer; do the same so that
/// `replicas: 1e0` reaches the API server as `1`, which an integer field accepts. In place: the
/// rendered objects are rebuilt only where a float changes.
fn integral_floats_to_integers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_to_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_to_integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> Value {
        documents(text).expect("valid yaml").remove(0)
    }

    #[test]
    fn scalars_resolve_like_kubectl() {
        assert_eq!(one("mode: 0755"), json!({"mode": 493}));
        assert_eq!(
            one("a: yes\nb: on\nc: y\nd: off\ne: no"),
            json!({"a": true, "b": true, "c": true, "d": false, "e": false})
        );
        assert_eq!(one("a: 1e3\nb: 1.5\nc: 08"), json!({"a": 1000, "b": 1.5, "c": 8}));
        assert_eq!(one("a: '16'\nb: 16\nc: ~"), json!({"a": "16", "b": 16, "c": null}));
        assert_eq!(one("a: 0x1F\nb: 1_000"), json!({"a": 31, "b": 1000}));
    }

    #[test]
    fn empty_documents_are_skipped() {
        assert_eq!(documents("---\na: 1\n---\n").expect("valid"), vec![json!({"a": 1})]);
    }

    #[test]
    fn syntax_error_has_position_and_bare_message() {
        let err = documents("a: b\n  c: [\n").expect_err("invalid");
        assert_eq!((err.line, err.column), (Some(2), Some(4)));
        assert_eq!(err.message, "mapping values are not allowed in this context");
    }
}
