//! Running a guarded action: act with the idempotency key, then record the run.
//!
//! Why never simply re-run: the effect (a backup, a webhook) is not idempotent. The key is a
//! function of the parent and its completed-run record (parent UID, action id, guard value), so
//! every attempt at one run acts under the same key until its completion is recorded.
//!
//! A `create` action needs no write before it acts: the created object's name derives from the
//! key, so the name itself is the lock. A repeat (a crash before the record, a second operator,
//! a stale cache) meets AlreadyExists and counts as done: at most one object per key exists,
//! exactly-once in effect. Its run is recorded once, in the same status write as the plan's
//! status when it is the reconcile's last action.
//!
//! An `http` action has no such lock, so it first records its intent (`phase: Pending`) with the
//! parent's resourceVersion as a precondition: of two writers that read the same parent only one
//! records it and sends, a stale cache fails with 409 before anything is sent, and a `Pending`
//! record is resumed with its own key even after the guard value moved on. The receiver gets the
//! key as `Idempotency-Key` and must deduplicate: at-least-once with a stable key.

use std::time::Duration;

use kube::api::PostParams;
use serde_json::{Value, json};

use super::{ApplyError, Cluster, ParentHandle};
use crate::engine::plan::DesiredStatus;
use crate::engine::plan::actions::{ActionDecision, Effect, HttpRequest, RunRecord, phase};
use crate::engine::plan::status::{ConditionStatus, WantedCondition, merge_conditions};
use crate::engine::rules::model::ActionSpec;

/// Condition summarising action failures; `False` while an action is failing.
pub const ACTIONS_CONDITION: &str = "ActionsSucceeded";

/// What a successful run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acted {
    /// The effect took place now: the object was created, the request was delivered.
    Now,
    /// The object for this key already existed: an earlier attempt (a crash before its record,
    /// another operator, or our own run seen through a stale cache) created it; only the record
    /// was written now.
    Before,
}

/// Runs one action the plan decided to run. `parent` is the latest parent JSON and is
/// replaced by the updated object after each status write. With `finish`, a successful
/// completion also writes that status (observedGeneration, fields, conditions).
pub async fn run(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    parent: &mut Value,
    spec: &ActionSpec,
    decision: &ActionDecision,
    finish: Option<&DesiredStatus>,
    now: &str,
) -> Result<Acted, ApplyError> {
    let (Some(key), Some(guard_value), Some(effect)) = (&decision.key, &decision.guard_value, &decision.effect) else {
        return Ok(Acted::Before);
    };
    let id = decision.id.as_str();
    let record = RunRecord::read(parent, id).filter(|r| &r.key == key);
    let runs = RunRecord::read(parent, id).map_or(0, |r| r.runs) + u64::from(record.is_none());
    let attempt = record.as_ref().map_or(0, |r| r.attempts) + 1;
    // A retry keeps the run's start: an `on: delete` action's timeout counts from it.
    let started_at = record
        .as_ref()
        .and_then(|r| r.started_at.clone())
        .unwrap_or_else(|| now.to_owned());
    let run = json!({
        "key": key, "guardValue": guard_value, "startedAt": started_at, "runs": runs, "attempts": attempt,
    });
    if let Effect::Http(_) = effect {
        // Every attempt, a resumed one too, first records its intent under the resourceVersion
        // the decision was made on: if the cache was stale (another writer, or our own last
        // write not seen yet) the write fails with 409 and nothing is sent.
        let resource_version = parent
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        let mut intent = run.clone();
        intent["phase"] = json!(phase::PENDING);
        intent["completedAt"] = Value::Null;
        let intent = json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {"actions": {id: intent}},
        });
        *parent = match cluster.patch_status(handle, &intent).await {
            Ok(updated) => updated,
            Err(kube::Error::Api(status)) if status.code == 409 => return Err(ApplyError::Conflict(id.to_owned())),
            Err(e) => return Err(ApplyError::Status(Box::new(e))),
        };
    }
    let outcome = match effect {
        Effect::Create(object) => create(cluster, object).await,
        Effect::Http(request) => send(request, key).await.map(|()| Acted::Now),
    };
    let conditions = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let (outcome_patch, wanted) = match &outcome {
        Ok(_) => {
            let mut wanted = Vec::new();
            for condition in spec
                .record
                .iter()
                .filter_map(|r| r.condition.as_ref())
                .chain(spec.guard.condition.as_ref())
            {
                wanted.push(WantedCondition {
                    type_: condition.clone(),
                    status: ConditionStatus::True,
                    reason: "ActionRan".to_owned(),
                    message: format!("action {id} ran for {guard_value} (key {key}) at {now}"),
                });
            }
            if conditions
                .iter()
                .any(|c| c["type"] == ACTIONS_CONDITION && c["status"] == "False")
            {
                wanted.push(WantedCondition {
                    type_: ACTIONS_CONDITION.to_owned(),
                    status: ConditionStatus::True,
                    reason: "ActionRan".to_owned(),
                    message: format!("action {id} succeeded for {guard_value} on attempt {attempt}"),
                });
            }
            (
                json!({"phase": phase::DONE, "completedAt": now, "error": null, "failedAt": null}),
                wanted,
            )
        }
        Err(message) => (
            json!({"phase": phase::FAILED, "error": message, "failedAt": now}),
            vec![WantedCondition {
                type_: ACTIONS_CONDITION.to_owned(),
                status: ConditionStatus::False,
                reason: "ActionFailed".to_owned(),
                message: format!("action {id} failed for {guard_value} (key {key}) on attempt {attempt}: {message}"),
            }],
        ),
    };
    // The last action of a reconcile also writes the plan's status, saving a request.
    let finish = finish.filter(|_| outcome.is_ok());
    let wanted: Vec<WantedCondition> = wanted
        .into_iter()
        .chain(finish.iter().flat_map(|d| d.conditions.clone()))
        .collect();
    let mut record_patch = run;
    if let (Some(record), Some(outcome)) = (record_patch.as_object_mut(), outcome_patch.as_object()) {
        record.extend(outcome.clone());
    }
    let mut status = json!({
        "actions": {id: record_patch},
        "conditions": merge_conditions(&conditions, &wanted, generation, now),
    });
    if let Some(desired) = finish {
        status["observedGeneration"] = json!(desired.generation);
        for (field, value) in &desired.fields {
            status[field] = value.clone();
        }
    }
    if outcome.is_ok()
        && let Some(field) = spec.record.as_ref().and_then(|r| r.status_field.as_ref())
    {
        status[field] = json!(now);
    }
    *parent = cluster
        .patch_status(handle, &json!({"status": status}))
        .await
        .map_err(|e| ApplyError::Status(Box::new(e)))?;
    outcome.map_err(|message| ApplyError::Action {
        id: id.to_owned(),
        message,
    })
}

async fn create(cluster: &Cluster<'_>, object: &Value) -> Result<Acted, String> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind, namespace) = (text("/apiVersion"), text("/kind"), text("/metadata/namespace"));
    let api = cluster.api(api_version, kind, namespace).map_err(|e| e.to_string())?;
    let typed: kube::api::DynamicObject = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    cluster.count_write("POST", kind);
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(Acted::Now),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Acted::Before),
        Err(e) => Err(super::api_error::describe(&e)),
    }
}

/// One delivery attempt; a failure is retried by the reconcile's backoff under the same key,
/// each attempt counted in `status.actions.<id>.attempts`.
async fn send(request: &HttpRequest, key: &str) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(request.timeout_ms))
        .build()
        .map_err(|e| e.to_string())?;
    let method = reqwest::Method::from_bytes(request.method.as_bytes()).map_err(|e| e.to_string())?;
    let mut builder = client
        .request(method, &request.url)
        .header("Idempotency-Key", key)
        .body(request.body.clone());
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    match builder.send().await {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(format!(
            "{} {} answered {}",
            request.method,
            request.url,
            response.status()
        )),
        Err(e) => Err(format!("{} {}: {e}", request.method, request.url)),
    }
}
