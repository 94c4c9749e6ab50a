//! Test fixtures shared by the model and render tests: a rule with a plain child (readyWhen),
//! a `forEach` child that depends on it, a Secret, a child whose `when` is false and an action.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::model::{Drift, Inputs, Trace, build};
use crate::engine::plan::children::ObjectRef;
use crate::engine::plan::{self, Plan};
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::load_sources;

const RULE: &str = r#"
apiVersion: ruleop.io/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  watch: {apiVersion: example.io/v1, kind: App}
  children:
    - id: service
      apiVersion: v1
      kind: Service
      template: service.yaml.j2
      readyWhen: object | dig("spec.clusterIP", "") != ""
    - id: config
      apiVersion: v1
      kind: ConfigMap
      template: config.yaml.j2
      forEach: spec.items
      key: "{{ item }}"
      dependsOn: [service]
    - id: secret
      apiVersion: v1
      kind: Secret
      template: secret.yaml.j2
    - id: off
      apiVersion: v1
      kind: ConfigMap
      template: config.yaml.j2
      when: "false"
  actions:
    - id: seed
      guard: {generation: true}
      create: {apiVersion: v1, kind: ConfigMap, template: seed.yaml.j2}
"#;

const SERVICE: &str =
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ metadata.name }}-svc\nspec:\n  ports:\n    - port: 80\n";
const CONFIG: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-{{ item_key }}\ndata:\n  k: v\n";
const SECRET: &str =
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ metadata.name }}-creds\nstringData:\n  password: hunter2\n";
const SEED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-seed\n";

pub(super) const NOW: &str = "2026-12-02T10:00:00Z";

pub(super) fn set() -> RuleSet {
    let file = |name: &str, text: &str| (name.to_owned(), PathBuf::from(name), text.to_owned());
    let templates = [
        file("service.yaml.j2", SERVICE),
        file("config.yaml.j2", CONFIG),
        file("secret.yaml.j2", SECRET),
        file("seed.yaml.j2", SEED),
    ];
    load_sources(&templates, &[file("app.yaml", RULE)]).expect("a valid rule")
}

pub(super) fn parent(name: &str, items: usize) -> Value {
    let items: Vec<String> = (0..items).map(|i| format!("i{i:02}")).collect();
    json!({
        "apiVersion": "example.io/v1", "kind": "App",
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1", "generation": 2,
                     "finalizers": ["ruleop.io/cleanup"]},
        "spec": {"items": items},
        "status": {"observedGeneration": 1, "conditions": [
            {"type": "Ready", "status": "False", "reason": "ChildNotReady",
             "message": "child \"service\" is not ready:\nreadyWhen is false", "lastTransitionTime": NOW}],
            "actions": {"seed": {"key": "0123456789abcdef", "guardValue": "generation=1", "phase": "Done", "runs": 1, "attempts": 1}}}
    })
}

pub(super) fn plan_of(set: &RuleSet, parent: &Value, observed: &[Value]) -> Plan {
    plan::plan_with(
        &set.renderer,
        &set.rules[0],
        parent,
        observed,
        &plan::lookups::NoLookups,
        NOW,
    )
    .expect("a plan")
}

/// The objects a first plan renders, as if applied (the Service with a clusterIP: ready).
pub(super) fn applied(plan: &Plan) -> Vec<Value> {
    plan.children
        .iter()
        .map(|c| {
            let mut object = c.object.clone();
            if c.target.kind == "Service" {
                object["spec"]["clusterIP"] = json!("10.0.0.1");
            }
            object
        })
        .collect()
}

pub(super) fn trace_of(
    parent: &Value,
    observed: &[Value],
    drift: &BTreeMap<ObjectRef, Drift>,
    events: &[Value],
) -> Trace {
    let set = set();
    let plan = plan_of(&set, parent, observed);
    build(&Inputs {
        rule: &set.rules[0],
        parent,
        observed,
        plan: Ok(&plan),
        drift,
        events,
    })
}
