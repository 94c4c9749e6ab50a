//! The parent's status write, where one refused field costs only itself: the status is one merge
//! patch, so a value the parent's schema refuses (a string where the CRD says `integer`) would
//! otherwise fail every field and condition with it. On a 422 that names status fields of the
//! patch, the patch is sent again without them and the `StatusFieldsValid` condition says which
//! were refused and why; once a full patch is accepted again, it turns `True`.

use serde_json::{Map, Value, json};

use super::{Cluster, ParentHandle};

/// The condition that reports refused status fields.
pub(crate) const STATUS_FIELDS_VALID: &str = "StatusFieldsValid";

/// Sends the plan's status patch for `parent` (as last read), dropping fields the API server
/// refuses; returns the parent as written.
pub(crate) async fn write_status(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    parent: &Value,
    patch: &Value,
    now: &str,
) -> Result<Value, kube::Error> {
    let mut patch = patch.clone();
    if condition_status(parent, STATUS_FIELDS_VALID) == Some("False") {
        set_condition(
            &mut patch,
            parent,
            "True",
            "Accepted",
            "every status field was accepted",
            now,
        );
    }
    let error = match cluster.patch_status(handle, parent, &patch).await {
        Ok(written) => return Ok(written),
        Err(e) => e,
    };
    let refused = refused_fields(&error, &patch);
    if refused.is_empty() {
        return Err(error);
    }
    let message = format!(
        "the API server refused {}: {}",
        refused
            .iter()
            .map(|f| format!("status.{f}"))
            .collect::<Vec<_>>()
            .join(", "),
        super::api_error::describe(&error)
    );
    tracing::warn!(parent = %handle.name, fields = ?refused, error = %message, "status fields refused; writing the rest");
    if let Some(status) = patch.get_mut("status").and_then(Value::as_object_mut) {
        for field in &refused {
            status.remove(field);
        }
    }
    set_condition(&mut patch, parent, "False", "FieldRefused", &message, now);
    let written = cluster.patch_status(handle, parent, &patch).await?;
    super::events::publish(
        cluster,
        handle,
        None,
        kube::runtime::events::EventType::Warning,
        "StatusFieldRefused",
        message,
    );
    Ok(written)
}

/// The top-level status fields of `patch` that a 422 names (`status.<field>` in its causes or
/// message), never the engine's own `conditions` and `observedGeneration`.
fn refused_fields(error: &kube::Error, patch: &Value) -> Vec<String> {
    let kube::Error::Api(status) = error else {
        return Vec::new();
    };
    if status.code != 422 {
        return Vec::new();
    }
    let mut named: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.field.as_str())
        .collect();
    named.push(status.message.as_str());
    let fields = patch.pointer("/status").and_then(Value::as_object);
    let mut refused: Vec<String> = fields
        .into_iter()
        .flat_map(Map::keys)
        .filter(|field| !matches!(field.as_str(), "conditions" | "observedGeneration"))
        .filter(|field| named.iter().any(|text| names_field(text, field)))
        .cloned()
        .collect();
    refused.sort();
    refused
}

/// Whether `text` names `status.<field>` as a whole path segment (`status.capacity:` or
/// `status.capacity[0]`, not `status.capacityBytes`).
fn names_field(text: &str, field: &str) -> bool {
    let needle = format!("status.{field}");
    text.match_indices(&needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn condition_status<'a>(parent: &'a Value, type_: &str) -> Option<&'a str> {
    parent
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

/// Puts the condition into the patch's conditions (the whole list: a merge patch replaces it),
/// starting from the parent's when the patch has none.
fn set_condition(patch: &mut Value, parent: &Value, status: &str, reason: &str, message: &str, now: &str) {
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let current = parent
        .pointer("/status/conditions")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let Some(target) = patch
        .as_object_mut()
        .map(|p| p.entry("status").or_insert_with(|| json!({})))
    else {
        return;
    };
    let Some(conditions) = target
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert(current))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let condition = json!({
        "type": STATUS_FIELDS_VALID,
        "status": status,
        "reason": reason,
        "message": crate::engine::diagnostic::bounded(message, crate::engine::diagnostic::MESSAGE_LIMIT),
        "lastTransitionTime": now,
        "observedGeneration": generation,
    });
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(STATUS_FIELDS_VALID))
    {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::api_error::rejected as invalid;

    #[test]
    fn only_the_patchs_own_fields_named_by_a_422_are_refused() {
        let patch = json!({"status": {"capacity": "x", "capacityBytes": 1, "zones": [], "conditions": [], "observedGeneration": 1}});
        let error = invalid(
            "Copies.x \"orders\" is invalid: status.capacity: Invalid value: \"string\": must be of type integer",
            &["status.capacity"],
        );
        assert_eq!(refused_fields(&error, &patch), vec!["capacity"]);
        let from_message = invalid("is invalid: status.zones[0]: Invalid value", &[]);
        assert_eq!(refused_fields(&from_message, &patch), vec!["zones"]);
        let engine_own = invalid("is invalid: status.conditions[0].reason: Required value", &[]);
        assert!(refused_fields(&engine_own, &patch).is_empty());
        let conflict = kube::Error::Api(Box::new(kube::core::Status {
            code: 409,
            ..Default::default()
        }));
        assert!(refused_fields(&conflict, &patch).is_empty());
    }

    #[test]
    fn the_condition_replaces_its_old_self_and_keeps_the_others() {
        let parent = json!({"metadata": {"generation": 4}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": STATUS_FIELDS_VALID, "status": "False"}]}});
        let mut patch = json!({"status": {"capacity": 3}});
        set_condition(&mut patch, &parent, "True", "Accepted", "ok", "2026-12-02T00:00:00Z");
        let conditions = patch
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["status"], "True");
        assert_eq!(conditions[1]["observedGeneration"], 4);
        assert_eq!(condition_status(&parent, "Ready"), Some("True"));
    }
}
