//! What applying a child would change, asked of the API server: a server-side apply with
//! `dryRun=All` (authorized and admitted like the real write, never persisted), cut down to the
//! fields ruleop manages on either side so defaults and other managers' fields never show.

use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::{api_for, fields};
use crate::apply::{FIELD_MANAGER, api_error};
use crate::cache::discovery::Kinds;
use crate::engine::plan::children::{ANNOTATION_DESIRED_HASH, ObjectRef};
use crate::engine::yaml;

/// The managed fields of a child before and after a dry-run apply, as sorted YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compared {
    /// The live object's managed fields (`None` when it does not exist).
    pub before: Option<String>,
    /// The dry run's result, cut to the same fields.
    pub after: String,
}

impl Compared {}

/// Why a dry run gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DryRunError {
    /// The child's kind was not resolved through discovery.
    #[error("{0:#}")]
    Kind(anyhow::Error),
    /// The API server refused the apply (validation, admission, immutable field, RBAC).
    #[error("would be refused by the API server: {0}")]
    Refused(String),
}

/// Dry-runs the apply of `desired` (the object as the operator would send it) onto `live` (the
/// object as stored, with its managedFields) and compares the fields ruleop would own.
pub(crate) async fn compare(
    client: &Client,
    kinds: &Kinds,
    target: &ObjectRef,
    desired: &Value,
    live: Option<&Value>,
) -> Result<Compared, DryRunError> {
    let params = PatchParams::apply(FIELD_MANAGER).force().validation_strict().dry_run();
    let api = api_for(
        client,
        kinds,
        &target.api_version,
        &target.kind,
        Some(&target.namespace),
    )
    .map_err(DryRunError::Kind)?;
    let result = match api.patch(&target.name, &params, &Patch::Apply(desired)).await {
        Ok(object) => serde_json::to_value(object).unwrap_or_default(),
        Err(e) => return Err(DryRunError::Refused(api_error::describe(&e))),
    };
    let mut owned = fields::owned_by(&result, FIELD_MANAGER);
    if let Some(live) = live {
        fields::merge(&mut owned, &fields::owned_by(live, FIELD_MANAGER));
    }
    let shown = |object: &Value| {
        let mut projected = fields::project(object, &owned);
        if let Some(Value::Object(annotations)) = projected.pointer_mut("/metadata/annotations") {
            annotations.remove(ANNOTATION_DESIRED_HASH);
            if annotations.is_empty()
                && let Some(Value::Object(metadata)) = projected.get_mut("metadata")
            {
                metadata.remove("annotations");
            }
        }
        yaml::to_string(&sorted(projected))
    };
    Ok(Compared {
        before: live.map(shown),
        after: shown(&result),
    })
}

/// `value` with every map's keys in order: the live object (JSON as stored) and the dry run's
/// result (decoded through typed metadata) list the same fields in different orders.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// A unified diff of two texts.
pub(crate) fn unified(before: &str, after: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}
