//! Kubernetes Events on the parent: one per child create/update/prune and per error.

use kube::runtime::events::{Event, EventType};
use tracing::warn;

use k8s_openapi::api::core::v1::ObjectReference;

use super::{Cluster, ParentHandle};
use crate::plan::children::ObjectRef;

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
    let mut note = note;
    if note.len() > 1000 {
        let mut cut = 1000;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
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
            warn!(parent = %name, error = %e, "publishing an Event failed");
        }
    });
}
