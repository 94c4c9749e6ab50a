//! Throwaway custom kinds for tests that must create, break or delete a CRD without touching
//! the shipped ones other tests use: a CRD whose objects keep any field, and a one-rule
//! directory that gives each object one ConfigMap child.

use super::{kubectl, kubectl_ok, kubectl_with_stdin, written};

/// Files as (path relative to a directory, content).
pub type Files = Vec<(String, String)>;

/// A namespaced custom kind `<kind>` in `<group>/v1`.
pub struct CustomKind {
    /// The API group, unique to the test.
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl CustomKind {
    /// A kind in a group named after the test, so parallel tests never share it.
    pub fn new(test: &str, kind: &str) -> Self {
        CustomKind {
            group: format!("{test}.ruleop.test"),
            kind: kind.to_owned(),
        }
    }

    /// The plural (resource) name.
    pub fn plural(&self) -> String {
        format!("{}s", self.kind.to_lowercase())
    }

    /// `<plural>.<group>`, the CRD's name and what kubectl accepts as a resource.
    pub fn resource(&self) -> String {
        format!("{}.{}", self.plural(), self.group)
    }

    /// `<group>/v1`.
    pub fn api_version(&self) -> String {
        format!("{}/v1", self.group)
    }

    /// The CRD: objects keep every field (`x-kubernetes-preserve-unknown-fields`), status subresource on.
    pub fn crd(&self) -> String {
        self.crd_with_schema("          type: object\n          x-kubernetes-preserve-unknown-fields: true\n")
    }

    /// The CRD whose status is typed: `properties` is the JSON of `status.properties` (plus
    /// `conditions` and `observedGeneration`, which the engine writes), every other field is
    /// pruned; `spec` keeps any field.
    pub fn crd_with_typed_status(&self, properties: &str) -> String {
        let properties = properties.split_whitespace().collect::<Vec<_>>().join(" ");
        let inner = properties
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .expect("properties is one JSON object");
        let engine = r#""observedGeneration": {"type": "integer"}, "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}"#;
        self.crd_with_schema(&format!(
            "          type: object\n          properties:\n            spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n            status: {{\"type\": \"object\", \"properties\": {{{engine}, {inner}}}}}\n"
        ))
    }

    /// The CRD whose spec declares exactly `properties` (JSON of `spec.properties`); status
    /// keeps any field.
    pub fn crd_with_typed_spec(&self, properties: &str) -> String {
        let properties = properties.split_whitespace().collect::<Vec<_>>().join(" ");
        self.crd_with_schema(&format!(
            "          type: object\n          properties:\n            spec: {{\"type\": \"object\", \"properties\": {properties}}}\n            status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        ))
    }

    fn crd_with_schema(&self, open_api_v3_schema: &str) -> String {
        let (kind, plural, group) = (&self.kind, self.plural(), &self.group);
        let singular = kind.to_lowercase();
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      subresources: {{status: {{}}}}\n      schema:\n        openAPIV3Schema:\n{open_api_v3_schema}"
        )
    }

    /// Creates the CRD (keeping any field) and waits until it is served.
    pub fn install(&self) {
        self.install_crd(&self.crd());
    }

    /// Creates `crd` (one of this kind's) and waits until it is served.
    pub fn install_crd(&self, crd: &str) {
        let out = kubectl_with_stdin(&["apply", "-f", "-"], Some(crd));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{}", self.resource()),
            "--timeout=60s",
        ]);
    }

    /// Deletes the CRD (and so every object of the kind) and waits until it is gone.
    pub fn uninstall(&self) {
        let _ = kubectl(&[
            "delete",
            &format!("crd/{}", self.resource()),
            "--wait=true",
            "--timeout=60s",
        ]);
    }

    /// An object of the kind with `spec` given as JSON text.
    pub fn object(&self, name: &str, spec_json: &str) -> String {
        format!(
            "{{\"apiVersion\":\"{}\",\"kind\":\"{}\",\"metadata\":{{\"name\":\"{name}\"}},\"spec\":{spec_json}}}",
            self.api_version(),
            self.kind
        )
    }

    /// Rules and templates written by a test: rule `<rule>` watches the kind, `spec_body` is the
    /// rest of its spec (indented two spaces), `templates` are `(path, text)` pairs.
    pub fn rule_files(
        &self,
        rule: &str,
        spec_body: &str,
        templates: &[(&str, &str)],
    ) -> (tempfile::TempDir, tempfile::TempDir) {
        let text = format!(
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata:\n  name: {rule}\nspec:\n  watch:\n    apiVersion: {}\n    kind: {}\n{spec_body}",
            self.api_version(),
            self.kind
        );
        (written(&[(&format!("{rule}.yaml"), &text)]), written(templates))
    }

    /// Rules and templates: rule `<rule>` watches the kind and gives each object a ConfigMap
    /// `<name>-cm` holding its `spec.size` (an object without one fails to render).
    pub fn config_map_rule(&self, rule: &str) -> (tempfile::TempDir, tempfile::TempDir) {
        let (rule_files, template_files) = self.config_map_rule_files(rule);
        let dirs = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        for (dir, files) in [(&dirs.0, rule_files), (&dirs.1, template_files)] {
            for (path, text) in files {
                std::fs::write(dir.path().join(path), text).expect("write");
            }
        }
        dirs
    }

    /// The files of [`CustomKind::config_map_rule`] as (relative path, content): rules, templates.
    pub fn config_map_rule_files(&self, rule: &str) -> (Files, Files) {
        let text = format!(
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata:\n  name: {rule}\nspec:\n  watch:\n    apiVersion: {}\n    kind: {}\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: {rule}-cm.yaml.j2\n",
            self.api_version(),
            self.kind
        );
        let template = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-cm\ndata:\n  size: {{ spec.size | tojson }}\n";
        (
            vec![(format!("{rule}.yaml"), text)],
            vec![(format!("{rule}-cm.yaml.j2"), template.to_owned())],
        )
    }
}

/// JSON nested `depth` levels deep: `{"a":{"a":...1...}}`.
pub fn nested_json(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}
