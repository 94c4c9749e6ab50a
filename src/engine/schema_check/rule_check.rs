//! A rule set checked against the schemas: every parent field its templates and expressions
//! read, and every status field it writes, must exist in the parent's schema. The same check
//! runs offline (`ruleop check`, schemas from `--crds`) and at reload (schemas the API server
//! serves). Pure: the catalog and the sources are values.

use std::path::Path;

use super::reads::{self, Read, Typing};
use crate::engine::diagnostic::{Diagnostic, SourceLocation};
use crate::engine::rules::model::{FieldSource, Located, RuleSpec};
use crate::engine::rules::{Rule, RuleSet, is_built_in_api};
use crate::engine::schema::{Catalog, Schema, Step, did_you_mean};

/// What the check found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Reads and writes the schema does not have: the rule set is not accepted.
    pub errors: Vec<Diagnostic>,
    /// Kinds with no schema, which are therefore not checked.
    pub warnings: Vec<String>,
}

/// Checks every rule of `set` against `catalog`; `templates` is the templates directory (for
/// locations).
pub(crate) fn check(set: &RuleSet, catalog: &Catalog, templates: &Path) -> Report {
    let mut report = Report::default();
    for rule in &set.rules {
        let watch = &rule.spec.watch;
        if let Some(kind) = catalog.kind(&watch.api_version, &watch.kind)
            && kind.namespaced == rule.has_cluster_scoped_parents()
        {
            // `ruleop run` refuses the rule for the same reason, from discovery.
            let (scope, fix) = if kind.namespaced {
                ("namespaced", "remove `scope: Cluster` from spec.watch")
            } else {
                ("cluster-scoped", "write `scope: Cluster` under spec.watch")
            };
            report.errors.push(
                Diagnostic::new(
                    SourceLocation::new(&rule.file, 0, 0),
                    format!(
                        "rule {:?} watches {} {}, which is {scope} in {}, but its watch.scope says otherwise",
                        rule.name, watch.api_version, watch.kind, kind.origin
                    ),
                )
                .with_hint(fix),
            );
        }
        let Some(schema) = catalog.schema(&watch.api_version, &watch.kind) else {
            if !is_built_in_api(&watch.api_version) {
                report.warnings.push(format!(
                    "{}: warning: rule {:?}: no schema for {} {} ({}), so its reads and status are not checked",
                    rule.file.display(),
                    rule.name,
                    watch.api_version,
                    watch.kind,
                    where_looked(catalog)
                ));
            }
            continue;
        };
        let mut checker = RuleReads {
            rule,
            schema,
            templates,
            set,
            catalog,
            errors: &mut report.errors,
        };
        checker.check_reads();
        checker.check_status_writes();
    }
    report
}

/// Where schemas were looked for, for a warning.
pub(crate) fn where_looked(catalog: &Catalog) -> String {
    if catalog.sources.is_empty() {
        "no --crds given, and no deploy/crds or crds beside the rules".to_owned()
    } else {
        let shown: Vec<String> = catalog.sources.iter().map(|p| p.display().to_string()).collect();
        format!("not among the CRDs in {}", shown.join(", "))
    }
}

struct RuleReads<'a> {
    rule: &'a Rule,
    schema: &'a Schema,
    templates: &'a Path,
    set: &'a RuleSet,
    catalog: &'a Catalog,
    errors: &'a mut Vec<Diagnostic>,
}

/// Where one template or expression is and what it is.
enum Source<'a> {
    /// An expression in the rule file whose `object` is another kind's object (`readyWhen`,
    /// `waitFor`): `(apiVersion, kind)`.
    About(&'a Located<String>, String, (&'a str, &'a str)),
    /// An object template file (child or created object).
    File(&'a str),
    /// An expression in the rule file.
    Expression(&'a Located<String>, String),
    /// An inline text template in the rule file.
    Text(&'a Located<String>, String),
}

impl<'a> RuleReads<'a> {
    fn check_reads(&mut self) {
        let spec: &RuleSpec = &self.rule.spec;
        for (i, child) in spec.children.iter().enumerate() {
            let item = child
                .for_each
                .as_ref()
                .and_then(|f| Some((self.item_schema(&f.value)?, f.value.as_str())));
            let mut sources = vec![Source::File(&child.template.value)];
            let label = |field: &str| format!("spec.children[{i}].{field}");
            for (field, expression) in [("when", &child.when), ("forEach", &child.for_each), ("key", &child.key)] {
                if let Some(expression) = expression {
                    sources.push(Source::Expression(expression, label(field)));
                }
            }
            if let Some(ready_when) = &child.ready_when {
                let kind = (child.api_version.as_str(), child.kind.as_str());
                sources.push(Source::About(ready_when, label("readyWhen"), kind));
            }
            for source in sources {
                self.check_source(source, item);
            }
        }
        let mut sources = Vec::new();
        for lookup in &spec.lookups {
            for (field, text) in [("name", &lookup.name), ("namespace", &lookup.namespace)] {
                if let Some(text) = text {
                    sources.push(Source::Text(text, format!("lookups.{}.{field}", lookup.id.value)));
                }
            }
        }
        for action in &spec.actions {
            let label = |field: &str| format!("actions.{}.{field}", action.id.value);
            if let Some(when) = &action.when {
                sources.push(Source::Expression(when, label("when")));
            }
            if let Some(create) = &action.create {
                sources.push(Source::File(&create.template.value));
                if let Some(wait_for) = &action.wait_for {
                    let kind = (create.api_version.as_str(), create.kind.as_str());
                    sources.push(Source::About(wait_for, label("waitFor"), kind));
                }
            }
            if let Some(http) = &action.http {
                sources.push(Source::Text(&http.url, label("http.url")));
                if let Some(body) = &http.body {
                    sources.push(Source::Text(body, label("http.body")));
                }
            }
        }
        for (name, field) in &spec.status.fields {
            let label = format!("status.fields.{name}");
            match &field.value {
                FieldSource::Template(text) => {
                    let located = Located::new(text.clone(), field.referenced, field.defined);
                    self.check_owned(located, label, false);
                }
                FieldSource::Expression(expression) => {
                    let located = Located::new(expression.value.clone(), field.referenced, field.defined);
                    self.check_owned(located, label, true);
                }
                FieldSource::FromChild(_) => {}
            }
        }
        for condition in &spec.status.conditions {
            let label = |field: &str| format!("status.conditions[{}].{field}", condition.type_);
            sources.push(Source::Expression(&condition.when, label("when")));
            for (field, text) in [
                ("reason", &condition.reason),
                ("falseReason", &condition.false_reason),
                ("message", &condition.message),
            ] {
                if let Some(text) = text {
                    sources.push(Source::Text(text, label(field)));
                }
            }
        }
        if let Some(metadata) = &spec.parent_metadata {
            for (field, entries) in [("labels", &metadata.labels), ("annotations", &metadata.annotations)] {
                for (key, text) in entries {
                    sources.push(Source::Text(text, format!("parentMetadata.{field}.{key}")));
                }
            }
        }
        if let Some(finalize) = &spec.finalize {
            sources.push(Source::Expression(&finalize.until, "finalize.until".to_owned()));
        }
        for source in sources {
            self.check_source(source, None);
        }
    }

    fn check_owned(&mut self, located: Located<String>, label: String, expression: bool) {
        let source = if expression {
            Source::Expression(&located, label)
        } else {
            Source::Text(&located, label)
        };
        self.check_source(source, None);
    }

    fn check_source(&mut self, source: Source<'_>, item: Option<(&Schema, &str)>) {
        let found = self.unknown_reads(&source, item);
        self.errors.extend(found);
    }

    fn unknown_reads(&self, source: &Source<'_>, item: Option<(&Schema, &str)>) -> Vec<Diagnostic> {
        let (object, object_kind) = match source {
            Source::About(_, _, (api_version, kind)) => (self.catalog.schema(api_version, kind), *kind),
            _ => (Some(self.schema), self.rule.spec.watch.kind.as_str()),
        };
        let typing = Typing {
            parent: self.schema,
            item: item.map(|(schema, _)| schema),
            object,
        };
        let (found, text): (Vec<Read>, Option<String>) = match source {
            Source::File(name) => {
                let text = self.set.renderer.yaml_source(name);
                (
                    text.as_deref().map(|t| reads::of_template(name, t)).unwrap_or_default(),
                    text,
                )
            }
            Source::Expression(located, label) | Source::About(located, label, _) => {
                (reads::of_expression(label, &located.value), None)
            }
            Source::Text(located, label) => (reads::of_template(label, &located.value), None),
        };
        let mut diagnostics: Vec<Diagnostic> = Vec::new();
        for read in &found {
            let Some(unknown) = reads::check(read, typing) else {
                continue;
            };
            let (location, label) = match source {
                Source::File(name) => {
                    let line = read.line.unwrap_or(0);
                    let column = text.as_deref().map_or(0, |t| column_of_name(t, line, &unknown.name));
                    (
                        SourceLocation::new(&self.templates.join(name), line as u64, column),
                        String::new(),
                    )
                }
                Source::Expression(located, label)
                | Source::Text(located, label)
                | Source::About(located, label, _) => (
                    SourceLocation::from_span(&self.rule.file, &located.referenced),
                    format!("{label}: "),
                ),
            };
            let diagnostic = Diagnostic::new(
                location,
                format!(
                    "{label}{} reads `{}`, which the {} schema does not have at {}",
                    read.dotted(),
                    unknown.name,
                    if read.root == "object" {
                        object_kind
                    } else {
                        self.rule.spec.watch.kind.as_str()
                    },
                    match item {
                        Some((_, for_each)) if read.root == "item" =>
                            format!("{} (an item of forEach `{for_each}`)", unknown.at),
                        _ => unknown.at,
                    }
                ),
            )
            .with_hint(unknown.hint);
            if !diagnostics.contains(&diagnostic) {
                diagnostics.push(diagnostic);
            }
        }
        diagnostics
    }

    /// The item schema of a `forEach` that iterates one typed list of the parent.
    fn item_schema(&self, for_each: &str) -> Option<&'a Schema> {
        let read = reads::sole_path(for_each)?;
        let parent: &'a Schema = self.schema;
        let mut schema = match read.root.as_str() {
            "spec" | "status" => match parent.field(&read.root) {
                Step::Field(s) => s,
                _ => return None,
            },
            _ => return None,
        };
        for segment in &read.path {
            let step = match segment {
                reads::Segment::Field(name) => schema.field(name),
                reads::Segment::Item => schema.item(),
            };
            match step {
                Step::Field(next) => schema = next,
                _ => return None,
            }
        }
        schema
            .items
            .as_deref()
            .filter(|_| schema.type_.as_deref() == Some("array"))
    }

    /// Status fields the rule writes must be declared by the parent's status schema.
    fn check_status_writes(&mut self) {
        if !self.rule.writes_status() {
            return;
        }
        let spec = &self.rule.spec;
        let kind = &spec.watch.kind;
        let status = match self.schema.field("status") {
            Step::Field(status) => status,
            Step::Open => return,
            Step::Unknown(_) => {
                let at = SourceLocation::new(&self.rule.file, 0, 0);
                self.errors.push(
                    Diagnostic::new(
                        at,
                        format!(
                            "rule {:?} writes the status of {kind}, whose schema declares no status (the API server would drop it)",
                            self.rule.name
                        ),
                    )
                    .with_hint("add a status object to the CRD's schema (and the status subresource), or set status.write: false"),
                );
                return;
            }
        };
        let mut written: Vec<(String, SourceLocation)> = spec
            .status
            .fields
            .iter()
            .map(|(name, field)| {
                (
                    name.clone(),
                    SourceLocation::from_span(&self.rule.file, &field.referenced),
                )
            })
            .collect();
        let rule_at = SourceLocation::new(&self.rule.file, 0, 0);
        written.push(("conditions".to_owned(), rule_at.clone()));
        written.push(("observedGeneration".to_owned(), rule_at.clone()));
        if let Some(rollout) = &spec.rollout {
            // At spec.rollout: it is what makes the rule write the field.
            let at = SourceLocation::from_span(&self.rule.file, &rollout.referenced);
            written.push((crate::engine::plan::REVISION_FIELD.to_owned(), at));
        }
        for action in &spec.actions {
            let at = SourceLocation::from_span(&self.rule.file, &action.id.referenced);
            written.push(("actions".to_owned(), at.clone()));
            if let Some(field) = action.record.as_ref().and_then(|r| r.status_field.as_ref()) {
                written.push((field.clone(), at));
            }
        }
        let mut reported = Vec::new();
        for (name, at) in written {
            if let Step::Unknown(known) = status.field(&name)
                && !reported.contains(&name)
            {
                self.errors.push(
                    Diagnostic::new(
                        at,
                        format!(
                            "the rule writes status.{name}, which the {kind} schema does not declare, so the API server would drop it"
                        ),
                    )
                    .with_hint(format!(
                        "declare it under the CRD's status, or remove it ({})",
                        did_you_mean(&name, &known)
                    )),
                );
                reported.push(name);
            }
        }
    }
}

/// The 1-based column of `name` on `line` of `text`, as a whole word read as an attribute
/// (after `.`, `[` or a quote) if it is there, else anywhere (0 when not found).
fn column_of_name(text: &str, line: usize, name: &str) -> u64 {
    let Some(source_line) = text.lines().nth(line.saturating_sub(1)) else {
        return 0;
    };
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut words = Vec::new();
    let mut from = 0;
    while let Some(pos) = source_line[from..].find(name) {
        let at = from + pos;
        let before = source_line[..at].chars().next_back();
        let after = source_line[at + name.len()..].chars().next();
        if !before.is_some_and(is_word) && !after.is_some_and(is_word) {
            words.push((at, before));
        }
        from = at + name.len();
    }
    let read = words
        .iter()
        .find(|(_, before)| matches!(before, Some('.' | '[' | '"' | '\'')))
        .or(words.first());
    read.map_or(0, |(at, _)| source_line[..*at].chars().count() as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_found_as_a_whole_word() {
        assert_eq!(column_of_name("  x: {{ spec.sizes }} {{ spec.size }}", 1, "size"), 31);
        assert_eq!(column_of_name("a\nb: {{ spec.size }}", 2, "size"), 12);
        assert_eq!(column_of_name("a", 3, "size"), 0);
        assert_eq!(column_of_name("  colour: {{ spec.colour }}", 1, "colour"), 19);
        assert_eq!(column_of_name("  colour: {{ x }}", 1, "colour"), 3);
    }
}
