//! Where children may live: cluster-scoped and cross-namespace children, owned by labels, and
//! the namespaces a rule allows (the guard that holds a plan to them is `namespace_guard.rs`).
//!
//! A child outside its parent's namespace cannot carry an ownerReference to a namespaced parent
//! (the garbage collector would treat it as dangling), so it is owned by labels (`ruleop.io/rule`,
//! `ruleop.io/parent-uid`) plus the `ruleop.io/parent` annotation that maps its watch events
//! back to the parent, and deleted through the parent's finalizer.

use serde_json::{Map, Value, json};

use super::context::ParentRef;
use super::lookups::{LookupKey, LookupSource};
use crate::engine::rules::Rule;

/// Annotation on label-owned children: `<namespace>/<name>` of the parent, so a watch event on
/// the child (which has no ownerReference) re-reconciles the right parent.
pub(crate) const ANNOTATION_PARENT: &str = "ruleop.io/parent";

/// Where a rendered object may live, which decides how the parent owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// In the parent's namespace only (objects created by actions).
    ParentNamespace,
    /// A child: in the parent's namespace (controller ownerReference), or, owned by labels,
    /// cluster-scoped or in another namespace (which the guard in `namespace_guard.rs` then checks).
    Child {
        /// Whether the kind is cluster-scoped.
        cluster_scoped: bool,
    },
}

/// How the parent owns a rendered object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// A controller ownerReference: the garbage collector deletes it with the parent.
    Controller,
    /// Labels only: the engine deletes it while the parent's finalizer holds the deletion.
    Labels,
}

/// Settles the rendered object's namespace: a cluster-scoped kind has none, a namespaced
/// object without one gets the parent's home ([`ParentRef::home_namespace`]). Says how the
/// parent will own it: a child of a cluster-scoped parent always by ownerReference (the garbage
/// collector follows one from any namespace to a cluster-scoped owner).
pub(crate) fn place(
    metadata: &mut Map<String, Value>,
    placement: Placement,
    parent: &ParentRef,
) -> Result<Ownership, String> {
    let rendered = metadata.get("namespace").and_then(Value::as_str).map(str::to_owned);
    let by_reference_from_anywhere = parent.is_cluster_scoped();
    match (placement, rendered) {
        (Placement::Child { cluster_scoped: true }, None) if by_reference_from_anywhere => Ok(Ownership::Controller),
        (Placement::Child { cluster_scoped: true }, None) => Ok(Ownership::Labels),
        (Placement::Child { cluster_scoped: true }, Some(ns)) => Err(format!(
            "rendered namespace {ns:?} for a cluster-scoped kind; remove metadata.namespace"
        )),
        (_, None) => match parent.home_namespace() {
            Some(home) => {
                metadata.insert("namespace".to_owned(), json!(home));
                Ok(Ownership::Controller)
            }
            None => Err(format!(
                "a namespaced object of a cluster-scoped parent ({} {}) must set metadata.namespace",
                parent.kind, parent.name
            )),
        },
        (_, Some(ns)) if Some(ns.as_str()) == parent.home_namespace() => Ok(Ownership::Controller),
        (Placement::Child { .. }, Some(_)) if by_reference_from_anywhere => Ok(Ownership::Controller),
        (Placement::Child { .. }, Some(_)) => Ok(Ownership::Labels),
        (Placement::ParentNamespace, Some(ns)) => Err(match parent.home_namespace() {
            Some(home) => {
                format!("rendered namespace {ns:?}; objects created by actions stay in the parent's namespace {home:?}")
            }
            None => format!(
                "rendered namespace {ns:?}; objects created by actions of a cluster-scoped parent are cluster-scoped or in the parent's own Namespace"
            ),
        }),
    }
}

/// Whether an object is owned by labels (outside the parent's namespace, or cluster-scoped).
pub(crate) fn is_label_owned(object: &Value, parent_namespace: &str) -> bool {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .is_none_or(|ns| ns.is_empty() || ns != parent_namespace)
}

/// Whether the rule lets children into `namespace` besides the parent's own and the ones the
/// parent owns: it is in `spec.allowedNamespaces`, or the Namespace (as `lookups` has it) carries
/// every label of `spec.allowedNamespaceSelector`.
pub(crate) fn namespace_allowed(rule: &Rule, namespace: &str, lookups: &dyn LookupSource) -> bool {
    if rule.spec.allowed_namespaces.iter().any(|a| a.value == namespace) {
        return true;
    }
    let selector = &rule.spec.allowed_namespace_selector;
    if selector.is_empty() {
        return false;
    }
    let key = LookupKey {
        api_version: "v1".to_owned(),
        kind: "Namespace".to_owned(),
        namespace: String::new(),
        name: namespace.to_owned(),
    };
    lookups
        .get(&key)
        .is_some_and(|object| super::lookups::has_labels(&object, selector))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "myorg.io/v1".into(),
            kind: "Tenant".into(),
            namespace: "platform".into(),
            name: "acme".into(),
            uid: "u1".into(),
            generation: 1,
        }
    }

    #[test]
    fn namespaced_objects_default_to_the_parent_namespace_and_are_owner_referenced() {
        let mut meta = Map::new();
        let child = Placement::Child { cluster_scoped: false };
        assert_eq!(place(&mut meta, child, &parent()), Ok(Ownership::Controller));
        assert_eq!(meta["namespace"], "platform");
        let mut meta = json!({"namespace": "acme"}).as_object().cloned().unwrap_or_default();
        assert_eq!(place(&mut meta, child, &parent()), Ok(Ownership::Labels));
    }

    #[test]
    fn cluster_scoped_objects_have_no_namespace() {
        let cluster = Placement::Child { cluster_scoped: true };
        let mut meta = Map::new();
        assert_eq!(place(&mut meta, cluster, &parent()), Ok(Ownership::Labels));
        assert!(!meta.contains_key("namespace"));
        let mut meta = json!({"namespace": "x"}).as_object().cloned().unwrap_or_default();
        assert!(place(&mut meta, cluster, &parent()).is_err());
    }

    #[test]
    fn action_objects_stay_in_the_parent_namespace() {
        let mut meta = json!({"namespace": "x"}).as_object().cloned().unwrap_or_default();
        assert!(place(&mut meta, Placement::ParentNamespace, &parent()).is_err());
    }
}
