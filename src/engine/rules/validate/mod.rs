//! Loading: a rules directory and a templates directory -> a validated [`RuleSet`], or every
//! problem found, each with its file:line:col and what to do.
//!
//! Directories are walked recursively, following symlinks and skipping dot entries, so a
//! mounted ConfigMap (files linked through `..data`) reads like a plain folder.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::model::{
    ActionSpec, ActionTrigger, ChildSpec, FieldSource, HeaderValue, Located, LookupSpec, ParentScope, RULE_API_VERSION,
    RULE_KIND, RuleDocument, RuleSpec, Scaling, SecretKeyRef, Watch,
};
use super::{Rule, RuleSet, inline_template_name};
use crate::engine::diagnostic::{Diagnostic, Diagnostics, SourceLocation, column_of};
use crate::engine::plan::names;
use crate::engine::rollout::policy as rollout;
use crate::engine::template::{CompileError, Renderer};
use crate::engine::yaml;
use crate::engine::{duration, egress};

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
        match yaml::documents(text) {
            Err(e) => problems.push(yaml_diagnostic(path, &e)),
            Ok(docs) => {
                for doc in parse_rule_documents(path, text, docs.len(), &mut problems) {
                    let mut checker = RuleChecker {
                        file: path,
                        file_name,
                        file_text: text,
                        renderer: &mut renderer,
                        templates: &template_sources,
                        problems: &mut problems,
                    };
                    if let Some(rule) = checker.check(doc) {
                        rules.push(rule);
                    }
                }
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

fn is_yaml_file(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// Reads every file under `dir` (following links, skipping dot entries), sorted by name, as
/// `(name relative to dir with '/' separators, path, text)`. A link that loops back to a directory
/// above it is a located error, not a walk without end.
pub fn read_tree(
    dir: &Path,
    wanted: impl Fn(&Path) -> bool,
    problems: &mut Vec<Diagnostic>,
) -> Vec<(String, PathBuf, String)> {
    let mut files = Vec::new();
    // Dot entries are skipped: a mounted ConfigMap keeps its files twice, under `..data`.
    let hidden = |entry: &walkdir::DirEntry| entry.depth() > 0 && entry.file_name().to_string_lossy().starts_with('.');
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_entry(|entry| !hidden(entry))
    {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                problems.push(walk_diagnostic(dir, &e));
                continue;
            }
        };
        let path = entry.path();
        if entry.file_type().is_dir() || !wanted(path) {
            continue;
        }
        match fs::read_to_string(path) {
            Ok(text) => {
                let name = path
                    .strip_prefix(dir)
                    .unwrap_or(path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                files.push((name, path.to_owned(), text));
            }
            Err(e) => problems.push(Diagnostic::new(
                SourceLocation::new(path, 0, 0),
                format!("cannot read file: {e}"),
            )),
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Where a walk failed and why: a link loop names the link and the directory it returns to.
fn walk_diagnostic(dir: &Path, e: &walkdir::Error) -> Diagnostic {
    let at = e.path().unwrap_or(dir);
    let message = match e.loop_ancestor() {
        Some(ancestor) => format!(
            "a symbolic link loop: this leads back to {}, a directory above it",
            ancestor.display()
        ),
        None => match e.io_error() {
            Some(io) if e.depth() == 0 => format!("cannot read directory: {io}"),
            Some(io) => format!("cannot read: {io}"),
            None => format!("cannot read: {e}"),
        },
    };
    Diagnostic::new(SourceLocation::new(at, 0, 0), message)
}

fn yaml_diagnostic(path: &Path, e: &yaml::YamlError) -> Diagnostic {
    Diagnostic::new(
        SourceLocation::new(path, e.line.unwrap_or(0), e.column.unwrap_or(0)),
        e.message.clone(),
    )
}

fn compile_diagnostic(path: &Path, source: &str, e: &CompileError) -> Diagnostic {
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

/// Validates one rule document and compiles its inline strings.
struct RuleChecker<'a> {
    file: &'a Path,
    /// The file's name relative to the rules directory, and its text (kept in revisions).
    file_name: &'a str,
    file_text: &'a str,
    renderer: &'a mut Renderer,
    templates: &'a HashMap<&'a str, &'a str>,
    problems: &'a mut Vec<Diagnostic>,
}

impl RuleChecker<'_> {
    fn at<T>(&self, located: &Located<T>) -> SourceLocation {
        SourceLocation::from_span(self.file, &located.referenced)
    }

    /// `watch.scope` must match what the built-in kinds are (custom kinds are checked against
    /// discovery by `ruleop run`), and `watch.namespaces` means nothing for cluster-scoped parents.
    fn check_watch_scope(&mut self, watch: &Watch, name_at: &SourceLocation) {
        let (api_version, kind) = (&watch.api_version, &watch.kind);
        let builtin_cluster = crate::engine::plan::builtin::is_cluster_scoped(api_version, kind);
        let builtin = crate::engine::plan::builtin::plural(api_version, kind).is_some() || builtin_cluster;
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

    fn report(&mut self, location: SourceLocation, message: impl Into<String>, hint: Option<&str>) {
        let mut diagnostic = Diagnostic::new(location, message);
        if let Some(hint) = hint {
            diagnostic = diagnostic.with_hint(hint);
        }
        self.problems.push(diagnostic);
    }

    fn check(&mut self, doc: RuleDocument) -> Option<Rule> {
        let before = self.problems.len();
        if doc.api_version.value != RULE_API_VERSION {
            self.report(
                self.at(&doc.api_version),
                format!(
                    "apiVersion must be {RULE_API_VERSION}, found {:?}",
                    doc.api_version.value
                ),
                None,
            );
        }
        if doc.kind.value != RULE_KIND {
            self.report(
                self.at(&doc.kind),
                format!("kind must be {RULE_KIND}, found {:?}", doc.kind.value),
                None,
            );
        }
        let name = doc.metadata.name.value.clone();
        let name_at = self.at(&doc.metadata.name);
        if !is_dns_label(&name) {
            self.report(
                name_at.clone(),
                format!("metadata.name {name:?} is not a DNS label"),
                Some("use lowercase letters, digits and '-', at most 63 characters"),
            );
        }
        let spec = &doc.spec;
        if !spec.watch.api_version.contains('/') && spec.watch.api_version != "v1" {
            self.report(
                name_at.clone(),
                format!(
                    "spec.watch.apiVersion {:?} must be group/version, e.g. myorg.io/v1",
                    spec.watch.api_version
                ),
                None,
            );
        }
        if spec.watch.kind.is_empty() {
            self.report(name_at.clone(), "spec.watch.kind must not be empty", None);
        }
        self.check_watch_scope(&spec.watch, &name_at);
        let resync =
            spec.resync
                .as_ref()
                .and_then(|r| match duration::parse_at_least(&r.value, duration::MIN_RESYNC) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        self.report(
                            self.at(r),
                            format!("spec.resync: {e}"),
                            Some("write e.g. 30s, 10m or 1h (at least 1s)"),
                        );
                        None
                    }
                });
        if let Some(zero) = spec.max_concurrent_reconciles.as_ref().filter(|c| c.value == 0) {
            self.report(self.at(zero), "spec.maxConcurrentReconciles must be at least 1", None);
        }
        let concurrency = spec.concurrency();
        if let Some(reload) = spec
            .reload_concurrency
            .as_ref()
            .filter(|reload| reload.value < concurrency)
        {
            self.report(
                self.at(reload),
                format!(
                    "spec.reloadConcurrency ({}) is less than maxConcurrentReconciles ({concurrency})",
                    reload.value
                ),
                Some("a reload runs at least as many reconciles at once as any other time: raise it or leave it out"),
            );
        }
        self.check_allowed_namespaces(spec);
        self.check_allowed_namespace_selector(spec, &name_at);
        let mut child_ids = BTreeMap::new();
        for (i, child) in spec.children.iter().enumerate() {
            self.check_id(&child.id, "child", &mut child_ids);
            self.check_template_exists(&child.template);
            if let Some(when) = &child.when {
                self.check_expression(when, &format!("spec.children[{i}].when"));
            }
            self.check_collection(&name, i, child);
        }
        for problem in crate::engine::plan::order::graph_problems(&spec.children) {
            self.report(self.at(problem.at), problem.message, Some(&problem.hint));
        }
        self.check_lookups(&name, &spec.lookups);
        let mut action_ids = BTreeMap::new();
        for action in &spec.actions {
            self.check_id(&action.id, "action", &mut action_ids);
            self.check_action(&name, action);
        }
        let mut used_templates: Vec<&str> = spec.children.iter().map(|c| c.template.value.as_str()).collect();
        used_templates.extend(
            spec.actions
                .iter()
                .filter_map(|a| a.create.as_ref())
                .map(|c| c.template.value.as_str()),
        );
        for (field, source) in &spec.status.fields {
            let path = format!("status.fields.{field}");
            match &source.value {
                FieldSource::Template(text) => self.compile_inline(&name, &path, text, self.at(source)),
                FieldSource::Expression(expression) => {
                    let located = Located::new(expression.value.clone(), source.referenced, source.defined);
                    self.check_expression(&located, &path);
                }
                FieldSource::FromChild(from) => {
                    if !child_ids.contains_key(from.child.as_str()) {
                        self.report(
                            self.at(source),
                            format!("{path}: no child with id {:?}", from.child),
                            Some(&format!("known children: {}", known(&child_ids))),
                        );
                    }
                    if let Err(e) = jsonpath_rust::parser::parse_json_path(&from.json_path) {
                        self.report(
                            self.at(source),
                            format!(
                                "{path}: invalid JSONPath {:?}: {}",
                                from.json_path,
                                one_line(&e.to_string())
                            ),
                            Some("write an RFC 9535 path such as $.status.readyReplicas"),
                        );
                    }
                }
            }
        }
        self.check_status_written(spec);
        let rollout = spec.rollout.as_ref().and_then(|block| {
            let writes_status = spec
                .status
                .write
                .unwrap_or_else(|| !super::is_built_in_api(&spec.watch.api_version));
            match rollout::validate(block, &spec.status, writes_status) {
                Ok(policy) => Some(policy),
                Err(problems) => {
                    for problem in problems {
                        let at = SourceLocation::from_span(self.file, &problem.at);
                        self.report(at, problem.message, Some(problem.hint));
                    }
                    None
                }
            }
        });
        if let Some(metadata) = &spec.parent_metadata {
            for (field, entries) in [("labels", &metadata.labels), ("annotations", &metadata.annotations)] {
                for (key, template) in entries {
                    if key.is_empty() || key.contains([',', '=', '!', ' ']) || key.starts_with("ruleop.io/") {
                        self.report(
                            self.at(template),
                            format!("parentMetadata.{field}: {key:?} is not a key ruleop may write"),
                            Some("a label or annotation key such as example.com/decorated (ruleop.io/ keys are the engine's)"),
                        );
                    }
                    self.compile_inline(
                        &name,
                        &format!("parentMetadata.{field}.{key}"),
                        &template.value,
                        self.at(template),
                    );
                }
            }
        }
        if let Some(finalize) = &spec.finalize {
            self.check_expression(&finalize.until, "finalize.until");
            if let Some(timeout) = &finalize.timeout
                && let Err(e) = duration::parse(&timeout.value)
            {
                self.report(
                    self.at(timeout),
                    format!("finalize.timeout: {e}"),
                    Some("write e.g. 5m or 1h"),
                );
            }
        }
        let mut condition_types = BTreeMap::new();
        for (i, condition) in spec.status.conditions.iter().enumerate() {
            let at = self.at(&condition.when);
            if condition_types.insert(condition.type_.clone(), ()).is_some() {
                self.report(
                    at.clone(),
                    format!("condition type {:?} is defined twice", condition.type_),
                    None,
                );
            }
            self.check_expression(&condition.when, &format!("status.conditions[{i}].when"));
            for (what, text) in [
                ("reason", &condition.reason),
                ("falseReason", &condition.false_reason),
                ("message", &condition.message),
            ] {
                if let Some(text) = text {
                    self.compile_inline(
                        &name,
                        &format!("status.conditions.{}.{what}", condition.type_),
                        &text.value,
                        self.at(text),
                    );
                }
            }
        }
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

    /// A rule that writes no status (`status.write: false`, the default for a built-in kind) can
    /// have nothing that lives there: status fields, conditions, or actions (whose runs are
    /// recorded in `status.actions`).
    fn check_status_written(&mut self, spec: &RuleSpec) {
        let watch = &spec.watch;
        if spec
            .status
            .write
            .unwrap_or_else(|| !super::is_built_in_api(&watch.api_version))
        {
            return;
        }
        let why = if spec.status.write == Some(false) {
            "this rule sets status.write: false".to_owned()
        } else {
            format!(
                "{} {} is a built-in kind whose status belongs to its own controller, so the rule writes none",
                watch.api_version, watch.kind
            )
        };
        let hint =
            "decorate it with children only; set status.write: true only for a kind whose status no controller owns";
        let mut located: Vec<(SourceLocation, String)> = spec
            .status
            .fields
            .iter()
            .map(|(field, source)| (self.at(source), format!("status.fields.{field}")))
            .collect();
        located.extend(
            spec.status
                .conditions
                .iter()
                .map(|c| (self.at(&c.when), format!("status.conditions[{}]", c.type_))),
        );
        located.extend(spec.actions.iter().map(|a| {
            (
                self.at(&a.id),
                format!("actions.{} (runs are recorded in status.actions)", a.id.value),
            )
        }));
        for (at, what) in located {
            self.report(at, format!("{what}: {why}"), Some(hint));
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

    /// `forEach`, `key`, `maxItems` and `readyWhen` of one child. Whether a `forEach` needs a
    /// `key` depends on its items (strings do not), which only rendering knows.
    fn check_collection(&mut self, rule: &str, i: usize, child: &ChildSpec) {
        let id = &child.id.value;
        if let Some(for_each) = &child.for_each {
            self.check_expression(for_each, &format!("spec.children[{i}].forEach"));
        } else {
            if let Some(key) = &child.key {
                self.report(
                    self.at(key),
                    format!("child {id:?}: key is set but forEach is not"),
                    Some("key names the items of a forEach; remove it or add forEach"),
                );
            }
            if child.max_items.is_some() {
                self.report(
                    self.at(&child.id),
                    format!("child {id:?}: maxItems is set but forEach is not"),
                    None,
                );
            }
            if child.scaling == Scaling::Ordered {
                self.report(
                    self.at(&child.id),
                    format!("child {id:?}: scaling Ordered orders the items of a forEach, and forEach is not set"),
                    Some("remove scaling, or give the child a forEach"),
                );
            }
            if child.update_strategy.is_rolling() {
                self.report(
                    self.at(&child.id),
                    format!(
                        "child {id:?}: updateStrategy {:?} rolls the items of a forEach, and forEach is not set",
                        child.update_strategy
                    ),
                    Some("use Recreate or InPlace for a single object"),
                );
            }
        }
        if let Some(key) = &child.key {
            self.compile_inline(rule, &format!("children.{id}.key"), &key.value, self.at(key));
        }
        if child.max_items == Some(0) {
            self.report(
                self.at(&child.id),
                format!("child {id:?}: maxItems must be at least 1"),
                None,
            );
        }
        if let Some(ready_when) = &child.ready_when {
            self.check_expression(ready_when, &format!("spec.children[{i}].readyWhen"));
        }
    }

    /// Ids, kinds, `matchLabels` and the name and namespace templates of the lookups.
    fn check_lookups(&mut self, rule: &str, lookups: &[LookupSpec]) {
        let mut ids = BTreeMap::new();
        // The first lookup of each kind: its `matchLabels` scope the kind's one cache.
        let mut first_of_kind: BTreeMap<(&str, &str), &LookupSpec> = BTreeMap::new();
        for lookup in lookups {
            let id = &lookup.id.value;
            self.check_id(&lookup.id, "lookup", &mut ids);
            match first_of_kind.entry((&lookup.api_version, &lookup.kind)) {
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(lookup);
                }
                std::collections::btree_map::Entry::Occupied(first)
                    if first.get().match_labels != lookup.match_labels =>
                {
                    self.report(
                        self.at(&lookup.id),
                        format!(
                            "lookup {id:?}: matchLabels {:?} differ from those of lookup {:?} of the same kind ({:?}); \
                             the lookups of one kind share one cache, so they must declare the same matchLabels",
                            lookup.match_labels,
                            first.get().id.value,
                            first.get().match_labels
                        ),
                        None,
                    );
                }
                std::collections::btree_map::Entry::Occupied(_) => {}
            }
            if let Some(key) = lookup
                .match_labels
                .keys()
                .find(|key| key.is_empty() || key.contains([',', '=', '!']))
            {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: matchLabels key {key:?} is not a label key"),
                    None,
                );
            }
            if !lookup.api_version.contains('/') && lookup.api_version != "v1" {
                self.report(
                    self.at(&lookup.id),
                    format!(
                        "lookup {id:?}: apiVersion {:?} must be group/version or v1",
                        lookup.api_version
                    ),
                    None,
                );
            }
            if lookup.kind.is_empty() {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: kind must not be empty"),
                    None,
                );
            }
            match (&lookup.name, lookup.list) {
                (Some(name), false) => {
                    self.compile_inline(rule, &format!("lookups.{id}.name"), &name.value, self.at(name));
                }
                (None, true) => {}
                (Some(_), true) | (None, false) => self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: give exactly one of name (one object) and list: true (every match)"),
                    None,
                ),
            }
            if lookup.max_items.is_some() && !lookup.list {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: maxItems bounds a list lookup (list: true)"),
                    None,
                );
            }
            if let Some(max) = lookup.max_items.filter(|m| *m == 0 || *m > MAX_LOOKUP_ITEMS) {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: maxItems {max} must be 1 to {MAX_LOOKUP_ITEMS}"),
                    None,
                );
            }
            if let Some(namespace) = lookup.namespace.as_ref().filter(|ns| ns.value.contains('*'))
                && (namespace.value.trim() != "*" || !lookup.list)
            {
                self.report(
                    self.at(namespace),
                    format!("lookup {id:?}: namespace \"*\" (every namespace) is for a list lookup, written alone"),
                    None,
                );
            }
            if let Some(namespace) = &lookup.namespace {
                self.compile_inline(
                    rule,
                    &format!("lookups.{id}.namespace"),
                    &namespace.value,
                    self.at(namespace),
                );
            }
        }
    }

    fn check_action(&mut self, rule: &str, action: &ActionSpec) {
        let at = self.at(&action.id);
        let id = &action.id.value;
        let guards = usize::from(action.guard.generation)
            + usize::from(action.guard.condition.is_some())
            + usize::from(action.guard.annotation.is_some())
            + usize::from(action.guard.schedule.is_some());
        match action.on {
            ActionTrigger::Reconcile => {
                if guards != 1 {
                    self.report(
                        at.clone(),
                        format!(
                            "action {id:?}: guard must set exactly one of generation, condition, annotation, schedule (found {guards})"
                        ),
                        Some("e.g. guard: {generation: true}"),
                    );
                }
                self.check_schedule(rule, action);
                for (field, set) in [
                    ("waitFor", action.wait_for.is_some()),
                    ("timeout", action.timeout.is_some()),
                ] {
                    if set {
                        self.report(
                            at.clone(),
                            format!("action {id:?}: {field} applies only to `on: delete` actions"),
                            Some("add `on: delete`, or remove the field"),
                        );
                    }
                }
            }
            ActionTrigger::Delete => self.check_delete_action(action, guards),
        }
        match (&action.create, &action.http) {
            (Some(create), None) => self.check_template_exists(&create.template),
            (None, Some(http)) => {
                self.compile_inline(
                    rule,
                    &format!("actions.{id}.http.url"),
                    &http.url.value,
                    self.at(&http.url),
                );
                if let Some(body) = &http.body {
                    self.compile_inline(rule, &format!("actions.{id}.http.body"), &body.value, self.at(body));
                }
                for (header, value) in &http.headers {
                    match value {
                        HeaderValue::Template(template) => {
                            self.compile_inline(
                                rule,
                                &format!("actions.{id}.http.headers.{header}"),
                                template,
                                at.clone(),
                            );
                        }
                        HeaderValue::FromSecret(from) => {
                            self.check_secret_header(&at, id, header, &from.value_from.secret_key_ref)
                        }
                    }
                }
                if let Some(timeout) = &http.timeout {
                    match duration::parse_at_least(timeout, std::time::Duration::from_millis(1)) {
                        Err(e) => self.report(at.clone(), format!("action {id:?}: http.timeout: {e}"), None),
                        Ok(t) if t > egress::MAX_TIMEOUT => self.report(
                            at.clone(),
                            format!("action {id:?}: http.timeout {timeout} is longer than the 30s maximum"),
                            None,
                        ),
                        Ok(_) => {}
                    }
                }
                if http.allowed_hosts.is_empty() {
                    self.report(
                        self.at(&http.url),
                        format!("action {id:?}: http needs allowedHosts: the hosts its url may reach"),
                        Some("e.g. allowedHosts: [hooks.example.com] (https on 443), or \"http://127.0.0.1:8080\" verbatim"),
                    );
                }
                for entry in &http.allowed_hosts {
                    if let Err(e) = egress::AllowedHost::parse(&entry.value) {
                        self.report(
                            self.at(entry),
                            format!("action {id:?}: http.allowedHosts entry {:?}: {e}", entry.value),
                            Some("an entry is [http://]host[:port], *.domain, an IP address or localhost"),
                        );
                    }
                }
            }
            _ => self.report(
                at.clone(),
                format!("action {id:?}: set exactly one of create, http"),
                None,
            ),
        }
        if let Some(when) = &action.when {
            self.check_expression(when, &format!("actions.{id}.when"));
        }
    }

    /// `guard.schedule`, `timeZone` and `startingDeadline`: a valid expression and zone, and
    /// the other two only beside a schedule.
    fn check_schedule(&mut self, rule: &str, action: &ActionSpec) {
        let (at, id, guard) = (self.at(&action.id), &action.id.value, &action.guard);
        let Some(expression) = &guard.schedule else {
            for (field, set) in [
                ("timeZone", guard.time_zone.is_some()),
                ("startingDeadline", guard.starting_deadline.is_some()),
            ] {
                if set {
                    self.report(
                        at.clone(),
                        format!("action {id:?}: guard.{field} applies only to guard.schedule"),
                        Some("add guard.schedule, or remove the field"),
                    );
                }
            }
            return;
        };
        if crate::engine::template::is_template(expression) {
            // Rendered per parent (`"{{ spec.backup.schedule }}"`), checked when rendered.
            self.compile_inline(rule, &format!("actions.{id}.guard.schedule"), expression, at.clone());
        } else if let Err(message) =
            crate::engine::plan::schedule::Schedule::parse(expression, guard.time_zone.as_deref())
        {
            self.report(
                at.clone(),
                format!("action {id:?}: guard: {message}"),
                Some("minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\" (03:00 daily)"),
            );
        }
        if let Some(deadline) = &guard.starting_deadline
            && let Err(e) = duration::parse(deadline)
        {
            self.report(
                at,
                format!("action {id:?}: guard.startingDeadline {deadline:?}: {e}"),
                Some("e.g. startingDeadline: 1h"),
            );
        }
    }

    /// A header read from a Secret names it with constants the API server would accept: the
    /// parent's author must not choose which Secret is read.
    fn check_secret_header(&mut self, at: &SourceLocation, id: &str, header: &str, reference: &SecretKeyRef) {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": reference.name}, "data": {&reference.key: ""},
        });
        let namespace = reference
            .namespace
            .as_ref()
            .map(|ns| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        let problems = [
            names::check_name(&secret).err(),
            names::check_keys(&secret, true).err(),
            namespace.and_then(|ns| names::check_name(&ns).err()),
        ];
        for problem in problems.into_iter().flatten() {
            self.report(
                at.clone(),
                format!("action {id:?}: http.headers.{header}.valueFrom.secretKeyRef: {problem}"),
                Some("name, key and namespace are constants (not templates), e.g. {name: hook-token, key: token, namespace: platform}"),
            );
        }
    }

    /// An `on: delete` action runs once per deletion: no guard; `waitFor` reads the created
    /// object, so it needs `create`.
    fn check_delete_action(&mut self, action: &ActionSpec, guards: usize) {
        let at = self.at(&action.id);
        let id = &action.id.value;
        if guards != 0 {
            self.report(
                at.clone(),
                format!("action {id:?}: an `on: delete` action takes no guard (it runs once per deletion)"),
                Some("remove `guard`"),
            );
        }
        if let Some(wait_for) = &action.wait_for {
            if action.create.is_none() {
                self.report(
                    self.at(wait_for),
                    format!("action {id:?}: waitFor reads the created `object`, so it needs `create`"),
                    None,
                );
            }
            self.check_expression(wait_for, &format!("actions.{id}.waitFor"));
        }
        // `timeout` bounds the whole run, `waitFor` or not: a run that keeps failing holds the
        // deletion no longer than it either.
        if let Some(timeout) = &action.timeout
            && let Err(e) = duration::parse(&timeout.value)
        {
            self.report(self.at(timeout), format!("action {id:?}: timeout: {e}"), None);
        }
    }

    fn check_allowed_namespace_selector(&mut self, spec: &RuleSpec, at: &SourceLocation) {
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

    fn check_allowed_namespaces(&mut self, spec: &RuleSpec) {
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

/// A parser's multi-line report (with a source frame) as one line.
fn one_line(report: &str) -> String {
    report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
        .collect::<Vec<_>>()
        .join(" ")
}

fn known(ids: &BTreeMap<String, ()>) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// The largest `maxItems` of a list lookup.
pub const MAX_LOOKUP_ITEMS: usize = 1000;

/// Lower-case hex of some bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` is an RFC 1123 DNS label.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
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
        .filter(|(api_version, kind)| crate::engine::plan::builtin::is_cluster_scoped(api_version, kind))
        .map(|(api_version, kind)| (api_version.clone(), kind.clone()))
        .collect()
}

fn check_across_rules(rules: &[Rule], problems: &mut Vec<Diagnostic>) {
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

#[cfg(test)]
mod tree_tests {
    use super::*;

    #[test]
    fn a_symlink_loop_under_the_rules_is_a_located_error_and_the_other_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("team")).expect("mkdir");
        fs::write(dir.path().join("team/a.yaml"), "a").expect("write");
        std::os::unix::fs::symlink(dir.path(), dir.path().join("team/loop")).expect("symlink");
        let mut problems = Vec::new();
        let files = read_tree(dir.path(), |_| true, &mut problems);
        assert_eq!(files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["team/a.yaml"]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let text = problems[0].to_string();
        assert!(
            text.contains("team/loop") && text.contains("symbolic link loop"),
            "{text}"
        );
    }

    #[test]
    fn dot_entries_are_skipped_and_linked_directories_followed_as_in_a_mounted_config_map() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("..2026_12_01");
        fs::create_dir_all(&data).expect("mkdir");
        fs::write(data.join("db.yaml"), "x").expect("write");
        std::os::unix::fs::symlink(&data, dir.path().join("..data")).expect("symlink");
        std::os::unix::fs::symlink("..data/db.yaml", dir.path().join("db.yaml")).expect("symlink");
        let mut problems = Vec::new();
        let files = read_tree(dir.path(), |_| true, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["db.yaml"]);
    }
}
