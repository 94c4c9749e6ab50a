//! Kubernetes Events on the parent: one per child create/update/prune and per error.

use kube::runtime::events::{Event, EventType};
use tracing::warn;

use k8s_openapi::api::core::v1::ObjectReference;

use super::{Cluster, ParentHandle};
use crate::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::plan::children::ObjectRef;

/// Longest Event note sent, before the `… (N bytes in all)` suffix.
const NOTE_LIMIT: usize = 960;

/// Publishes an Event on the parent, about `child` when given (Events with the same reason
/// about different children stay separate instead of folding into one series). Sent in the
/// background so a reconcile never waits for it; a failure to publish is logged, never fatal.
pub fn publish(
    cluster: &Cluster<'_>,
    parent: &ParentHandle,
    child: Option<&ObjectRef>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    // The API server refuses Event notes over 1 KiB; leave room for the size suffix.
    let note = bounded(&note, NOTE_LIMIT).into_owned();
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: child.map(|c| ObjectReference {
            api_version: Some(c.api_version.clone()),
            kind: Some(c.kind.clone()),
            name: Some(c.name.clone()),
            namespace: Some(c.namespace.clone()),
            ..ObjectReference::default()
        }),
    };
    cluster.count_write("POST", "Event");
    let (recorder, reference, name) = (cluster.recorder.clone(), parent.reference.clone(), parent.name.clone());
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(parent = %name, error = %bounded(&e.to_string(), MESSAGE_LIMIT), "publishing an Event failed");
        }
    });
}
