//! `ruleop.io/paused: "true"` on a parent: ruleop writes nothing for it (no child applied or
//! pruned, no finalizer added or removed, no action run) but a `Paused` condition, once, until
//! the annotation goes; then `Paused` turns `False` and the parent is reconciled as usual.

use serde_json::{Map, Value};

use super::status::{ConditionStatus, WantedCondition};
use super::{DesiredStatus, Plan, status_patch};

/// The annotation that pauses a parent (value `"true"`; anything else does not).
pub(crate) const ANNOTATION_PAUSED: &str = "ruleop.io/paused";
/// The condition a paused parent carries.
pub(crate) const PAUSED: &str = "Paused";

/// Whether the parent is paused.
pub(crate) fn is_paused(parent: &Value) -> bool {
    parent
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_PAUSED))
        .and_then(Value::as_str)
        == Some("true")
}

/// The plan of a paused parent: nothing but `Paused=True`. Its `observedGeneration` stays what
/// the last reconcile before the pause saw.
pub(crate) fn plan(parent: &Value, now: &str) -> Plan {
    let observed = parent
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = DesiredStatus {
        generation: observed,
        fields: Map::new(),
        conditions: vec![WantedCondition {
            type_: PAUSED.to_owned(),
            status: ConditionStatus::True,
            reason: "Paused".to_owned(),
            message: format!(
                "the {ANNOTATION_PAUSED} annotation is \"true\": ruleop writes nothing for this object and holds its \
                 actions until it is removed"
            ),
        }],
        revision: None,
    };
    Plan {
        status_patch: status_patch(parent, observed, Map::new(), &status.conditions, now),
        paused: true,
        ..Plan::with_status_only(status)
    }
}

/// `Paused=False` for a parent that says it is paused and no longer is, else nothing.
pub(crate) fn resumed(parent: &Value) -> Option<WantedCondition> {
    let was_paused = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(PAUSED)
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
    was_paused.then(|| WantedCondition {
        type_: PAUSED.to_owned(),
        status: ConditionStatus::False,
        reason: "Resumed".to_owned(),
        message: format!("the {ANNOTATION_PAUSED} annotation was removed; ruleop reconciles this object again"),
    })
}
