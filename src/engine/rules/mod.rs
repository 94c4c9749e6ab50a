//! Rules: the file model, loading and validating a directory into an immutable [`RuleSet`].

pub mod lint;
pub mod load;
pub mod model;

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
    /// A digest of the rule document and every template it uses: equal digests mean the
    /// rule renders the same, so a reload need not re-reconcile its parents.
    pub digest: String,
    /// `(apiVersion, kind)` of the rule's child and action kinds that are cluster-scoped: built-in
    /// kinds when loaded, replaced by discovery's answer in `ruleop run` ([`Rule::set_scopes`]).
    pub cluster_scoped: std::collections::BTreeSet<(String, String)>,
}

impl Rule {
    /// The name under which an inline string (status field, reason, URL) of this rule is compiled.
    pub fn inline_template(&self, field_path: &str) -> String {
        inline_template_name(&self.name, field_path)
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
        kinds.sort();
        kinds.dedup();
        kinds
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
        !self.spec.allowed_namespaces.is_empty()
            || self
                .spec
                .children
                .iter()
                .any(|c| self.is_cluster_scoped(&c.api_version, &c.kind))
    }

    /// Whether parents may need the cleanup finalizer: label-owned children or `on: delete` actions.
    pub fn needs_finalizer(&self) -> bool {
        self.may_own_by_label() || self.spec.actions.iter().any(|a| a.on == model::ActionTrigger::Delete)
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
}

impl RuleSet {
    /// The rule with that name.
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }
}
