//! Reading: the text of a rule file -> its typed rule documents, every value with its location
//! (`Located`), or the located diagnostics of text that is not YAML or not a rule; and the
//! located diagnostic of a template that does not compile. Nothing is validated here beyond
//! what the types say (`rules/validate/` does that).

use std::path::Path;

use super::model::RuleDocument;
use crate::engine::diagnostic::{Diagnostic, SourceLocation, column_of};
use crate::engine::template::CompileError;
use crate::engine::yaml;

/// Whether a file in the rules directory is a rule file (`*.yaml`, `*.yml`).
pub(super) fn is_yaml_file(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// The typed rule documents of one rule file; none, and a located problem, when it is not YAML
/// or not made of rules.
pub(super) fn rule_documents(path: &Path, text: &str, problems: &mut Vec<Diagnostic>) -> Vec<RuleDocument> {
    match yaml::documents(text) {
        Err(e) => {
            problems.push(yaml_diagnostic(path, &e));
            Vec::new()
        }
        Ok(docs) => parse_rule_documents(path, text, docs.len(), problems),
    }
}

fn yaml_diagnostic(path: &Path, e: &yaml::YamlError) -> Diagnostic {
    Diagnostic::new(
        SourceLocation::new(path, e.line.unwrap_or(0), e.column.unwrap_or(0)),
        e.message.clone(),
    )
}

/// Where a template's syntax error is, in the template's file.
pub(super) fn compile_diagnostic(path: &Path, source: &str, e: &CompileError) -> Diagnostic {
    let column = e.range.as_ref().map_or(0, |r| column_of(source, r.start));
    Diagnostic::new(
        SourceLocation::new(path, e.line.unwrap_or(0) as u64, column),
        format!("template syntax error: {}", e.message),
    )
}

/// Parses the typed rule documents of a file (already known to be valid YAML).
fn parse_rule_documents(path: &Path, text: &str, count: usize, problems: &mut Vec<Diagnostic>) -> Vec<RuleDocument> {
    let parsed: Result<Vec<RuleDocument>, _> =
        serde_saphyr::from_multiple_with_options(text, yaml::kubernetes_options());
    match parsed {
        Ok(docs) => docs,
        Err(e) => {
            let mut error = yaml::YamlError::from_saphyr(&e);
            if let (Some(line), Some(column)) = (error.line, error.column)
                && let Some(field) = crate::engine::field_at::field_at(text, line, column)
            {
                let what = crate::engine::field_at::explain_scalar_error(&error.message).map(str::to_owned);
                error.message = format!("{field}: {}", what.unwrap_or(error.message));
            }
            let mut diagnostic = yaml_diagnostic(path, &error);
            if diagnostic.message.contains("unknown field") {
                diagnostic =
                    diagnostic.with_hint("see the rule reference in docs/reference/rule.md or schema/rule.schema.json");
            }
            problems.push(diagnostic);
            debug_assert!(count > 0);
            Vec::new()
        }
    }
}
