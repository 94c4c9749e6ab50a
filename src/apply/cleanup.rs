//! Label-owned children and the parent's finalizer: add and remove `ruleop.io/cleanup`, read a
//! deleting parent's objects fresh from the API server, and refuse to adopt an existing object.
//!
//! Why a fresh LIST on deletion: the caches lag behind our own writes, and a child created just
//! before the parent was deleted may not be in them yet; removing the finalizer on the cache's
//! word could leak it. Deletions are rare, so their extra reads cost nothing in steady state.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;

use super::{ApplyError, Cluster, ParentHandle};
use crate::engine::plan::children::DesiredChild;
use crate::engine::plan::context::LABEL_PARENT_UID;
use crate::engine::plan::deletion::{FinalizerStep, finalizer_patch};

/// Adds or removes our finalizer (one merge patch under the parent's resourceVersion) and
/// replaces `parent` with the result. A parent already gone counts as done.
pub async fn set_finalizer(
    cluster: &Cluster<'_>,
    handle: &ParentHandle,
    parent: &mut Value,
    step: FinalizerStep,
) -> Result<(), ApplyError> {
    let Some(patch) = finalizer_patch(parent, step) else {
        return Ok(());
    };
    cluster.count_write("PATCH", &handle.kind);
    match handle
        .api
        .patch(&handle.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(updated) => {
            let mut updated = serde_json::to_value(updated).unwrap_or_default();
            if let Some(meta) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            if let Some(uid) = &handle.reference.uid {
                cluster.written.record(uid, &updated);
            }
            *parent = updated;
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Err(ApplyError::Conflict("finalizer".to_owned())),
        Err(kube::Error::Api(status)) if status.code == 404 && step == FinalizerStep::Remove => Ok(()),
        Err(e) => Err(ApplyError::Finalizer(Box::new(e))),
    }
}

/// Every object of these kinds carrying the parent's UID label, read from the API server (all
/// namespaces: label-owned children live outside the parent's).
pub async fn list_owned(
    cluster: &Cluster<'_>,
    kinds: &[(String, String)],
    uid: &str,
) -> Result<Vec<Value>, ApplyError> {
    let params = ListParams::default().labels(&format!("{LABEL_PARENT_UID}={uid}"));
    let mut objects = Vec::new();
    for (api_version, kind) in kinds {
        let served = cluster.kind(api_version, kind)?;
        let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &served.resource);
        let list = api.list(&params).await.map_err(|e| ApplyError::List {
            kind: kind.clone(),
            source: Box::new(e),
        })?;
        for item in list.items {
            let mut json = serde_json::to_value(item).unwrap_or_default();
            if let Some(map) = json.as_object_mut() {
                map.insert("apiVersion".to_owned(), Value::from(api_version.clone()));
                map.insert("kind".to_owned(), Value::from(kind.clone()));
            }
            objects.push(json);
        }
    }
    Ok(objects)
}

/// Before the first apply of a label-owned child: an object of that name that exists without
/// this parent's UID label belongs to someone else. Server-side apply would adopt it, and the
/// parent's deletion would then delete it (think of a Tenant naming its Namespace
/// `kube-system`), so it is refused instead.
pub async fn refuse_adoption(cluster: &Cluster<'_>, child: &DesiredChild) -> Result<(), ApplyError> {
    let target = &child.target;
    let api = cluster.api(&target.api_version, &target.kind, &target.namespace)?;
    let existing = api.get_opt(&target.name).await.map_err(|source| ApplyError::Child {
        target: target.clone(),
        source: Box::new(source),
    })?;
    let want = child
        .object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_PARENT_UID))
        .and_then(Value::as_str);
    let theirs = existing.is_some_and(|o| o.labels().get(LABEL_PARENT_UID).map(String::as_str) != want);
    if theirs {
        return Err(ApplyError::NotOurs(target.clone()));
    }
    Ok(())
}

/// Whether a desired child is owned by labels (it carries the parent annotation instead of an
/// ownerReference).
pub fn is_label_owned(child: &DesiredChild) -> bool {
    child
        .object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(crate::engine::plan::scope::ANNOTATION_PARENT))
        .is_some()
}
