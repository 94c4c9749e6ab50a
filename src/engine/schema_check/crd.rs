//! A CRD generated from a rule's `spec.schema` (`ruleop crd`): the group, version and kind from
//! `watch`, the schema as written plus the status fields the engine writes, the status
//! subresource, printer columns from the status fields and `Ready`, and short names.

use serde_json::{Map, Value, json};

use super::rule_check::Report;
use crate::engine::diagnostic::{Diagnostic, SourceLocation};
use crate::engine::rules::model::ParentSchema;
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::schema::Catalog;

/// The CRD of `rule`'s parent kind, when the rule has `spec.schema`.
pub(crate) fn generate(rule: &Rule) -> Option<Value> {
    let schema = rule.spec.schema.as_ref()?;
    let watch = &rule.spec.watch;
    let (group, version) = watch.api_version.rsplit_once('/')?;
    let singular = watch.kind.to_lowercase();
    let plural = schema.plural.clone().unwrap_or_else(|| format!("{singular}s"));
    let mut names = json!({
        "kind": watch.kind,
        "listKind": format!("{}List", watch.kind),
        "plural": plural,
        "singular": singular,
    });
    if !schema.short_names.is_empty() {
        names["shortNames"] = json!(schema.short_names);
    }
    let mut properties = Map::new();
    properties.insert("spec".to_owned(), schema.spec.clone());
    let mut served = json!({
        "name": version,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {}}},
    });
    if rule.writes_status() {
        properties.insert("status".to_owned(), status_schema(rule, schema));
        served["subresources"] = json!({"status": {}});
        served["additionalPrinterColumns"] = Value::Array(printer_columns(schema));
    }
    served["schema"]["openAPIV3Schema"]["properties"] = Value::Object(properties);
    Some(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [served],
        },
    }))
}

/// Rules with `spec.schema` against the CRDs in `catalog`: a committed CRD that differs from the
/// generated one is stale (an error, as a stale ClusterRole is); a missing one is a warning, and
/// the generated CRD joins the catalog so the rule's reads are checked all the same. A schema
/// that is not structural is an error.
pub(crate) fn check_committed(set: &RuleSet, catalog: &mut Catalog) -> Report {
    let mut report = Report::default();
    for rule in &set.rules {
        let Some(generated) = generate(rule) else { continue };
        let watch = &rule.spec.watch;
        let at = SourceLocation::new(&rule.file, 0, 0);
        let name = generated["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let committed = catalog
            .kind(&watch.api_version, &watch.kind)
            .map(|k| (k.origin.clone(), k.crd.clone()));
        match committed {
            Some((origin, crd)) => {
                if crd["spec"] != generated["spec"] || crd["metadata"]["name"] != generated["metadata"]["name"] {
                    report.errors.push(
                        Diagnostic::new(
                            at,
                            format!(
                                "rule {:?}: the committed CRD {origin} is stale: it differs from the one spec.schema generates",
                                rule.name
                            ),
                        )
                        .with_hint(format!("regenerate it: ruleop crd > {origin}")),
                    );
                }
            }
            None => {
                let mut generated_catalog = Catalog::default();
                let problems = generated_catalog.add_crd(&format!("{} spec.schema", rule.file.display()), &generated);
                for problem in &problems {
                    report.errors.push(Diagnostic::new(
                        at.clone(),
                        format!("rule {:?}: spec.schema: {}", rule.name, problem.message),
                    ));
                }
                if problems.is_empty() {
                    report.warnings.push(format!(
                        "{}: warning: rule {:?}: no committed CRD {name} (spec.schema generates it: ruleop crd > deploy/crds/{}.yaml)",
                        rule.file.display(),
                        rule.name,
                        watch.kind.to_lowercase()
                    ));
                    let _ = catalog.add_crd(&format!("{} spec.schema", rule.file.display()), &generated);
                }
            }
        }
    }
    report
}

/// The status schema: the rule's fields as written, and what the engine itself writes.
fn status_schema(rule: &Rule, schema: &ParentSchema) -> Value {
    let mut status = schema
        .status
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    if status.get("properties").is_none() {
        status["properties"] = json!({});
    }
    let Some(properties) = status["properties"].as_object_mut() else {
        return status;
    };
    properties
        .entry("observedGeneration")
        .or_insert_with(|| json!({"type": "integer", "format": "int64"}));
    properties.entry("conditions").or_insert_with(|| {
        json!({
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {"type": "string"},
                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                    "observedGeneration": {"type": "integer", "format": "int64"},
                },
            },
        })
    });
    if rule.spec.rollout.is_some() {
        properties
            .entry(crate::engine::plan::REVISION_FIELD)
            .or_insert_with(|| json!({"type": "integer", "format": "int64", "description": "The revision of the rule that last changed this object (see ruleop rollout history)."}));
    }
    if !rule.spec.actions.is_empty() {
        properties.entry("actions").or_insert_with(|| {
            json!({
                "type": "object",
                "description": "Records of guarded one-shot actions, kept by ruleop.",
                "x-kubernetes-preserve-unknown-fields": true,
            })
        });
    }
    for field in rule
        .spec
        .actions
        .iter()
        .filter_map(|a| a.record.as_ref()?.status_field.as_ref())
    {
        properties
            .entry(field.clone())
            .or_insert_with(|| json!({"type": "string", "format": "date-time"}));
    }
    status
}

/// A column per scalar status field the rule declares, then `Ready` and `Age`.
fn printer_columns(schema: &ParentSchema) -> Vec<Value> {
    let mut columns = Vec::new();
    let declared = schema
        .status
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    for (name, field) in declared.into_iter().flatten() {
        let type_ = field.get("type").and_then(Value::as_str).unwrap_or_default();
        if matches!(type_, "string" | "integer" | "number" | "boolean") {
            let mut title = name.clone();
            title[..1].make_ascii_uppercase();
            columns.push(json!({"name": title, "type": type_, "jsonPath": format!(".status.{name}")}));
        }
    }
    columns.push(
        json!({"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}),
    );
    columns.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rules::load::one_rule;

    #[test]
    fn a_rule_with_a_schema_prints_its_crd_with_engine_status_and_columns() {
        let set = one_rule(
            "widget",
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: widget}\nspec:
  watch: {apiVersion: example.com/v1, kind: Widget}
  schema:
    shortNames: [wd]
    spec: {type: object, properties: {size: {type: integer, default: 1}}}
    status: {type: object, properties: {phase: {type: string}, zones: {type: array, items: {type: string}}}}
  status:
    fields: {phase: ok}
",
        );
        let crd = generate(&set.rules[0]).expect("a CRD");
        assert_eq!(crd["metadata"]["name"], "widgets.example.com");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["wd"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["subresources"], json!({"status": {}}));
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert!(status.get("conditions").is_some() && status.get("observedGeneration").is_some());
        assert!(status.get("actions").is_none(), "no actions, no action records");
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(columns, vec!["Phase", "Ready", "Age"]);
    }
}
