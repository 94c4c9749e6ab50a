//! No value from a custom resource can change the structure of a rendered object: it is either
//! refused by the injection guard or lands as one string scalar where the template put it.

use std::path::Path;

use ruleop::engine::plan::{self, PlanError};
use ruleop::engine::rules::RuleSet;
use ruleop::engine::rules::load::load;
use serde_json::{Value, json};

const PAYLOADS: &[&str] = &[
    "16\nkind: ClusterRoleBinding",
    "16\r\nkind: ClusterRoleBinding",
    "16\n---\napiVersion: v1\nkind: Secret",
    "16\u{2028}kind: X",
    "16\u{85}kind: X",
    "x\", \"evil\": \"1",
    "x', evil: '1",
    "{{ 7 * 7 }}",
    "{% raw %}x",
    "a # comment",
    "a: b",
    "a:",
    "[1, 2]",
    "{a: 1}",
    "a, b: c",
    "&anchor x",
    "*alias",
    "!!binary aGk=",
    "| block",
    "> folded",
    "- item",
    "? key",
    "---",
    "%YAML 1.1",
    "@at",
    "`tick",
    "back\\slash",
    " leading-space",
    "tab\there",
    "\"quoted\"",
];

/// The shape of a value: every key path with the JSON type at its end.
fn shape(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                shape(v, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                shape(v, &format!("{path}[{i}]"), out);
            }
        }
        Value::String(_) => out.push(format!("{path}: string")),
        Value::Number(_) => out.push(format!("{path}: number")),
        Value::Bool(_) => out.push(format!("{path}: bool")),
        Value::Null => out.push(format!("{path}: null")),
    }
}

fn shapes(objects: &[Value]) -> Vec<Vec<String>> {
    objects
        .iter()
        .map(|o| {
            let mut out = Vec::new();
            shape(o, "", &mut out);
            out
        })
        .collect()
}

fn parent(version: &str, size: &str) -> Value {
    json!({
        "apiVersion": "myorg.io/v1", "kind": "Database",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {"version": version, "replicas": 1, "storage": {"size": size}, "backup": {"enabled": true}},
    })
}

fn rendered(version: &str, size: &str) -> Result<Vec<Value>, PlanError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let set = load(&root.join("rules"), &root.join("templates")).expect("shipped rules load");
    let rule = set.rule("database").expect("database rule");
    let plan = plan::plan(&set.renderer, rule, &parent(version, size), &[], "2026-11-29T10:00:00Z")?;
    let mut objects: Vec<Value> = plan.children.into_iter().map(|c| c.object).collect();
    for decision in plan.actions {
        if let Some(plan::actions::Effect::Create(object)) = decision.effect {
            objects.push(object);
        }
    }
    Ok(objects)
}

#[test]
fn raw_interpolation_refuses_every_structural_payload() {
    for payload in PAYLOADS {
        match rendered(payload, "1Gi") {
            Err(PlanError::Render(e)) => assert!(e.message.contains("not safe to insert raw"), "{payload:?}: {e}"),
            other => panic!("{payload:?} was not refused: {other:?}"),
        }
    }
}

#[test]
fn quoted_interpolation_keeps_every_payload_as_one_string() {
    let baseline = shapes(&rendered("16", "1Gi").expect("baseline renders"));
    for payload in PAYLOADS {
        let objects = rendered("16", payload).unwrap_or_else(|e| panic!("{payload:?}: {e}"));
        assert_eq!(shapes(&objects), baseline, "{payload:?} changed the structure");
        let size = objects[1].pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage");
        assert_eq!(size, Some(&json!(payload)), "{payload:?} was not kept verbatim");
    }
}

/// A rule set of one rule `r` over Databases with one ConfigMap child rendered by `text`, a
/// template file named `name` (under `t/`).
fn one_child_rule(name: &str, text: &str) -> RuleSet {
    let root = tempfile::tempdir().expect("tempdir");
    let (rules, templates) = (root.path().join("rules"), root.path().join("templates"));
    std::fs::create_dir_all(&rules).expect("mkdir");
    std::fs::create_dir_all(templates.join("t")).expect("mkdir");
    std::fs::write(
        rules.join("r.yaml"),
        format!("apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  watch: {{apiVersion: myorg.io/v1, kind: Database}}\n  children:\n    - {{id: cm, apiVersion: v1, kind: ConfigMap, template: {name}}}\n"),
    )
    .expect("write");
    std::fs::write(templates.join(name), text).expect("write");
    load(&rules, &templates).expect("loads")
}

#[test]
fn maps_from_the_resource_cannot_break_out_of_their_position() {
    let set = one_child_rule(
        "t/cm.yaml.j2",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {a: '{{ spec.labels }}'}\n  annotations: {{ spec.labels }}\ndata: {}\n",
    );
    let rule = set.rule("r").expect("rule");
    let mut p = parent("16", "1Gi");
    p["spec"]["labels"] = json!({"k": "', evil: '1", "q": "\"}, evil2: {\"", "h": "x #y"});
    match plan::plan(&set.renderer, rule, &p, &[], "2026-11-29T10:00:00Z") {
        Ok(plan) => {
            let object = &plan.children[0].object;
            let labels = object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .expect("labels");
            assert!(
                !labels.contains_key("evil") && !labels.contains_key("evil2"),
                "{object}"
            );
            let annotations = object.pointer("/metadata/annotations").expect("annotations");
            assert_eq!(annotations, &p["spec"]["labels"]);
        }
        Err(e) => assert!(matches!(e, PlanError::InvalidChild { .. }), "unexpected error {e}"),
    }
}

#[test]
fn escape_filters_refuse_every_payload_whatever_the_template_name() {
    for (name, filter) in [
        ("t/w.j2", "e"),
        ("t/x.tmpl", "e"),
        ("t/y.html.j2", "e"),
        ("t/z.html", "escape"),
        ("t/c.yaml.j2", "escape"),
        ("t/d.xml.j2", "escape"),
    ] {
        let set = one_child_rule(
            name,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: {{{{ spec.version | {filter} }}}}\n"
            ),
        );
        let rule = set.rule("r").expect("rule");
        for payload in PAYLOADS {
            match plan::plan(
                &set.renderer,
                rule,
                &parent(payload, "1Gi"),
                &[],
                "2026-11-29T10:00:00Z",
            ) {
                Err(PlanError::Render(e)) => {
                    assert!(e.message.contains("not safe to insert raw"), "{name} {payload:?}: {e}")
                }
                other => panic!("{name}: {payload:?} was not refused: {other:?}"),
            }
        }
    }
}
