//! Lookups: read-only objects a rule reads but does not own, resolved through a
//! [`LookupSource`] (the watched caches at run time, the `--observed` directory offline). A
//! missing object is `none` in the context, never an error.

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
    /// Namespace (the source ignores it for cluster-scoped kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for LookupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Where looked-up objects come from. Implementations read memory (a cache, files read before),
/// never the network, so planning stays a function of values.
pub trait LookupSource {
    /// The object, or `None` when it does not exist.
    fn get(&self, key: &LookupKey) -> Option<Value>;
}

/// No object exists (plans of rules without lookups, tests).
pub struct NoLookups;

impl LookupSource for NoLookups {
    fn get(&self, _key: &LookupKey) -> Option<Value> {
        None
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
    /// Whether the object exists.
    pub found: bool,
}

/// The objects every lookup of `rule` reads, from its name and namespace templates over the
/// parent (`object`, `metadata`, `spec`, `status`, `rule`; not children or other lookups).
pub fn keys(
    renderer: &Renderer,
    rule: &Rule,
    parent_ref: &ParentRef,
    parent_context: &minijinja::Value,
) -> Result<Vec<(String, Option<LookupKey>)>, PlanError> {
    let mut keys = Vec::with_capacity(rule.spec.lookups.len());
    for lookup in &rule.spec.lookups {
        let id = &lookup.id.value;
        let render =
            |field: &str| renderer.render_text(&rule.inline_template(&format!("lookups.{id}.{field}")), parent_context);
        let name = render("name")?.trim().to_owned();
        let namespace = match &lookup.namespace {
            Some(template) => {
                let namespace = render("namespace")?.trim().to_owned();
                guard(rule, lookup, template, &namespace, parent_ref)?;
                namespace
            }
            None => String::new(),
        };
        let key = (!name.is_empty()).then(|| LookupKey {
            api_version: lookup.api_version.clone(),
            kind: lookup.kind.clone(),
            namespace: if namespace.is_empty() {
                parent_ref.namespace.clone()
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
    let constant = !template.value.contains("{{") && !template.value.contains("{%");
    if constant
        || namespace.is_empty()
        || namespace == parent_ref.namespace
        || rule.spec.allowed_namespaces.iter().any(|a| a == namespace)
        || rule.is_cluster_scoped(&lookup.api_version, &lookup.kind)
        || super::builtin::is_cluster_scoped(&lookup.api_version, &lookup.kind)
    {
        return Ok(());
    }
    Err(PlanError::LookupNamespaceNotAllowed {
        id: lookup.id.value.clone(),
        at: SourceLocation::from_span(&rule.file, &template.referenced).to_string(),
        namespace: namespace.to_owned(),
        parent_namespace: parent_ref.namespace.clone(),
        allowed: if rule.spec.allowed_namespaces.is_empty() {
            "none".to_owned()
        } else {
            rule.spec.allowed_namespaces.join(", ")
        },
    })
}

/// Reads every lookup: what was read (for the plan) and the `lookups` context entry.
pub fn resolve(
    renderer: &Renderer,
    rule: &Rule,
    parent_ref: &ParentRef,
    parent_context: &minijinja::Value,
    source: &dyn LookupSource,
) -> Result<(Vec<LookupRead>, Value), PlanError> {
    let mut reads = Vec::new();
    let mut context = Map::new();
    for (id, key) in keys(renderer, rule, parent_ref, parent_context)? {
        let object = key.as_ref().and_then(|k| source.get(k));
        reads.push(LookupRead {
            id: id.clone(),
            found: object.is_some(),
            target: key,
        });
        context.insert(id, object.unwrap_or(Value::Null));
    }
    Ok((reads, Value::Object(context)))
}
