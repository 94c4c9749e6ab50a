//! Fuzz target bodies, shared by the cargo-fuzz targets in `fuzz/` and by the test that replays
//! every saved finding (`tests/it/offline/fuzz_regressions.rs`). Each takes raw bytes and panics only when
//! an invariant breaks: a panic anywhere in the code under test, or a broken promise (the
//! injection guard letting structure through, an error message echoing input unbounded).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::engine::plan::{self, Plan};
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::{SourceFile, load, load_sources};

/// The names of the targets, each a directory of seeds and of regression inputs.
pub const TARGETS: [&str; 6] = [
    "rule_loader",
    "duration",
    "render_hostile",
    "yaml_reader",
    "json_path",
    "parent_status",
];

/// Runs the target called `name` on `data`; `false` for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "rule_loader" => rule_loader(data),
        "duration" => duration(data),
        "render_hostile" => render_hostile(data),
        "yaml_reader" => yaml_reader(data),
        "json_path" => json_path(data),
        "parent_status" => parent_status(data),
        _ => return false,
    }
    true
}

const NOW: &str = "2026-11-29T10:00:00Z";

/// The rule loader: YAML, the typed rule model, validation and template compilation, then
/// `check`'s lints and a plan of every loaded rule against a plain parent. The input is a rule
/// file, optionally followed by `\n===\n` and a template (`fuzz/object.yaml.j2`).
pub fn rule_loader(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (rule, template) = text.split_once("\n===\n").unwrap_or((&text, ""));
    let mut templates = shipped_templates().clone();
    templates.push((
        "fuzz/object.yaml.j2".to_owned(),
        PathBuf::from("templates/fuzz/object.yaml.j2"),
        template.to_owned(),
    ));
    let rules = [(
        "fuzz.yaml".to_owned(),
        PathBuf::from("rules/fuzz.yaml"),
        rule.to_owned(),
    )];
    let Ok(set) = load_sources(&templates, &rules) else {
        return;
    };
    let _ = crate::engine::rules::lint::warnings(&set);
    for rule in &set.rules {
        let parent = json!({
            "apiVersion": rule.spec.watch.api_version,
            "kind": rule.spec.watch.kind,
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {"version": "16", "replicas": 1, "storage": {"size": "1Gi"}, "maxMemory": "64mb"},
        });
        let _ = plan::plan(&set.renderer, rule, &parent, &[], NOW);
    }
}

/// The duration parser: total (no panic, no overflow), the 1 s floor holds, and an error quotes
/// the input bounded (at most `MESSAGE_LIMIT` bytes, whatever the input).
pub fn duration(data: &[u8]) {
    use crate::engine::duration::{MIN_RESYNC, parse, parse_at_least};
    let text = String::from_utf8_lossy(data);
    match parse(&text) {
        Ok(_) => {}
        // Bounded, not proportional: control characters are quoted escaped (up to 6 bytes each).
        Err(e) => assert!(
            e.len() <= crate::engine::diagnostic::MESSAGE_LIMIT,
            "error of {} bytes for {} bytes of input",
            e.len(),
            text.len()
        ),
    }
    if let Ok(d) = parse_at_least(&text, MIN_RESYNC) {
        assert!(d >= MIN_RESYNC, "{d:?} passed the floor");
    }
}

/// The renderer with hostile parents: a hostile value at each place the shipped Database
/// templates insert one. Whatever renders must have exactly the shape (keys, list lengths,
/// scalar vs. collection) the same template gives for a plain value: the value may change
/// scalars, never add keys, items or documents. The first byte picks the value: even, the
/// rest as a string; odd, the rest as a JSON scalar (number, boolean or null).
pub fn render_hostile(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest).into_owned();
    let hostile = if mode % 2 == 1 {
        match serde_json::from_str::<Value>(&text) {
            Ok(value) if !value.is_object() && !value.is_array() => value,
            _ => return,
        }
    } else {
        Value::String(text)
    };
    let set = shipped_rules();
    let Some(rule) = set.rules.iter().find(|r| r.spec.watch.kind == "Database") else {
        panic!("the shipped rules have no Database rule");
    };
    for site in INJECTION_SITES {
        // The className is tested by an `if`: a falsy value legitimately drops its key.
        let plain = plain_plan(site, site == "/spec/storage/className" && !truthy(&hostile));
        let Ok(planned) = plan::plan(&set.renderer, rule, &database_with(site, hostile.clone()), &[], NOW) else {
            continue;
        };
        assert_same_shapes(plain, &planned, site);
    }
}

/// The plan of a plain Database (`x1` at `site`, or null when `null` is set), computed once.
fn plain_plan(site: &str, null: bool) -> &'static Plan {
    static PLANS: OnceLock<Vec<(String, bool, Plan)>> = OnceLock::new();
    let plans = PLANS.get_or_init(|| {
        let set = shipped_rules();
        let Some(rule) = set.rules.iter().find(|r| r.spec.watch.kind == "Database") else {
            panic!("the shipped rules have no Database rule");
        };
        let mut plans = Vec::new();
        for site in INJECTION_SITES {
            let variants: &[bool] = if site == "/spec/storage/className" {
                &[false, true]
            } else {
                &[false]
            };
            for &null in variants {
                let value = if null { Value::Null } else { json!("x1") };
                let plan = plan::plan(&set.renderer, rule, &database_with(site, value.clone()), &[], NOW)
                    .unwrap_or_else(|e| panic!("the plain Database does not plan with {site}={value}: {e}"));
                plans.push((site.to_owned(), null, plan));
            }
        }
        plans
    });
    match plans.iter().find(|(s, n, _)| s == site && *n == null) {
        Some((_, _, plan)) => plan,
        None => panic!("no plain plan for {site}"),
    }
}

/// Where a parent value reaches the shipped Database templates (JSON pointers).
const INJECTION_SITES: [&str; 6] = [
    "/spec/version",
    "/spec/credentialsSecret",
    "/spec/storage/size",
    "/spec/storage/className",
    "/spec/resources/cpu",
    "/metadata/name",
];

/// Jinja's truthiness of a scalar.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

fn database_with(pointer: &str, value: Value) -> Value {
    let mut parent = json!({
        "apiVersion": "myorg.io/v1",
        "kind": "Database",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {"version": "16", "replicas": 1, "storage": {"size": "1Gi", "className": "fast"},
                 "resources": {"cpu": "250m"}, "credentialsSecret": "s", "backup": {"enabled": true}},
    });
    if let Some(slot) = parent.pointer_mut(pointer) {
        *slot = value;
    }
    parent
}

fn assert_same_shapes(plain: &Plan, planned: &Plan, site: &str) {
    let objects = |plan: &Plan| -> Vec<Value> {
        let mut all: Vec<Value> = plan.children.iter().map(|c| c.object.clone()).collect();
        all.extend(plan.actions.iter().filter_map(|a| match &a.effect {
            Some(plan::actions::Effect::Create(object)) => Some(object.clone()),
            _ => None,
        }));
        all
    };
    let (want, got) = (objects(plain), objects(planned));
    assert_eq!(want.len(), got.len(), "a hostile {site} changed the number of objects");
    for (want, got) in want.iter().zip(&got) {
        assert!(
            same_shape(want, got),
            "a hostile {site} changed the structure:\nplain:   {want}\nhostile: {got}"
        );
    }
}

/// Same keys and list lengths all the way down; scalars may differ.
fn same_shape(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same_shape(v, w)))
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(v, w)| same_shape(v, w)),
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        _ => true,
    }
}

/// The kubectl-YAML reader: any text gives documents or a located error, never a panic; what
/// it reads also goes through the typed rule model.
pub fn yaml_reader(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(documents) = crate::engine::yaml::documents(&text) {
        for document in &documents {
            let _ = crate::engine::yaml::to_string(document);
        }
    }
    let _ = crate::engine::yaml::from_str::<crate::engine::rules::model::RuleDocument>(&text);
}

/// JSONPath status fields: the loader's parse and the plan's query. The input is a path, then
/// optionally a line break and a JSON object to query (default: a StatefulSet with a status).
pub fn json_path(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (path, object) = text.split_once('\n').unwrap_or((&text, ""));
    let object = serde_json::from_str::<Value>(object).unwrap_or_else(|_| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a", "labels": {"x": "y"}},
               "status": {"readyReplicas": 2, "conditions": [{"type": "Ready", "status": "True"}]}})
    });
    let _ = jsonpath_rust::parser::parse_json_path(path);
    let _ = crate::engine::plan::status_eval::first_match(&object, path);
}

/// A hostile parent status (run records, conditions, fields) under every shipped rule: the
/// input is YAML for `status` (the first byte, when odd, also marks the parent as being deleted,
/// so `on: delete` actions read their records too). Planning gives a plan or an error, never a
/// panic, and every run it decides carries a key ruleop made, whatever key the status held.
pub fn parent_status(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let Ok(mut documents) = crate::engine::yaml::documents(&text) else {
        return;
    };
    let status = if documents.is_empty() {
        Value::Null
    } else {
        documents.swap_remove(0)
    };
    let set = shipped_rules();
    for rule in &set.rules {
        let mut parent = database_with("/spec/version", json!("16"));
        parent["apiVersion"] = json!(rule.spec.watch.api_version);
        parent["kind"] = json!(rule.spec.watch.kind);
        parent["status"] = status.clone();
        if mode % 2 == 1 {
            parent["metadata"]["deletionTimestamp"] = json!(NOW);
            parent["metadata"]["finalizers"] = json!(["ruleop.io/cleanup"]);
        }
        let Ok(planned) = plan::plan(&set.renderer, rule, &parent, &[], NOW) else {
            continue;
        };
        for decision in planned.actions.iter().filter(|d| d.run) {
            let key = decision.key.as_deref().unwrap_or_default();
            assert!(
                crate::engine::plan::actions::is_key(key),
                "action {} runs with key {key:?}, which ruleop did not make",
                decision.id
            );
        }
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped rules and templates, loaded once.
fn shipped_rules() -> &'static RuleSet {
    static SET: OnceLock<RuleSet> = OnceLock::new();
    SET.get_or_init(|| {
        load(&root().join("rules"), &root().join("templates"))
            .unwrap_or_else(|e| panic!("the shipped rules do not load:\n{e}"))
    })
}

/// The shipped templates as source files, read once.
fn shipped_templates() -> &'static Vec<SourceFile> {
    static TEMPLATES: OnceLock<Vec<SourceFile>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let mut problems = Vec::new();
        crate::engine::base::files::read_tree(&root().join("templates"), |_| true, &mut problems)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_refused_values_keep_the_shape() {
        render_hostile(b"\x00postgres");
        render_hostile(b"\x0016\nkind: ClusterRoleBinding");
        render_hostile(b"\x0116");
        render_hostile(b"\x01true");
        render_hostile(b"\x01null");
        render_hostile(b"\x00");
    }

    #[test]
    fn foreign_run_records_neither_panic_nor_lend_their_key() {
        parent_status("\x00actions: {backup: {key: ééééééééééé, phase: Pending, guardValue: x}}".as_bytes());
        parent_status("\x01actions: {final-backup: {key: \"../x\", phase: Pending}}".as_bytes());
        parent_status(b"\x00actions: [1, 2]");
        parent_status(b"\x00conditions: {a: 1}");
    }

    #[test]
    fn shapes_compare_keys_and_lengths_not_scalars() {
        assert!(same_shape(
            &json!({"a": [1, {"b": "x"}]}),
            &json!({"a": [2, {"b": null}]})
        ));
        assert!(!same_shape(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!same_shape(&json!({"a": "x"}), &json!({"a": {"x": 1}})));
        assert!(!same_shape(&json!([1]), &json!([1, 2])));
    }

    #[test]
    fn every_target_runs_on_empty_input() {
        for target in TARGETS {
            assert!(run(target, b""), "{target}");
        }
    }
}
