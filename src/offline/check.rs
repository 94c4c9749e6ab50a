//! `ruleop check`: the rules and templates loaded and validated, a sample parent of every rule
//! with a CRD planned against it, and the warnings (`|safe`, lints, kinds without a schema).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::engine::plan::{self};
use crate::engine::rules::RuleSet;
use crate::engine::schema::{self};
use crate::offline::parent::{ObservedLookups, fill_placeholders, validate_children, validate_status};
use crate::offline::{CommandError, SchemaSources, Sources, load_checked};

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
