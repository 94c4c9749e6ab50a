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

/// Publishes an Event of its own for one occurrence named by `identity` (an action run's key):
/// never folded into an earlier Event's series, whose note would speak of an earlier run, and
/// published at most once per identity (its name derives from it, so a repeat meets AlreadyExists).
pub fn publish_once(
    cluster: &Cluster<'_>,
    parent: &ParentHandle,
    type_: EventType,
    reason: &str,
    note: String,
    identity: &str,
) {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use sha2::{Digest, Sha256};

    let namespace = parent.reference.namespace.clone().unwrap_or_default();
    let digest = crate::rules::load::hex(&Sha256::digest(identity.as_bytes())[..8]);
    // Event names are DNS subdomains (253 characters); the digest keeps them apart.
    let base: String = parent.name.chars().take(200).collect();
    let controller = "ruleop".to_owned();
    let event = K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{digest}")),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        action: Some("RunAction".to_owned()),
        reason: Some(reason.to_owned()),
        note: Some(bounded(&note, NOTE_LIMIT).into_owned()),
        type_: Some(
            match type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_owned(),
        ),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(parent.reference.clone()),
        reporting_instance: Some(std::env::var("POD_NAME").unwrap_or_else(|_| controller.clone())),
        reporting_controller: Some(controller),
        ..K8sEvent::default()
    };
    cluster.count_write("POST", "Event");
    let api: kube::Api<K8sEvent> = kube::Api::namespaced(cluster.client.clone(), &namespace);
    let name = parent.name.clone();
    tokio::spawn(async move {
        match api.create(&kube::api::PostParams::default(), &event).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => {
                warn!(parent = %name, error = %bounded(&e.to_string(), MESSAGE_LIMIT), "publishing an Event failed");
            }
        }
    });
}

/// What one successful action run did, for its Event: the guard value it ran for, its key and
/// its effect.
pub fn action_run_note(decision: &crate::plan::actions::ActionDecision) -> String {
    use crate::plan::actions::Effect;
    let guard = decision.guard_value.as_deref().unwrap_or("?");
    let key = decision.key.as_deref().unwrap_or("?");
    let effect = match &decision.effect {
        Some(Effect::Create(object)) => {
            let text = |p: &str| object.pointer(p).and_then(serde_json::Value::as_str).unwrap_or("?");
            format!("created {} {}", text("/kind"), text("/metadata/name"))
        }
        Some(Effect::Http(request)) => format!("sent {} {}", request.method, request.url),
        None => "nothing to do".to_owned(),
    };
    format!("action {} ran for {guard} (key {key}): {effect}", decision.id)
}
