//! Kubernetes Events on the parent: one per child create/update/prune and per error.

use kube::runtime::events::{Event, EventType};
use tracing::warn;

use super::{Cluster, ParentHandle};

/// Publishes an Event; a failure to publish is logged, never fatal.
pub async fn publish(cluster: &Cluster<'_>, parent: &ParentHandle, type_: EventType, reason: &str, note: String) {
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
        secondary: None,
    };
    cluster.count_write("POST", "Event");
    if let Err(e) = cluster.recorder.publish(&event, &parent.reference).await {
        warn!(parent = %parent.name, error = %e, "publishing an Event failed");
    }
}
