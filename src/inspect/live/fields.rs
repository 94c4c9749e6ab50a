//! The fields a manager owns, from `metadata.managedFields` (FieldsV1), and an object cut down
//! to them: what `ruleop diff` compares, so defaults and other managers' fields never show.

use serde_json::{Map, Value};

/// The union of the field sets `manager` holds on `object` (every operation: its applies, and
/// the merge patch that repairs drift).
pub(crate) fn owned_by(object: &Value, manager: &str) -> Map<String, Value> {
    let mut union = Map::new();
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in entries {
        if entry.get("manager").and_then(Value::as_str) == Some(manager)
            && let Some(Value::Object(fields)) = entry.get("fieldsV1")
        {
            merge(&mut union, fields);
        }
    }
    union
}

/// Adds the field set `more` to `into`.
pub(crate) fn merge(into: &mut Map<String, Value>, more: &Map<String, Value>) {
    for (key, sub) in more {
        match (into.get_mut(key), sub) {
            (Some(Value::Object(have)), Value::Object(sub)) => merge(have, sub),
            (Some(_), _) => {}
            (None, _) => {
                into.insert(key.clone(), sub.clone());
            }
        }
    }
}

/// `value` cut down to the field set `fields` (FieldsV1: `f:<name>` map fields, `k:<json>` list
/// items by key, `v:<json>` set items, `i:<n>` items by index, `.` the item itself).
pub(crate) fn project(value: &Value, fields: &Map<String, Value>) -> Value {
    let leaf = |sub: &Map<String, Value>| sub.keys().all(|k| k == ".");
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, sub) in fields {
                let Some(name) = key.strip_prefix("f:") else { continue };
                let Some(field) = map.get(name) else { continue };
                let projected = match sub {
                    Value::Object(sub) if !leaf(sub) => project(field, sub),
                    _ => field.clone(),
                };
                out.insert(name.to_owned(), projected);
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            for (index, item) in items.iter().enumerate() {
                let selected = fields.iter().find(|(key, _)| selects(key, index, item));
                match selected {
                    Some((_, Value::Object(sub))) if !leaf(sub) => out.push(project(item, sub)),
                    Some(_) => out.push(item.clone()),
                    None => {}
                }
            }
            Value::Array(out)
        }
        other => other.clone(),
    }
}

fn selects(key: &str, index: usize, item: &Value) -> bool {
    if let Some(json) = key.strip_prefix("k:") {
        let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(json) else {
            return false;
        };
        wanted
            .iter()
            .all(|(k, v)| item.get(k).is_some_and(|have| same(have, v)))
    } else if let Some(json) = key.strip_prefix("v:") {
        serde_json::from_str::<Value>(json).is_ok_and(|v| same(item, &v))
    } else if let Some(i) = key.strip_prefix("i:") {
        i.parse::<usize>() == Ok(index)
    } else {
        false
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (x, y) => x == y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_owned_fields_and_keyed_items_remain() {
        let live = json!({
            "metadata": {"name": "a", "labels": {"ours": "1", "theirs": "2"}, "resourceVersion": "9",
                "managedFields": [
                    {"manager": "ruleop", "operation": "Apply", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:ours": {}}},
                        "f:spec": {"f:ports": {"k:{\"port\":5432,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:targetPort": {}}}}}},
                    {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:theirs": {}}}}}]},
            "spec": {"clusterIP": "10.0.0.1", "ports": [
                {"port": 80, "protocol": "TCP", "targetPort": 80},
                {"port": 5432, "protocol": "TCP", "targetPort": 5432}]}});
        let fields = owned_by(&live, "ruleop");
        assert_eq!(
            project(&live, &fields),
            json!({"metadata": {"labels": {"ours": "1"}}, "spec": {"ports": [{"port": 5432, "targetPort": 5432}]}})
        );
    }

    #[test]
    fn set_items_and_whole_leaves_are_kept() {
        let value = json!({"finalizers": ["a", "b"], "data": {"x": {"deep": 1}}});
        let fields = json!({"f:finalizers": {"v:\"b\"": {}}, "f:data": {"f:x": {}}});
        let Value::Object(fields) = fields else { unreachable!() };
        assert_eq!(
            project(&value, &fields),
            json!({"finalizers": ["b"], "data": {"x": {"deep": 1}}})
        );
    }
}
