//! The rule file format: serde types for `kind: Rule` documents, with a JSON Schema derived from them.
//!
//! Every struct denies unknown fields, so a typo is an error with its location, never a silent no-op.
//! Strings whose later validation can fail (ids, templates, expressions, JSONPaths) are kept
//! [`Spanned`] so that error can point at the file, line and column it came from.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

mod actions;
mod children;
mod status;

pub(crate) use actions::{ActionSpec, ActionTrigger, HeaderValue, SecretKeyRef};
pub(crate) use children::DEFAULT_MAX_ITEMS;
pub(crate) use children::{ChildSpec, DeletionPolicy, ImmutableChangePolicy, LookupSpec, Scaling, UpdateStrategy};
pub(crate) use status::{ConditionSpec, FieldSource, StatusSpec};

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
