//! Does the live object already hold what we would apply? If so, no request is sent.
//!
//! `covers(live, desired)` is true when every field we render is present in the live object
//! with an equal value. Fields set by others (defaults, other managers, status) are ignored.
//! Equality tolerates what the API server normalises: quantities (`0.5` = `500m`,
//! `1024Mi` = `1Gi`) and empty values we render but the server drops (`{}`, `[]`, `null`).
//! Removing a field from a template changes the desired-hash annotation, so that is seen too.

use serde_json::Value;

/// Whether `live` already holds every field of `desired`.
pub(crate) fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(live), Value::Object(desired)) => desired.iter().all(|(key, want)| match live.get(key) {
            Some(have) => covers(have, want),
            None => is_empty(want),
        }),
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(have, want)| covers(have, want))
        }
        (Value::String(have), Value::String(want)) => have == want || same_quantity(have, want),
        (Value::Number(have), Value::String(want)) | (Value::String(want), Value::Number(have)) => {
            same_quantity(&have.to_string(), want)
        }
        (Value::Number(have), Value::Number(want)) => have.as_f64() == want.as_f64(),
        (have, want) => have == want,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

fn same_quantity(a: &str, b: &str) -> bool {
    matches!((quantity(a), quantity(b)), (Some(x), Some(y)) if (x - y).abs() <= f64::EPSILON * x.abs().max(1.0))
}

/// The value of a Kubernetes quantity (`500m`, `1Gi`, `2e3`), or `None` if `s` is not one.
pub(crate) fn quantity(s: &str) -> Option<f64> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => 10f64.powi(exponent[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_added_by_the_server_or_others_are_ignored() {
        let desired = json!({"spec": {"ports": [{"port": 5432}]}, "metadata": {"labels": {"a": "1"}}});
        let live = json!({"spec": {"ports": [{"port": 5432, "protocol": "TCP"}], "clusterIP": "10.0.0.1"},
            "metadata": {"labels": {"a": "1", "b": "2"}, "resourceVersion": "7"}, "status": {}});
        assert!(covers(&live, &desired));
    }

    #[test]
    fn drift_in_our_fields_is_seen() {
        let desired = json!({"spec": {"ports": [{"port": 5432}]}});
        assert!(!covers(&json!({"spec": {"ports": [{"port": 5433}]}}), &desired));
        assert!(!covers(&json!({"spec": {"ports": []}}), &desired));
        assert!(!covers(&json!({"spec": {}}), &desired));
    }

    #[test]
    fn normalised_quantities_and_dropped_empties_are_equal() {
        assert!(covers(
            &json!({"cpu": "500m", "mem": "1Gi"}),
            &json!({"cpu": "0.5", "mem": "1024Mi"})
        ));
        assert!(covers(&json!({"a": 1}), &json!({"a": 1, "b": {}, "c": [], "d": null})));
        assert!(!covers(&json!({"cpu": "500m"}), &json!({"cpu": "600m"})));
        assert!(!covers(&json!({"name": "x"}), &json!({"name": "y"})));
    }
}
