//! Children: server-side apply of what differs, recreate on immutable changes when asked, prune.

use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use serde_json::{Value, json};

use super::{ApplyError, Cluster, FIELD_MANAGER, compare};
use crate::engine::plan::children::{ANNOTATION_DESIRED_HASH, ChildUpdate, DesiredChild, ObjectRef, desired_hash};
use crate::engine::plan::lifecycle::Release;
use crate::engine::rules::model::ImmutableChangePolicy;

/// What happened to one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildOutcome {
    /// Live already held it: no request sent.
    Unchanged,
    /// It did not exist and was created.
    Created,
    /// It existed and was updated.
    Updated,
    /// It was deleted to be created again (immutable field changed, `onImmutableChange: recreate`).
    Recreated,
    /// It was deleted for `updateStrategy: Recreate`; a later reconcile creates it once it is gone.
    DeletedToRecreate,
}

/// The object we send: the rendered child plus its desired-hash annotation.
pub(crate) fn with_desired_hash(child: &DesiredChild) -> Value {
    let mut object = child.object.clone();
    let digest = desired_hash(&child.object);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(ANNOTATION_DESIRED_HASH.to_owned(), json!(digest));
        }
    }
    object
}

/// Applies one child (`desired`: its object [`with_desired_hash`]) unless `live` already covers
/// it, or what its update strategy says instead.
pub(crate) async fn apply_child(
    cluster: &Cluster<'_>,
    child: &DesiredChild,
    desired: &Value,
    live: Option<&Value>,
) -> Result<ChildOutcome, ApplyError> {
    match child.update {
        ChildUpdate::Apply => {}
        ChildUpdate::Keep | ChildUpdate::Wait => return Ok(ChildOutcome::Unchanged),
        ChildUpdate::Recreate => {
            delete(cluster, &child.target).await?;
            if let Some(uid) = parent_uid(child) {
                cluster.written.record_child(uid, &child.target, None);
            }
            return Ok(ChildOutcome::DeletedToRecreate);
        }
    }
    if live.is_some_and(|live| compare::covers(live, desired)) {
        return Ok(ChildOutcome::Unchanged);
    }
    if live.is_none() {
        super::cleanup::refuse_takeover(cluster, child).await?;
    }
    let target = &child.target;
    let api = cluster.api(&target.api_version, &target.kind, &target.namespace)?;
    let params = PatchParams::apply(FIELD_MANAGER).force().validation_strict();
    cluster.count_write("PATCH", &target.kind);
    match api.patch(&target.name, &params, &Patch::Apply(desired)).await {
        Ok(applied) => Ok({
            remember(cluster, child, applied.metadata.resource_version.as_deref());
            if live.is_some() {
                ChildOutcome::Updated
            } else {
                ChildOutcome::Created
            }
        }),
        Err(kube::Error::Api(status)) if is_immutable(&status) => match child.on_immutable_change {
            ImmutableChangePolicy::Report => Err(ApplyError::Immutable {
                target: target.clone(),
                message: status.message.clone(),
            }),
            ImmutableChangePolicy::Recreate => {
                delete(cluster, target).await?;
                cluster.count_write("PATCH", &target.kind);
                let applied = api
                    .patch(&target.name, &params, &Patch::Apply(desired))
                    .await
                    .map_err(|source| ApplyError::Child {
                        target: target.clone(),
                        source: Box::new(source),
                    })?;
                remember(cluster, child, applied.metadata.resource_version.as_deref());
                Ok(ChildOutcome::Recreated)
            }
        },
        Err(kube::Error::Api(status)) if status.code == 422 && live.is_some() => {
            repair_drift(cluster, &api, target, desired, &params).await?;
            Ok(ChildOutcome::Updated)
        }
        Err(source) => Err(ApplyError::Child {
            target: target.clone(),
            source: Box::new(source),
        }),
    }
}

/// Remembers an applied child's resourceVersion until its cache shows it (see [`super::WrittenParents`]).
fn remember(cluster: &Cluster<'_>, child: &DesiredChild, version: Option<&str>) {
    if let (Some(uid), Some(version)) = (parent_uid(child), version.and_then(|v| v.parse::<u64>().ok())) {
        cluster.written.record_child(uid, &child.target, Some(version));
    }
}

/// The UID of the parent a rendered child carries in its labels.
fn parent_uid(child: &DesiredChild) -> Option<&str> {
    child
        .object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(crate::engine::plan::context::LABEL_PARENT_UID))
        .and_then(Value::as_str)
}

/// When someone else changed the key of a list item we own (say a Service port 5432 -> 6000),
/// server-side apply keeps their item beside ours and the result is invalid. A JSON merge
/// patch replaces our lists wholesale, dropping the foreign item; the apply then owns them again.
async fn repair_drift(
    cluster: &Cluster<'_>,
    api: &kube::Api<kube::api::DynamicObject>,
    target: &ObjectRef,
    desired: &Value,
    params: &PatchParams,
) -> Result<(), ApplyError> {
    let fail = |source: kube::Error| ApplyError::Child {
        target: target.clone(),
        source: Box::new(source),
    };
    let mut merge = desired.clone();
    if let Some(map) = merge.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    let merge_params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    cluster.count_write("PATCH", &target.kind);
    api.patch(&target.name, &merge_params, &Patch::Merge(&merge))
        .await
        .map_err(fail)?;
    cluster.count_write("PATCH", &target.kind);
    api.patch(&target.name, params, &Patch::Apply(desired))
        .await
        .map_err(fail)?;
    Ok(())
}

/// Whether the API server rejected a change to a field that cannot change in place. Kinds word
/// it differently: "field is immutable" (Job template), "may not change once set" (Service
/// clusterIP), "Forbidden: updates to statefulset spec for fields other than ..." (StatefulSet).
fn is_immutable(status: &kube::core::Status) -> bool {
    status.code == 422
        && ["immutable", "may not change once set", "Forbidden: updates to"]
            .iter()
            .any(|phrase| status.message.contains(phrase))
}

/// Releases an orphaned child (`deletionPolicy: Orphan`): one merge patch, under its
/// resourceVersion, removing ruleop's labels, annotations and ownerReference. A child already
/// gone counts as released.
pub(crate) async fn release(cluster: &Cluster<'_>, release: &Release) -> Result<(), ApplyError> {
    let target = &release.target;
    let api = cluster.api(&target.api_version, &target.kind, &target.namespace)?;
    cluster.count_write("PATCH", &target.kind);
    match api
        .patch(&target.name, &PatchParams::default(), &Patch::Merge(&release.patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            Err(ApplyError::Conflict(format!("release of {target}")))
        }
        Err(source) => Err(ApplyError::Prune {
            target: target.clone(),
            source: Box::new(source),
        }),
    }
}

/// Deletes a child (background propagation); a child already gone counts as deleted.
pub(crate) async fn delete(cluster: &Cluster<'_>, target: &ObjectRef) -> Result<(), ApplyError> {
    let api = cluster.api(&target.api_version, &target.kind, &target.namespace)?;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    cluster.count_write("DELETE", &target.kind);
    match api.delete(&target.name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Prune {
            target: target.clone(),
            source: Box::new(source),
        }),
    }
}
