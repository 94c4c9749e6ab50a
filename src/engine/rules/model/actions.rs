//! A rule's guarded one-shot actions: trigger, guard, what they create or send, how a run is
//! recorded.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Located;

/// A guarded one-shot action.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionSpec {
    /// Unique within the rule; the key under `status.actions`.
    #[schemars(with = "String")]
    pub id: Located<String>,
    /// Jinja expression; the action is considered only while it is true. Default: true.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub when: Option<Located<String>>,
    /// When the action runs: on reconciles (default) or once when the parent is being deleted.
    #[serde(default)]
    pub on: ActionTrigger,
    /// What makes a run happen at most once (`on: reconcile` only; an `on: delete` action runs
    /// once per parent deletion).
    #[serde(default)]
    pub guard: Guard,
    /// Create an object (e.g. a Job) whose name is derived from the idempotency key.
    #[serde(default)]
    pub create: Option<CreateAction>,
    /// Call a webhook with an `Idempotency-Key` header.
    #[serde(default)]
    pub http: Option<HttpAction>,
    /// Where else the run is recorded besides `status.actions.<id>`.
    #[serde(default)]
    pub record: Option<Record>,
    /// `on: delete` with `create` only: a Jinja expression over the created `object`; the
    /// parent's deletion is held until it is true (or `timeout` passes).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub wait_for: Option<Located<String>>,
    /// How long `waitFor` may hold the deletion, e.g. `10m` (default `10m`); then a Warning
    /// Event is published and the deletion goes on.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Located<String>>,
}

/// When an action runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ActionTrigger {
    /// On reconciles of a live parent, once per guard value.
    #[default]
    Reconcile,
    /// Once when the parent is being deleted, before its finalizer is removed.
    Delete,
}

/// Exactly one of the guard fields must be set.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Guard {
    /// `true`: run at most once per `metadata.generation`.
    #[serde(default)]
    pub generation: bool,
    /// Skip while this status condition is `True` (e.g. `BackupInitiated`).
    #[serde(default)]
    pub condition: Option<String>,
    /// Run when this annotation's value differs from the value recorded at the last run.
    #[serde(default)]
    pub annotation: Option<String>,
    /// Run once per slot of this five-field cron expression (`"0 3 * * *"`, Sunday is 0,
    /// `@daily`-style nicknames allowed): the slot's time is the guard value, so a slot runs
    /// once across restarts and replicas. Only the latest slot runs, once, even when late;
    /// slots before the parent existed never run.
    #[serde(default)]
    pub schedule: Option<String>,
    /// The IANA time zone the schedule is read in (default `UTC`), e.g. `Europe/Berlin`.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// How late a slot may still run (e.g. `1h`); an older slot is skipped and the next one
    /// awaited. Default: no limit (the latest slot runs however late).
    #[serde(default)]
    pub starting_deadline: Option<String>,
}

/// An object to create once per guard value.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateAction {
    /// `group/version` the template must render.
    pub api_version: String,
    /// Kind the template must render.
    pub kind: String,
    /// Template path relative to the templates directory. `action.name` holds the derived name.
    #[schemars(with = "String")]
    pub template: Located<String>,
}

/// A webhook call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpAction {
    /// Target URL (a Jinja template). Only scheme, host and port ever show in status, Events
    /// and logs.
    #[schemars(with = "String")]
    pub url: Located<String>,
    /// Where the request may go (required): `hooks.example.com` (https on 443),
    /// `hooks.example.com:8443`, `*.internal.example.com` (any name under it),
    /// `http://hooks.example.com[:port]` (plain http only when written so), an IP address
    /// (`http://127.0.0.1:8080`, `[::1]`) or `localhost`. A name never reaches loopback,
    /// link-local, metadata or operator-refused addresses; an address entry reaches exactly
    /// itself.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub allowed_hosts: Vec<Located<String>>,
    /// HTTP method (default `POST`).
    #[serde(default = "default_method")]
    pub method: String,
    /// Extra headers: a Jinja template over the parent, or
    /// `{valueFrom: {secretKeyRef: {name, key, namespace}}}`, read from a Secret when the
    /// request is sent (never rendered, shown or recorded).
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Request body (a Jinja template).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub body: Option<Located<String>>,
    /// Per-request timeout, e.g. `10s` (default `10s`, at most `30s`).
    #[serde(default)]
    pub timeout: Option<String>,
}

/// An `http` header's value.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HeaderValue {
    /// A Jinja template over the parent, e.g. `"{{ metadata.name }}"`.
    Template(String),
    /// A value kept in a Secret: `{valueFrom: {secretKeyRef: {name, key, namespace}}}`.
    FromSecret(HeaderFrom),
}

/// `valueFrom` of a header.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderFrom {
    /// Where the value is kept.
    pub value_from: HeaderSource,
}

/// The source of a header's value.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderSource {
    /// A key of a Secret, read by the sender just before each request.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret. Every field is a constant (no template): the parent's author chooses
/// neither which Secret is read nor where its value goes (only to `allowedHosts`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, JsonSchema, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key in its `data`.
    pub key: String,
    /// The Secret's namespace (default: the parent's). A platform namespace keeps the value
    /// from tenants; `ruleop rbac` grants `get` on exactly this Secret name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn default_method() -> String {
    "POST".to_owned()
}

/// Where a run is recorded for users and for the `condition` guard.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Record {
    /// A status condition set to `True` when the action starts (e.g. `BackupInitiated`).
    #[serde(default)]
    pub condition: Option<String>,
    /// A top-level status field that gets the start time (RFC 3339), e.g. `lastBackupTime`.
    #[serde(default)]
    pub status_field: Option<String>,
}
