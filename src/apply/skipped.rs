//! The status of a parent that ruleop will not keep in memory (over `--max-object-size`):
//! `Ready=False` with the reason and what to do, written once per generation of the parent.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ObjectMeta;
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
