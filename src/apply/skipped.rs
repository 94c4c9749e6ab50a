//! What ruleop writes about an object it skips (it does not decode, or is over
//! `--max-object-size`): a Warning Event on the object, and on a parent `Ready=False` with the
//! reason and what to do; once per generation (the cache's `SkipReporter` decides when).

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::ObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::json;
use tracing::warn;

use crate::cache::discovery::ServedKind;
use crate::cache::watch::Skipped;
use crate::ops::Observability;

/// Merge-patches the parent's status to `Ready=False` (`why`), stamped `now`. A parent ruleop
/// does not cache is not reconciled, so nothing else writes its conditions meanwhile.
pub(crate) async fn mark_parent(
    client: Client,
    parent: &ServedKind,
    metadata: &ObjectMeta,
    why: &Skipped,
    now: String,
    observability: &Observability,
) {
    let (Some(name), namespace) = (metadata.name.as_deref(), metadata.namespace.as_deref()) else {
        return;
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) if parent.namespaced => Api::namespaced_with(client, ns, &parent.resource),
        _ => Api::all_with(client, &parent.resource),
    };
    let patch = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": "False",
        "reason": why.reason(),
        "message": why.message(&parent.resource.kind),
        "lastTransitionTime": now,
        "observedGeneration": metadata.generation,
    }]}});
    observability
        .metrics
        .api_write("PATCH", &format!("{}/status", parent.resource.kind));
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        warn!(kind = %parent.resource.kind, namespace = namespace.unwrap_or_default(), %name, error = %e,
              "writing Ready=False to a parent that is not cached failed");
    }
}

/// Publishes a Warning Event (`Undecodable` or `ObjectTooLarge`) on the skipped object of
/// `resource`, in a task of its own; nothing for an object without a name.
pub(crate) fn publish_event(recorder: &Recorder, resource: &ApiResource, metadata: &ObjectMeta, why: &Skipped) {
    let Some(name) = metadata.name.clone().filter(|n| !n.is_empty()) else {
        return;
    };
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(resource.api_version.clone()),
        kind: Some(resource.kind.clone()),
        name: Some(name),
        namespace: metadata.namespace.clone(),
        uid: metadata.uid.clone(),
        resource_version: metadata.resource_version.clone(),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: why.reason().to_owned(),
        note: Some(why.message(&resource.kind)),
        action: "Decode".to_owned(),
        secondary: None,
    };
    let recorder = recorder.clone();
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(error = %e, "publishing an Event failed");
        }
    });
}
