//! Desired children: render a child's template and check it is exactly the one object declared.

use serde_json::{Value, json};

use super::PlanError;
use super::context::{LABEL_CHILD, LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use super::scope::{self, Placement};
use crate::engine::base::builtin_kinds;
use crate::engine::base::digest::sha256_hex_prefix;
use crate::engine::base::k8s_names;
use crate::engine::rules::model::ImmutableChangePolicy;
use crate::engine::template::Renderer;
use crate::engine::yaml;

/// Annotation holding a digest of everything we render for a child: removing a field from a
/// template changes it, so the removal is applied even though the live object still covers us;
/// and `updateStrategy: Recreate` compares it to tell a changed rendering from drift.
pub(crate) const ANNOTATION_DESIRED_HASH: &str = "ruleop.io/desired-hash";

/// The digest [`ANNOTATION_DESIRED_HASH`] holds for a rendered object.
pub(crate) fn desired_hash(object: &Value) -> String {
    sha256_hex_prefix(object.to_string().as_bytes(), 8)
}

/// The digest a live object carries, if any.
pub(crate) fn live_hash(live: &Value) -> Option<&str> {
    live.pointer("/metadata/annotations")?
        .get(ANNOTATION_DESIRED_HASH)?
        .as_str()
}

/// What this reconcile does with a child (see `updateStrategy` and `scaling`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChildUpdate {
    /// Server-side apply it (a no-op when the live object already holds it).
    #[default]
    Apply,
    /// Leave the live object as it is (`OnDelete`, an item waiting for its rolling turn, or an
    /// object still being deleted for `Recreate`).
    Keep,
    /// Delete it; a later reconcile creates it from the new rendering once it is gone.
    Recreate,
    /// Do not create it yet: an item of a `scaling: Ordered` forEach waits until every item
    /// before it exists and is ready.
    Wait,
}

impl ChildUpdate {
    /// Whether it is the default (left out of `ruleop render`).
    pub fn is_apply(&self) -> bool {
        *self == ChildUpdate::Apply
    }
}

/// A child as it will be applied.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredChild {
    /// The child's id in the rule.
    pub id: String,
    /// Identity of the object.
    #[serde(flatten)]
    pub target: ObjectRef,
    /// The complete object to apply, with our labels and the controller owner reference.
    pub object: Value,
    /// What to do when the apply hits an immutable field.
    #[serde(skip)]
    pub on_immutable_change: ImmutableChangePolicy,
    /// Whether the rule lets this child take over an existing object of its name that is not
    /// this parent's (`adopt: true`); otherwise such an object is refused (`ChildNotOwned`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// What happens to the live object, by the child's `updateStrategy`.
    #[serde(skip_serializing_if = "ChildUpdate::is_apply")]
    pub update: ChildUpdate,
}

/// Identity of an object (`namespace` is empty for cluster-scoped kinds).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version` or `v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The identity of an observed object, if it has the fields.
    pub fn of(object: &Value) -> Option<Self> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        Some(ObjectRef {
            api_version: text("/apiVersion")?,
            kind: text("/kind")?,
            namespace: text("/metadata/namespace").unwrap_or_default(),
            name: text("/metadata/name")?,
        })
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// What a template must produce.
pub(crate) struct Declared<'a> {
    /// Id of the child or action, for messages and labels.
    pub id: &'a str,
    /// Declared apiVersion.
    pub api_version: &'a str,
    /// Declared kind.
    pub kind: &'a str,
    /// Template name.
    pub template: &'a str,
    /// Where the object may live.
    pub placement: Placement,
}

/// The length of `object` as compact JSON, counted without building the text.
pub(crate) fn json_len(object: &Value) -> usize {
    /// Counts what serde_json writes.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, object);
    count.0
}

/// Renders one template into one checked object carrying our labels and owner reference.
pub(crate) fn render_object(
    renderer: &Renderer,
    declared: &Declared<'_>,
    parent: &ParentRef,
    rule_name: &str,
    context: &minijinja::Value,
) -> Result<Value, PlanError> {
    let invalid = |message: String| PlanError::InvalidChild {
        id: declared.id.to_owned(),
        template: declared.template.to_owned(),
        message,
    };
    let rendered = renderer.render_yaml(declared.template, context)?;
    let mut documents = yaml::documents(&rendered.text).map_err(|e| {
        invalid(format!(
            "rendered text is not valid YAML at line {}: {}",
            e.line.unwrap_or(0),
            rendered.placeholders.display(&e.message)
        ))
    })?;
    let mut object = match documents.len() {
        // Strings the formatter wrote as placeholders go back in before anything reads the object.
        1 => rendered
            .placeholders
            .restore(documents.remove(0))
            .map_err(|e| invalid(e.to_string()))?,
        0 => return Err(invalid("rendered no object".to_owned())),
        n => {
            return Err(invalid(format!(
                "rendered {n} documents; a template must render exactly one object"
            )));
        }
    };
    let Some(map) = object.as_object_mut() else {
        return Err(invalid("rendered a scalar or list, not an object".to_owned()));
    };
    for (field, want) in [("apiVersion", declared.api_version), ("kind", declared.kind)] {
        let got = map.get(field).and_then(Value::as_str).unwrap_or_default();
        if got != want {
            return Err(invalid(format!(
                "rendered {field} {got:?} but the rule declares {want:?}"
            )));
        }
    }
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err(invalid("metadata is not a mapping".to_owned()));
    };
    let ownership = scope::place(metadata, declared.placement, parent).map_err(invalid)?;
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(labels) = labels.as_object_mut() else {
        return Err(invalid("metadata.labels is not a mapping".to_owned()));
    };
    labels.insert(LABEL_RULE.to_owned(), json!(rule_name));
    labels.insert(LABEL_PARENT_UID.to_owned(), json!(parent.uid));
    match ownership {
        scope::Ownership::Controller => {
            let owners = metadata.entry("ownerReferences").or_insert_with(|| json!([]));
            match owners.as_array_mut() {
                Some(owners) => owners.push(parent.owner_reference()),
                None => return Err(invalid("metadata.ownerReferences is not a list".to_owned())),
            }
        }
        scope::Ownership::Labels => {
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            let Some(annotations) = annotations.as_object_mut() else {
                return Err(invalid("metadata.annotations is not a mapping".to_owned()));
            };
            annotations.insert(
                scope::ANNOTATION_PARENT.to_owned(),
                json!(super::ownership::parent_annotation(parent)),
            );
        }
    }
    builtin_kinds::check_types(&object).map_err(&invalid)?;
    let is_builtin = builtin_kinds::plural(declared.api_version, declared.kind).is_some();
    k8s_names::check_keys(&object, is_builtin).map_err(invalid)?;
    Ok(object)
}

/// Renders a child and names it.
pub(crate) fn desired_child(
    renderer: &Renderer,
    declared: &Declared<'_>,
    on_immutable_change: ImmutableChangePolicy,
    parent: &ParentRef,
    rule_name: &str,
    context: &minijinja::Value,
) -> Result<DesiredChild, PlanError> {
    let mut object = render_object(renderer, declared, parent, rule_name, context)?;
    if let Some(labels) = object.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.insert(LABEL_CHILD.to_owned(), json!(declared.id));
    }
    let target = ObjectRef::of(&object).ok_or_else(|| PlanError::InvalidChild {
        id: declared.id.to_owned(),
        template: declared.template.to_owned(),
        message: "rendered object has no metadata.name".to_owned(),
    })?;
    k8s_names::check_name(&object).map_err(|message| PlanError::InvalidChild {
        id: declared.id.to_owned(),
        template: declared.template.to_owned(),
        message,
    })?;
    Ok(DesiredChild {
        id: declared.id.to_owned(),
        target,
        object,
        on_immutable_change,
        adopt: false,
        update: ChildUpdate::Apply,
    })
}
