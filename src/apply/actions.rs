//! Running a guarded action: record the intent, act with the idempotency key, record completion.
//!
//! Why never simply re-run: the effect (a backup, a webhook) is not idempotent. The intent
//! record is written with the parent's resourceVersion as a precondition, so of two writers
//! that read the same parent only one records it; whoever acts next, acts under that one key.
//! A created object's name derives from the key, so a repeat meets AlreadyExists; a webhook
//! receives the key as `Idempotency-Key` and must deduplicate. Delivery is therefore
//! exactly-once in effect for `create`, at-least-once with a stable key for `http`.

use std::time::Duration;

use kube::api::PostParams;
use serde_json::{Value, json};

use super::{ApplyError, Cluster, ParentHandle};
use crate::plan::DesiredStatus;
use crate::plan::actions::{ActionDecision, Effect, HttpRequest, RunRecord, phase};
use crate::plan::status::{ConditionStatus, WantedCondition, merge_conditions};
use crate::rules::model::ActionSpec;

/// Condition summarising action failures; `False` while an action is failing.
pub const ACTIONS_CONDITION: &str = "ActionsSucceeded";

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
) -> Result<(), ApplyError> {
    let (Some(key), Some(guard_value), Some(effect)) = (&decision.key, &decision.guard_value, &decision.effect) else {
        return Ok(());
    };
    let id = decision.id.as_str();
    let record = RunRecord::read(parent, id);
    // Every attempt, a resumed one too, first records its intent under the resourceVersion the
    // decision was made on: if the cache was stale (another writer, or our own last write not
    // seen yet) the write fails with 409 and the reconcile retries on fresh state.
    let same_key = record.as_ref().is_some_and(|r| &r.key == key);
    let runs = record.as_ref().map_or(0, |r| r.runs) + u64::from(!same_key);
    let attempts = if same_key {
        record.as_ref().map_or(0, |r| r.attempts)
    } else {
        0
    } + 1;
    let resource_version = parent
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let intent = json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"actions": {id: {
            "key": key, "guardValue": guard_value, "phase": phase::PENDING,
            "startedAt": now, "completedAt": null, "runs": runs, "attempts": attempts,
        }}},
    });
    *parent = match cluster.patch_status(handle, &intent).await {
        Ok(updated) => updated,
        Err(kube::Error::Api(status)) if status.code == 409 => return Err(ApplyError::Conflict(id.to_owned())),
        Err(e) => return Err(ApplyError::Status(Box::new(e))),
    };
    let outcome = match effect {
        Effect::Create(object) => create(cluster, object).await,
        Effect::Http(request) => send(request, key).await,
    };
    let attempt = RunRecord::read(parent, id).map_or(1, |r| r.attempts);
    let conditions = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let (record_patch, wanted) = match &outcome {
        Ok(()) => {
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

async fn create(cluster: &Cluster<'_>, object: &Value) -> Result<(), String> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind, namespace) = (text("/apiVersion"), text("/kind"), text("/metadata/namespace"));
    let api = cluster.api(api_version, kind, namespace).map_err(|e| e.to_string())?;
    let typed: kube::api::DynamicObject = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    cluster.count_write("POST", kind);
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
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
