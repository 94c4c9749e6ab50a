//! A rule's children and lookups: what is rendered, how collections scale and update, what a
//! lookup reads.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Located;

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
