//! Label-owned children and the parent's finalizer: add and remove `ruleop.io/cleanup`, read a
//! deleting parent's objects fresh from the API server, and refuse to take over an existing
//! object that is not this parent's.
//!
//! Why a fresh LIST on deletion: the caches lag behind our own writes, and a child created just
//! before the parent was deleted may not be in them yet; removing the finalizer on the cache's
//! word could leak it. Deletions are rare, so their extra reads cost nothing in steady state.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;

use super::{ApplyError, Cluster, ParentHandle};
use crate::engine::plan::children::DesiredChild;
use crate::engine::plan::context::LABEL_PARENT_UID;
use crate::engine::plan::deletion::{FinalizerStep, finalizer_patch};
use crate::engine::plan::ownership;

/// Adds or removes our finalizer (one merge patch under the parent's resourceVersion) and
/// replaces `parent` with the result. A parent already gone counts as done.
pub(crate) async fn set_finalizer(
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
            let updated = crate::cache::watch::as_cached(updated);
            if let Some(uid) = &handle.reference.uid {
                cluster.written.record(uid, parent, &updated);
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
pub(crate) async fn list_owned(
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

/// Before the first apply of a child (one not in the children cache): an object of that name
/// that exists without this parent's UID label or controller ownerReference belongs to someone
/// else. A forced server-side apply would take it over (our selector, our ownerReference: the
/// garbage collector then deletes it with the parent; think of a Tenant naming its Namespace
/// `kube-system`, or a Database naming its Service after the team's `payments-svc`), so it is
/// refused, unless the rule says `adopt: true` for this child.
pub(crate) async fn refuse_takeover(cluster: &Cluster<'_>, child: &DesiredChild) -> Result<(), ApplyError> {
    if child.adopt {
        return Ok(());
    }
    let target = &child.target;
    let api = cluster.api(&target.api_version, &target.kind, &target.namespace)?;
    let existing = api.get_opt(&target.name).await.map_err(|source| ApplyError::Child {
        target: target.clone(),
        source: Box::new(source),
    })?;
    let Some(existing) = existing else {
        return Ok(());
    };
    let uid = child
        .object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_PARENT_UID))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let existing = serde_json::to_value(existing).unwrap_or_default();
    if ownership::may_take_over(&existing, uid) {
        return Ok(());
    }
    Err(ApplyError::NotOurs {
        id: child.id.clone(),
        target: target.clone(),
    })
}
