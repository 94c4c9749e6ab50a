//! Subset matching of expected values against planned ones, with Kubernetes list merge keys.
//!
//! An expected map needs only the keys it names; `null` means "absent". A list of maps whose
//! field has a Kubernetes merge key (containers by `name`, Service ports by `port`, ...) is
//! matched item by item by that key, so a test names the one port it cares about; other lists
//! must match position by position with the same length. The first difference is reported
//! with its path (`spec.ports[port=5432].targetPort`), the expected and the actual value.

use serde_json::Value;

/// The first place where the actual value does not hold what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// Where, e.g. `spec.template.spec.containers[name=postgres].image`.
    pub path: String,
    /// What the test expected (compact JSON, or a description).
    pub expected: String,
    /// What the plan holds (compact JSON, or `<absent>`).
    pub actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: expected {}, got {}", self.path, self.expected, self.actual)
    }
}

/// Compact JSON of a value, `<absent>` for none.
pub(crate) fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "<absent>".to_owned(), Value::to_string)
}

/// Checks that `actual` holds `expected` as a subset; `path` names `actual` in the report.
pub(crate) fn subset(expected: &Value, actual: Option<&Value>, path: &str) -> Result<(), Mismatch> {
    let mismatch = || Mismatch {
        path: path.to_owned(),
        expected: expected.to_string(),
        actual: show(actual),
    };
    match (expected, actual) {
        (Value::Null, None | Some(Value::Null)) => Ok(()),
        (Value::Null, Some(actual)) => Err(Mismatch {
            path: path.to_owned(),
            expected: "<absent>".to_owned(),
            actual: actual.to_string(),
        }),
        (_, None) => Err(mismatch()),
        (Value::Object(expected), Some(Value::Object(actual))) => {
            for (key, want) in expected {
                subset(want, actual.get(key), &join(path, key))?;
            }
            Ok(())
        }
        (Value::Array(expected), Some(Value::Array(actual))) => list(expected, actual, path),
        (Value::Number(want), Some(Value::Number(have))) if want.as_f64() == have.as_f64() => Ok(()),
        (want, Some(have)) if want == have => Ok(()),
        _ => Err(mismatch()),
    }
}

fn list(expected: &[Value], actual: &[Value], path: &str) -> Result<(), Mismatch> {
    let field = path.rsplit(['.', ']']).next().unwrap_or_default();
    if let Some(key) = merge_key(field, expected) {
        for want in expected {
            let id = &want[key];
            let item_path = format!("{path}[{key}={}]", scalar_text(id));
            let found = actual.iter().find(|have| same_key(&have[key], id));
            match found {
                Some(have) => subset(want, Some(have), &item_path)?,
                None => {
                    return Err(Mismatch {
                        path: item_path,
                        expected: want.to_string(),
                        actual: format!(
                            "<absent> (items have {key}: {})",
                            actual
                                .iter()
                                .map(|i| scalar_text(&i[key]))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
            }
        }
        return Ok(());
    }
    if expected.len() != actual.len() {
        return Err(Mismatch {
            path: path.to_owned(),
            expected: format!("{} item(s) {}", expected.len(), Value::from(expected.to_vec())),
            actual: format!("{} item(s) {}", actual.len(), Value::from(actual.to_vec())),
        });
    }
    for (i, (want, have)) in expected.iter().zip(actual).enumerate() {
        subset(want, Some(have), &format!("{path}[{i}]"))?;
    }
    Ok(())
}

/// The Kubernetes merge key of a list field, when every expected item carries it.
fn merge_key(field: &str, expected: &[Value]) -> Option<&'static str> {
    let first = expected.first()?;
    let key = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "ports" if first.get("port").is_some() => "port",
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    };
    expected
        .iter()
        .all(|item| item.get(key).is_some_and(|v| !v.is_null()))
        .then_some(key)
}

fn same_key(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(expected: Value, actual: Value) -> Result<(), String> {
        subset(&expected, Some(&actual), "object").map_err(|m| m.to_string())
    }

    #[test]
    fn named_fields_are_enough_and_others_are_ignored() {
        assert_eq!(check(json!({"a": 1}), json!({"a": 1.0, "b": 2})), Ok(()));
        assert_eq!(
            check(json!({"a": {"b": "x"}}), json!({"a": {"b": "y"}})),
            Err(r#"object.a.b: expected "x", got "y""#.to_owned())
        );
        assert_eq!(check(json!({"gone": null}), json!({"a": 1})), Ok(()));
        assert_eq!(
            check(json!({"a": null}), json!({"a": 1})),
            Err("object.a: expected <absent>, got 1".to_owned())
        );
    }

    #[test]
    fn lists_with_a_merge_key_match_by_key_not_position() {
        let service = json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 5432, "targetPort": 5432}]}});
        assert_eq!(
            check(json!({"spec": {"ports": [{"port": 5432}]}}), service.clone()),
            Ok(())
        );
        assert_eq!(
            check(
                json!({"spec": {"ports": [{"port": 5432, "targetPort": 6000}]}}),
                service.clone()
            ),
            Err("object.spec.ports[port=5432].targetPort: expected 6000, got 5432".to_owned())
        );
        assert_eq!(
            check(json!({"spec": {"ports": [{"port": 443}]}}), service),
            Err(
                r#"object.spec.ports[port=443]: expected {"port":443}, got <absent> (items have port: 80, 5432)"#
                    .to_owned()
            )
        );
        let pod = json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]});
        assert_eq!(check(json!({"containers": [{"name": "b", "image": "y"}]}), pod), Ok(()));
    }

    #[test]
    fn lists_without_a_merge_key_match_position_by_position() {
        assert_eq!(check(json!({"args": ["a", "b"]}), json!({"args": ["a", "b"]})), Ok(()));
        assert_eq!(
            check(json!({"args": ["a"]}), json!({"args": ["a", "b"]})),
            Err(r#"object.args: expected 1 item(s) ["a"], got 2 item(s) ["a","b"]"#.to_owned())
        );
        assert_eq!(
            check(json!({"args": ["a", "c"]}), json!({"args": ["a", "b"]})),
            Err(r#"object.args[1]: expected "c", got "b""#.to_owned())
        );
    }
}
