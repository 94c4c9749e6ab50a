//! The rule file format: serde types for `kind: Rule` documents, with a JSON Schema derived from them.
//!
//! Every struct denies unknown fields, so a typo is an error with its location, never a silent no-op.
//! Strings whose later validation can fail (ids, templates, expressions, JSONPaths) are kept
//! [`Spanned`] so that error can point at the file, line and column it came from.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

/// The API version of rule documents.
pub(crate) const RULE_API_VERSION: &str = "ruleop.io/v1alpha1";
/// The kind of rule documents.
pub(crate) const RULE_KIND: &str = "Rule";

/// A string with the place it was read from (file line and column).
pub(crate) type Located<T> = Spanned<T>;

/// One rule: a watched custom resource kind, the children it owns, its guarded actions and its status.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "ruleop Rule")]
pub(crate) struct RuleDocument {
    /// Must be `ruleop.io/v1alpha1`.
    #[schemars(with = "String")]
    pub api_version: Located<String>,
    /// Must be `Rule`.
    #[schemars(with = "String")]
    pub kind: Located<String>,
    /// The rule's name: unique in the rule set; becomes the `ruleop.io/rule` label on children.
    pub metadata: RuleMetadata,
    /// What the rule watches and what it produces.
    pub spec: RuleSpec,
}

/// Identifies a rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RuleMetadata {
    /// A DNS label (lowercase letters, digits, `-`), at most 63 characters.
    #[schemars(with = "String")]
    pub name: Located<String>,
}

/// Parents of one rule reconciled at once when its `maxConcurrentReconciles` does not say.
pub(crate) const DEFAULT_CONCURRENCY: u16 = 5;

/// How many more reconciles than `maxConcurrentReconciles` a rule reload may run at once by
/// default, as a multiple of it: a template edit re-reconciles every parent, and each of those
/// reconciles is mostly one apply waiting on the API server, so the burst is bounded by the
/// server's latency, not by our CPU.
pub(crate) const RELOAD_BURST_FACTOR: u16 = 3;

/// What a rule watches and what it produces for each watched object (the parent).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleSpec {
    /// The parent kind this rule reconciles.
    pub watch: Watch,
    /// Period of the safety-net re-reconcile of every parent, e.g. `30s`, `10m`, `1h`
    /// (default: the operator's `--default-resync`). Each parent at its own fixed point
    /// of the period (a hash of its UID), so resyncs are spread evenly over it.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub resync: Option<Located<String>>,
    /// How many parents of this rule reconcile at once (default 5). One parent never
    /// reconciles twice at the same time.
    #[serde(default)]
    #[schemars(with = "Option<u16>")]
    pub max_concurrent_reconciles: Option<Located<u16>>,
    /// How many parents of this rule reconcile at once right after a rule reload, which
    /// re-reconciles every parent (default 4 times `maxConcurrentReconciles`, 20 at its default;
    /// at least `maxConcurrentReconciles`). Each such reconcile is mostly one apply waiting on
    /// the API server, so more in flight gets a template edit to every parent sooner, at the
    /// price of a burst of writes.
    #[serde(default)]
    #[schemars(with = "Option<u16>")]
    pub reload_concurrency: Option<Located<u16>>,
    /// Read-only objects the rule reads but does not own, in the context as `lookups.<id>`.
    #[serde(default)]
    pub lookups: Vec<LookupSpec>,
    /// Desired child objects, applied server-side on every reconcile.
    #[serde(default)]
    pub children: Vec<ChildSpec>,
    /// Non-idempotent work, run at most once per guard value.
    #[serde(default)]
    pub actions: Vec<ActionSpec>,
    /// What the engine writes to the parent's status subresource.
    #[serde(default)]
    pub status: StatusSpec,
    /// Namespaces besides the parent's own (and Namespaces the parent owns as children) that
    /// children may be written into. Anything else is refused (`NamespaceNotAllowed`), so
    /// whoever can create a parent cannot aim ruleop's writes at a namespace they do not control.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub allowed_namespaces: Vec<Located<String>>,
    /// Namespaces whose labels carry every one of these also take children (and their children
    /// are read there): `{team: a}` lets a rule propagate into every namespace labelled
    /// `team=a`. Only whoever may label Namespaces (a cluster admin, not a tenant) widens it.
    #[serde(default)]
    pub allowed_namespace_selector: BTreeMap<String, String>,
    /// Labels and annotations written onto the watched object itself (Jinja over the parent, its
    /// children and lookups), by server-side apply under ruleop's field manager.
    #[serde(default)]
    pub parent_metadata: Option<ParentMetadata>,
    /// A finalize phase while the parent is being deleted: its children keep being reconciled
    /// (templates see `metadata.deletionTimestamp`) until `until` holds or `timeout` passes;
    /// then the children are deleted and the finalizer released.
    #[serde(default)]
    pub finalize: Option<FinalizeSpec>,
    /// The parent's schema, for a kind this rule defines: `ruleop crd` prints its CRD, `check`
    /// fails while the committed one differs, and reads and status writes are checked against it.
    #[serde(default)]
    pub schema: Option<ParentSchema>,
    /// How a change of this rule reaches its parents: in steps, a share of the parents at a
    /// time, halting when too many moved parents stop being ready. Default: all at once.
    #[serde(default)]
    #[schemars(with = "Option<RolloutSpec>")]
    pub rollout: Option<Located<RolloutSpec>>,
}

impl RuleSpec {
    /// Parents reconciled at once: `maxConcurrentReconciles`, or the default.
    pub fn concurrency(&self) -> u16 {
        self.max_concurrent_reconciles
            .as_ref()
            .map_or(DEFAULT_CONCURRENCY, |c| c.value)
    }

    /// Reconciles a change of this rule runs at once: `reloadConcurrency`, or by default
    /// [`Self::concurrency`] plus a burst of [`RELOAD_BURST_FACTOR`] times as many.
    pub fn reload_in_flight(&self) -> u16 {
        self.reload_concurrency.as_ref().map_or_else(
            || self.concurrency().saturating_mul(1 + RELOAD_BURST_FACTOR),
            |c| c.value,
        )
    }
}

/// `spec.rollout`: a changed rule reaches its parents step by step (see docs/concepts/rollouts.md).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The steps, in order: each moves the first `percent`% of the parents (ordered by a hash of
    /// their UID) to the new revision, then waits `pause`. Percents increase; the last is 100.
    #[schemars(with = "Vec<RolloutStep>")]
    pub steps: Vec<Located<RolloutStep>>,
    /// How many moved parents may go from ready to not ready during a step's pause (default 0);
    /// one more halts the rollout.
    #[serde(default)]
    pub max_failures: u32,
    /// What a halted rollout does with the parents it already moved: `halt` (default: they stay
    /// on the new revision) or `rollback` (they go back to the previous one).
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The status condition that says a parent is healthy (default `Ready`): `Ready` or a type
    /// defined in `status.conditions`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub condition: Option<Located<String>>,
}

/// One step of a rollout.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutStep {
    /// The share of the parents on the new revision once the step begins, 1 to 100.
    #[schemars(with = "u32", range(min = 1, max = 100))]
    pub percent: Located<u32>,
    /// How long the step watches its moved parents before the next step begins, e.g. `1m`
    /// (at least `1s`). Required on every step but the last.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub pause: Option<Located<String>>,
}

/// What a halted rollout does with the parents it already moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Stop: no further parent moves; the moved ones stay on the new revision.
    #[default]
    Halt,
    /// Stop, and move the moved parents back to the previous revision.
    Rollback,
}

/// `spec.schema`: the parent's schema in the OpenAPI v3 subset CRDs use, so an existing CRD's
/// schema can be pasted in and the generated CRD is exactly what was written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ParentSchema {
    /// The schema of `spec` (an object schema: `type: object`, `properties`, `required`...).
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub spec: serde_json::Value,
    /// The schema of the status fields the rule writes (`status.fields`). `conditions`,
    /// `observedGeneration` and `actions` (when the rule has actions) are added.
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, serde_json::Value>>")]
    pub status: Option<serde_json::Value>,
    /// The resource name (default: the kind in lowercase with an `s`).
    #[serde(default)]
    pub plural: Option<String>,
    /// Short names for kubectl, e.g. `[db]`.
    #[serde(default)]
    pub short_names: Vec<String>,
}

/// `spec.finalize`: keep reconciling a deleted parent's children until a condition holds.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FinalizeSpec {
    /// Jinja expression over the parent, `children` and `lookups`: the phase ends once it is
    /// true, e.g. `children.pod | length == 0`.
    #[schemars(with = "String")]
    pub until: Located<String>,
    /// The longest the phase may hold the deletion, counted from the deletion request (default
    /// `10m`); then a Warning Event `FinalizeTimedOut` and the deletion goes on.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Located<String>>,
}

/// What `spec.parentMetadata` writes onto the parent.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParentMetadata {
    /// Label key -> Jinja template of its value.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub labels: BTreeMap<String, Located<String>>,
    /// Annotation key -> Jinja template of its value.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub annotations: BTreeMap<String, Located<String>>,
}

/// The watched parent kind and which of its objects the rule applies to.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Watch {
    /// `group/version` of the parent, e.g. `myorg.io/v1`.
    pub api_version: String,
    /// Kind of the parent, e.g. `Database`.
    pub kind: String,
    /// `Namespaced` (default) or `Cluster`: the watched kind's scope, written out so that a rule
    /// reacting to cluster-scoped objects (a `Namespace`, a `ClusterRole`, a cluster-scoped
    /// custom resource) says so. Checked against discovery when the rule comes into force.
    #[serde(default)]
    pub scope: ParentScope,
    /// Only parents in these namespaces (default: all namespaces; namespaced parents only).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Only parents matching this label selector, e.g. `tier=db,env!=dev`.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Only parents carrying every one of these annotations with these values (`""` matches any
    /// value): the decorator's opt-in, e.g. `{service-per-pod/enabled: "true"}` on the
    /// StatefulSets to decorate. Checked by ruleop (the API server has no annotation selector).
    #[serde(default)]
    pub annotation_selector: BTreeMap<String, String>,
}

/// A child object rendered from a template.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChildSpec {
    /// Unique within the rule; the `ruleop.io/child` label and the key in `children.<id>`.
    #[schemars(with = "String")]
    pub id: Located<String>,
    /// `group/version` the template must render, e.g. `apps/v1`.
    pub api_version: String,
    /// Kind the template must render, e.g. `StatefulSet`.
    pub kind: String,
    /// Template path relative to the templates directory, e.g. `database/service.yaml.j2`.
    #[schemars(with = "String")]
    pub template: Located<String>,
    /// Jinja expression; when false the child is absent (and pruned if it exists). Default: true.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub when: Option<Located<String>>,
    /// What to do when an apply is rejected because an immutable field changed.
    #[serde(default)]
    pub on_immutable_change: ImmutableChangePolicy,
    /// Let this child take over an existing object of the same name that ruleop did not create
    /// for this parent (default false: such an object is refused with `ChildNotOwned`, so a
    /// parent can never claim someone else's object by naming it). Only a rule can say this,
    /// never a parent; set it only where the object's name is not chosen by the parent.
    #[serde(default)]
    pub adopt: bool,
    /// How a live child takes a changed rendering: `InPlace` (default), `OnDelete`, `Recreate`,
    /// or for a `forEach` child one item at a time, `RollingInPlace` or `RollingRecreate`.
    #[serde(default)]
    pub update_strategy: UpdateStrategy,
    /// What becomes of the object when it is pruned or its parent is deleted: `Delete` (default)
    /// or `Orphan` (ruleop's labels, annotations and ownerReference are removed; it stays).
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// How the items of a `forEach` come and go: `Parallel` (default: all at once) or `Ordered`
    /// (one at a time, like a StatefulSet's `OrderedReady`: an item is created once every item
    /// before it exists and is ready; removed items go last key first, one at a time, once every
    /// remaining item is ready).
    #[serde(default)]
    pub scaling: Scaling,
    /// Jinja expression giving a list or a map: one object per item, the template sees `item`
    /// and `item_key`. Objects are identified by their key, never by their position.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub for_each: Option<Located<String>>,
    /// Jinja template giving each item's stable identity, e.g. `"{{ item.name }}"`. Needed when
    /// the items of a `forEach` list are not strings (a map's items default to their map key).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub key: Option<Located<String>>,
    /// Most items a `forEach` may give (default 500); more is an error, not a flood of objects.
    #[serde(default)]
    pub max_items: Option<u32>,
    /// Jinja expression over the observed child as `object`: whether it is ready. Default: it
    /// is ready when it exists.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub ready_when: Option<Located<String>>,
    /// Ids of children that must exist and be ready before this one is applied.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub depends_on: Vec<Located<String>>,
}

/// Items of one `forEach` child when the rule does not set `maxItems`.
pub(crate) const DEFAULT_MAX_ITEMS: u32 = 500;

/// A read-only object the rule reads (never writes): `lookups.<id>` in the context, or none
/// when it does not exist.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LookupSpec {
    /// Unique within the rule; the key in `lookups.<id>`.
    #[schemars(with = "String")]
    pub id: Located<String>,
    /// `group/version` of the object, e.g. `v1`.
    pub api_version: String,
    /// Kind of the object, e.g. `ConfigMap`.
    pub kind: String,
    /// Name of the object (a Jinja template over the parent); empty means no lookup (none).
    /// Exactly one of `name` and `list`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub name: Option<Located<String>>,
    /// `true`: `lookups.<id>` is the list of every object of the kind in the namespace that
    /// carries `matchLabels`, sorted by namespace and name. Exactly one of `name` and `list`.
    #[serde(default)]
    pub list: bool,
    /// A list lookup's bound (default 100, at most 1000): more matches fail the plan with
    /// `LookupTooLarge` instead of growing the render without limit.
    #[serde(default)]
    pub max_items: Option<usize>,
    /// Namespace of the object (a Jinja template over the parent); default: the parent's.
    /// Ignored for cluster-scoped kinds. A list lookup may read every namespace with the
    /// constant `"*"`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub namespace: Option<Located<String>>,
    /// Only objects carrying all these labels are looked up, and only they are cached: e.g.
    /// `{ruleop.io/lookup: "true"}` keeps a tenant's unrelated Secrets out of ruleop's memory.
    /// Every lookup of the same kind in a rule declares the same `matchLabels` (one cache per kind).
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// The scope of a rule's watched kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ParentScope {
    /// Parents live in namespaces; children default to the parent's namespace.
    #[default]
    Namespaced,
    /// Parents are cluster-scoped (created by cluster admins): children carry ownerReferences
    /// to them (the garbage collector follows those from any namespace), and a namespaced child
    /// names its namespace, held to `allowedNamespaces` / `allowedNamespaceSelector` (a
    /// `Namespace` parent's own namespace is its home).
    Cluster,
}

/// Reaction to an apply rejected because an immutable field changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ImmutableChangePolicy {
    /// Report it on the parent (condition and Event) and do not retry until the parent changes.
    #[default]
    Report,
    /// Delete the child and create it again from the new rendering.
    Recreate,
}

/// How a live child takes a changed rendering (see docs/concepts/lifecycle.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema, serde::Serialize)]
pub enum UpdateStrategy {
    /// Server-side apply the change onto the live object.
    #[default]
    InPlace,
    /// Never change a live object; create it again only once someone deleted it.
    OnDelete,
    /// Delete the live object when what ruleop renders for it changed; the next reconcile
    /// creates it from the new rendering once it is gone.
    Recreate,
    /// `forEach` only: change one item in place at a time, and only while every item exists and
    /// is ready (`readyWhen`).
    RollingInPlace,
    /// `forEach` only: recreate one item at a time, and only while every item exists and is
    /// ready (`readyWhen`).
    RollingRecreate,
}

impl UpdateStrategy {
    /// Whether it changes the items of a `forEach` one at a time.
    pub fn is_rolling(self) -> bool {
        matches!(self, UpdateStrategy::RollingInPlace | UpdateStrategy::RollingRecreate)
    }
}

/// How the items of a `forEach` child come and go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Scaling {
    /// Every item is created and removed at once.
    #[default]
    Parallel,
    /// One item at a time, in item order: created once every earlier item exists and is ready;
    /// removed last key first, once every remaining item is ready.
    Ordered,
}

/// What becomes of a child when it is pruned or its parent is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete it.
    #[default]
    Delete,
    /// Leave it, released: without ruleop's labels, annotations and ownerReference.
    Orphan,
}

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

/// The parent's status written by the engine.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusSpec {
    /// Top-level status fields: a Jinja template string, a typed `{value: <expression>}`, or
    /// `{child, jsonPath}` from a child.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, FieldSource>")]
    pub fields: BTreeMap<String, Located<FieldSource>>,
    /// Conditions in the standard Kubernetes shape. `Ready` is managed by the engine unless defined here.
    #[serde(default)]
    pub conditions: Vec<ConditionSpec>,
    /// Whether the engine writes the watched object's status at all (`Ready`,
    /// `observedGeneration`, fields, conditions, action records). Default: `true` for custom
    /// resources, `false` for built-in kinds (`v1`, `apps/v1`, `*.k8s.io`, ...), whose status
    /// belongs to their own controller: a rule that decorates a StatefulSet must not reset its
    /// `observedGeneration`. Without it the rule can have no status fields, conditions or actions.
    #[serde(default)]
    pub write: Option<bool>,
}

/// Where a status field's value comes from.
#[derive(Debug, Clone, JsonSchema)]
#[serde(untagged)]
pub enum FieldSource {
    /// A Jinja template rendered to a string, e.g. `"{{ metadata.name }}-svc"`.
    Template(String),
    /// A value read from an observed child.
    FromChild(ChildField),
    /// A Jinja expression whose value keeps its type (number, boolean, list, mapping, null).
    Expression(ExpressionField),
}

/// A value read from an observed child.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChildField {
    /// The child's id.
    pub child: String,
    /// A JSONPath (RFC 9535) into the child, e.g. `$.status.readyReplicas`. No match gives null.
    pub json_path: String,
}

/// A typed status value: `{value: "children.copies | length"}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpressionField {
    /// A Jinja expression (no `{{ }}`); its value is written as it is: `spec.replicas * 10` is a
    /// number, `children.db is defined` a boolean, `spec.regions | list` a list.
    pub value: String,
}

/// The keys a status field's mapping may have; which ones it has says which source it is.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldMapping {
    child: Option<String>,
    json_path: Option<String>,
    value: Option<String>,
}

impl<'de> Deserialize<'de> for FieldSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> serde::de::Visitor<'de> for SourceVisitor {
            type Value = FieldSource;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a template string, a mapping {value} or a mapping {child, jsonPath}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<FieldSource, A::Error> {
                let mapping = FieldMapping::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                match mapping {
                    FieldMapping {
                        child: None,
                        json_path: None,
                        value: Some(value),
                    } => Ok(FieldSource::Expression(ExpressionField { value })),
                    FieldMapping {
                        child: Some(child),
                        json_path: Some(json_path),
                        value: None,
                    } => Ok(FieldSource::FromChild(ChildField { child, json_path })),
                    _ => Err(serde::de::Error::custom(
                        "a status field mapping is either {value: <expression>} or {child: <id>, jsonPath: <path>}",
                    )),
                }
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<FieldSource, E> {
                Ok(FieldSource::Template(value.to_owned()))
            }
        }
        deserializer.deserialize_any(SourceVisitor)
    }
}

/// A condition computed from a Jinja expression.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConditionSpec {
    /// Condition type, e.g. `Ready` (PascalCase).
    #[serde(rename = "type")]
    pub type_: String,
    /// Jinja expression: true gives status `True`, false gives `False`.
    #[schemars(with = "String")]
    pub when: Located<String>,
    /// Reason when true (default `AsExpected`); a Jinja template.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub reason: Option<Located<String>>,
    /// Reason when false (default `NotYet`); a Jinja template.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub false_reason: Option<Located<String>>,
    /// Message (a Jinja template), default empty.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub message: Option<Located<String>>,
    /// Reasons (as `falseReason` renders them, e.g. `BackoffLimitExceeded`) that, when the
    /// condition turns `False` with one of them, also publish a Warning Event on the parent with
    /// that reason and the condition's message: once per transition, not on every reconcile.
    #[serde(default)]
    pub warn_on: Vec<String>,
}
