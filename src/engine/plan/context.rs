//! The template context: what a template or expression sees of the parent and its children.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::PlanError;
use crate::engine::template;

/// Label naming the rule that made an object.
pub(crate) const LABEL_RULE: &str = "ruleop.io/rule";
/// Label holding the parent's UID.
pub(crate) const LABEL_PARENT_UID: &str = "ruleop.io/parent-uid";
/// Label naming the child id within the rule.
pub(crate) const LABEL_CHILD: &str = "ruleop.io/child";
/// Label naming the action that created an object.
pub(crate) const LABEL_ACTION: &str = "ruleop.io/action";

/// Whether an object (the parent, a child) is being deleted.
pub(crate) fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// The parent's identity, read once and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    /// `apiVersion` of the parent.
    pub api_version: String,
    /// `kind` of the parent.
    pub kind: String,
    /// Namespace of the parent; empty for a cluster-scoped parent.
    pub namespace: String,
    /// Name of the parent.
    pub name: String,
    /// UID of the parent.
    pub uid: String,
    /// `metadata.generation` (0 when the server has not set it).
    pub generation: i64,
}

impl ParentRef {
    /// Reads and checks the parent's identity fields.
    pub fn read(parent: &Value) -> Result<Self, PlanError> {
        let text = |pointer: &str| parent.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
        let missing = |what: &str| PlanError::InvalidParent(format!("the custom resource has no {what}"));
        // A parent without spec (a ConfigMap, a Namespace) is fine: templates see `spec` as `{}`
        // and read `object`; a spec that is there must be a mapping.
        if parent.get("spec").is_some_and(|spec| !spec.is_object()) {
            return Err(PlanError::InvalidParent(
                "the parent's spec is not a mapping".to_owned(),
            ));
        }
        Ok(ParentRef {
            api_version: text("/apiVersion").ok_or_else(|| missing("apiVersion"))?,
            kind: text("/kind").ok_or_else(|| missing("kind"))?,
            // A cluster-scoped parent has none; `plan` holds it to the rule's `watch.scope`.
            namespace: text("/metadata/namespace").unwrap_or_default(),
            name: text("/metadata/name").ok_or_else(|| missing("metadata.name"))?,
            uid: text("/metadata/uid").ok_or_else(|| missing("metadata.uid"))?,
            generation: parent
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        })
    }

    /// Whether the parent is cluster-scoped (it has no namespace).
    pub fn is_cluster_scoped(&self) -> bool {
        self.namespace.is_empty()
    }

    /// The namespace a namespaced child goes to when its template names none, and where a
    /// controller ownerReference proves a child: the parent's own namespace, or for a
    /// `Namespace` parent the namespace it is. Other cluster-scoped parents have none.
    pub fn home_namespace(&self) -> Option<&str> {
        if !self.namespace.is_empty() {
            Some(&self.namespace)
        } else if self.api_version == "v1" && self.kind == "Namespace" {
            Some(&self.name)
        } else {
            None
        }
    }

    /// The home namespace for a message: `the parent's namespace "shop"`.
    pub(crate) fn home_description(&self) -> String {
        match self.home_namespace() {
            Some(home) if self.is_cluster_scoped() => format!("the parent Namespace {home:?}"),
            Some(home) => format!("the parent's namespace {home:?}"),
            None => "the parent's namespace (a cluster-scoped parent has none)".to_owned(),
        }
    }

    /// Checks the parent against the rule's `watch.scope`: a namespaced parent needs its
    /// namespace, a cluster-scoped one has none.
    pub(crate) fn check_scope(&self, cluster_scoped: bool) -> Result<(), PlanError> {
        match (cluster_scoped, self.is_cluster_scoped()) {
            (false, true) => Err(PlanError::InvalidParent(
                "the custom resource has no metadata.namespace (the rule's watch.scope is Namespaced)".to_owned(),
            )),
            (true, false) => Err(PlanError::InvalidParent(format!(
                "the parent has metadata.namespace {:?}, but the rule's watch.scope is Cluster",
                self.namespace
            ))),
            _ => Ok(()),
        }
    }

    /// The controller owner reference children carry.
    pub fn owner_reference(&self) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }
}

/// Builds the context of templates and expressions: `object`, `metadata`, `spec`, `status`,
/// `children` (observed children by id), `rule` (`name`), plus `extra` entries (e.g. `action`).
/// The parent is converted once: `metadata`, `spec` and `status` share its maps.
pub(crate) fn build(
    parent: &Value,
    children: &BTreeMap<String, &Value>,
    rule_name: &str,
    extra: Option<(&str, Value)>,
) -> minijinja::Value {
    let object = template::to_value(parent);
    // A missing field reads as an empty mapping (a JSON null stays none).
    let field = |name: &str| match object.get_attr(name) {
        Ok(value) if !value.is_undefined() => value,
        _ => minijinja::Value::from(BTreeMap::<String, minijinja::Value>::new()),
    };
    let mut context = BTreeMap::from([
        (minijinja::Value::from("metadata"), field("metadata")),
        ("spec".into(), field("spec")),
        ("status".into(), field("status")),
        ("children".into(), template::to_value(children)),
        ("rule".into(), minijinja::context! { name => rule_name }),
    ]);
    context.insert("object".into(), object);
    if let Some((key, value)) = extra {
        context.insert(key.into(), template::to_value(&value));
    }
    minijinja::Value::from(context)
}

/// `base` with `entries` added or replacing its own: a lazy merge, the base is not copied.
pub(crate) fn extend_with<'k>(
    base: &minijinja::Value,
    entries: impl IntoIterator<Item = (&'k str, minijinja::Value)>,
) -> minijinja::Value {
    let entries: BTreeMap<minijinja::Value, minijinja::Value> =
        entries.into_iter().map(|(k, v)| (k.into(), v)).collect();
    layer(base, minijinja::Value::from(entries))
}

/// `base` seen through `top`: a key of `top` hides the same key of `base` (minijinja's
/// `merge_maps` lets the last map win, whatever its doc example says).
pub(crate) fn layer(base: &minijinja::Value, top: minijinja::Value) -> minijinja::Value {
    minijinja::value::merge_maps([base.clone(), top])
}
