//! The offline commands: `check`, `render` and `schema`. No cluster, no client.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::{OutputFormat, Sources};
use crate::plan::context::{LABEL_CHILD, LABEL_PARENT_UID, LABEL_RULE};
use crate::plan::{self, Plan};
use crate::rules::load::load;
use crate::rules::{Rule, RuleSet};
use crate::yaml;

/// Placeholder UID for a parent read from a file that has none.
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// A failed offline command: the text to print on stderr.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

/// `ruleop check`: the summary line on success.
pub fn check(sources: &Sources) -> Result<String, CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let warnings = safe_filter_warnings(&sources.templates);
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

/// `ruleop render`: the printed plan.
pub fn render(
    sources: &Sources,
    file: &Path,
    observed_dir: Option<&Path>,
    output: OutputFormat,
    now: &str,
) -> Result<String, CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let (parent, notes) = read_parent(file)?;
    let rule = rule_for(&set, &parent, file)?;
    let observed = match observed_dir {
        Some(dir) => read_observed(dir, rule, &parent)?,
        None => Vec::new(),
    };
    let plan = plan::plan(&set.renderer, rule, &parent, &observed, now).map_err(|e| {
        CommandError(format!(
            "{}: error: {e}\n  the parent would get Ready=False (reason {}); nothing would be applied",
            file.display(),
            e.reason()
        ))
    })?;
    Ok(match output {
        OutputFormat::Json => {
            serde_json::to_string_pretty(&json!({"rule": rule.name, "notes": notes, "plan": plan})).unwrap_or_default()
        }
        OutputFormat::Yaml => print_yaml(rule, &parent, &notes, &plan),
    })
}

/// Every document of a YAML file, or an error naming the file and the place.
fn read_yaml_file(path: &Path) -> Result<Vec<Value>, CommandError> {
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

fn read_parent(file: &Path) -> Result<(Value, Vec<String>), CommandError> {
    let mut docs = read_yaml_file(file)?;
    if docs.len() != 1 || !docs[0].is_object() {
        return Err(CommandError(format!(
            "{}: error: expected exactly one object, found {} document(s)",
            file.display(),
            docs.len()
        )));
    }
    let mut parent = docs.remove(0);
    let mut notes = Vec::new();
    let metadata = parent
        .as_object_mut()
        .map(|m| m.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| CommandError(format!("{}: error: metadata is not a mapping", file.display())))?;
    for (field, placeholder) in [
        ("uid", json!(PLACEHOLDER_UID)),
        ("namespace", json!("default")),
        ("generation", json!(1)),
    ] {
        if !metadata.contains_key(field) {
            notes.push(format!("metadata.{field} not set; using {placeholder}"));
            metadata.insert(field.to_owned(), placeholder);
        }
    }
    Ok((parent, notes))
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

/// Reads observed children, labelling unlabelled ones as this parent's children by kind.
fn read_observed(dir: &Path, rule: &Rule, parent: &Value) -> Result<Vec<Value>, CommandError> {
    let uid = parent
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or(PLACEHOLDER_UID);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| CommandError(format!("{}: error: cannot read directory: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    let mut observed = Vec::new();
    for path in files {
        let docs = read_yaml_file(&path)?;
        for mut object in docs {
            adopt(&mut object, rule, uid);
            observed.push(object);
        }
    }
    Ok(observed)
}

fn adopt(object: &mut Value, rule: &Rule, uid: &str) {
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
    for note in notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    out.push_str(&format!("# === children ({}) ===\n", plan.children.len()));
    for child in &plan.children {
        out.push_str(&format!("---\n# child {:?}: {}\n", child.id, child.target));
        out.push_str(&yaml::to_string(&child.object));
    }
    if !plan.waiting.is_empty() {
        out.push_str(&format!("# === waiting ({}) ===\n", plan.waiting.len()));
        for waiting in &plan.waiting {
            out.push_str(&format!(
                "# child {:?}: {}: {}\n",
                waiting.id, waiting.target, waiting.reason
            ));
        }
    }
    out.push_str(&format!("# === prune ({}) ===\n", plan.prune.len()));
    for target in &plan.prune {
        out.push_str(&format!("# delete {target}\n"));
    }
    out.push_str(&format!("# === actions ({}) ===\n", plan.actions.len()));
    for decision in &plan.actions {
        let verdict = if decision.run { "RUN" } else { "skip" };
        out.push_str(&format!("# {}: {verdict}: {}\n", decision.id, decision.reason));
        if let Some(effect) = &decision.effect {
            let printed = match effect {
                plan::actions::Effect::Create(object) => yaml::to_string(object),
                plan::actions::Effect::Http(request) => yaml::to_string(&json!(request)),
            };
            out.push_str(&commented(&printed, "#   "));
        }
    }
    print_lifecycle(&mut out, plan);
    out.push_str("# === status patch ===\n");
    match &plan.status_patch {
        Some(patch) => out.push_str(&commented(&yaml::to_string(patch), "# ")),
        None => out.push_str("# (none: status already up to date)\n"),
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
        for line in &deletion.timed_out {
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
pub fn rbac(sources: &Sources, crds: &Path) -> Result<String, CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let plurals = crate::rbac::crd_plurals(crds).map_err(|e| CommandError(format!("error: {e}")))?;
    let role = crate::rbac::cluster_role(&set, &plurals).map_err(|e| CommandError(format!("error: {e}")))?;
    Ok(format!(
        "# Generated by `ruleop rbac` from the rules: the verbs ruleop needs and nothing more.\n{}",
        yaml::to_string(&role)
    ))
}

/// `ruleop schema`: the JSON Schema of rule files.
pub fn schema() -> String {
    let schema = schemars::schema_for!(crate::rules::model::RuleDocument);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
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
