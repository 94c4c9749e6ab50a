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
//! key as `Idempotency-Key` and must deduplicate: at-least-once with a stable key. The request
//! itself is sent by a task of its own ([`super::deliveries`]), so the reconcile lets its worker
//! go; the answer queues the parent, and that reconcile records the outcome under the same key.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use kube::api::PostParams;
use serde_json::{Value, json};
use tracing::debug;

use super::deliveries::Progress;
use super::{ApplyError, Cluster, ParentHandle, secrets};
use crate::engine::egress::{self, EGRESS_DENIED, Target};
use crate::engine::plan::DesiredStatus;
use crate::engine::plan::actions::{ActionDecision, Effect, HttpRequest, RunStart, phase};
use crate::engine::plan::status::{ConditionStatus, WantedCondition, merge_conditions};
use crate::engine::rules::model::ActionSpec;

/// Condition summarising action failures; `False` while an action is failing.
pub(crate) const ACTIONS_CONDITION: &str = "ActionsSucceeded";

/// What a successful run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acted {
    /// The effect took place now: the object was created, the request was delivered.
    Now,
    /// The object for this key already existed: an earlier attempt (a crash before its record,
    /// another operator, or our own run seen through a stale cache) created it; only the record
    /// was written now.
    Before,
    /// The request is on its way (sent by a task of its own, see [`super::deliveries`]); its
    /// answer queues the parent again, and that reconcile records the outcome.
    InFlight,
}

/// Runs one action the plan decided to run. `parent` is the latest parent JSON and is
/// replaced by the updated object after each status write. With `finish`, a successful
/// completion also writes that status (observedGeneration, fields, conditions).
pub(crate) async fn run(
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
    let RunStart {
        record,
        runs,
        started_at,
    } = RunStart::of(parent, id, key, now);
    // A request's answer is recorded by a later reconcile, under the attempt its intent counted.
    let progress = match effect {
        Effect::Http(_) => cluster.deliveries.progress(key),
        Effect::Create(_) => Progress::NotSent,
    };
    let answered = matches!(progress, Progress::Done(_));
    let attempt = record
        .as_ref()
        .map_or(0, |r| r.attempts)
        .saturating_add(u64::from(!answered))
        .max(1);
    let run = json!({
        "key": key, "guardValue": guard_value, "startedAt": started_at, "runs": runs, "attempts": attempt,
    });
    let outcome = match effect {
        Effect::Create(object) => create(cluster, object).await.map_err(Failure::failed),
        Effect::Http(request) => match progress {
            Progress::InFlight => return Ok(Acted::InFlight),
            Progress::Done(outcome) => outcome.map(|()| Acted::Now).map_err(Failure::from),
            Progress::NotSent => match prepare(cluster, request).await {
                Ok(ready) => {
                    write_intent(cluster, handle, parent, id, &run).await?;
                    let parent_at = (
                        parent
                            .pointer("/metadata/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        handle.name.clone(),
                    );
                    let (request, key) = (request.clone(), key.clone());
                    cluster.deliveries.spawn(key.clone(), parent_at, async move {
                        send(&request, &ready, &key).await.map_err(|f| (f.reason, f.message))
                    });
                    return Ok(Acted::InFlight);
                }
                // A request the egress policy (or its Secret) refuses is refused before anything
                // is written or sent.
                Err(failure) => Err(failure),
            },
        },
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
        Err(failure) => (
            json!({"phase": phase::FAILED, "error": failure.message, "failedAt": now}),
            vec![WantedCondition {
                type_: ACTIONS_CONDITION.to_owned(),
                status: ConditionStatus::False,
                reason: failure.reason.to_owned(),
                message: format!(
                    "action {id} failed for {guard_value} (key {key}) on attempt {attempt}: {}",
                    failure.message
                ),
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
        .patch_status(handle, parent, &json!({"status": status}))
        .await
        .map_err(|e| ApplyError::Status(Box::new(e)))?;
    // Recorded: a delivery's answer is no longer needed (until then a failed write keeps it).
    cluster.deliveries.settle(key);
    outcome.map_err(|failure| match failure.reason {
        EGRESS_DENIED => ApplyError::EgressDenied {
            id: id.to_owned(),
            message: failure.message,
        },
        _ => ApplyError::Action {
            id: id.to_owned(),
            message: failure.message,
        },
    })
}

/// Why an effect did not take place, and the reason it is reported under.
#[derive(Debug)]
struct Failure {
    /// `ActionFailed`, or `EgressDenied` for a request refused before any connection.
    reason: &'static str,
    /// What failed: for a request, only its scheme and host, never path, query or userinfo.
    message: String,
}

impl From<(&'static str, String)> for Failure {
    fn from((reason, message): (&'static str, String)) -> Self {
        Failure { reason, message }
    }
}

impl Failure {
    fn failed(message: String) -> Self {
        Failure {
            reason: "ActionFailed",
            message,
        }
    }
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

/// Records the run's intent (`phase: Pending`) under the resourceVersion the decision was made
/// on, before anything is sent: if the cache was stale (another writer, or our own last write
/// not seen yet) the write fails with 409 and nothing is sent. A resumed run records it again.
async fn write_intent(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    parent: &mut Value,
    id: &str,
    run: &Value,
) -> Result<(), ApplyError> {
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
    *parent = match cluster.patch_status(handle, parent, &intent).await {
        Ok(updated) => updated,
        Err(kube::Error::Api(status)) if status.code == 409 => return Err(ApplyError::Conflict(id.to_owned())),
        Err(e) => return Err(ApplyError::Status(Box::new(e))),
    };
    Ok(())
}

/// A request ready to send: where it may connect, and the header values read from Secrets.
#[derive(Debug)]
struct Ready {
    target: Target,
    pinned: Vec<SocketAddr>,
    secret_headers: Vec<(String, reqwest::header::HeaderValue)>,
}

/// Everything decided before a request is sent: the egress policy, then the headers kept in
/// Secrets. A failure here opens no socket and writes no intent.
async fn prepare(cluster: &Cluster<'_>, request: &HttpRequest) -> Result<Ready, Failure> {
    let (target, pinned) = check(request, cluster.egress).await?;
    let mut secret_headers = Vec::new();
    for (header, reference) in &request.secret_headers {
        let value = secrets::read_key(cluster, reference)
            .await
            .map_err(|e| Failure::failed(format!("header {header}: {e}; nothing was sent")))?;
        let mut value = reqwest::header::HeaderValue::from_bytes(&value).map_err(|_| {
            Failure::failed(format!(
                "header {header}: the value in {} is not valid header text; nothing was sent",
                secrets::describe(reference)
            ))
        })?;
        value.set_sensitive(true);
        secret_headers.push((header.clone(), value));
    }
    Ok(Ready {
        target,
        pinned,
        secret_headers,
    })
}

/// The egress policy applied before any connection: the URL against the rule's
/// `allowedHosts`, then every address its host resolves to against the refused ranges. The
/// checked addresses are the only ones the request may connect to (pinned), so a name that
/// resolves differently a moment later (DNS rebinding) cannot move it.
async fn check(request: &HttpRequest, refused: &[IpNet]) -> Result<(Target, Vec<SocketAddr>), Failure> {
    let denied = |e: egress::Denied| Failure {
        reason: EGRESS_DENIED,
        message: format!("{}: {e}", request.at),
    };
    let allowed = egress::parse_allowed(&request.allowed_hosts).map_err(denied)?;
    let target = egress::check_url(&request.url, &allowed).map_err(denied)?;
    let addrs: Vec<IpAddr> = match (target.literal(), &target.name) {
        (Some(ip), _) => vec![ip],
        (None, Some(name)) => {
            let wait = Duration::from_millis(request.timeout_ms).min(egress::MAX_TIMEOUT);
            match tokio::time::timeout(wait, tokio::net::lookup_host((name.as_str(), target.port))).await {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                Ok(Err(_)) | Err(_) => {
                    return Err(Failure::failed(format!(
                        "request to {} failed: its host name did not resolve",
                        target.origin
                    )));
                }
            }
        }
        (None, None) => Vec::new(),
    };
    if let Err(e) = egress::check_addrs(&target, &addrs, refused) {
        debug!(origin = %target.origin, "request refused by the egress policy");
        return Err(denied(e));
    }
    let pinned = addrs.into_iter().map(|ip| SocketAddr::new(ip, target.port)).collect();
    Ok((target, pinned))
}

/// One delivery attempt; a failure is retried by the reconcile's backoff under the same key,
/// each attempt counted in `status.actions.<id>.attempts`. No redirect is followed (a 3xx is a
/// failure), no proxy from the environment is used, and errors name only scheme and host: the
/// tenant chose the rest, and a detailed connect error would make this a port scanner.
async fn send(request: &HttpRequest, ready: &Ready, key: &str) -> Result<(), Failure> {
    let (target, pinned) = (&ready.target, &ready.pinned);
    let origin = &target.origin;
    let mut client = reqwest::Client::builder()
        .timeout(Duration::from_millis(request.timeout_ms).min(egress::MAX_TIMEOUT))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(name) = &target.name {
        client = client.resolve_to_addrs(name, pinned);
    }
    let client = client
        .build()
        .map_err(|_| Failure::failed(format!("request to {origin} failed: no HTTP client")))?;
    let method = reqwest::Method::from_bytes(request.method.as_bytes()).map_err(|_| {
        Failure::failed(format!(
            "request to {origin} failed: invalid method {:?}",
            request.method
        ))
    })?;
    let mut builder = client
        .request(method, target.url.clone())
        .header("Idempotency-Key", key)
        .body(request.body.clone());
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    for (name, value) in &ready.secret_headers {
        builder = builder.header(name, value.clone());
    }
    match builder.send().await {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) if response.status().is_redirection() => Err(Failure::failed(format!(
            "{} {origin} answered {} (redirects are not followed)",
            request.method,
            response.status().as_u16()
        ))),
        Ok(response) => Err(Failure::failed(format!(
            "{} {origin} answered {}",
            request.method,
            response.status()
        ))),
        Err(e) => {
            let what = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "connection error"
            } else if e.is_builder() {
                "invalid request"
            } else {
                "request error"
            };
            Err(Failure::failed(format!("request to {origin} failed: {what}")))
        }
    }
}
