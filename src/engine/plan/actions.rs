//! Action decisions: whether each guarded one-shot action runs now, and why.
//!
//! A run is keyed by an idempotency key derived from (parent UID, action id, guard value), a
//! function of the parent and its completed-run record, so every attempt at one run has the same
//! key until the apply layer records it `Done`. A `create` run needs nothing more (the created
//! object's name derives from the key: a repeat meets AlreadyExists); an `http` run records its
//! intent (phase `Pending`) before sending, and a `Pending` record is always resumed with its
//! own key, never a new one, so a crash between sending and completion re-sends that key only.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::PlanError;
use super::children::{Declared, render_object};
use super::context::{self, LABEL_ACTION, ParentRef};
use super::scope::Placement;
use crate::engine::base::digest::sha256_hex_prefix;
use crate::engine::base::schedule::{Schedule, Slot};
use crate::engine::rules::Rule;
use crate::engine::rules::model::{ActionSpec, ActionTrigger, HeaderValue, SecretKeyRef};
use crate::engine::template::{self, Renderer};

/// Annotation carrying the idempotency key on created objects.
pub const ANNOTATION_KEY: &str = "ruleop.io/idempotency-key";

/// The guard value of an `on: delete` action's run: one run per parent (UID) deletion.
pub const DELETE_GUARD_VALUE: &str = "delete";

/// Phase of a recorded run.
pub mod phase {
    /// Intent recorded; the effect may or may not have happened.
    pub const PENDING: &str = "Pending";
    /// The effect happened.
    pub const DONE: &str = "Done";
    /// The last attempt failed; it is retried with the same key.
    pub const FAILED: &str = "Failed";
}

/// The decision for one action.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionDecision {
    /// Action id.
    pub id: String,
    /// Whether it runs in this reconcile.
    pub run: bool,
    /// Why it runs or not, for people.
    pub reason: String,
    /// The guard value this run is for (e.g. `generation=3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_value: Option<String>,
    /// The idempotency key of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What the run does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// When a failed run waits out its backoff: milliseconds until it may be retried; for a
    /// scheduled action that does not run now, until its next slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// A scheduled run: the slots since the last run that were never run (only the latest does).
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped_slots: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a run does, fully rendered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Effect {
    /// Create this object (its name derives from the key, so a retry meets AlreadyExists).
    Create(Value),
    /// Send this request with an `Idempotency-Key` header.
    Http(HttpRequest),
}

/// A rendered webhook request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequest {
    /// Method.
    pub method: String,
    /// URL.
    pub url: String,
    /// Headers (without `Idempotency-Key`, which the sender adds).
    pub headers: BTreeMap<String, String>,
    /// Headers whose values the sender reads from a Secret just before sending (the namespace
    /// resolved): never rendered, shown or recorded.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: BTreeMap<String, SecretKeyRef>,
    /// Body.
    pub body: String,
    /// Timeout in milliseconds (at most 30 s).
    pub timeout_ms: u64,
    /// The rule's `allowedHosts`, checked by the sender against the URL and its addresses.
    #[serde(skip)]
    pub allowed_hosts: Vec<String>,
    /// Where the rule declares the URL (`file:line:col`), for a refused request's message.
    #[serde(skip)]
    pub at: String,
}

/// The record of an action's last run, as kept in `status.actions.<id>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRecord {
    /// Key of the last run.
    pub key: String,
    /// Guard value of the last run.
    pub guard_value: String,
    /// Its phase.
    pub phase: String,
    /// How many runs (distinct keys) have started.
    pub runs: u64,
    /// How many attempts the current key has had.
    pub attempts: u64,
    /// When the last attempt failed (RFC 3339).
    pub failed_at: Option<String>,
    /// When the current run started (RFC 3339).
    pub started_at: Option<String>,
}

impl RunRecord {
    /// Reads `status.actions.<id>` of the parent.
    ///
    /// A record whose `key` is not one ruleop writes ([`is_key`]) was not written by ruleop and
    /// counts as no record: the key names created objects and is sent as `Idempotency-Key`, so it
    /// must never come from elsewhere; and no record is what whoever can write status gets anyway
    /// by deleting it. Running again is then safe because the fresh key is the same function of
    /// (parent UID, action id, guard value): a created object meets AlreadyExists, an HTTP
    /// endpoint sees the key it saw before. Failing the plan instead would stop every child of
    /// the parent over a field only a status writer can fix.
    pub fn read(parent: &Value, id: &str) -> Option<Self> {
        let record = parent.pointer(&format!("/status/actions/{id}"))?;
        let text = |f: &str| record.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
        let key = text("key");
        if !key.is_empty() && !is_key(&key) {
            return None;
        }
        Some(RunRecord {
            key,
            guard_value: text("guardValue"),
            phase: text("phase"),
            runs: record.get("runs").and_then(Value::as_u64).unwrap_or(0),
            attempts: record.get("attempts").and_then(Value::as_u64).unwrap_or(0),
            failed_at: record.get("failedAt").and_then(Value::as_str).map(str::to_owned),
            started_at: record.get("startedAt").and_then(Value::as_str).map(str::to_owned),
        })
    }
}

/// The run of one key as it stands when it acts: the record if it is this run's (a retry), how
/// many runs have started with it counted (one more for a new run), and its start (a retry keeps
/// it, so an `on: delete` action's timeout counts from it; a new run starts `now`).
#[derive(Debug, Clone)]
pub struct RunStart {
    /// `status.actions.<id>` when it records this key.
    pub record: Option<RunRecord>,
    /// Runs (distinct keys) started, this one included.
    pub runs: u64,
    /// When this run started (RFC 3339).
    pub started_at: String,
}

impl RunStart {
    /// The run of `key` of action `id` on `parent`, at `now`.
    pub fn of(parent: &Value, id: &str, key: &str, now: &str) -> Self {
        let last = RunRecord::read(parent, id);
        let runs = last.as_ref().map_or(0, |r| r.runs);
        let record = last.filter(|r| r.key == key);
        let started_at = record
            .as_ref()
            .and_then(|r| r.started_at.clone())
            .unwrap_or_else(|| now.to_owned());
        RunStart {
            // Saturating: the count comes from status, which its writers can set to anything.
            runs: runs.saturating_add(u64::from(record.is_none())),
            record,
            started_at,
        }
    }
}

/// The `actions` context entry: per action id, its last run as recorded in status (`key`,
/// `guardValue`, `phase`, `runs`, `startedAt`) and `object`, the live object that run created
/// (matched by its key annotation among the objects proven this parent's), or `none`. An action
/// that never ran is `none`. So status can report an outcome, not just a start: a backup Job's
/// `status.succeeded`.
pub fn runs_context(rule: &Rule, parent: &Value, ours: &[&Value]) -> Value {
    let mut runs = serde_json::Map::new();
    for action in &rule.spec.actions {
        let id = action.id.value.as_str();
        let entry = match RunRecord::read(parent, id).filter(|r| !r.key.is_empty()) {
            None => Value::Null,
            Some(record) => {
                let created = ours.iter().find(|o| {
                    super::label(o, LABEL_ACTION) == Some(id)
                        && o.pointer("/metadata/annotations")
                            .and_then(|a| a.get(ANNOTATION_KEY))
                            .and_then(Value::as_str)
                            == Some(record.key.as_str())
                });
                json!({
                    "key": record.key,
                    "guardValue": record.guard_value,
                    "phase": record.phase,
                    "runs": record.runs,
                    "startedAt": record.started_at,
                    "object": created.map_or(Value::Null, |o| (*o).clone()),
                })
            }
        };
        runs.insert(id.to_owned(), entry);
    }
    Value::Object(runs)
}

/// The `actions` context entry (`before`, from [`runs_context`]) as it stands once this
/// reconcile's `create` runs are done and recorded: each shows its key, guard value, phase
/// `Done`, its run count and start, and the object it creates (with this reconcile's `now` as
/// `metadata.creationTimestamp` and an empty `status` unless it has them, as the API server
/// returns it), as the next reconcile reads them from status and the cache.
/// `None` when no `create` runs now. Status is evaluated with it, so the status written with a
/// run already reports it (a backup Job's name, running) instead of a second status write once
/// the object shows up; the apply layer writes that status only if the create succeeded.
pub fn after_runs(before: &Value, decisions: &[ActionDecision], parent: &Value, now: &str) -> Option<Value> {
    let mut after = before.as_object()?.clone();
    let mut changed = false;
    for decision in decisions.iter().filter(|d| d.run) {
        let (Some(key), Some(guard_value), Some(Effect::Create(object))) =
            (&decision.key, &decision.guard_value, &decision.effect)
        else {
            continue;
        };
        let RunStart { runs, started_at, .. } = RunStart::of(parent, &decision.id, key, now);
        let mut object = object.clone();
        if let Some(object) = object.as_object_mut() {
            // What the API server adds on create: a time, and a status that says nothing yet.
            object.entry("status").or_insert_with(|| json!({}));
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.entry("creationTimestamp").or_insert_with(|| json!(now));
            }
        }
        after.insert(
            decision.id.clone(),
            json!({
                "key": key,
                "guardValue": guard_value,
                "phase": phase::DONE,
                "runs": runs,
                "startedAt": started_at,
                "object": object,
            }),
        );
        changed = true;
    }
    changed.then_some(Value::Object(after))
}

/// Length of an idempotency key: 8 bytes of SHA-256 in lowercase hex.
pub const KEY_LEN: usize = 16;

/// The idempotency key of a run: stable for (parent UID, action id, guard value).
pub fn idempotency_key(parent_uid: &str, action_id: &str, guard_value: &str) -> String {
    sha256_hex_prefix(
        format!("{parent_uid}/{action_id}/{guard_value}").as_bytes(),
        KEY_LEN / 2,
    )
}

/// Whether `key` has the form of an [`idempotency_key`].
pub fn is_key(key: &str) -> bool {
    key.len() == KEY_LEN && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The name of an object created by a run: `<parent>-<action>-<key prefix>`, at most 63 characters.
pub fn object_name(parent: &str, action_id: &str, key: &str) -> String {
    // By characters: a key is hex when ruleop made it, but this must not panic on any text.
    let key_prefix: String = key.chars().take(10).collect();
    let suffix = format!("-{action_id}-{key_prefix}");
    let room = 63usize.saturating_sub(suffix.len());
    let prefix: String = parent.chars().take(room).collect();
    format!("{}{suffix}", prefix.trim_end_matches('-'))
}

/// What an action's templates and guard read.
pub struct Scope<'a> {
    /// The parent object.
    pub parent: &'a Value,
    /// Its identity.
    pub parent_ref: &'a ParentRef,
    /// Observed children by id.
    pub children: &'a BTreeMap<String, &'a Value>,
    /// The context of `when` expressions (without `action`).
    pub context: &'a minijinja::Value,
    /// The time of this plan (RFC 3339), for retry backoff.
    pub now: &'a str,
}

/// Longest wait before retrying a failed run.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// How long after its `attempts`-th failure a run is retried: 1 s doubling, capped.
pub fn retry_delay(attempts: u64) -> Duration {
    Duration::from_secs(1u64 << attempts.saturating_sub(1).min(16)).min(MAX_RETRY_DELAY)
}

/// Time left before a failed run may be retried, or `None` if it may be retried now.
fn backoff_left(record: &RunRecord, now: &str) -> Option<Duration> {
    let failed_at: jiff::Timestamp = record.failed_at.as_deref()?.parse().ok()?;
    let now: jiff::Timestamp = now.parse().ok()?;
    let elapsed = Duration::try_from(now.duration_since(failed_at)).unwrap_or(Duration::ZERO);
    retry_delay(record.attempts)
        .checked_sub(elapsed)
        .filter(|left| !left.is_zero())
}

/// Decides one action. A scheduled action that does not run now is looked at again at its
/// next slot.
pub fn decide(
    renderer: &Renderer,
    rule: &Rule,
    action: &ActionSpec,
    scope: &Scope<'_>,
) -> Result<ActionDecision, PlanError> {
    let slot = scheduled_slot(renderer, rule, action, scope)?;
    let mut decision = decide_guarded(renderer, rule, action, scope, slot.as_ref())?;
    let next = match slot {
        Some(Slot::Due { slot, skipped, next }) => {
            if decision.run && decision.guard_value.as_deref() == Some(slot_guard_value(slot).as_str()) {
                decision.skipped_slots = skipped;
            }
            next
        }
        Some(Slot::NotYet { next } | Slot::Missed { next, .. }) => next,
        None => None,
    };
    if !decision.run
        && decision.retry_in_ms.is_none()
        && let (Some(next), Ok(now)) = (next, scope.now.parse::<jiff::Timestamp>())
    {
        let wait = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
        decision.retry_in_ms = Some((wait.as_millis() as u64).max(1));
    }
    Ok(decision)
}

/// The guard value of a scheduled run: the slot's UTC time.
fn slot_guard_value(slot: jiff::Timestamp) -> String {
    format!("slot={slot}")
}

/// Where a scheduled action stands at the plan's time, or `None` for another guard. A schedule
/// written as a template (`"{{ spec.backup.schedule }}"`) is rendered first: an empty one never
/// comes due, an invalid one is an error on the parent, located at the action.
fn scheduled_slot(
    renderer: &Renderer,
    rule: &Rule,
    action: &ActionSpec,
    scope: &Scope<'_>,
) -> Result<Option<Slot>, PlanError> {
    let guard = &action.guard;
    let Some(written) = &guard.schedule else {
        return Ok(None);
    };
    let at = || crate::engine::diagnostic::SourceLocation::from_span(&rule.file, &action.id.referenced).to_string();
    let invalid =
        |message: String| PlanError::InvalidParent(format!("{}: action {}: {message}", at(), action.id.value));
    let expression = if template::is_template(written) {
        let name = rule.inline_template(&format!("actions.{}.guard.schedule", action.id.value));
        renderer.render_text(&name, scope.context)?.trim().to_owned()
    } else {
        written.clone()
    };
    if expression.is_empty() {
        return Ok(Some(Slot::NotYet { next: None }));
    }
    let schedule = Schedule::parse(&expression, guard.time_zone.as_deref()).map_err(|e| {
        invalid(format!(
            "guard.schedule: {}",
            crate::engine::diagnostic::bounded(&e, 300)
        ))
    })?;
    let deadline = match &guard.starting_deadline {
        Some(text) => Some(crate::engine::duration::parse(text).map_err(|e| invalid(e.to_string()))?),
        None => None,
    };
    let now: jiff::Timestamp = scope
        .now
        .parse()
        .map_err(|e| invalid(format!("the plan's time {:?}: {e}", scope.now)))?;
    let created = scope
        .parent
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok());
    let last_run =
        RunRecord::read(scope.parent, &action.id.value).and_then(|r| r.guard_value.strip_prefix("slot=")?.parse().ok());
    Ok(Some(schedule.due(now, created, last_run, deadline)))
}

fn decide_guarded(
    renderer: &Renderer,
    rule: &Rule,
    action: &ActionSpec,
    scope: &Scope<'_>,
    slot: Option<&Slot>,
) -> Result<ActionDecision, PlanError> {
    let (parent, parent_ref, base_context) = (scope.parent, scope.parent_ref, scope.context);
    let id = action.id.value.as_str();
    let skip = |reason: String| ActionDecision {
        id: id.to_owned(),
        run: false,
        reason,
        guard_value: None,
        key: None,
        effect: None,
        retry_in_ms: None,
        skipped_slots: 0,
    };
    let record = RunRecord::read(parent, id);
    if let Some(record) = record
        .as_ref()
        .filter(|r| r.phase == phase::PENDING && !r.key.is_empty())
    {
        let reason = format!(
            "resuming run {} ({}): its intent was recorded but not its completion",
            record.key, record.guard_value
        );
        return run(
            renderer,
            rule,
            action,
            scope,
            &record.guard_value,
            record.key.clone(),
            reason,
        );
    }
    if let Some(when) = &action.when {
        let label = rule.inline_template(&format!("actions.{id}.when"));
        let holds = renderer
            .eval_bool(&label, &when.value, base_context)
            .map_err(|e| super::relocate::relocate(rule, when, e))?;
        if !holds {
            return Ok(skip(format!("`when` is false ({})", when.value)));
        }
    }
    let guard = &action.guard;
    let guard_value = if action.on == ActionTrigger::Delete {
        DELETE_GUARD_VALUE.to_owned()
    } else if guard.generation {
        format!("generation={}", parent_ref.generation)
    } else if let Some(annotation) = &guard.annotation {
        match parent.pointer(&format!(
            "/metadata/annotations/{}",
            annotation.replace('~', "~0").replace('/', "~1")
        )) {
            Some(Value::String(value)) if !value.is_empty() => format!("annotation={value}"),
            _ => return Ok(skip(format!("annotation {annotation} is not set"))),
        }
    } else if let Some(slot) = slot {
        match slot {
            Slot::Due { slot, .. } => slot_guard_value(*slot),
            Slot::NotYet { .. } => return Ok(skip("no slot of its schedule since the parent was created".to_owned())),
            Slot::Missed { slot, .. } => {
                return Ok(skip(format!(
                    "slot {slot} missed: more than startingDeadline ago; waiting for the next slot"
                )));
            }
        }
    } else if let Some(condition) = &guard.condition {
        if condition_is_true(parent, condition) {
            return Ok(skip(format!("condition {condition} is True")));
        }
        let runs = record.as_ref().map_or(0, |r| r.runs);
        let done = record.as_ref().is_some_and(|r| r.phase == phase::DONE);
        format!("run={}", if done { runs.saturating_add(1) } else { runs.max(1) })
    } else {
        return Ok(skip("no guard".to_owned()));
    };
    let key = idempotency_key(&parent_ref.uid, id, &guard_value);
    let reason = match &record {
        Some(r) if r.key == key && r.phase == phase::DONE => {
            let what = if action.on == ActionTrigger::Delete {
                "this deletion"
            } else {
                guard_value.as_str()
            };
            return Ok(skip(format!("already ran for {what} (key {key})")));
        }
        Some(r) if r.key == key => {
            if let Some(left) = backoff_left(r, scope.now) {
                let mut decision = skip(format!(
                    "attempt {} for {guard_value} failed; retrying in {}s (key {key})",
                    r.attempts,
                    left.as_secs().max(1)
                ));
                decision.retry_in_ms = Some(left.as_millis() as u64);
                return Ok(decision);
            }
            format!(
                "retrying {guard_value} after a failure, attempt {} (key {key})",
                r.attempts.saturating_add(1)
            )
        }
        Some(r) => format!("{guard_value} has not run yet (last run: {})", r.guard_value),
        None if action.on == ActionTrigger::Delete => "the parent is being deleted and it has not run yet".to_owned(),
        None => format!("{guard_value} has not run yet (never ran)"),
    };
    run(renderer, rule, action, scope, &guard_value, key, reason)
}

fn condition_is_true(parent: &Value, condition: &str) -> bool {
    parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(condition)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

fn run(
    renderer: &Renderer,
    rule: &Rule,
    action: &ActionSpec,
    scope: &Scope<'_>,
    guard_value: &str,
    key: String,
    reason: String,
) -> Result<ActionDecision, PlanError> {
    let (id, parent_ref) = (action.id.value.as_str(), scope.parent_ref);
    let name = object_name(&parent_ref.name, id, &key);
    let action_value = json!({"id": id, "key": key, "name": name, "guardValue": guard_value});
    let context = context::extend_with(scope.context, [("action", template::to_value(&action_value))]);
    let effect = if let Some(create) = &action.create {
        let declared = Declared {
            id,
            api_version: &create.api_version,
            kind: &create.kind,
            template: &create.template.value,
            placement: Placement::ParentNamespace,
        };
        let mut object = render_object(renderer, &declared, parent_ref, &rule.name, &context)?;
        if action.on == ActionTrigger::Delete
            && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            // A final backup must outlive its parent: with an ownerReference the garbage
            // collector would delete it (and stop it, if it still runs) once the parent is gone.
            // The `ruleop.io/parent` annotation (below) is then its proof of ownership.
            metadata.remove("ownerReferences");
        }
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("name".to_owned(), json!(name));
            if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
                labels.insert(LABEL_ACTION.to_owned(), json!(id));
            }
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            if let Some(annotations) = annotations.as_object_mut() {
                annotations.insert(ANNOTATION_KEY.to_owned(), json!(key));
                if action.on == ActionTrigger::Delete {
                    annotations.insert(
                        super::scope::ANNOTATION_PARENT.to_owned(),
                        json!(super::ownership::parent_annotation(parent_ref)),
                    );
                }
            }
        }
        Effect::Create(object)
    } else if let Some(http) = &action.http {
        let text = |path: &str| renderer.render_text(&rule.inline_template(&format!("actions.{id}.{path}")), &context);
        let (mut headers, mut secret_headers) = (BTreeMap::new(), BTreeMap::new());
        for (header, value) in &http.headers {
            match value {
                HeaderValue::Template(_) => {
                    headers.insert(header.clone(), text(&format!("http.headers.{header}"))?);
                }
                HeaderValue::FromSecret(from) => {
                    let mut reference = from.value_from.secret_key_ref.clone();
                    reference
                        .namespace
                        .get_or_insert_with(|| parent_ref.home_namespace().unwrap_or_default().to_owned());
                    secret_headers.insert(header.clone(), reference);
                }
            }
        }
        Effect::Http(HttpRequest {
            method: http.method.to_uppercase(),
            url: text("http.url")?,
            headers,
            secret_headers,
            body: if http.body.is_some() {
                text("http.body")?
            } else {
                String::new()
            },
            timeout_ms: http
                .timeout
                .as_deref()
                .and_then(|t| crate::engine::duration::parse(t).ok())
                .map_or(10_000, |d| d.min(crate::engine::egress::MAX_TIMEOUT).as_millis() as u64),
            allowed_hosts: http.allowed_hosts.iter().map(|h| h.value.clone()).collect(),
            at: crate::engine::diagnostic::SourceLocation::from_span(&rule.file, &http.url.referenced).to_string(),
        })
    } else {
        return Err(PlanError::InvalidParent(format!("action {id} has no effect")));
    };
    Ok(ActionDecision {
        id: id.to_owned(),
        run: true,
        reason,
        guard_value: Some(guard_value.to_owned()),
        key: Some(key),
        effect: Some(effect),
        retry_in_ms: None,
        skipped_slots: 0,
    })
}

#[cfg(test)]
mod tests;
