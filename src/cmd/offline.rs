//! The offline commands: `check`, `render`, `rbac` and `schema`. No cluster, no client.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cmd::cli::{OutputFormat, SchemaSources, Sources};
use crate::engine::base::builtin_kinds;
use crate::engine::plan::children::ChildUpdate;
use crate::engine::plan::context::{LABEL_CHILD, LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use crate::engine::plan::foreach::ANNOTATION_ITEM_KEY;
use crate::engine::plan::lookups::{LookupKey, LookupSource};
use crate::engine::plan::{self, Plan};
use crate::engine::rules::load::load;
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::schema::{self, Catalog};
use crate::engine::schema_check;
use crate::engine::yaml;

/// Placeholder UID for a parent read from a file that has none.
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// A failed offline command: the text to print on stderr.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

/// Loads the rules and checks them against the schemas `schemas` names: the set, carrying
/// those schemas, and the warnings (kinds that have none).
pub fn load_checked(sources: &Sources, schemas: &SchemaSources) -> Result<(RuleSet, Vec<String>), CommandError> {
    let mut set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let mut catalog = Catalog::read(&schemas.paths(&sources.rules)).map_err(|d| CommandError(d.to_string()))?;
    let generated = schema_check::crd::check_committed(&set, &mut catalog);
    let mut report = schema_check::rule_check::check(&set, &catalog, &sources.templates);
    report.errors.splice(0..0, generated.errors);
    report.warnings.splice(0..0, generated.warnings);
    if !report.errors.is_empty() {
        return Err(CommandError(
            crate::engine::diagnostic::Diagnostics(report.errors).to_string(),
        ));
    }
    set.schemas = catalog;
    Ok((set, report.warnings))
}

/// `ruleop check`: the summary line on success.
pub fn check(sources: &Sources, schemas: &SchemaSources) -> Result<String, CommandError> {
    let (set, schema_warnings) = load_checked(sources, schemas)?;
    let mut warnings = safe_filter_warnings(&sources.templates);
    warnings.extend(schema_warnings);
    check_samples(&set)?;
    warnings.extend(crate::engine::rules::lint::warnings(&set));
    let mut report = warnings.join("\n");
    if !report.is_empty() {
        report.push('\n');
    }
    report.push_str(&format!(
        "ok: {} rule(s) valid ({})",
        set.rules.len(),
        set.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
    ));
    Ok(report)
}

/// The time a sample parent is planned at (its output is not shown, only its problems).
const SAMPLE_NOW: &str = "2026-01-01T00:00:00Z";

/// Plans a sample parent of every rule whose parent CRD is known, built from the schema
/// (examples, defaults, the least values of required fields), with no observed children: a
/// custom resource child or a status write that breaks its CRD is an error before any parent
/// exists. A sample that cannot be planned (a lookup it needs, a template that fails on it) is
/// passed over: the children it did not reach are checked by `render` and `ruleop test`.
fn check_samples(set: &RuleSet) -> Result<(), CommandError> {
    for rule in &set.rules {
        let watch = &rule.spec.watch;
        let Some(kind) = set.schemas.kind(&watch.api_version, &watch.kind) else {
            continue;
        };
        let mut parent = schema::sample::of(&kind.schema);
        let namespace = watch.namespaces.first().map_or("default", String::as_str);
        let annotations: serde_json::Map<String, Value> = watch
            .annotation_selector
            .iter()
            .map(|(key, value)| (key.clone(), json!(if value.is_empty() { "sample" } else { value })))
            .collect();
        parent["apiVersion"] = json!(watch.api_version);
        parent["kind"] = json!(watch.kind);
        parent["metadata"] = if rule.has_cluster_scoped_parents() {
            json!({"name": "sample", "annotations": annotations})
        } else {
            json!({"name": "sample", "namespace": namespace, "annotations": annotations})
        };
        let origin = PathBuf::from(format!(
            "{} (a sample {} from {})",
            rule.file.display(),
            watch.kind,
            kind.origin
        ));
        fill_placeholders(&mut parent, &origin, rule.has_cluster_scoped_parents())?;
        schema::defaults::apply(&kind.schema, &mut parent);
        let looked_up = ObservedLookups(Vec::new());
        // A sample is a guess: one the rule refuses (a lookup or namespace it names, a `fail`)
        // says nothing about the rule, so it is not reported.
        let Ok(plan) = plan::plan_with(&set.renderer, rule, &parent, &[], &looked_up, SAMPLE_NOW) else {
            continue;
        };
        let checked = validate_children(&set.schemas, rule, plan)
            .map_err(|e| CommandError(e.to_string()))
            .and_then(|plan| validate_status(&set.schemas, rule, &plan, &origin));
        if let Err(CommandError(message)) = checked {
            return Err(CommandError(format!("{}: error: {message}", origin.display())));
        }
    }
    Ok(())
}

/// Lines warning about `|safe`, which bypasses the injection guard.
fn safe_filter_warnings(templates: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut stack = vec![templates.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                for (i, line) in text.lines().enumerate() {
                    if let Some(col) = find_safe_filter(line) {
                        warnings.push(format!(
                            "{}:{}:{}: warning: `|safe` inserts a value without the injection guard; \
                             use it only for trusted text",
                            path.display(),
                            i + 1,
                            col + 1
                        ));
                    }
                }
            }
        }
    }
    warnings
}

fn find_safe_filter(line: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(pos) = line[from..].find('|') {
        let at = from + pos;
        let rest = line[at + 1..].trim_start();
        if rest.starts_with("safe") && !rest[4..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// What `ruleop render` renders and how it prints it.
#[derive(Debug, Clone, Copy)]
pub struct RenderInputs<'a> {
    /// The parent object (YAML).
    pub file: &'a Path,
    /// A directory of observed children.
    pub observed: Option<&'a Path>,
    /// The output format.
    pub output: OutputFormat,
    /// The time stamped on changed conditions.
    pub now: &'a str,
}

/// `ruleop render`: the printed plan.
pub fn render(sources: &Sources, schemas: &SchemaSources, inputs: &RenderInputs<'_>) -> Result<String, CommandError> {
    let (set, _) = load_checked(sources, schemas)?;
    render_with(&set, inputs)
}

/// The rule watching the parent of `file`'s kind in `set`, by name.
pub fn rule_of_parent(set: &RuleSet, file: &Path) -> Result<String, CommandError> {
    let parent = read_parent(file)?;
    Ok(rule_for(set, &parent, file)?.name.clone())
}

/// `ruleop render` of the parent in `inputs` under `set`.
pub fn render_with(set: &RuleSet, inputs: &RenderInputs<'_>) -> Result<String, CommandError> {
    let RenderInputs {
        file,
        observed: observed_dir,
        output,
        now,
    } = *inputs;
    let parent = read_parent(file)?;
    let files = match observed_dir {
        Some(dir) => read_observed(dir)?,
        None => Vec::new(),
    };
    let planned = plan_offline(set, parent, files, file, now, Admission::ByCrd)?;
    let plan = planned.result.map_err(|e| {
        CommandError(format!(
            "{}: error: {e}\n  the parent would get Ready=False (reason {}); nothing would be applied",
            file.display(),
            e.reason()
        ))
    })?;
    let (rule, parent, notes) = (planned.rule, planned.parent, planned.notes);
    Ok(match output {
        OutputFormat::Json => {
            let mut out = json!({"rule": rule.name, "notes": notes, "plan": plan});
            if let Some(rollout) = &rule.rollout {
                out["rollout"] = json!(rollout.describe());
            }
            serde_json::to_string_pretty(&out).unwrap_or_default()
        }
        OutputFormat::Yaml => print_yaml(rule, &parent, &notes, &plan),
    })
}

/// What happens to a parent before it is planned offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// As the API server does when its kind's CRD is known: refused when it breaks the schema,
    /// then defaulted.
    ByCrd,
    /// Nothing: planned as a parent of a kind without a CRD.
    None,
}

/// A parent planned offline, as `render` and `ruleop test` see it: its CRD's defaults applied
/// first, and the custom resource children and status write validated against their schemas.
#[derive(Debug)]
pub struct Planned<'a> {
    /// The rule watching the parent's kind.
    pub rule: &'a Rule,
    /// The parent, with placeholders for a missing uid, namespace or generation.
    pub parent: Value,
    /// Which placeholders were used.
    pub notes: Vec<String>,
    /// The plan, or why none could be made (what the parent's `Ready` would say).
    pub result: Result<Plan, plan::PlanError>,
}

/// Plans one parent offline against `files`: observed children (unlabelled ones are adopted as
/// the first child id of their kind) and looked-up objects (matched by apiVersion, kind, name).
/// `origin` names where the parent came from in errors.
pub fn plan_offline<'a>(
    set: &'a RuleSet,
    mut parent: Value,
    files: Vec<Value>,
    origin: &Path,
    now: &str,
    admission: Admission,
) -> Result<Planned<'a>, CommandError> {
    let rule = rule_for(set, &parent, origin)?;
    let notes = fill_placeholders(&mut parent, origin, rule.has_cluster_scoped_parents())?;
    if admission == Admission::ByCrd {
        admit(&set.schemas, &mut parent, origin)?;
    }
    if !rule.selects(&parent) {
        return Err(CommandError(format!(
            "{}: error: rule {:?} does not select this parent: watch.annotationSelector wants {:?}",
            origin.display(),
            rule.name,
            rule.spec.watch.annotation_selector
        )));
    }
    let looked_up = ObservedLookups(files.clone());
    let lookup_keys = wanted_lookups(set, rule, &parent);
    let observed: Vec<Value> = files
        .into_iter()
        .filter(|object| has_label(object, LABEL_CHILD) || !lookup_keys.iter().any(|k| looked_up.matches(object, k)))
        .map(|mut object| {
            adopt(&mut object, rule, &parent);
            object
        })
        .collect();
    let result = plan::plan_with(&set.renderer, rule, &parent, &observed, &looked_up, now)
        .and_then(|plan| validate_children(&set.schemas, rule, plan));
    if let Ok(plan) = &result {
        validate_status(&set.schemas, rule, plan, origin)?;
    }
    Ok(Planned {
        rule,
        parent,
        notes,
        result,
    })
}

/// What the API server does to a parent of a kind whose CRD is known before anything sees it:
/// refuse it when it breaks the schema, then fill in the defaults.
fn admit(schemas: &Catalog, parent: &mut Value, origin: &Path) -> Result<(), CommandError> {
    let text = |key: &str| parent.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let Some(kind) = schemas.kind(&text("apiVersion"), &text("kind")) else {
        return Ok(());
    };
    let violations = schema::validate::validate(&kind.schema, parent, schema::validate::Top::Object, "");
    if !violations.is_empty() {
        return Err(CommandError(format!(
            "{}: error: the parent does not match its CRD ({}), so the API server would refuse it:\n{}",
            origin.display(),
            kind.origin,
            listed(&violations)
        )));
    }
    schema::defaults::apply(&kind.schema, parent);
    Ok(())
}

fn listed(violations: &[schema::validate::Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every child of a custom resource kind whose CRD is known, checked against its schema as the
/// API server would check it: the first that breaks it fails the plan (`InvalidChild`), before
/// anything is applied.
fn validate_children(schemas: &Catalog, rule: &Rule, plan: Plan) -> Result<Plan, plan::PlanError> {
    for child in &plan.children {
        let Some(kind) = schemas.kind(&child.target.api_version, &child.target.kind) else {
            continue;
        };
        let violations = schema::validate::validate(&kind.schema, &child.object, schema::validate::Top::Object, "");
        if !violations.is_empty() {
            let template = rule
                .spec
                .children
                .iter()
                .find(|c| c.id.value == child.id)
                .map(|c| c.template.value.clone())
                .unwrap_or_default();
            return Err(plan::PlanError::InvalidChild {
                id: child.id.clone(),
                template,
                message: format!(
                    "does not match the {} CRD ({}), so the API server would refuse it:\n{}",
                    child.target.kind,
                    kind.origin,
                    listed(&violations)
                ),
            });
        }
    }
    Ok(plan)
}

/// The status write checked against the parent's status schema (fields set to null are
/// removals and not checked).
fn validate_status(schemas: &Catalog, rule: &Rule, plan: &Plan, origin: &Path) -> Result<(), CommandError> {
    let watch = &rule.spec.watch;
    let (Some(kind), Some(patch)) = (
        schemas.kind(&watch.api_version, &watch.kind),
        plan.status_patch.as_ref().and_then(|p| p.get("status")),
    ) else {
        return Ok(());
    };
    let schema::Step::Field(status) = kind.schema.field("status") else {
        return Ok(());
    };
    let mut written = patch.clone();
    if let Some(map) = written.as_object_mut() {
        map.retain(|_, value| !value.is_null());
    }
    let violations = schema::validate::validate(status, &written, schema::validate::Top::Part, "status");
    if violations.is_empty() {
        return Ok(());
    }
    Err(CommandError(format!(
        "{}: error: rule {:?} would write a status that does not match the {} CRD ({}):\n{}",
        origin.display(),
        rule.name,
        watch.kind,
        kind.origin,
        listed(&violations)
    )))
}

/// Every document of a YAML file, or an error naming the file and the place.
pub(crate) fn read_yaml_file(path: &Path) -> Result<Vec<Value>, CommandError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CommandError(format!("{}: error: cannot read: {e}", path.display())))?;
    yaml::documents(&text).map_err(|e| {
        CommandError(format!(
            "{}:{}:{}: error: {}",
            path.display(),
            e.line.unwrap_or(0),
            e.column.unwrap_or(0),
            e.message
        ))
    })
}

/// Reads the one object of a parent file.
pub(crate) fn read_parent(file: &Path) -> Result<Value, CommandError> {
    let mut docs = read_yaml_file(file)?;
    if docs.len() != 1 || !docs[0].is_object() {
        return Err(CommandError(format!(
            "{}: error: expected exactly one object, found {} document(s)",
            file.display(),
            docs.len()
        )));
    }
    Ok(docs.remove(0))
}

/// Gives a parent read from a file a placeholder uid, namespace (not to a cluster-scoped one)
/// and generation where it has none; returns a note for each.
fn fill_placeholders(parent: &mut Value, origin: &Path, cluster_scoped: bool) -> Result<Vec<String>, CommandError> {
    let mut notes = Vec::new();
    let metadata = parent
        .as_object_mut()
        .map(|m| m.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| CommandError(format!("{}: error: metadata is not a mapping", origin.display())))?;
    for (field, placeholder) in [
        ("uid", json!(PLACEHOLDER_UID)),
        ("namespace", json!("default")),
        ("generation", json!(1)),
    ] {
        let not_for_this_parent = field == "namespace" && cluster_scoped;
        if !not_for_this_parent && !metadata.contains_key(field) {
            notes.push(format!("metadata.{field} not set; using {placeholder}"));
            metadata.insert(field.to_owned(), placeholder);
        }
    }
    Ok(notes)
}

fn rule_for<'a>(set: &'a RuleSet, parent: &Value, file: &Path) -> Result<&'a Rule, CommandError> {
    let api_version = parent.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = parent.get("kind").and_then(Value::as_str).unwrap_or_default();
    set.rules
        .iter()
        .find(|r| r.spec.watch.api_version == api_version && r.spec.watch.kind == kind)
        .ok_or_else(|| {
            CommandError(format!(
                "{}: error: no rule watches {api_version} {kind} (rules watch: {})",
                file.display(),
                set.rules
                    .iter()
                    .map(|r| format!("{} {}", r.spec.watch.api_version, r.spec.watch.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Reads every object of the `--observed` directory.
pub(crate) fn read_observed(dir: &Path) -> Result<Vec<Value>, CommandError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| CommandError(format!("{}: error: cannot read directory: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    let mut observed = Vec::new();
    for path in files {
        observed.extend(read_yaml_file(&path)?);
    }
    Ok(observed)
}

/// Looked-up objects offline: the `--observed` objects of the lookup's apiVersion, kind and
/// name, in its namespace when the file sets one (a file without a namespace matches any, as
/// observed children do).
struct ObservedLookups(Vec<Value>);

impl ObservedLookups {
    fn matches(&self, object: &Value, key: &LookupKey) -> bool {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str);
        text("/apiVersion") == Some(key.api_version.as_str())
            && text("/kind") == Some(key.kind.as_str())
            && match text("/metadata/namespace") {
                Some(namespace) => key.covers(namespace, text("/metadata/name").unwrap_or_default()),
                None => key.is_list() || text("/metadata/name") == Some(key.name.as_str()),
            }
    }
}

impl LookupSource for ObservedLookups {
    fn get(&self, key: &LookupKey) -> Option<Value> {
        self.0.iter().find(|o| self.matches(o, key)).cloned()
    }

    fn list(&self, key: &LookupKey) -> Vec<Value> {
        self.0.iter().filter(|o| self.matches(o, key)).cloned().collect()
    }
}

/// The objects the parent's lookups read (none if they cannot be computed: planning reports why).
fn wanted_lookups(set: &RuleSet, rule: &Rule, parent: &Value) -> Vec<LookupKey> {
    let Ok(parent_ref) = ParentRef::read(parent) else {
        return Vec::new();
    };
    let context = plan::context::build(parent, &std::collections::BTreeMap::new(), &rule.name, None);
    plan::lookups::keys(&set.renderer, rule, &parent_ref, &context)
        .map(|keys| keys.into_iter().filter_map(|(_, key)| key).collect())
        .unwrap_or_default()
}

fn has_label(object: &Value, key: &str) -> bool {
    object.pointer("/metadata/labels").and_then(|l| l.get(key)).is_some()
}

/// Labels an unlabelled observed object as this parent's child of the first child id of its
/// kind, with the proof of ownership ruleop would have written (an ownerReference, the
/// `ruleop.io/parent` annotation). An object that already carries the parent UID label is taken
/// as it is: its labels are a claim that [`plan::ownership`] checks, as at run time.
fn adopt(object: &mut Value, rule: &Rule, parent: &Value) {
    if has_label(object, LABEL_PARENT_UID) {
        return;
    }
    let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let cluster_scoped =
        rule.is_cluster_scoped(&api_version, &kind) || builtin_kinds::is_cluster_scoped(&api_version, &kind);
    if let Ok(parent_ref) = ParentRef::read(parent)
        && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        // Written without a namespace, a namespaced child is in the parent's (as kubectl would put it).
        if !cluster_scoped
            && !metadata.contains_key("namespace")
            && let Some(home) = parent_ref.home_namespace()
        {
            metadata.insert("namespace".to_owned(), json!(home));
        }
        if let Some(owners) = metadata
            .entry("ownerReferences")
            .or_insert_with(|| json!([]))
            .as_array_mut()
        {
            owners.push(parent_ref.owner_reference());
        }
        if let Some(annotations) = metadata
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            annotations.insert(
                plan::scope::ANNOTATION_PARENT.to_owned(),
                json!(plan::ownership::parent_annotation(&parent_ref)),
            );
        }
    }
    let uid = parent
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or(PLACEHOLDER_UID)
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(labels) = labels.as_object_mut() else {
        return;
    };
    if !labels.contains_key(LABEL_CHILD)
        && let Some(child) = rule.spec.children.iter().find(|c| c.kind == kind)
    {
        labels.insert(LABEL_CHILD.to_owned(), json!(child.id.value));
    }
    labels.entry(LABEL_RULE).or_insert_with(|| json!(rule.name));
    labels.entry(LABEL_PARENT_UID).or_insert_with(|| json!(uid));
}

fn print_yaml(rule: &Rule, parent: &Value, notes: &[String], plan: &Plan) -> String {
    let name = parent
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = parent.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("# ruleop render: rule {:?}, parent {kind} {name}\n", rule.name);
    if let Some(rollout) = &rule.rollout {
        out.push_str(&format!("# rollout: {}\n", rollout.describe()));
    }
    for note in notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    if plan.paused {
        out.push_str(&format!(
            "# paused ({}: \"true\"): nothing would be written but the Paused condition; actions are held\n",
            crate::engine::plan::pause::ANNOTATION_PAUSED
        ));
    }
    if !plan.lookups.is_empty() {
        out.push_str(&format!("# === lookups ({}) ===\n", plan.lookups.len()));
        for read in &plan.lookups {
            match (&read.target, read.found) {
                (Some(target), _) if read.count.is_some() => out.push_str(&format!(
                    "# {}: {target}: list of {}\n",
                    read.id,
                    read.count.unwrap_or_default()
                )),
                (Some(target), true) => out.push_str(&format!("# {}: {target}: found\n", read.id)),
                (Some(target), false) => out.push_str(&format!("# {}: {target}: absent (none)\n", read.id)),
                (None, _) => out.push_str(&format!("# {}: name is empty: none\n", read.id)),
            }
        }
    }
    out.push_str(&format!("# === children ({}) ===\n", plan.children.len()));
    for child in &plan.children {
        let item = child
            .object
            .pointer(&format!(
                "/metadata/annotations/{}",
                ANNOTATION_ITEM_KEY.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(|key| format!(" item {key:?}"))
            .unwrap_or_default();
        let update = match child.update {
            ChildUpdate::Apply => "",
            ChildUpdate::Keep => " (updateStrategy: the live object is kept as it is)",
            ChildUpdate::Recreate => " (updateStrategy: the live object is deleted; created again once it is gone)",
            ChildUpdate::Wait => " (scaling: Ordered; not created until every item before it exists and is ready)",
        };
        out.push_str(&format!(
            "---\n# child {:?}{item}: {}{update}\n",
            child.id, child.target
        ));
        out.push_str(&yaml::to_string(&child.object));
    }
    if !plan.waiting.is_empty() {
        out.push_str(&format!("# === waiting ({}) ===\n", plan.waiting.len()));
        for wait in &plan.waiting {
            out.push_str(&format!(
                "# {}: waits for {:?}: {} (not applied, not pruned)\n",
                wait.id, wait.on, wait.reason
            ));
        }
    }
    out.push_str(&format!("# === prune ({}) ===\n", plan.prune.len()));
    for target in &plan.prune {
        out.push_str(&format!("# delete {target}\n"));
    }
    for held in &plan.held_removals {
        out.push_str(&format!("# keep {} for now: {}\n", held.target, held.reason));
    }
    if !plan.release.is_empty() {
        out.push_str(&format!(
            "# === release ({}, deletionPolicy: Orphan: left in place, no longer ruleop's) ===\n",
            plan.release.len()
        ));
        for release in &plan.release {
            out.push_str(&format!("# release {} with the merge patch\n", release.target));
            out.push_str(&commented(&yaml::to_string(&release.patch), "#   "));
        }
    }
    out.push_str(&format!("# === actions ({}) ===\n", plan.actions.len()));
    for decision in &plan.actions {
        let verdict = if decision.run { "RUN" } else { "skip" };
        let mut notes = String::new();
        if decision.skipped_slots > 0 {
            notes.push_str(&format!(" ({} earlier slot(s) skipped)", decision.skipped_slots));
        }
        if let Some(ms) = decision.retry_in_ms {
            notes.push_str(&format!(" (looking again in {ms} ms)"));
        }
        out.push_str(&format!("# {}: {verdict}: {}{notes}\n", decision.id, decision.reason));
        if let Some(effect) = &decision.effect {
            let printed = match effect {
                plan::actions::Effect::Create(object) => yaml::to_string(object),
                plan::actions::Effect::Http(request) => {
                    let mut shown = json!(request);
                    shown["egress"] = json!(egress_verdict(request));
                    yaml::to_string(&shown)
                }
            };
            out.push_str(&commented(&printed, "#   "));
        }
    }
    print_lifecycle(&mut out, plan);
    if let Some(apply) = &plan.parent_metadata {
        out.push_str("# === parent metadata (server-side apply onto the parent) ===\n");
        out.push_str(&commented(&yaml::to_string(&apply["metadata"]), "# "));
    }
    out.push_str("# === status patch ===\n");
    for problem in &plan.status_problems {
        out.push_str(&commented(&format!("warning: {problem}"), "# "));
    }
    match &plan.status_patch {
        Some(patch) => out.push_str(&commented(&yaml::to_string(patch), "# ")),
        None if !rule.writes_status() => out.push_str(&format!(
            "# (none: the rule writes no status into {}, see status.write)\n",
            rule.spec.watch.kind
        )),
        None => out.push_str("# (none: status already up to date)\n"),
    }
    if rule.rollout.is_some() && rule.revision.is_none() {
        out.push_str(&format!(
            "# status.{}: the number of the revision in force, with the next write that changes this parent \
             (ruleop run numbers revisions; see ruleop rollout history, or render --revision)\n",
            plan::REVISION_FIELD
        ));
    }
    for warning in &plan.warnings {
        let line = format!(
            "warning event {} ({} turned False): {}",
            warning.reason, warning.type_, warning.message
        );
        out.push_str(&commented(&line, "# "));
    }
    out
}

/// The finalizer step and, for a parent being deleted, what holds the deletion.
fn print_lifecycle(out: &mut String, plan: &Plan) {
    use plan::deletion::{FINALIZER, FinalizerStep};
    match plan.finalizer {
        FinalizerStep::Unchanged => {}
        FinalizerStep::Add => out.push_str(&format!(
            "# === finalizer {FINALIZER}: add (before any child is applied) ===\n"
        )),
        FinalizerStep::Remove => out.push_str(&format!(
            "# === finalizer {FINALIZER}: remove (after the deletes above): the deletion completes ===\n"
        )),
    }
    if let Some(deletion) = &plan.deletion {
        out.push_str("# === deletion in progress ===\n");
        for line in &deletion.waiting {
            out.push_str(&format!("# waiting: {line}\n"));
        }
        for line in deletion.timed_out.iter().chain(&deletion.finalize_timed_out) {
            out.push_str(&format!("# timed out (Warning Event): {line}\n"));
        }
        if let Some(ms) = deletion.recheck_in_ms {
            out.push_str(&format!("# looking again in {ms} ms\n"));
        }
    }
}

fn commented(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// `ruleop rbac`: the ClusterRole as YAML.
pub fn rbac(sources: &Sources, schemas: &SchemaSources) -> Result<String, CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let catalog = Catalog::read(&schemas.paths(&sources.rules)).map_err(|d| CommandError(d.to_string()))?;
    let role =
        crate::engine::rbac::cluster_role(&set, &catalog.plurals()).map_err(|e| CommandError(format!("error: {e}")))?;
    Ok(format!(
        "# Generated by `ruleop rbac` from the rules: the verbs ruleop needs and nothing more.\n{}",
        yaml::to_string(&role)
    ))
}

/// `ruleop crd`: the CRD of every rule with `spec.schema`, as YAML documents.
pub fn crd(sources: &Sources) -> Result<String, CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let documents: Vec<String> = set
        .rules
        .iter()
        .filter_map(|rule| {
            let crd = schema_check::crd::generate(rule)?;
            Some(format!(
                "# Generated by `ruleop crd` from {} (spec.schema); `ruleop check` fails while the committed copy differs.\n{}",
                rule.file.display(),
                yaml::to_string(&crd)
            ))
        })
        .collect();
    if documents.is_empty() {
        return Err(CommandError(
            "error: no rule has spec.schema, so there is no CRD to generate (see docs/reference/schemas.md)".to_owned(),
        ));
    }
    Ok(documents.join("---\n"))
}

/// `ruleop schema`: the JSON Schema of rule files, or of test files.
pub fn schema(kind: crate::cmd::cli::SchemaKind) -> String {
    let schema = match kind {
        crate::cmd::cli::SchemaKind::Rule => schemars::schema_for!(crate::engine::rules::model::RuleDocument),
        crate::cmd::cli::SchemaKind::RuleTest => schemars::schema_for!(crate::cmd::ruletest::model::RuleTestDocument),
    };
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// What the egress policy says of a rendered request before resolving its host: the sender
/// then also checks every address the host resolves to.
fn egress_verdict(request: &plan::actions::HttpRequest) -> String {
    let checked = crate::engine::egress::parse_allowed(&request.allowed_hosts)
        .and_then(|allowed| crate::engine::egress::check_url(&request.url, &allowed));
    match checked {
        Ok(target) => format!("allowed to {} (its addresses are checked when sent)", target.origin),
        Err(denied) => format!("EgressDenied: {denied}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_filter_is_found_but_not_safer_names() {
        assert_eq!(find_safe_filter("a: {{ x | safe }}"), Some(8));
        assert_eq!(find_safe_filter("a: {{ x|safe}}"), Some(7));
        assert_eq!(find_safe_filter("a: {{ x | safest }}"), None);
        assert_eq!(find_safe_filter("a: {{ x | tojson }}"), None);
    }
}
