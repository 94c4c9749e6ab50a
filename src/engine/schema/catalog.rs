//! The schemas ruleop knows, by `(apiVersion, kind)`: read from CRD files (`--crds`, offline) or
//! from the CRD objects the API server serves (`ruleop run`). A CRD that is not structural is
//! a located error, as the API server would refuse it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Schema;
use crate::engine::diagnostic::{Diagnostic, Diagnostics, SourceLocation};
use crate::engine::yaml;

/// One served version of a custom resource kind.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdKind {
    /// The version's `openAPIV3Schema`.
    pub schema: Schema,
    /// The resource name, e.g. `databases`.
    pub plural: String,
    /// Whether objects of the kind live in a namespace.
    pub namespaced: bool,
    /// Where the CRD was read (a file, or `CustomResourceDefinition/<name>` live).
    pub origin: String,
    /// The CRD object as read.
    pub crd: Value,
}

/// Every known custom resource schema.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    kinds: BTreeMap<(String, String), CrdKind>,
    /// The files or directories read, for messages (`none` when empty).
    pub sources: Vec<PathBuf>,
}

impl Catalog {
    /// Reads every CRD in `paths` (files, or directories walked for `*.yaml`/`*.yml`); other
    /// documents are skipped. All-or-nothing, as rule loading is.
    pub fn read(paths: &[PathBuf]) -> Result<Catalog, Diagnostics> {
        let mut catalog = Catalog {
            sources: paths.to_vec(),
            ..Catalog::default()
        };
        let mut problems = Vec::new();
        for path in paths {
            if !path.exists() {
                problems.push(Diagnostic::new(
                    SourceLocation::new(path, 0, 0),
                    "--crds: no such file or directory",
                ));
                continue;
            }
            let files = crate::engine::base::files::read_tree(
                path,
                |p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")),
                &mut problems,
            );
            for (_, file, text) in files {
                catalog.read_text(&file, &text, &mut problems);
            }
        }
        if problems.is_empty() {
            Ok(catalog)
        } else {
            Err(Diagnostics(problems))
        }
    }

    fn read_text(&mut self, file: &Path, text: &str, problems: &mut Vec<Diagnostic>) {
        let docs = match yaml::documents(text) {
            Ok(docs) => docs,
            Err(e) => {
                let at = SourceLocation::new(file, e.line.unwrap_or(0), e.column.unwrap_or(0));
                problems.push(Diagnostic::new(at, e.message));
                return;
            }
        };
        for doc in docs.iter().filter(|d| d["kind"] == "CustomResourceDefinition") {
            let origin = file.display().to_string();
            for problem in self.add_crd(&origin, doc) {
                let (line, column) = locate(text, &problem.keys);
                problems.push(
                    Diagnostic::new(SourceLocation::new(file, line, column), problem.message)
                        .with_hint("a CRD must be structural: https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema"),
                );
            }
        }
    }

    /// Adds the served versions of one CRD object; returns what is wrong with it (nothing is
    /// added from a version with a problem).
    pub fn add_crd(&mut self, origin: &str, crd: &Value) -> Vec<CrdProblem> {
        let text = |pointer: &str| crd.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
        let name = text("/metadata/name");
        let (group, kind, plural) = (
            text("/spec/group"),
            text("/spec/names/kind"),
            text("/spec/names/plural"),
        );
        let namespaced = text("/spec/scope") != "Cluster";
        let mut problems = Vec::new();
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        for (i, version) in versions.into_iter().flatten().enumerate() {
            if version.get("served") == Some(&Value::Bool(false)) {
                continue;
            }
            let version_name = version.get("name").and_then(Value::as_str).unwrap_or_default();
            let at = |path: &str| {
                format!("CRD {name} version {version_name}: spec.versions[{i}].schema.openAPIV3Schema{path}")
            };
            let Some(raw) = version.pointer("/schema/openAPIV3Schema") else {
                problems.push(CrdProblem {
                    message: format!("{}: missing (a served version needs a schema)", at("")),
                    keys: vec!["versions".into(), "name".into()],
                });
                continue;
            };
            let mut found = Vec::new();
            structural_problems(raw, &mut Vec::new(), &mut found);
            let schema = match serde_json::from_value::<Schema>(raw.clone()) {
                Ok(schema) => schema,
                Err(e) => {
                    found.push((Vec::new(), format!("does not parse: {e}")));
                    Schema::default()
                }
            };
            if found.is_empty() {
                self.kinds.insert(
                    (format!("{group}/{version_name}"), kind.to_owned()),
                    CrdKind {
                        schema,
                        plural: plural.to_owned(),
                        namespaced,
                        origin: origin.to_owned(),
                        crd: crd.clone(),
                    },
                );
            }
            for (path, message) in found {
                let shown: String = path.iter().map(|k| format!(".{k}")).collect();
                let mut keys = vec!["versions".to_owned(), "openAPIV3Schema".to_owned()];
                keys.extend(path);
                problems.push(CrdProblem {
                    message: format!("{}: {message}", at(&shown)),
                    keys,
                });
            }
        }
        problems
    }

    /// The schema of a custom resource kind, when one was read.
    pub fn schema(&self, api_version: &str, kind: &str) -> Option<&Schema> {
        self.kind(api_version, kind).map(|k| &k.schema)
    }

    /// What is known of a custom resource kind.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&CrdKind> {
        self.kinds.get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// `(group, kind)` → plural of every kind read (what `ruleop rbac` needs).
    pub fn plurals(&self) -> BTreeMap<(String, String), String> {
        self.kinds
            .iter()
            .map(|((api_version, kind), crd)| {
                let group = api_version.rsplit_once('/').map_or("", |(g, _)| g).to_owned();
                ((group, kind.clone()), crd.plural.clone())
            })
            .collect()
    }

    /// Whether no schema was read.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

/// What is wrong with one CRD version, and the keys leading to it (to find its line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdProblem {
    /// The message, naming the CRD, the version and the schema path.
    pub message: String,
    /// Keys from the document's top towards the problem, searched in order for its line.
    pub keys: Vec<String>,
}

/// The structural-schema rules the API server enforces and pruning relies on: a type on
/// every node (unless it preserves unknown fields or is an int-or-string), `items` on every
/// array, not both `properties` and `additionalProperties`, and patterns that compile.
fn structural_problems(node: &Value, path: &mut Vec<String>, found: &mut Vec<(Vec<String>, String)>) {
    let Some(map) = node.as_object() else {
        found.push((path.clone(), "a schema node must be a mapping".to_owned()));
        return;
    };
    let flag = |key: &str| map.get(key) == Some(&Value::Bool(true));
    let type_ = map.get("type").and_then(Value::as_str).unwrap_or_default();
    let open = flag("x-kubernetes-preserve-unknown-fields") || flag("x-kubernetes-int-or-string");
    if type_.is_empty() && !open {
        found.push((path.clone(), "not structural: no type".to_owned()));
    }
    if path.is_empty() && !type_.is_empty() && type_ != "object" {
        found.push((path.clone(), format!("the root must be type object, found {type_}")));
    }
    if type_ == "array" && !map.contains_key("items") {
        found.push((path.clone(), "not structural: an array needs items".to_owned()));
    }
    if map.contains_key("properties")
        && map
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
    {
        found.push((
            path.clone(),
            "not structural: properties and additionalProperties are mutually exclusive".to_owned(),
        ));
    }
    if let Some(pattern) = map.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(pattern)
    {
        found.push((path.clone(), format!("pattern {pattern:?} does not compile: {e}")));
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            path.extend(["properties".to_owned(), name.clone()]);
            structural_problems(child, path, found);
            path.truncate(path.len() - 2);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get(key).filter(|c| c.is_object()) {
            path.push(key.to_owned());
            structural_problems(child, path, found);
            path.pop();
        }
    }
}

/// The 1-based line and column of the last of `keys` found one after the other in `text` (each
/// searched from where the previous one was), or the file when none is.
fn locate(text: &str, keys: &[String]) -> (u64, u64) {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut found = (0, 0);
    for key in keys {
        let hit = lines.iter().enumerate().skip(from).find_map(|(i, line)| {
            let trimmed = line.trim_start().trim_start_matches("- ");
            let indent = line.len() - trimmed.len();
            (trimmed.starts_with(&format!("{key}:")) || trimmed.starts_with(&format!("{{{key}:")))
                .then_some((i, indent))
        });
        if let Some((i, indent)) = hit {
            from = i;
            found = (i as u64 + 1, indent as u64 + 1);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size:
                  minimum: 1
";

    fn read(text: &str) -> Result<Catalog, Diagnostics> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("crd.yaml"), text).expect("write");
        Catalog::read(&[dir.path().join("crd.yaml")]).map(|mut c| {
            c.sources.clear();
            c
        })
    }

    #[test]
    fn a_node_without_a_type_is_located_at_its_line() {
        let err = read(CRD).expect_err("not structural").to_string();
        assert!(
            err.contains("crd.yaml:19:17: error: CRD widgets.example.com version v1"),
            "{err}"
        );
        assert!(
            err.contains("openAPIV3Schema.properties.spec.properties.size: not structural: no type"),
            "{err}"
        );
    }

    #[test]
    fn a_structural_crd_is_read_by_api_version_and_kind() {
        let catalog = read(&CRD.replace("minimum: 1", "type: integer")).expect("structural");
        let kind = catalog.kind("example.com/v1", "Widget").expect("known");
        assert_eq!(kind.plural, "widgets");
        assert!(kind.namespaced);
        assert!(kind.schema.properties["spec"].properties.contains_key("size"));
        assert_eq!(
            catalog.plurals().get(&("example.com".into(), "Widget".into())),
            Some(&"widgets".to_owned())
        );
        assert!(catalog.schema("example.com/v2", "Widget").is_none());
    }

    #[test]
    fn arrays_without_items_both_kinds_of_properties_and_bad_patterns_are_refused() {
        let crd = CRD.replace(
            "minimum: 1",
            "type: array\n                tags: {type: object, properties: {a: {type: string}}, additionalProperties: {type: string}}\n                name: {type: string, pattern: '(['}",
        );
        let err = read(&crd).expect_err("not structural").to_string();
        assert!(err.contains("size: not structural: an array needs items"), "{err}");
        assert!(
            err.contains("tags: not structural: properties and additionalProperties"),
            "{err}"
        );
        assert!(err.contains("name: pattern \"([\" does not compile"), "{err}");
    }

    #[test]
    fn a_missing_path_is_an_error() {
        let err = Catalog::read(&[PathBuf::from("/no/such/crds")]).expect_err("missing");
        assert_eq!(
            err.to_string(),
            "/no/such/crds: error: --crds: no such file or directory"
        );
    }
}
