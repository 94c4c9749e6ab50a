//! `ruleop rbac`: the minimal ClusterRole the rules need, derived from the kinds they declare.
//!
//! Watched kinds: get/list/watch, and patch on their status when the rule writes it (not into a
//! built-in kind by default, `status.write`); patch on the parent itself when
//! the rule needs the `ruleop.io/cleanup` finalizer (label-owned children or `on: delete`
//! actions). Child kinds (cluster-scoped ones too): get/list/watch (the caches), create/patch
//! (server-side apply) and delete (prune and cleanup). Kinds created by actions: create and
//! get/list/watch (they are cached like children: status reads what a run created, and an
//! `on: delete` action's `waitFor` reads the object). Looked-up kinds:
//! get/list/watch (read only), cluster-wide: a lookup's cache is one watch per kind across
//! namespaces and its default namespace is the parent's (any namespace parents live in), so
//! per-namespace Roles would need per-namespace caches; which namespaces a lookup may read is
//! enforced by the plan's namespace guard instead (`plan::lookups`). Secrets `http` headers read:
//! get, by name. Events: create/patch. The
//! CRDs of watched custom kinds: get, by name (the schema check at reload). Plurals come from k8s-openapi for built-in kinds and from the
//! CRD files for custom kinds, so the role is computed offline.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::engine::base::builtin_kinds;
use crate::engine::rules::RuleSet;
use crate::engine::rules::model::HeaderValue;

/// Name of the generated ClusterRole.
pub(crate) const CLUSTER_ROLE: &str = "ruleop";

/// The ClusterRole for `set`, as a JSON value.
pub(crate) fn cluster_role(set: &RuleSet, crds: &BTreeMap<(String, String), String>) -> Result<Value, String> {
    let mut verbs: BTreeMap<(String, String), BTreeSet<&str>> = BTreeMap::new();
    let mut grant = |api_version: &str, kind: &str, suffix: &str, add: &[&'static str]| -> Result<(), String> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g).to_owned();
        let plural = builtin_kinds::plural(api_version, kind)
            .map(str::to_owned)
            .or_else(|| crds.get(&(group.clone(), kind.to_owned())).cloned())
            .ok_or_else(|| format!("no plural known for {api_version} {kind}: pass its CRD with --crds"))?;
        verbs
            .entry((group, format!("{plural}{suffix}")))
            .or_default()
            .extend(add);
        Ok(())
    };
    for rule in &set.rules {
        let watch = &rule.spec.watch;
        grant(&watch.api_version, &watch.kind, "", &["get", "list", "watch"])?;
        if rule.writes_status() {
            grant(&watch.api_version, &watch.kind, "/status", &["get", "patch"])?;
        }
        for child in &rule.spec.children {
            grant(
                &child.api_version,
                &child.kind,
                "",
                &["get", "list", "watch", "create", "patch", "delete"],
            )?;
        }
        if rule.needs_finalizer() || rule.spec.parent_metadata.is_some() {
            // The `ruleop.io/cleanup` finalizer is a merge patch on the parent itself, and
            // `parentMetadata` a server-side apply of its labels and annotations.
            grant(&watch.api_version, &watch.kind, "", &["patch"])?;
        }
        // `lookup_kinds` includes Namespaces for `allowedNamespaceSelector`.
        for (api_version, kind) in rule.lookup_kinds() {
            grant(&api_version, &kind, "", &["get", "list", "watch"])?;
        }
        for action in &rule.spec.actions {
            let Some(create) = &action.create else { continue };
            // Watched like children: status reads what a run created (`actions.<id>.object`).
            grant(
                &create.api_version,
                &create.kind,
                "",
                &["create", "get", "list", "watch"],
            )?;
        }
    }
    verbs
        .entry(("events.k8s.io".to_owned(), "events".to_owned()))
        .or_default()
        .extend(["create", "patch"]);
    let mut by_group: BTreeMap<(String, Vec<&str>), Vec<String>> = BTreeMap::new();
    for ((group, resource), verbs) in verbs {
        by_group
            .entry((group, verbs.into_iter().collect()))
            .or_default()
            .push(resource);
    }
    let mut rules: Vec<Value> = by_group
        .into_iter()
        .map(|((group, verbs), resources)| json!({"apiGroups": [group], "resources": resources, "verbs": verbs}))
        .collect();
    // The CRDs of watched custom kinds, by name only: `ruleop run` checks the rules against
    // their schemas at every reload.
    let mut crd_names: Vec<String> = set
        .rules
        .iter()
        .map(|rule| &rule.spec.watch)
        .filter(|watch| !crate::engine::rules::is_built_in_api(&watch.api_version))
        .filter_map(|watch| {
            let group = watch.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let plural = crds.get(&(group.to_owned(), watch.kind.clone()))?;
            Some(format!("{plural}.{group}"))
        })
        .collect();
    crd_names.sort();
    crd_names.dedup();
    // Secrets `http` headers read (`valueFrom.secretKeyRef`): get, by name only.
    let secret_names: BTreeSet<&str> = set
        .rules
        .iter()
        .flat_map(|rule| &rule.spec.actions)
        .filter_map(|action| action.http.as_ref())
        .flat_map(|http| http.headers.values())
        .filter_map(|value| match value {
            HeaderValue::FromSecret(from) => Some(from.value_from.secret_key_ref.name.as_str()),
            HeaderValue::Template(_) => None,
        })
        .collect();
    if !secret_names.is_empty() {
        rules.push(json!({
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": secret_names,
            "verbs": ["get"],
        }));
    }
    if !crd_names.is_empty() {
        rules.push(json!({
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": crd_names,
            "verbs": ["get"],
        }));
    }
    Ok(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE, "labels": {"app.kubernetes.io/name": "ruleop"}},
        "rules": rules,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::engine::rules::load::one_rule;

    #[test]
    fn looked_up_kinds_are_granted_read_verbs_only() {
        let set = one_rule(
            "app",
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: app}\nspec:\n  watch: {apiVersion: example.com/v1, kind: App}\n  lookups:\n    - {id: defaults, apiVersion: v1, kind: ConfigMap, name: platform-defaults, namespace: platform}\n    - {id: token, apiVersion: v1, kind: Secret, name: \"{{ metadata.name }}-token\"}\n",
        );
        let crds = BTreeMap::from([(("example.com".to_owned(), "App".to_owned()), "apps".to_owned())]);
        let role = cluster_role(&set, &crds).expect("role");
        let read_only = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| r["apiGroups"] == json!([""]))
            .expect("core group rule");
        assert_eq!(read_only["resources"], json!(["configmaps", "secrets"]));
        assert_eq!(read_only["verbs"], json!(["get", "list", "watch"]));
    }

    #[test]
    fn secrets_http_headers_read_are_granted_get_by_name_only() {
        let set = one_rule(
            "hook",
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: hook}\nspec:\n  watch: {apiVersion: example.com/v1, kind: App}\n  actions:\n    - id: notify\n      guard: {generation: true}\n      http:\n        url: https://hooks.example.com/\n        allowedHosts: [hooks.example.com]\n        headers:\n          Authorization: {valueFrom: {secretKeyRef: {name: hook-token, key: token, namespace: platform}}}\n          X-App: \"{{ metadata.name }}\"\n",
        );
        let crds = BTreeMap::from([(("example.com".to_owned(), "App".to_owned()), "apps".to_owned())]);
        let role = cluster_role(&set, &crds).expect("role");
        let secrets: Vec<&Value> = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| r["resources"].as_array().is_some_and(|r| r.contains(&json!("secrets"))))
            .collect();
        assert_eq!(
            secrets,
            [&json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hook-token"], "verbs": ["get"]})]
        );
    }
}
