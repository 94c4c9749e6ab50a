//! The confused-deputy guard over a plan's children: it keeps a parent from aiming writes at a
//! namespace it does not own or the rule does not allow (`scope.rs` says which namespaces those are).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::PlanError;
use super::children::{DesiredChild, ObjectRef};
use super::context::ParentRef;
use super::lookups::LookupSource;
use super::order::Waiting;
use super::scope::namespace_allowed;
use crate::engine::rules::Rule;

/// The allowed namespaces, for an error message.
fn allowed_description(rule: &Rule) -> String {
    let mut allowed: Vec<String> = rule.spec.allowed_namespaces.iter().map(|a| a.value.clone()).collect();
    if !rule.spec.allowed_namespace_selector.is_empty() {
        let labels: Vec<String> = rule
            .spec
            .allowed_namespace_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        allowed.push(format!("namespaces labelled {}", labels.join(",")));
    }
    if allowed.is_empty() {
        "none".to_owned()
    } else {
        allowed.join(", ")
    }
}

/// The confused-deputy guard. A child's namespace must be the parent's, one the rule allows
/// ([`namespace_allowed`]), or a Namespace this parent owns as a child: desired in this plan
/// *and* observed as proven this parent's ([`super::ownership`]), so a parent cannot claim an
/// existing namespace by rendering a Namespace child of that name (the apply layer refuses to
/// take an existing object over unless the rule says `adopt: true`). Children
/// into a desired Namespace not observed yet wait for it (like a `dependsOn`: not applied, not
/// pruned). Anything else fails the whole plan.
pub(crate) fn guard(
    rule: &Rule,
    parent: &ParentRef,
    desired: Vec<DesiredChild>,
    ours: &[&Value],
    lookups: &dyn LookupSource,
) -> Result<(Vec<DesiredChild>, Vec<Waiting>), PlanError> {
    let is_namespace = |api_version: &str, kind: &str| api_version == "v1" && kind == "Namespace";
    // Namespace name -> id of the child that renders it.
    let namespaces: BTreeMap<String, String> = desired
        .iter()
        .filter(|c| is_namespace(&c.target.api_version, &c.target.kind))
        .map(|c| (c.target.name.clone(), c.id.clone()))
        .collect();
    let observed: BTreeSet<String> = ours
        .iter()
        .filter_map(|o| ObjectRef::of(o))
        .filter(|o| is_namespace(&o.api_version, &o.kind) && namespaces.contains_key(&o.name))
        .map(|o| o.name)
        .collect();
    let mut applied = Vec::with_capacity(desired.len());
    let mut waiting = Vec::new();
    for child in desired {
        let ns = child.target.namespace.as_str();
        if ns.is_empty()
            || Some(ns) == parent.home_namespace()
            || observed.contains(ns)
            || namespace_allowed(rule, ns, lookups)
        {
            applied.push(child);
        } else if let Some(owner) = namespaces.get(ns) {
            if !waiting.iter().any(|w: &Waiting| w.id == child.id) {
                waiting.push(Waiting {
                    id: child.id.clone(),
                    on: owner.clone(),
                    reason: format!("Namespace {ns} (a child of this parent) does not exist yet"),
                });
            }
        } else {
            return Err(PlanError::NamespaceNotAllowed {
                id: child.id,
                namespace: ns.to_owned(),
                home: parent.home_description(),
                allowed: allowed_description(rule),
            });
        }
    }
    Ok((applied, waiting))
}
