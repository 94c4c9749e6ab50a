//! What the rule watches and where its children may go: `watch` (apiVersion, kind, scope,
//! namespaces), `allowedNamespaces` and `allowedNamespaceSelector`.

use super::RuleChecker;
use crate::engine::base::builtin_kinds;
use crate::engine::base::k8s_names::is_dns_label;
use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::model::{ParentScope, RuleSpec, Watch};

impl RuleChecker<'_> {
    /// `watch.apiVersion` is group/version, `watch.kind` is set, and `watch.scope` matches what
    /// the built-in kinds are (custom kinds are checked against discovery by `ruleop run`);
    /// `watch.namespaces` means nothing for cluster-scoped parents.
    pub(super) fn check_watch(&mut self, watch: &Watch, name_at: &SourceLocation) {
        if !watch.api_version.contains('/') && watch.api_version != "v1" {
            self.report(
                name_at.clone(),
                format!(
                    "spec.watch.apiVersion {:?} must be group/version, e.g. myorg.io/v1",
                    watch.api_version
                ),
                None,
            );
        }
        if watch.kind.is_empty() {
            self.report(name_at.clone(), "spec.watch.kind must not be empty", None);
        }
        let (api_version, kind) = (&watch.api_version, &watch.kind);
        let builtin_cluster = builtin_kinds::is_cluster_scoped(api_version, kind);
        let builtin = builtin_kinds::plural(api_version, kind).is_some() || builtin_cluster;
        match watch.scope {
            ParentScope::Namespaced if builtin_cluster => self.report(
                name_at.clone(),
                format!("spec.watch: {api_version} {kind} is cluster-scoped, and watch.scope is Namespaced"),
                Some("write `scope: Cluster` under spec.watch: children then name their namespace, held to allowedNamespaces (docs/concepts/deletion-and-scope.md)"),
            ),
            ParentScope::Cluster if builtin && !builtin_cluster => self.report(
                name_at.clone(),
                format!("spec.watch: {api_version} {kind} is namespaced, and watch.scope is Cluster"),
                Some("remove `scope: Cluster`"),
            ),
            ParentScope::Cluster if !watch.namespaces.is_empty() => self.report(
                name_at.clone(),
                "spec.watch.namespaces: a cluster-scoped parent is in no namespace".to_owned(),
                Some("remove watch.namespaces, or watch a namespaced kind"),
            ),
            _ => {}
        }
    }

    pub(super) fn check_allowed_namespaces(&mut self, spec: &RuleSpec) {
        for namespace in &spec.allowed_namespaces {
            if !is_dns_label(&namespace.value) {
                self.report(
                    self.at(namespace),
                    format!(
                        "spec.allowedNamespaces: {:?} is not a namespace name (a DNS label)",
                        namespace.value
                    ),
                    None,
                );
            }
        }
    }

    pub(super) fn check_allowed_namespace_selector(&mut self, spec: &RuleSpec, at: &SourceLocation) {
        let selector = &spec.allowed_namespace_selector;
        if let Some(key) = selector
            .keys()
            .find(|key| key.is_empty() || key.contains([',', '=', '!']))
        {
            self.report(
                at.clone(),
                format!("spec.allowedNamespaceSelector: {key:?} is not a label key"),
                None,
            );
        }
        let namespace_lookup = spec
            .lookups
            .iter()
            .find(|l| l.api_version == "v1" && l.kind == "Namespace" && !selector.is_empty());
        if let Some(lookup) = namespace_lookup.filter(|l| &l.match_labels != selector) {
            self.report(
                self.at(&lookup.id),
                format!(
                    "lookup {:?}: matchLabels {:?} differ from spec.allowedNamespaceSelector {selector:?}; \
                     both read the rule's one cache of Namespaces, so they must be the same",
                    lookup.id.value, lookup.match_labels
                ),
                None,
            );
        }
    }
}
