//! Validating one rule document: every problem located at the value it is about, with what to
//! do, and every inline string compiled. [`RuleChecker::check`] is the order the checks run in
//! (the order their diagnostics are printed); each concern is a file of its own: the document
//! and its timing (`rule.rs`), the watched kind and the namespaces (`scope.rs`), children
//! (`children.rs`), lookups (`lookups.rs`), actions (`actions.rs`), status and the rollout
//! (`status.rs`), the parent's metadata and finalize phase (`parent.rs`).

mod actions;
mod children;
mod lookups;
mod parent;
mod rule;
mod scope;
mod status;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::model::{Located, RuleDocument, RuleSpec};
use super::{Rule, inline_template_name};
use crate::engine::base::builtin_kinds;
use crate::engine::base::digest::hex;
use crate::engine::base::k8s_names::is_dns_label;
use crate::engine::diagnostic::{Diagnostic, SourceLocation};
use crate::engine::template::Renderer;

/// Validates one rule document and compiles its inline strings.
pub(super) struct RuleChecker<'a> {
    file: &'a Path,
    /// The file's name relative to the rules directory, and its text (kept in revisions).
    file_name: &'a str,
    file_text: &'a str,
    renderer: &'a mut Renderer,
    templates: &'a HashMap<&'a str, &'a str>,
    problems: &'a mut Vec<Diagnostic>,
}

impl<'a> RuleChecker<'a> {
    /// A checker of the documents of one rule file, reporting into `problems`.
    pub(super) fn new(
        file: &'a Path,
        file_name: &'a str,
        file_text: &'a str,
        renderer: &'a mut Renderer,
        templates: &'a HashMap<&'a str, &'a str>,
        problems: &'a mut Vec<Diagnostic>,
    ) -> Self {
        RuleChecker {
            file,
            file_name,
            file_text,
            renderer,
            templates,
            problems,
        }
    }

    fn at<T>(&self, located: &Located<T>) -> SourceLocation {
        SourceLocation::from_span(self.file, &located.referenced)
    }

    fn report(&mut self, location: SourceLocation, message: impl Into<String>, hint: Option<&str>) {
        let mut diagnostic = Diagnostic::new(location, message);
        if let Some(hint) = hint {
            diagnostic = diagnostic.with_hint(hint);
        }
        self.problems.push(diagnostic);
    }

    /// Validates one rule document: the rule, or `None` when any problem was reported.
    pub(super) fn check(&mut self, doc: RuleDocument) -> Option<Rule> {
        let before = self.problems.len();
        let (name, name_at) = self.check_document(&doc);
        let spec = &doc.spec;
        self.check_watch(&spec.watch, &name_at);
        let resync = self.check_timing(spec);
        self.check_allowed_namespaces(spec);
        self.check_allowed_namespace_selector(spec, &name_at);
        let child_ids = self.check_children(&name, spec);
        self.check_lookups(&name, &spec.lookups);
        self.check_actions(&name, spec);
        let used_templates = used_templates(spec);
        self.check_status_fields(&name, spec, &child_ids);
        self.check_status_written(spec);
        let rollout = self.check_rollout(spec);
        self.check_parent_metadata(&name, spec);
        self.check_finalize(spec);
        self.check_conditions(&name, spec);
        if self.problems.len() > before {
            return None;
        }
        let mut files = BTreeMap::from([(format!("rules/{}", self.file_name), self.file_text.to_owned())]);
        for template in &used_templates {
            let text = self.templates.get(template).copied().unwrap_or_default();
            files.insert(format!("templates/{template}"), text.to_owned());
        }
        Some(Rule {
            digest: self.digest(&doc, &used_templates),
            files,
            name,
            file: self.file.to_path_buf(),
            resync,
            rollout,
            cluster_scoped: builtin_cluster_scoped(&doc.spec),
            revision: None,
            spec: doc.spec,
        })
    }

    fn check_id(&mut self, id: &Located<String>, what: &str, seen: &mut BTreeMap<String, ()>) {
        if !is_dns_label(&id.value) {
            self.report(
                self.at(id),
                format!("{what} id {:?} is not a DNS label", id.value),
                Some("ids become label values: lowercase letters, digits and '-'"),
            );
        }
        if seen.insert(id.value.clone(), ()).is_some() {
            self.report(
                self.at(id),
                format!("duplicate {what} id {:?}", id.value),
                Some("ids must be unique within a rule"),
            );
        }
    }

    fn check_template_exists(&mut self, template: &Located<String>) {
        if !self.templates.contains_key(template.value.as_str()) {
            let mut names: Vec<&str> = self.templates.keys().copied().collect();
            names.sort_unstable();
            self.report(
                self.at(template),
                format!("template {:?} not found in the templates directory", template.value),
                Some(&format!(
                    "available templates: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                )),
            );
        }
    }

    fn check_expression(&mut self, expression: &Located<String>, label: &str) {
        if let Err(e) = self.renderer.check_expression(label, &expression.value) {
            self.report(
                self.at(expression),
                format!("{label}: invalid expression {:?}: {}", expression.value, e.message),
                None,
            );
        }
    }

    fn compile_inline(&mut self, rule: &str, field_path: &str, text: &str, at: SourceLocation) {
        if let Err(e) = self
            .renderer
            .add_text_template(inline_template_name(rule, field_path), text.to_owned())
        {
            self.report(at, format!("{field_path}: template syntax error: {}", e.message), None);
        }
    }

    /// A digest of the rule document and every template it uses.
    fn digest(&self, doc: &RuleDocument, templates: &[&str]) -> String {
        let mut hasher = Sha256::new();
        hasher.update(format!("{:?}", doc.spec).as_bytes());
        for name in templates {
            hasher.update(name.as_bytes());
            hasher.update(self.templates.get(name).copied().unwrap_or_default().as_bytes());
        }
        hex(&hasher.finalize()[..8])
    }
}

/// The templates a rule renders: its children's and its created actions'.
fn used_templates(spec: &RuleSpec) -> Vec<&str> {
    let mut used_templates: Vec<&str> = spec.children.iter().map(|c| c.template.value.as_str()).collect();
    used_templates.extend(
        spec.actions
            .iter()
            .filter_map(|a| a.create.as_ref())
            .map(|c| c.template.value.as_str()),
    );
    used_templates
}

/// A parser's multi-line report (with a source frame) as one line.
fn one_line(report: &str) -> String {
    report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The ids seen so far, for a hint.
fn known(ids: &BTreeMap<String, ()>) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// The kinds of `spec` known offline to be cluster-scoped (built-in kinds); `ruleop run`
/// replaces this with what discovery says.
fn builtin_cluster_scoped(spec: &RuleSpec) -> std::collections::BTreeSet<(String, String)> {
    let children = spec.children.iter().map(|c| (&c.api_version, &c.kind));
    let created = spec
        .actions
        .iter()
        .filter_map(|a| a.create.as_ref())
        .map(|c| (&c.api_version, &c.kind));
    children
        .chain(created)
        .filter(|(api_version, kind)| builtin_kinds::is_cluster_scoped(api_version, kind))
        .map(|(api_version, kind)| (api_version.clone(), kind.clone()))
        .collect()
}

/// Problems between rules: two rules of one name, or two rules watching one kind.
pub(super) fn check_across_rules(rules: &[Rule], problems: &mut Vec<Diagnostic>) {
    let mut names: HashMap<&str, &Path> = HashMap::new();
    let mut kinds: HashMap<(String, String), &str> = HashMap::new();
    for rule in rules {
        if let Some(first) = names.insert(&rule.name, &rule.file) {
            problems.push(Diagnostic::new(
                SourceLocation::new(&rule.file, 0, 0),
                format!("rule name {:?} is also used in {}", rule.name, first.display()),
            ));
        }
        let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
        if let Some(other) = kinds.insert(watched.clone(), &rule.name) {
            problems.push(
                Diagnostic::new(
                    SourceLocation::new(&rule.file, 0, 0),
                    format!(
                        "rules {other:?} and {:?} both watch {} {}",
                        rule.name, watched.0, watched.1
                    ),
                )
                .with_hint("one rule per watched kind: merge them into one rule"),
            );
        }
    }
}
