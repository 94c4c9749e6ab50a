//! Names and keys the API server would reject, caught offline: object names (DNS-1123 label or
//! subdomain per kind, with its length limit), label keys and values, annotation keys and
//! ConfigMap/Secret data keys. A child failing here makes the plan fail, so nothing is applied,
//! instead of the API server rejecting that one child after its siblings were applied.

use serde_json::{Map, Value};

use crate::engine::diagnostic::bounded;

/// How many bytes of a rejected name or key an error message quotes.
const QUOTE_LIMIT: usize = 80;
/// Label values and the name part of qualified keys (`prefix/name`).
const LABEL_LIMIT: usize = 63;
/// DNS-1123 subdomains: most object names, key prefixes, ConfigMap keys.
const SUBDOMAIN_LIMIT: usize = 253;
/// All annotations of one object together (keys and values), as the API server counts them.
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// What the API server accepts as the name of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// RFC 1123 label: lowercase letters, digits, `-`; alphanumeric at both ends; at most 63.
    Label,
    /// RFC 1035 label: like [`NameRule::Label`], but starting with a letter (Services).
    Label1035,
    /// RFC 1123 subdomain: dot-separated labels, at most `max` characters in all (253, or
    /// less where the name reappears in a label value or a generated name).
    Subdomain {
        /// Longest name accepted.
        max: usize,
    },
    /// Any path segment: not `.` or `..`, no `/` or `%` (RBAC objects).
    PathSegment,
}

impl NameRule {
    /// The rule for `(apiVersion, kind)`: the built-in kinds people render most, and a
    /// DNS-1123 subdomain for everything else (what custom resources get).
    pub(crate) fn of(api_version: &str, kind: &str) -> NameRule {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        match (group, kind) {
            ("", "Namespace") => NameRule::Label,
            ("", "Service") => NameRule::Label1035,
            // A Job's name becomes the `batch.kubernetes.io/job-name` label of its pods.
            ("batch", "Job") => NameRule::Subdomain { max: LABEL_LIMIT },
            // The CronJob controller appends an 11-character suffix to name each Job.
            ("batch", "CronJob") => NameRule::Subdomain { max: 52 },
            ("rbac.authorization.k8s.io", "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding") => {
                NameRule::PathSegment
            }
            _ => NameRule::Subdomain { max: SUBDOMAIN_LIMIT },
        }
    }

    fn describe(self) -> String {
        match self {
            NameRule::Label => "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters".to_owned(),
            NameRule::Label1035 => "a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, at most 63 characters".to_owned(),
            NameRule::Subdomain { max } => format!(
                "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most {max} characters"
            ),
            NameRule::PathSegment => "a path segment: not '.' or '..', without '/' or '%'".to_owned(),
        }
    }

    fn max(self) -> Option<usize> {
        match self {
            NameRule::Label | NameRule::Label1035 => Some(LABEL_LIMIT),
            NameRule::Subdomain { max } => Some(max),
            NameRule::PathSegment => None,
        }
    }

    fn accepts(self, name: &str) -> bool {
        match self {
            NameRule::Label => is_dns_label(name),
            NameRule::Label1035 => is_dns_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()),
            NameRule::Subdomain { .. } => is_subdomain(name),
            NameRule::PathSegment => !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']),
        }
    }
}

/// Checks `metadata.name` of a rendered object against the rule of its kind.
pub(crate) fn check_name(object: &Value) -> Result<(), String> {
    let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or_default();
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
        return Ok(());
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let rule = NameRule::of(api_version, kind);
    let shown = bounded(name, QUOTE_LIMIT);
    if let Some(max) = rule.max()
        && name.len() > max
    {
        return Err(format!(
            "metadata.name {shown:?} is {} characters, more than {max}, the limit for a {kind} name ({})",
            name.len(),
            rule.describe()
        ));
    }
    if !rule.accepts(name) {
        return Err(format!(
            "metadata.name {shown:?} is not a valid {kind} name: it must be {}",
            rule.describe()
        ));
    }
    Ok(())
}

/// Checks the label and annotation keys and values of every object metadata in a rendered
/// object (pod templates and claim templates included for built-in kinds), label selectors,
/// and the data keys of ConfigMaps and Secrets.
pub(crate) fn check_keys(object: &Value, builtin: bool) -> Result<(), String> {
    if let Some(metadata) = object.get("metadata") {
        check_metadata(metadata, "metadata")?;
    }
    if builtin && let Some(spec) = object.get("spec") {
        check_nested(spec, "spec")?;
    }
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Service") => {
            if let Some(Value::Object(selector)) = object.pointer("/spec/selector") {
                check_labels(selector, "spec.selector")?;
            }
        }
        ("v1", "ConfigMap") => {
            for field in ["data", "binaryData"] {
                check_data_keys(object.get(field), field)?;
            }
        }
        ("v1", "Secret") => {
            for field in ["data", "stringData"] {
                check_data_keys(object.get(field), field)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Object metadata and label selectors nested in a built-in kind's spec.
fn check_nested(value: &Value, path: &str) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let here = format!("{path}.{key}");
                match (key.as_str(), value) {
                    ("metadata", Value::Object(_)) => check_metadata(value, &here)?,
                    ("matchLabels", Value::Object(labels)) => check_labels(labels, &here)?,
                    _ => check_nested(value, &here)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check_nested(item, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

fn check_metadata(metadata: &Value, path: &str) -> Result<(), String> {
    if let Some(Value::Object(labels)) = metadata.get("labels") {
        check_labels(labels, &format!("{path}.labels"))?;
    }
    if let Some(Value::Object(annotations)) = metadata.get("annotations") {
        let path = format!("{path}.annotations");
        let mut total = 0;
        for (key, value) in annotations {
            // The API server checks annotation keys in lower case.
            check_qualified_key(&key.to_ascii_lowercase(), key, &path)?;
            let Some(text) = value.as_str() else {
                return Err(not_a_string(&path, key, value));
            };
            total += key.len() + text.len();
        }
        if total > ANNOTATIONS_LIMIT {
            return Err(format!(
                "{path}: {total} bytes in all, more than the limit of {ANNOTATIONS_LIMIT}"
            ));
        }
    }
    Ok(())
}

fn check_labels(labels: &Map<String, Value>, path: &str) -> Result<(), String> {
    for (key, value) in labels {
        check_qualified_key(key, key, path)?;
        let Some(text) = value.as_str() else {
            return Err(not_a_string(path, key, value));
        };
        if text.len() > LABEL_LIMIT {
            return Err(format!(
                "{path}[{:?}]: value {:?} is {} characters, more than {LABEL_LIMIT}, the limit for a label value",
                bounded(key, QUOTE_LIMIT),
                bounded(text, QUOTE_LIMIT),
                text.len()
            ));
        }
        if !text.is_empty() && !is_qualified_name_part(text) {
            return Err(format!(
                "{path}[{:?}]: value {:?} is not a valid label value: {QUALIFIED_PART}",
                bounded(key, QUOTE_LIMIT),
                bounded(text, QUOTE_LIMIT)
            ));
        }
    }
    Ok(())
}

const QUALIFIED_PART: &str =
    "use letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most 63 characters";

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123 subdomain.
fn check_qualified_key(key: &str, shown: &str, path: &str) -> Result<(), String> {
    let invalid = |why: String| {
        Err(format!(
            "{path}: key {:?} is not a valid key: {why}",
            bounded(shown, QUOTE_LIMIT)
        ))
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.len() > SUBDOMAIN_LIMIT {
            return invalid(format!("its prefix is more than {SUBDOMAIN_LIMIT} characters"));
        }
        if !is_subdomain(prefix) {
            return invalid("its prefix (before '/') must be a DNS-1123 subdomain such as example.com".to_owned());
        }
    }
    if name.len() > LABEL_LIMIT {
        return invalid(format!(
            "its name part is {} characters, more than {LABEL_LIMIT}",
            name.len()
        ));
    }
    if name.is_empty() || !is_qualified_name_part(name) {
        return invalid(format!("the name part must be non-empty; {QUALIFIED_PART}"));
    }
    Ok(())
}

/// A ConfigMap or Secret key: `[-._a-zA-Z0-9]+`, at most 253, not `.` or `..`.
fn check_data_keys(data: Option<&Value>, path: &str) -> Result<(), String> {
    let Some(Value::Object(data)) = data else {
        return Ok(());
    };
    for key in data.keys() {
        let valid = !key.is_empty()
            && key.len() <= SUBDOMAIN_LIMIT
            && key != "."
            && key != ".."
            && !key.starts_with("..")
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return Err(format!(
                "{path}: key {:?} is not a valid data key: use letters, digits, '-', '_' and '.', at most {SUBDOMAIN_LIMIT} characters, not '.' or '..'",
                bounded(key, QUOTE_LIMIT)
            ));
        }
    }
    Ok(())
}

fn not_a_string(path: &str, key: &str, value: &Value) -> String {
    format!(
        "{path}[{:?}]: value {} is not a string; write it quoted (e.g. `{{{{ x | tojson }}}}` or \"{{{{ x }}}}\")",
        bounded(key, QUOTE_LIMIT),
        bounded(&value.to_string(), QUOTE_LIMIT)
    )
}

/// Whether `s` is an RFC 1123 DNS label (a namespace name, a rule name, an id of a rule's
/// children, actions or lookups).
pub(crate) fn is_dns_label(s: &str) -> bool {
    s.len() <= LABEL_LIMIT && is_label_text(s)
}

/// Lowercase letters, digits and `-`, alphanumeric at both ends (any length).
fn is_label_text(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain as Kubernetes checks it: at most 253 in all, its dot-separated parts
/// label-shaped (Kubernetes does not limit each part to 63).
fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= SUBDOMAIN_LIMIT && s.split('.').all(is_label_text)
}

/// The name part of a qualified name, and a non-empty label value.
fn is_qualified_name_part(s: &str) -> bool {
    s.len() <= LABEL_LIMIT
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn named(api_version: &str, kind: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
    }

    #[test]
    fn a_service_name_longer_than_a_label_is_refused_with_the_limit() {
        let name = format!("{}-svc", "a".repeat(63));
        let err = check_name(&named("v1", "Service", &name)).expect_err("67 characters");
        assert!(
            err.contains("is 67 characters, more than 63, the limit for a Service name (a DNS-1035 label"),
            "{err}"
        );
    }

    #[test]
    fn kinds_get_their_own_name_rules() {
        let long = "a".repeat(100);
        assert!(check_name(&named("apps/v1", "StatefulSet", &long)).is_ok());
        assert!(check_name(&named("myorg.io/v1", "Anything", "a.b-c")).is_ok());
        assert!(check_name(&named("batch/v1", "Job", &long)).is_err());
        assert!(check_name(&named("batch/v1", "CronJob", &"a".repeat(53))).is_err());
        assert!(check_name(&named("v1", "Service", "1abc")).is_err());
        assert!(check_name(&named("v1", "ConfigMap", "1abc.x")).is_ok());
        assert!(check_name(&named("v1", "ConfigMap", "Upper")).is_err());
        assert!(check_name(&named("v1", "Namespace", "a.b")).is_err());
        assert!(check_name(&named("rbac.authorization.k8s.io/v1", "Role", "system:x")).is_ok());
        assert!(check_name(&named("rbac.authorization.k8s.io/v1", "Role", "a/b")).is_err());
    }

    #[test]
    fn a_long_name_is_quoted_bounded() {
        let err = check_name(&named("v1", "ConfigMap", &"a".repeat(900_000))).expect_err("too long");
        assert!(err.len() < 600, "{}", err.len());
    }

    #[test]
    fn configmap_keys_with_a_line_break_are_refused() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"A\nB": "1"}});
        let err = check_keys(&cm, true).expect_err("line break");
        assert_eq!(
            err,
            "data: key \"A\\nB\" is not a valid data key: use letters, digits, '-', '_' and '.', at most 253 characters, not '.' or '..'"
        );
        let ok = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "stringData": {"tls.crt": "1", "A_b-9": "2"}});
        assert_eq!(check_keys(&ok, true), Ok(()));
    }

    #[test]
    fn labels_and_annotations_are_checked_where_they_nest() {
        let bad_value = json!({"metadata": {"labels": {"app": "a b"}}});
        assert!(
            check_keys(&bad_value, false)
                .expect_err("space")
                .starts_with("metadata.labels[\"app\"]: value")
        );
        let template = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": {"ok": "x"}}, "template": {"metadata": {"labels": {"-bad": "x"}}}}});
        let err = check_keys(&template, true).expect_err("bad key");
        assert!(err.starts_with("spec.template.metadata.labels: key \"-bad\""), "{err}");
        let annotation = json!({"metadata": {"annotations": {"Example.COM/Name": "x", "a/b/c": "y"}}});
        assert!(
            check_keys(&annotation, false)
                .expect_err("two slashes")
                .contains("\"a/b/c\"")
        );
        let number = json!({"metadata": {"labels": {"replicas": 3}}});
        assert!(
            check_keys(&number, false)
                .expect_err("number")
                .contains("is not a string")
        );
        let long = json!({"metadata": {"labels": {"a": "x".repeat(64)}}});
        assert!(
            check_keys(&long, false)
                .expect_err("long")
                .contains("64 characters, more than 63")
        );
    }
}
