//! A parent planned offline, as `render` and `ruleop test` see it: read from a file, given
//! placeholders, admitted by its CRD, planned against observed children and looked-up objects
//! read from files, and its custom resource children and status checked against their schemas.

use std::path::Path;

use serde_json::{Value, json};

use crate::engine::base::builtin_kinds;
use crate::engine::plan::context::{LABEL_CHILD, LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use crate::engine::plan::lookups::{LookupKey, LookupSource};
use crate::engine::plan::{self, Plan};
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::schema::{self, Catalog};
use crate::engine::yaml;
use crate::offline::CommandError;

/// Placeholder UID for a parent read from a file that has none.
pub(crate) const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// The rule watching the parent of `file`'s kind in `set`, by name.
pub(crate) fn rule_of_parent(set: &RuleSet, file: &Path) -> Result<String, CommandError> {
    let parent = read_parent(file)?;
    Ok(rule_for(set, &parent, file)?.name.clone())
}

/// What happens to a parent before it is planned offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// As the API server does when its kind's CRD is known: refused when it breaks the schema,
    /// then defaulted.
    ByCrd,
    /// Nothing: planned as a parent of a kind without a CRD.
    None,
}

/// A parent planned offline, as `render` and `ruleop test` see it: its CRD's defaults applied
/// first, and the custom resource children and status write validated against their schemas.
#[derive(Debug)]
pub(crate) struct Planned<'a> {
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
pub(crate) fn plan_offline<'a>(
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
pub(crate) fn admit(schemas: &Catalog, parent: &mut Value, origin: &Path) -> Result<(), CommandError> {
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
pub(crate) fn validate_children(schemas: &Catalog, rule: &Rule, plan: Plan) -> Result<Plan, plan::PlanError> {
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
pub(crate) fn validate_status(schemas: &Catalog, rule: &Rule, plan: &Plan, origin: &Path) -> Result<(), CommandError> {
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
pub(crate) fn fill_placeholders(
    parent: &mut Value,
    origin: &Path,
    cluster_scoped: bool,
) -> Result<Vec<String>, CommandError> {
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

pub(crate) fn rule_for<'a>(set: &'a RuleSet, parent: &Value, file: &Path) -> Result<&'a Rule, CommandError> {
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
pub(crate) struct ObservedLookups(pub(crate) Vec<Value>);

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
