//! Loading: a rules directory and a templates directory -> a validated [`RuleSet`], or every
//! problem found, each with its file:line:col and what to do. The steps: read the files
//! (`base/files.rs`, `read.rs`), compile the templates, validate each rule document
//! (`validate/`), then the rules against each other. All-or-nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::RuleSet;
use super::read::{compile_diagnostic, is_yaml_file, rule_documents};
use super::validate::{RuleChecker, check_across_rules};
use crate::engine::base::files::read_tree;
use crate::engine::diagnostic::{Diagnostic, Diagnostics, SourceLocation};
use crate::engine::template::Renderer;

/// Loads and validates every rule and template. All-or-nothing: one problem anywhere means
/// no rule set, so a half-valid set never runs.
pub fn load(rules_dir: &Path, templates_dir: &Path) -> Result<RuleSet, Diagnostics> {
    let mut problems = Vec::new();
    let templates = read_tree(templates_dir, |_| true, &mut problems);
    let rule_files = read_tree(rules_dir, is_yaml_file, &mut problems);
    if rule_files.is_empty() && problems.is_empty() {
        problems.push(
            Diagnostic::new(
                SourceLocation::new(rules_dir, 0, 0),
                "no rule files (*.yaml, *.yml) found",
            )
            .with_hint("point --rules at the directory holding your Rule documents"),
        );
    }
    load_files(&templates, &rule_files, problems)
}

/// One file already read: `(name relative to its directory, path, text)`.
pub type SourceFile = (String, PathBuf, String);

/// The rule set of one rule file `rules/<name>.yaml` with no templates (tests of what a rule
/// alone means).
#[cfg(test)]
pub fn one_rule(name: &str, text: &str) -> RuleSet {
    let file = (
        format!("{name}.yaml"),
        PathBuf::from(format!("rules/{name}.yaml")),
        text.to_owned(),
    );
    load_sources(&[], &[file]).expect("a valid rule")
}

/// Loads and validates rules and templates already read into memory, a pure function of the
/// texts (what `load` does after reading the directories; the fuzz target calls it directly).
pub fn load_sources(templates: &[SourceFile], rule_files: &[SourceFile]) -> Result<RuleSet, Diagnostics> {
    load_files(templates, rule_files, Vec::new())
}

fn load_files(
    templates: &[SourceFile],
    rule_files: &[SourceFile],
    mut problems: Vec<Diagnostic>,
) -> Result<RuleSet, Diagnostics> {
    let mut renderer = Renderer::default();
    for (name, path, source) in templates {
        if let Err(e) = renderer.add_yaml_template(name.clone(), source.clone()) {
            problems.push(compile_diagnostic(path, source, &e));
        }
    }
    let template_sources: HashMap<&str, &str> = templates
        .iter()
        .map(|(name, _, source)| (name.as_str(), source.as_str()))
        .collect();

    let mut rules = Vec::new();
    for (file_name, path, text) in rule_files {
        for doc in rule_documents(path, text, &mut problems) {
            let mut checker = RuleChecker::new(path, file_name, text, &mut renderer, &template_sources, &mut problems);
            if let Some(rule) = checker.check(doc) {
                rules.push(rule);
            }
        }
    }
    check_across_rules(&rules, &mut problems);
    if problems.is_empty() {
        Ok(RuleSet {
            rules,
            renderer,
            schemas: Default::default(),
        })
    } else {
        Err(Diagnostics(problems))
    }
}
