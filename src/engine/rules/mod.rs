//! Rules: the file model, loading and validating a directory into an immutable [`RuleSet`]: read
//! (`read.rs`), validate (`validate/`, one file per concern), the `dependsOn` graph (`graph.rs`),
//! the validated `spec.rollout` (`rollout_policy.rs`), the pipeline (`load.rs`).

mod graph;
pub(crate) mod lint;
pub mod load;
pub(crate) mod model;
mod read;
pub mod rollout_policy;
mod validate;

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::template::Renderer;
use model::{ChildSpec, RuleSpec};

/// One validated rule.
#[derive(Debug)]
pub struct Rule {
    /// The rule's name (`metadata.name`): the `ruleop.io/rule` label value on its children.
    pub name: String,
    /// The file it was read from.
    pub file: PathBuf,
    /// The rule as written.
    pub spec: RuleSpec,
    /// `spec.resync`, parsed.
    pub resync: Option<Duration>,
    /// `spec.rollout`, validated: `None` means a change reaches every parent at once.
    pub rollout: Option<crate::engine::rules::rollout_policy::Rollout>,
    /// A digest of the rule document and every template it uses: equal digests mean the
    /// rule renders the same, so a reload need not re-reconcile its parents.
    pub digest: String,
    /// The rule's files with their content, by name (`rules/<file>`, `templates/<template>`): what
    /// a revision of the rule keeps.
    pub files: std::collections::BTreeMap<String, String>,
    /// `(apiVersion, kind)` of the rule's child and action kinds that are cluster-scoped: built-in
    /// kinds when loaded, replaced by discovery's answer in `ruleop run` ([`Rule::set_scopes`]).
    pub cluster_scoped: std::collections::BTreeSet<(String, String)>,
    /// The number of the revision these files are, once `ruleop run` has recorded it (`None`
    /// offline, where no cluster numbers revisions). A rule with `spec.rollout` writes it as
    /// its parents' `status.ruleopRevision` whenever a reconcile changes something.
    pub revision: Option<u64>,
}

/// Whether an `apiVersion` is one of Kubernetes' own APIs: the core group (`v1`), a group
/// without a dot (`apps`, `batch`, `policy`, ...) or one under `k8s.io`, a suffix reserved for
/// the Kubernetes project (a CRD there needs an API-review approval).
pub fn is_built_in_api(api_version: &str) -> bool {
    match api_version.split_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group == "k8s.io" || group.ends_with(".k8s.io"),
    }
}

impl Rule {
    /// A rule named `database` from `rules/database.yaml` with this spec (YAML), for unit tests.
    #[cfg(test)]
    pub fn from_spec_yaml(spec: &str) -> Rule {
        Rule {
            name: "database".into(),
            file: "rules/database.yaml".into(),
            spec: crate::engine::yaml::from_str(spec).expect("a rule spec"),
            resync: None,
            rollout: None,
            digest: String::new(),
            files: Default::default(),
            cluster_scoped: Default::default(),
            revision: None,
        }
    }

    /// The name under which an inline string (status field, reason, URL) of this rule is compiled.
    pub fn inline_template(&self, field_path: &str) -> String {
        inline_template_name(&self.name, field_path)
    }

    /// Whether the engine writes the watched object's status (`spec.status.write`, by default
    /// only into custom resources: a built-in kind's status belongs to its own controller).
    pub fn writes_status(&self) -> bool {
        self.spec
            .status
            .write
            .unwrap_or_else(|| !is_built_in_api(&self.spec.watch.api_version))
    }

    /// Whether `watch.annotationSelector` selects the parent: every annotation present, with
    /// the value given (`""`: any value).
    pub fn selects(&self, parent: &serde_json::Value) -> bool {
        self.spec.watch.annotation_selector.iter().all(|(key, wanted)| {
            parent
                .pointer("/metadata/annotations")
                .and_then(|annotations| annotations.get(key))
                .and_then(serde_json::Value::as_str)
                .is_some_and(|value| wanted.is_empty() || value == wanted)
        })
    }

    /// The child with that id.
    pub fn child(&self, id: &str) -> Option<&ChildSpec> {
        self.spec.children.iter().find(|c| c.id.value == id)
    }

    /// The `(apiVersion, kind)` of every kind the rule looks up (read-only, watched without a
    /// label selector).
    pub fn lookup_kinds(&self) -> Vec<(String, String)> {
        let mut kinds: Vec<_> = self
            .spec
            .lookups
            .iter()
            .map(|l| (l.api_version.clone(), l.kind.clone()))
            .collect();
        // `allowedNamespaceSelector` reads Namespaces' labels through the same caches.
        if !self.spec.allowed_namespace_selector.is_empty() {
            kinds.push(("v1".to_owned(), "Namespace".to_owned()));
        }
        kinds.sort();
        kinds.dedup();
        kinds
    }

    /// The label selector (`k=v,...`) of the one cache of a looked-up kind: the `matchLabels`
    /// its lookups declare (check makes them agree). `None`: every object of the kind.
    pub fn lookup_selector(&self, api_version: &str, kind: &str) -> Option<String> {
        let labels = match self
            .spec
            .lookups
            .iter()
            .find(|l| l.api_version == api_version && l.kind == kind)
        {
            Some(lookup) => &lookup.match_labels,
            None if (api_version, kind) == ("v1", "Namespace") => &self.spec.allowed_namespace_selector,
            None => return None,
        };
        let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        (!selector.is_empty()).then(|| selector.join(","))
    }

    /// The one namespace every lookup of a kind reads, when each names it as a constant: its
    /// cache then watches that namespace only. `None`: the parents' namespaces, a template or
    /// several namespaces (`"*"`, a list lookup's every namespace).
    pub fn lookup_namespace(&self, api_version: &str, kind: &str) -> Option<String> {
        let mut namespaces = self
            .spec
            .lookups
            .iter()
            .filter(|l| l.api_version == api_version && l.kind == kind)
            .map(|l| {
                l.namespace
                    .as_ref()
                    .map(|ns| ns.value.trim())
                    .filter(|ns| !ns.is_empty() && *ns != "*" && !crate::engine::template::is_template(ns))
            });
        let first = namespaces.next()??;
        namespaces.all(|ns| ns == Some(first)).then(|| first.to_owned())
    }

    /// Whether the rule looks a kind up and every such lookup reads in the parent's own
    /// namespace (none names a `namespace`), the parents being namespaced: then, with every
    /// parent in one namespace (`ruleop run --namespace`), its cache need watch that namespace
    /// only.
    pub fn lookups_read_the_parents_namespace(&self, api_version: &str, kind: &str) -> bool {
        let mut of_kind = self
            .spec
            .lookups
            .iter()
            .filter(|l| l.api_version == api_version && l.kind == kind)
            .peekable();
        self.spec.watch.scope == model::ParentScope::Namespaced
            && of_kind.peek().is_some()
            && of_kind.all(|l| l.namespace.is_none())
    }

    /// Whether objects of this kind are cluster-scoped (as far as the rule set knows).
    pub fn is_cluster_scoped(&self, api_version: &str, kind: &str) -> bool {
        self.cluster_scoped.contains(&(api_version.to_owned(), kind.to_owned()))
    }

    /// Records which of the rule's kinds are cluster-scoped, as discovery says.
    pub fn set_scopes(&mut self, cluster_scoped: impl Fn(&str, &str) -> Option<bool>) {
        for (api_version, kind) in self.owned_kinds() {
            match cluster_scoped(&api_version, &kind) {
                Some(true) => {
                    self.cluster_scoped.insert((api_version, kind));
                }
                Some(false) => {
                    self.cluster_scoped.remove(&(api_version, kind));
                }
                None => {}
            }
        }
    }

    /// Whether a child may live outside the parent's namespace (cluster-scoped, in a Namespace
    /// the parent owns, or in an allowed namespace): such children are owned by labels, watched
    /// cluster-wide, and cleaned up through the parent's finalizer.
    pub fn may_own_by_label(&self) -> bool {
        if self.has_cluster_scoped_parents() {
            // Every child of a cluster-scoped parent can carry an ownerReference to it.
            return false;
        }
        !self.spec.allowed_namespaces.is_empty()
            || !self.spec.allowed_namespace_selector.is_empty()
            || self
                .spec
                .children
                .iter()
                .any(|c| self.is_cluster_scoped(&c.api_version, &c.kind))
    }

    /// Whether the rule watches a cluster-scoped kind (`watch.scope: Cluster`).
    pub fn has_cluster_scoped_parents(&self) -> bool {
        self.spec.watch.scope == model::ParentScope::Cluster
    }

    /// Whether the rule's children may be in any namespace the rule allows, so their caches
    /// watch every namespace: label-owned children, or children of a cluster-scoped parent.
    pub fn watches_children_cluster_wide(&self) -> bool {
        self.may_own_by_label() || self.has_cluster_scoped_parents()
    }

    /// Whether a child is orphaned, not deleted, with its parent (`deletionPolicy: Orphan`): the
    /// finalizer then holds the parent until those children are released, before the garbage
    /// collector would follow their ownerReference.
    pub fn orphans_children(&self) -> bool {
        self.spec
            .children
            .iter()
            .any(|c| c.deletion_policy == model::DeletionPolicy::Orphan)
    }

    /// Whether a deleted parent's children go in waves, reverse `dependsOn` order, each gone
    /// before the next: the rule orders its children.
    pub fn tears_down_in_order(&self) -> bool {
        self.spec.children.iter().any(|c| !c.depends_on.is_empty())
    }

    /// Whether parents hold their deletion for ruleop regardless of their values: label-owned
    /// children, children to orphan, an ordered teardown or a finalize phase.
    pub fn always_holds_deletion(&self) -> bool {
        self.may_own_by_label() || self.tears_down_in_order() || self.spec.finalize.is_some()
    }

    /// Whether parents may need the cleanup finalizer: label-owned children, children to orphan,
    /// an ordered teardown, a finalize phase or `on: delete` actions.
    pub fn needs_finalizer(&self) -> bool {
        self.always_holds_deletion()
            || self.orphans_children()
            || self.spec.actions.iter().any(|a| a.on == model::ActionTrigger::Delete)
    }

    /// The `(apiVersion, kind)` of every object kind the rule creates: children and created actions.
    pub fn owned_kinds(&self) -> Vec<(String, String)> {
        let children = self
            .spec
            .children
            .iter()
            .map(|c| (c.api_version.clone(), c.kind.clone()));
        let actions = self
            .spec
            .actions
            .iter()
            .filter_map(|a| a.create.as_ref())
            .map(|c| (c.api_version.clone(), c.kind.clone()));
        let mut kinds: Vec<_> = children.chain(actions).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// The compiled name of an inline template: `<rule>#<field path>`.
pub fn inline_template_name(rule: &str, field_path: &str) -> String {
    format!("{rule}#{field_path}")
}

/// A complete, validated set of rules with their compiled templates. Immutable: a reload builds
/// a new one and swaps it in whole.
#[derive(Debug)]
pub struct RuleSet {
    /// The rules, in file order.
    pub rules: Vec<Rule>,
    /// Every template and inline string, compiled.
    pub renderer: Renderer,
    /// The schemas the set was checked against (empty unless a command attached them): offline,
    /// the parent's CRD defaults apply before planning and custom resource children are validated.
    pub schemas: crate::engine::schema::Catalog,
}

impl RuleSet {
    /// The rule with that name.
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_with_lookups(lookups: &str) -> Rule {
        let text = format!(
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  watch: {{apiVersion: example.com/v1, kind: R}}\n  lookups:\n{lookups}"
        );
        load::one_rule("r", &text).rules.remove(0)
    }

    #[test]
    fn a_looked_up_kind_is_cached_in_the_one_constant_namespace_its_lookups_name() {
        let one = rule_with_lookups(
            "    - {id: a, apiVersion: v1, kind: ConfigMap, name: a, namespace: platform}\n    - {id: b, apiVersion: v1, kind: ConfigMap, name: b, namespace: platform}\n    - {id: s, apiVersion: v1, kind: Secret, name: s}\n",
        );
        assert_eq!(one.lookup_namespace("v1", "ConfigMap").as_deref(), Some("platform"));
        assert_eq!(one.lookup_namespace("v1", "Secret"), None, "the parents' namespaces");
        let two = rule_with_lookups(
            "    - {id: a, apiVersion: v1, kind: ConfigMap, name: a, namespace: platform}\n    - {id: b, apiVersion: v1, kind: ConfigMap, name: b, namespace: other}\n",
        );
        assert_eq!(two.lookup_namespace("v1", "ConfigMap"), None, "two namespaces");
        let templated = rule_with_lookups(
            "    - {id: a, apiVersion: v1, kind: ConfigMap, name: a, namespace: \"{{ metadata.namespace }}\"}\n",
        );
        assert_eq!(templated.lookup_namespace("v1", "ConfigMap"), None);
        assert!(
            one.lookups_read_the_parents_namespace("v1", "Secret"),
            "no namespace named"
        );
        assert!(!one.lookups_read_the_parents_namespace("v1", "ConfigMap"));
        assert!(!templated.lookups_read_the_parents_namespace("v1", "ConfigMap"));
        assert!(
            !one.lookups_read_the_parents_namespace("v1", "Pod"),
            "a kind it does not look up"
        );
    }

    #[test]
    fn a_looked_up_kind_is_cached_with_the_labels_its_lookups_match() {
        let rule = rule_with_lookups(
            "    - {id: a, apiVersion: v1, kind: Secret, name: a, matchLabels: {team: x, ruleop.io/lookup: \"true\"}}\n    - {id: c, apiVersion: v1, kind: ConfigMap, name: c}\n",
        );
        assert_eq!(
            rule.lookup_selector("v1", "Secret").as_deref(),
            Some("ruleop.io/lookup=true,team=x")
        );
        assert_eq!(rule.lookup_selector("v1", "ConfigMap"), None);
    }

    #[test]
    fn a_reload_concurrency_below_the_rules_concurrency_is_refused_at_the_field() {
        let rule = |spec: &str| {
            let text = format!(
                "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  watch: {{apiVersion: example.com/v1, kind: R}}\n{spec}"
            );
            let file = ("r.yaml".to_owned(), std::path::PathBuf::from("rules/r.yaml"), text);
            load::load_sources(&[], &[file])
        };
        let Err(refused) = rule("  maxConcurrentReconciles: 10\n  reloadConcurrency: 8\n") else {
            panic!("loaded")
        };
        let refused = refused.to_string();
        assert!(
            refused.contains("rules/r.yaml:7:22:")
                && refused.contains("reloadConcurrency (8) is less than maxConcurrentReconciles (10)"),
            "{refused}"
        );
        assert!(rule("  reloadConcurrency: 4\n").is_err(), "below the default of 5");
        let loaded = rule("  reloadConcurrency: 40\n").expect("loads");
        assert_eq!(
            loaded.rules[0].spec.reload_concurrency.as_ref().map(|c| c.value),
            Some(40)
        );
    }
}
