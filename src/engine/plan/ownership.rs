//! Proof of ownership: which observed objects really are a parent's children. Labels alone
//! prove nothing (anyone who can write an object can copy `ruleop.io/rule` and
//! `ruleop.io/parent-uid` onto it), so every reader (the template's `children.<id>`, status
//! fields, prune, deletion cleanup, the apply layer's live view) goes through [`owned`].
//!
//! An object carrying this rule's labels for this parent is accepted when
//! - it is in the parent's namespace and has a controller ownerReference to the parent's UID
//!   (only ruleop, or someone who can already write the parent's namespace, can set that; an
//!   object an `on: delete` action created has none and shows the annotation below instead), or
//! - it is owned by labels (cluster-scoped, or in a namespace the rule allows: one of
//!   `spec.allowedNamespaces`, or a Namespace this parent owns, itself proven) and carries the
//!   `ruleop.io/parent` annotation naming this parent.
//!
//! Anything else is not this parent's, whatever its labels say: it is not shown to templates,
//! not pruned, not deleted on cleanup.

use std::collections::BTreeSet;

use serde_json::Value;

use super::context::{LABEL_ACTION, LABEL_PARENT_UID, ParentRef};
use super::lookups::LookupSource;
use super::scope::ANNOTATION_PARENT;
use super::{is_child_of, label};
use crate::engine::rules::Rule;

/// The objects of `candidates` that are proven children (or action objects) of this parent.
/// `lookups` answers whether a namespace matches the rule's `allowedNamespaceSelector`.
pub(crate) fn owned<'a>(
    rule: &Rule,
    parent: &ParentRef,
    candidates: &'a [Value],
    lookups: &dyn LookupSource,
) -> Vec<&'a Value> {
    let namespaces = owned_namespaces(rule, parent, candidates, lookups);
    candidates
        .iter()
        .filter(|o| proves(rule, parent, &namespaces, lookups, o))
        .collect()
}

/// [`owned`] in place: drops from `candidates` what is not proven this parent's, copying nothing.
pub(crate) fn retain_owned(rule: &Rule, parent: &ParentRef, candidates: &mut Vec<Value>, lookups: &dyn LookupSource) {
    let namespaces = owned_namespaces(rule, parent, candidates, lookups);
    candidates.retain(|o| proves(rule, parent, &namespaces, lookups, o));
}

/// Namespaces first: a proven Namespace child makes its namespace one the parent owns.
fn owned_namespaces(
    rule: &Rule,
    parent: &ParentRef,
    candidates: &[Value],
    lookups: &dyn LookupSource,
) -> BTreeSet<String> {
    let none = BTreeSet::new();
    candidates
        .iter()
        .filter(|o| is_namespace(o) && proves(rule, parent, &none, lookups, o))
        .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// Whether `object` is proven to be this parent's, given the Namespaces the parent is proven to
/// own (`owned_namespaces`).
pub(crate) fn proves(
    rule: &Rule,
    parent: &ParentRef,
    owned_namespaces: &BTreeSet<String>,
    lookups: &dyn LookupSource,
    object: &Value,
) -> bool {
    if !is_child_of(object, &rule.name, &parent.uid) {
        return false;
    }
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let annotated = annotation(object, ANNOTATION_PARENT) == Some(&parent_annotation(parent));
    // By reference; what an `on: delete` action created has none (it outlives the parent) and
    // shows the annotation instead.
    let referenced =
        has_controller_reference(object, &parent.uid) || (label(object, LABEL_ACTION).is_some() && annotated);
    if namespace == parent.namespace && !parent.is_cluster_scoped() {
        return referenced;
    }
    let in_allowed_place = namespace.is_empty()
        || Some(namespace) == parent.home_namespace()
        || owned_namespaces.contains(namespace)
        || super::scope::namespace_allowed(rule, namespace, lookups);
    // Every child of a cluster-scoped parent carries a controller ownerReference; a namespaced
    // parent's children elsewhere are owned by labels and the annotation.
    in_allowed_place
        && if parent.is_cluster_scoped() {
            referenced
        } else {
            annotated
        }
}

/// The `ruleop.io/parent` annotation's value for this parent: `<namespace>/<name>`, or
/// `<name>` for a cluster-scoped parent.
pub(crate) fn parent_annotation(parent: &ParentRef) -> String {
    if parent.is_cluster_scoped() {
        parent.name.clone()
    } else {
        format!("{}/{}", parent.namespace, parent.name)
    }
}

/// Whether an existing object may be written as this parent's child: it carries this parent's
/// UID label or a controller ownerReference to it (what ruleop itself would have put there). An
/// object without either belongs to someone else and is never taken over implicitly.
pub(crate) fn may_take_over(object: &Value, parent_uid: &str) -> bool {
    label(object, LABEL_PARENT_UID) == Some(parent_uid) || has_controller_reference(object, parent_uid)
}

fn has_controller_reference(object: &Value, uid: &str) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o.get("uid").and_then(Value::as_str) == Some(uid) && o.get("controller") == Some(&Value::Bool(true))
            })
        })
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn is_namespace(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Namespace")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "myorg.io/v1".into(),
            kind: "Database".into(),
            namespace: "shop".into(),
            name: "orders".into(),
            uid: "u1".into(),
            generation: 1,
        }
    }

    fn labels() -> Value {
        json!({"ruleop.io/rule": "database", "ruleop.io/parent-uid": "u1", "ruleop.io/child": "service"})
    }

    fn owner() -> Value {
        json!([{"apiVersion": "myorg.io/v1", "kind": "Database", "name": "orders", "uid": "u1", "controller": true}])
    }

    fn rule(allowed: &[&str]) -> Rule {
        Rule::from_spec_yaml(&format!(
            "watch: {{apiVersion: myorg.io/v1, kind: Database}}\nallowedNamespaces: {allowed:?}\n"
        ))
    }

    #[test]
    fn a_child_in_the_parent_namespace_needs_a_controller_reference_to_the_parent() {
        let rule = rule(&[]);
        let forged = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "orders-svc", "namespace": "shop", "labels": labels()}});
        let ours = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "orders-svc", "namespace": "shop", "labels": labels(), "ownerReferences": owner()}});
        let candidates = [forged, ours.clone()];
        assert_eq!(
            owned(&rule, &parent(), &candidates, &crate::engine::plan::lookups::NoLookups),
            vec![&ours]
        );
    }

    #[test]
    fn a_labelled_object_in_another_namespace_is_not_the_parents() {
        let rule = rule(&["shared"]);
        let annotations = json!({"ruleop.io/parent": "shop/orders"});
        let elsewhere = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "victim", "namespace": "payments", "labels": labels(),
                         "annotations": annotations, "ownerReferences": owner()}});
        let unannotated = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "x", "namespace": "shared", "labels": labels()}});
        let allowed = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "y", "namespace": "shared", "labels": labels(), "annotations": annotations}});
        let candidates = [elsewhere, unannotated, allowed.clone()];
        assert_eq!(
            owned(&rule, &parent(), &candidates, &crate::engine::plan::lookups::NoLookups),
            vec![&allowed]
        );
    }

    #[test]
    fn objects_in_a_namespace_the_parent_owns_are_accepted_with_the_annotation() {
        let rule = rule(&[]);
        let annotations = json!({"ruleop.io/parent": "shop/orders"});
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "orders-home", "labels": labels(), "annotations": annotations}});
        let inside = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "orders-home", "labels": labels(), "annotations": annotations}});
        let other_parent = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "d", "namespace": "orders-home", "labels": labels(),
                         "annotations": {"ruleop.io/parent": "shop/other"}}});
        let candidates = [namespace.clone(), inside.clone(), other_parent];
        assert_eq!(
            owned(&rule, &parent(), &candidates, &crate::engine::plan::lookups::NoLookups),
            vec![&namespace, &inside]
        );
    }

    #[test]
    fn a_cluster_scoped_parents_child_needs_its_reference_and_an_allowed_place() {
        let rule = Rule::from_spec_yaml(
            "watch: {apiVersion: myorg.io/v1, kind: Propagation, scope: Cluster}\nallowedNamespaces: [team-a]\n",
        );
        let parent = ParentRef {
            kind: "Propagation".into(),
            namespace: String::new(),
            ..parent()
        };
        let object = |namespace: Option<&str>, metadata: Value| {
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "copy", "labels": labels()}});
            if let Some(ns) = namespace {
                object["metadata"]["namespace"] = json!(ns);
            }
            for (k, v) in metadata.as_object().expect("a map") {
                object["metadata"][k] = v.clone();
            }
            object
        };
        let referenced = json!({"ownerReferences": owner()});
        let allowed = object(Some("team-a"), referenced.clone());
        let cluster_scoped = object(None, referenced.clone());
        let elsewhere = object(Some("kube-system"), referenced);
        // Labels and the annotation alone prove nothing for a cluster-scoped parent.
        let annotated_only = object(Some("team-a"), json!({"annotations": {"ruleop.io/parent": "orders"}}));
        let candidates = [allowed.clone(), cluster_scoped.clone(), elsewhere, annotated_only];
        assert_eq!(
            owned(&rule, &parent, &candidates, &crate::engine::plan::lookups::NoLookups),
            vec![&allowed, &cluster_scoped]
        );
        assert_eq!(parent_annotation(&parent), "orders");
    }

    #[test]
    fn an_existing_object_without_our_label_or_reference_may_not_be_taken_over() {
        let unowned = json!({"metadata": {"name": "payments-svc", "labels": {"app": "payments"}}});
        assert!(!may_take_over(&unowned, "u1"));
        let labelled = json!({"metadata": {"labels": {"ruleop.io/parent-uid": "u1"}}});
        assert!(may_take_over(&labelled, "u1"));
        let referenced = json!({"metadata": {"ownerReferences": owner()}});
        assert!(may_take_over(&referenced, "u1"));
        let someone_elses = json!({"metadata": {"ownerReferences": [{"uid": "u2", "controller": true}]}});
        assert!(!may_take_over(&someone_elses, "u1"));
    }
}
