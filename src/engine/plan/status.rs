//! The parent's status: observedGeneration, conditions and rule fields, as a merge patch that
//! exists only when something changed (so a converged parent gets no status write).

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};

/// The status of a condition, as Kubernetes writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not hold.
    False,
    /// It could not be determined (e.g. its expression failed).
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// A condition the engine wants, before timestamps are merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedCondition {
    /// Condition type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// Human message.
    pub message: String,
}

/// A Warning Event a condition's transition asks for (`warnOn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConditionWarning {
    /// The condition type.
    #[serde(rename = "condition")]
    pub type_: String,
    /// The Event's reason: the condition's `False` reason.
    pub reason: String,
    /// The Event's note: the condition's message.
    pub message: String,
}

/// The Warning Events of the wanted conditions that turn `False` with a reason their `warnOn`
/// lists (`warn_on` by condition type), where the current condition of that type is not already
/// `False` with that reason: a reconcile that finds the condition as it was publishes nothing.
pub(crate) fn warnings<'a>(
    current: &[Value],
    wanted: &[WantedCondition],
    warn_on: impl Fn(&str) -> &'a [String],
) -> Vec<ConditionWarning> {
    wanted
        .iter()
        .filter(|want| want.status == ConditionStatus::False)
        .filter(|want| warn_on(&want.type_).contains(&want.reason))
        .filter(|want| {
            !current.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(&want.type_)
                    && c.get("status").and_then(Value::as_str) == Some("False")
                    && c.get("reason").and_then(Value::as_str) == Some(&want.reason)
            })
        })
        .map(|want| ConditionWarning {
            type_: want.type_.clone(),
            reason: want.reason.clone(),
            message: bounded(&want.message, MESSAGE_LIMIT).into_owned(),
        })
        .collect()
}

/// Merges wanted conditions into the current list: a condition keeps its `lastTransitionTime`
/// while its status is unchanged, so a status write never triggers another one. Conditions
/// of other types (other writers, action records) are kept as they are.
pub(crate) fn merge_conditions(
    current: &[Value],
    wanted: &[WantedCondition],
    generation: i64,
    now: &str,
) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(current.len() + wanted.len());
    for condition in current {
        let type_ = condition.get("type").and_then(Value::as_str).unwrap_or_default();
        if !wanted.iter().any(|w| w.type_ == type_) {
            merged.push(condition.clone());
        }
    }
    for want in wanted {
        let status = want.status.as_str();
        let previous = current
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(&want.type_));
        let transition = previous
            .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        merged.push(json!({
            "type": want.type_,
            "status": status,
            "reason": want.reason,
            // A message can quote user values; a status write must stay small.
            "message": bounded(&want.message, MESSAGE_LIMIT),
            "lastTransitionTime": transition,
            "observedGeneration": generation,
        }));
    }
    merged.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
    merged
}

/// The status merge patch taking `current` to the managed values, or `None` if they already hold.
/// A `null` value removes the field; a missing field equals `null`.
pub(crate) fn patch(current: &Value, managed: Map<String, Value>) -> Option<Value> {
    let changed = managed
        .iter()
        .any(|(key, want)| current.get(key).unwrap_or(&Value::Null) != want);
    changed.then(|| json!({ "status": Value::Object(managed) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(status: bool) -> WantedCondition {
        WantedCondition {
            type_: "Ready".into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
        }
    }

    #[test]
    fn a_warning_only_when_the_condition_turns_false_with_a_listed_reason() {
        let wanted = |status: ConditionStatus, reason: &str| WantedCondition {
            type_: "BackupSucceeded".to_owned(),
            status,
            reason: reason.to_owned(),
            message: "Job orders-backup-1: Job has reached the specified backoff limit".to_owned(),
        };
        let listed = ["BackoffLimitExceeded".to_owned()];
        let warn_on = |type_: &str| -> &[String] { if type_ == "BackupSucceeded" { &listed } else { &[] } };
        let current =
            |status: &str, reason: &str| vec![json!({"type": "BackupSucceeded", "status": status, "reason": reason})];
        let failed = [wanted(ConditionStatus::False, "BackoffLimitExceeded")];
        // From True, from Running, from nothing: one Warning with the reason and the message.
        for before in [current("True", "Succeeded"), current("False", "Running"), vec![]] {
            let warnings = warnings(&before, &failed, warn_on);
            assert_eq!(warnings.len(), 1, "{before:?}");
            assert_eq!(warnings[0].reason, "BackoffLimitExceeded");
            assert!(warnings[0].message.contains("backoff limit"));
        }
        // Already so: nothing again.
        assert!(warnings(&current("False", "BackoffLimitExceeded"), &failed, warn_on).is_empty());
        // A reason not listed, a True condition, a type without warnOn: nothing.
        let running = [wanted(ConditionStatus::False, "Running")];
        assert!(warnings(&[], &running, warn_on).is_empty());
        assert!(warnings(&[], &[wanted(ConditionStatus::True, "BackoffLimitExceeded")], warn_on).is_empty());
        let other = [WantedCondition {
            type_: "Ready".to_owned(),
            ..wanted(ConditionStatus::False, "BackoffLimitExceeded")
        }];
        assert!(warnings(&[], &other, warn_on).is_empty());
    }

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let current = merge_conditions(&[], &[ready(true)], 1, "t1");
        let again = merge_conditions(&current, &[ready(true)], 1, "t2");
        assert_eq!(again[0]["lastTransitionTime"], "t1");
        let flipped = merge_conditions(&again, &[ready(false)], 1, "t3");
        assert_eq!(flipped[0]["lastTransitionTime"], "t3");
    }

    #[test]
    fn foreign_conditions_are_kept() {
        let current = vec![json!({"type": "BackupInitiated", "status": "True"})];
        let merged = merge_conditions(&current, &[ready(true)], 1, "t");
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0]["type"], "BackupInitiated");
    }

    #[test]
    fn no_patch_when_nothing_changed() {
        let current = json!({"observedGeneration": 2, "endpoint": "x"});
        let mut managed = Map::new();
        managed.insert("observedGeneration".into(), json!(2));
        managed.insert("endpoint".into(), json!("x"));
        managed.insert("gone".into(), Value::Null);
        assert_eq!(patch(&current, managed.clone()), None);
        managed.insert("observedGeneration".into(), json!(3));
        assert!(patch(&current, managed).is_some());
    }
}
