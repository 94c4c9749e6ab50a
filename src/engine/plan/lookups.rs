//! Lookups: read-only objects a rule reads but does not own, resolved through a
//! [`LookupSource`] (the watched caches at run time, the `--observed` directory offline). A
//! missing object is `none` in the context, never an error; a list lookup (`list: true`) is the
//! list of every object that carries its `matchLabels`, bounded by its `maxItems`.

use serde::Serialize;
use serde_json::{Map, Value};

use super::PlanError;
use super::context::ParentRef;
use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::Rule;
use crate::engine::rules::model::{Located, LookupSpec};
use crate::engine::template::Renderer;

/// Which object a lookup reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LookupKey {
    /// `group/version` or `v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (the source ignores it for cluster-scoped kinds); [`ALL_NAMESPACES`] for a list
    /// lookup of every namespace.
    pub namespace: String,
    /// Name; empty for a list lookup: every object in the namespace.
    pub name: String,
}

/// A list lookup's namespace that means every namespace.
pub(crate) const ALL_NAMESPACES: &str = "*";

/// The default bound of a list lookup.
pub(crate) const DEFAULT_MAX_ITEMS: usize = 100;

impl LookupKey {
    /// Whether this reads every object of the namespace (a list lookup), not one by name.
    pub fn is_list(&self) -> bool {
        self.name.is_empty()
    }

    /// Whether `object` (its namespace and name) is what this key reads.
    pub fn covers(&self, namespace: &str, name: &str) -> bool {
        (self.namespace == ALL_NAMESPACES || self.namespace == namespace) && (self.is_list() || self.name == name)
    }
}

impl std::fmt::Display for LookupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = if self.is_list() { "*" } else { &self.name };
        match self.namespace.as_str() {
            "" => write!(f, "{} {name}", self.kind),
            namespace => write!(f, "{} {namespace}/{name}", self.kind),
        }
    }
}

/// Where looked-up objects come from. Implementations read memory (a cache, files read before),
/// never the network, so planning stays a function of values.
pub trait LookupSource {
    /// The object, or `None` when it does not exist.
    fn get(&self, key: &LookupKey) -> Option<Value>;
    /// Every object a list key covers ([`LookupKey::covers`]), in any order.
    fn list(&self, key: &LookupKey) -> Vec<Value>;
}

/// No object exists (plans of rules without lookups, tests).
pub(crate) struct NoLookups;

impl LookupSource for NoLookups {
    fn get(&self, _key: &LookupKey) -> Option<Value> {
        None
    }

    fn list(&self, _key: &LookupKey) -> Vec<Value> {
        Vec::new()
    }
}

/// What one lookup read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LookupRead {
    /// The lookup's id.
    pub id: String,
    /// The object it read; `None` when its name rendered empty (no lookup).
    pub target: Option<LookupKey>,
    /// Whether the object exists (a list lookup: whether any matched).
    pub found: bool,
    /// A list lookup's matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
}

/// The objects every lookup of `rule` reads, from its name and namespace templates over the
/// parent (`object`, `metadata`, `spec`, `status`, `rule`; not children or other lookups).
pub(crate) fn keys(
    renderer: &Renderer,
    rule: &Rule,
    parent_ref: &ParentRef,
    parent_context: &minijinja::Value,
) -> Result<Vec<(String, Option<LookupKey>)>, PlanError> {
    let mut keys = Vec::with_capacity(rule.spec.lookups.len());
    for lookup in &rule.spec.lookups {
        let id = &lookup.id.value;
        let render = |field: &str, source: &Located<String>| {
            renderer
                .render_text(&rule.inline_template(&format!("lookups.{id}.{field}")), parent_context)
                .map_err(|e| super::relocate::relocate(rule, source, e))
        };
        let name = match &lookup.name {
            Some(template) => render("name", template)?.trim().to_owned(),
            None => String::new(),
        };
        let namespace = match &lookup.namespace {
            Some(template) => {
                let namespace = render("namespace", template)?.trim().to_owned();
                guard(rule, lookup, template, &namespace, parent_ref)?;
                namespace
            }
            None => String::new(),
        };
        let key = (lookup.list || !name.is_empty()).then(|| LookupKey {
            api_version: lookup.api_version.clone(),
            kind: lookup.kind.clone(),
            namespace: if rule.is_cluster_scoped(&lookup.api_version, &lookup.kind)
                || crate::engine::base::builtin_kinds::is_cluster_scoped(&lookup.api_version, &lookup.kind)
            {
                String::new()
            } else if namespace.is_empty() {
                // A cluster-scoped parent other than a Namespace has no home: such a lookup
                // reads nothing (docs/reference/rule.md).
                parent_ref.home_namespace().unwrap_or_default().to_owned()
            } else {
                namespace
            },
            name,
        });
        keys.push((id.clone(), key));
    }
    Ok(keys)
}

/// The confused-deputy guard for reads, the same as for children's writes: a `namespace` the
/// parent can influence (a template) must render the parent's namespace or one of
/// `spec.allowedNamespaces`; a constant one was chosen by the platform engineer who wrote the
/// rule and may name any namespace. Cluster-scoped kinds have no namespace to guard.
fn guard(
    rule: &Rule,
    lookup: &LookupSpec,
    template: &Located<String>,
    namespace: &str,
    parent_ref: &ParentRef,
) -> Result<(), PlanError> {
    let constant = !crate::engine::template::is_template(&template.value);
    if constant
        || namespace.is_empty()
        || Some(namespace) == parent_ref.home_namespace()
        || rule.spec.allowed_namespaces.iter().any(|a| a.value == namespace)
        || rule.is_cluster_scoped(&lookup.api_version, &lookup.kind)
        || crate::engine::base::builtin_kinds::is_cluster_scoped(&lookup.api_version, &lookup.kind)
    {
        return Ok(());
    }
    Err(PlanError::LookupNamespaceNotAllowed {
        id: lookup.id.value.clone(),
        at: SourceLocation::from_span(&rule.file, &template.referenced).to_string(),
        namespace: namespace.to_owned(),
        home: parent_ref.home_description(),
        allowed: if rule.spec.allowed_namespaces.is_empty() {
            "none".to_owned()
        } else {
            rule.spec
                .allowed_namespaces
                .iter()
                .map(|a| a.value.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

/// Whether `object` carries every label of `wanted` (a lookup's `matchLabels`).
pub(crate) fn has_labels(object: &Value, wanted: &std::collections::BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(key, value)| {
        object
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(key))
            .and_then(Value::as_str)
            == Some(value.as_str())
    })
}

/// Reads every lookup: what was read (for the plan) and the `lookups` context entry. An object
/// without the lookup's `matchLabels` is not read (the cache does not hold it either).
pub(crate) fn resolve(
    renderer: &Renderer,
    rule: &Rule,
    parent_ref: &ParentRef,
    parent_context: &minijinja::Value,
    source: &dyn LookupSource,
) -> Result<(Vec<LookupRead>, Value), PlanError> {
    let mut reads = Vec::new();
    let mut context = Map::new();
    for ((id, key), lookup) in keys(renderer, rule, parent_ref, parent_context)?
        .into_iter()
        .zip(&rule.spec.lookups)
    {
        if let Some(list_key) = key.as_ref().filter(|k| k.is_list()) {
            let mut objects: Vec<Value> = source
                .list(list_key)
                .into_iter()
                .filter(|object| has_labels(object, &lookup.match_labels))
                .collect();
            let max = lookup.max_items.unwrap_or(DEFAULT_MAX_ITEMS);
            if objects.len() > max {
                return Err(PlanError::LookupTooLarge {
                    id,
                    at: SourceLocation::from_span(&rule.file, &lookup.id.referenced).to_string(),
                    count: objects.len(),
                    max,
                });
            }
            let text = |o: &Value, p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
            objects.sort_by_key(|o| (text(o, "/metadata/namespace"), text(o, "/metadata/name")));
            reads.push(LookupRead {
                id: id.clone(),
                found: !objects.is_empty(),
                count: Some(objects.len()),
                target: key,
            });
            context.insert(id, Value::Array(objects));
            continue;
        }
        let object = key
            .as_ref()
            .and_then(|k| source.get(k))
            .filter(|object| has_labels(object, &lookup.match_labels));
        reads.push(LookupRead {
            id: id.clone(),
            found: object.is_some(),
            count: None,
            target: key,
        });
        context.insert(id, object.unwrap_or(Value::Null));
    }
    Ok((reads, Value::Object(context)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::plan::context;
    use crate::engine::rules::load::one_rule;

    /// The keys of a rule with a templated and a constant lookup namespace, for `spec.from`.
    fn keys_for(from: &str) -> Result<Vec<(String, Option<LookupKey>)>, PlanError> {
        let set = one_rule(
            "copy",
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: copy}\nspec:\n  watch: {apiVersion: example.com/v1, kind: Copy}\n  allowedNamespaces: [shared]\n  lookups:\n    - {id: source, apiVersion: v1, kind: ConfigMap, name: source, namespace: \"{{ spec.from }}\"}\n    - {id: defaults, apiVersion: v1, kind: ConfigMap, name: defaults, namespace: platform}\n",
        );
        let parent = json!({"apiVersion": "example.com/v1", "kind": "Copy",
            "metadata": {"name": "c", "namespace": "team-a", "uid": "u1"}, "spec": {"from": from}});
        let parent_ref = ParentRef::read(&parent).expect("parent");
        let context = context::build(&parent, &std::collections::BTreeMap::new(), "copy", None);
        keys(&set.renderer, &set.rules[0], &parent_ref, &context)
    }

    #[test]
    fn a_lookup_namespace_chosen_by_the_parent_must_be_its_own_or_allowed() {
        for allowed in ["team-a", "shared", ""] {
            let keys = keys_for(allowed).expect("allowed namespace");
            let namespaces: Vec<&str> = keys
                .iter()
                .filter_map(|(_, k)| k.as_ref().map(|k| k.namespace.as_str()))
                .collect();
            let own = if allowed.is_empty() { "team-a" } else { allowed };
            assert_eq!(
                namespaces,
                [own, "platform"],
                "a constant namespace is the rule's choice"
            );
        }
        match keys_for("kube-system") {
            Err(PlanError::LookupNamespaceNotAllowed { id, namespace, at, .. }) => {
                assert_eq!((id.as_str(), namespace.as_str()), ("source", "kube-system"));
                assert!(at.contains("copy.yaml:"), "{at}");
            }
            other => panic!("expected LookupNamespaceNotAllowed, got {other:?}"),
        }
    }
}
