//! Kubernetes Events on the parent: one per reconcile that changed something, summarising it
//! ("created Service orders-svc, StatefulSet orders; ran backup for generation=1 ..."), and a
//! Warning of its own for each failure. An Event that repeats within [`SERIES_WINDOW`] is not a
//! new object: it becomes an events.k8s.io series (count and last time patched onto the first).
//!
//! Why not kube's `Recorder`: it folds Events with the same reason into one series whatever
//! their notes say (its key has no note), so a second run's Event would show the first run's
//! note with a count of 2. Here the note is part of what makes two Events the same.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, Client};
use serde_json::json;
use tracing::warn;

use super::children::ChildOutcome;
use super::{Cluster, ParentHandle};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::actions::{ActionDecision, Effect};
use crate::engine::plan::children::ObjectRef;

/// Longest Event note sent, before the `… (N bytes in all)` suffix.
const NOTE_LIMIT: usize = 960;

/// How long after its last occurrence an Event still folds a repeat into its series: the
/// window client-go's and kube's recorders use.
pub(crate) const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Events sent at once. Events are for people and can wait: a burst of reconciles (a template
/// edit over 1,000 parents) sends its child writes first instead of sharing the API server with
/// as many Events.
const SENDERS: usize = 2;

/// Most Events waiting to be sent; more are dropped with a log line, as client-go's broadcaster
/// drops beyond its queue of 1,000: an API server too slow for Events must not fill memory.
const MAX_QUEUED: usize = 4096;

/// The reporting controller of every Event.
const CONTROLLER: &str = "ruleop";

/// The Events this process published in the last [`SERIES_WINDOW`], by what makes two Events
/// the same (regarding object, related object, type, reason and note), so a repeat is sent as
/// a series update of the first instead of a new object.
pub(crate) struct EventLog {
    client: Client,
    instance: String,
    recent: Mutex<HashMap<u64, Recent>>,
    /// Events in flight or waiting for a sender.
    senders: std::sync::Arc<tokio::sync::Semaphore>,
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// One recently published Event.
#[derive(Debug, Clone)]
struct Recent {
    name: String,
    count: i32,
    last: Instant,
}

impl EventLog {
    /// Events remembered for series.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.recent.lock().map_or(0, |recent| recent.len())
    }

    /// An empty log publishing through `client`, reporting as instance `POD_NAME` (or `ruleop`).
    pub(crate) fn new(client: Client) -> Self {
        EventLog {
            client,
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| CONTROLLER.to_owned()),
            recent: Mutex::new(HashMap::new()),
            senders: std::sync::Arc::new(tokio::sync::Semaphore::new(SENDERS)),
            queued: std::sync::Arc::default(),
        }
    }

    /// Decides whether this Event is new or a repeat (and remembers it); returns the write to send.
    fn record(&self, key: u64, prefix: &str, now: Instant) -> Send {
        let Ok(mut recent) = self.recent.lock() else {
            return Send::Create(event_name(prefix));
        };
        recent.retain(|_, r| now.duration_since(r.last) < SERIES_WINDOW);
        match recent.get_mut(&key) {
            Some(r) => {
                r.count += 1;
                r.last = now;
                Send::Series {
                    name: r.name.clone(),
                    count: r.count,
                }
            }
            None => {
                let name = event_name(prefix);
                recent.insert(
                    key,
                    Recent {
                        name: name.clone(),
                        count: 1,
                        last: now,
                    },
                );
                Send::Create(name)
            }
        }
    }

    /// After a series update found its Event gone (expired, or its create still in flight
    /// failed): the repeat starts a new Event under a new name.
    fn restart(&self, key: u64, name: &str) {
        if let Ok(mut recent) = self.recent.lock()
            && let Some(r) = recent.get_mut(&key)
        {
            r.name = name.to_owned();
            r.count = 1;
        }
    }
}

/// The write that publishes one Event.
enum Send {
    /// A new Event object with this name.
    Create(String),
    /// A repeat: patch the series of the Event of this name.
    Series { name: String, count: i32 },
}

/// A unique Event name, like kube's and client-go's recorders make (`<parent>.<hex
/// nanoseconds>`), plus a process-wide sequence number against two in the same nanosecond.
fn event_name(prefix: &str) -> String {
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let sequence = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}.{nanos:x}{sequence:x}")
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// Publishes an Event on the parent, about `child` when given, in the background (a reconcile
/// never waits for it; a failure to publish is logged, never fatal). A repeat of an Event
/// published in the last [`SERIES_WINDOW`] (same object, type, reason and note) is sent as a
/// series update of that Event.
pub(crate) fn publish(
    cluster: &Cluster<'_>,
    parent: &ParentHandle,
    child: Option<&ObjectRef>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    // The API server refuses Event notes over 1 KiB; leave room for the size suffix.
    let note = bounded(&note, NOTE_LIMIT).into_owned();
    let related = child.map(|c| ObjectReference {
        api_version: Some(c.api_version.clone()),
        kind: Some(c.kind.clone()),
        name: Some(c.name.clone()),
        namespace: Some(c.namespace.clone()).filter(|n| !n.is_empty()),
        ..ObjectReference::default()
    });
    let regarding = parent.reference.clone();
    let mut hasher = DefaultHasher::new();
    (
        &regarding.uid,
        &regarding.namespace,
        &regarding.name,
        child,
        type_name(type_),
        reason,
        &note,
    )
        .hash(&mut hasher);
    let key = hasher.finish();
    let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_owned());
    let base: String = parent.name.chars().take(200).collect();
    let log = cluster.events;
    let queued = std::sync::Arc::clone(&log.queued);
    if queued.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= MAX_QUEUED {
        queued.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        warn!(parent = %parent.name, reason, "dropping an Event: {MAX_QUEUED} are waiting to be sent");
        return;
    }
    let send = log.record(key, &base, Instant::now());
    cluster.count_write(
        match send {
            Send::Create(_) => "POST",
            Send::Series { .. } => "PATCH",
        },
        "Event",
    );
    let api: Api<K8sEvent> = Api::namespaced(log.client.clone(), &namespace);
    let event = K8sEvent {
        metadata: ObjectMeta {
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        action: Some("Reconcile".to_owned()),
        reason: Some(reason.to_owned()),
        note: Some(note),
        type_: Some(type_name(type_).to_owned()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(regarding),
        related,
        reporting_instance: Some(log.instance.clone()),
        reporting_controller: Some(CONTROLLER.to_owned()),
        ..K8sEvent::default()
    };
    let (log, parent_name) = (std::sync::Arc::clone(log), parent.name.clone());
    let senders = std::sync::Arc::clone(&log.senders);
    tokio::spawn(async move {
        let _permit = senders.acquire_owned().await;
        let result = match send {
            Send::Create(name) => create(&api, event, name).await,
            Send::Series { name, count } => {
                let patch = json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(k8s_openapi::jiff::Timestamp::now()),
                }});
                match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let name = event_name(&base);
                        log.restart(key, &name);
                        create(&api, event, name).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        queued.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = result {
            warn!(parent = %parent_name, error = %bounded(&e.to_string(), MESSAGE_LIMIT), "publishing an Event failed");
        }
    });
}

async fn create(api: &Api<K8sEvent>, mut event: K8sEvent, name: String) -> Result<(), kube::Error> {
    event.metadata.name = Some(name);
    api.create(&PostParams::default(), &event).await.map(|_| ())
}

/// What one reconcile changed, for its one Event.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    created: Vec<ObjectRef>,
    recreated: Vec<ObjectRef>,
    updated: Vec<ObjectRef>,
    deleted: Vec<ObjectRef>,
    released: Vec<ObjectRef>,
    ran: Vec<String>,
}

impl Summary {
    /// Notes a child's apply.
    pub(crate) fn child(&mut self, target: &ObjectRef, outcome: &ChildOutcome) {
        let list = match outcome {
            ChildOutcome::Unchanged => return,
            ChildOutcome::Created => &mut self.created,
            ChildOutcome::Recreated => &mut self.recreated,
            ChildOutcome::Updated => &mut self.updated,
            ChildOutcome::DeletedToRecreate => &mut self.deleted,
        };
        list.push(target.clone());
    }

    /// Notes a prune (or a cleanup delete).
    pub(crate) fn deleted(&mut self, target: &ObjectRef) {
        self.deleted.push(target.clone());
    }

    /// Notes a child released to live on (`deletionPolicy: Orphan`).
    pub(crate) fn released(&mut self, target: &ObjectRef) {
        self.released.push(target.clone());
    }

    /// Notes a successful action run.
    pub(crate) fn ran(&mut self, decision: &ActionDecision) {
        self.ran.push(action_run_note(decision));
    }

    /// The Event's reason: the most notable change (an action run, then a child created,
    /// recreated, updated, deleted); `None` when the reconcile changed nothing.
    pub(crate) fn reason(&self) -> Option<&'static str> {
        [
            (!self.ran.is_empty(), "ActionRan"),
            (!self.created.is_empty(), "ChildCreated"),
            (!self.recreated.is_empty(), "ChildRecreated"),
            (!self.updated.is_empty(), "ChildUpdated"),
            (!self.deleted.is_empty(), "ChildPruned"),
            (!self.released.is_empty(), "ChildReleased"),
        ]
        .into_iter()
        .find_map(|(any, reason)| any.then_some(reason))
    }

    /// The Event's note, e.g. `created Service orders-svc, StatefulSet orders; ran backup for
    /// generation=1 (key …): created Job orders-backup-…`. Objects in the parent's namespace go
    /// without it.
    pub(crate) fn note(&self, parent_namespace: &str) -> String {
        let name = |o: &ObjectRef| {
            if o.namespace.is_empty() || o.namespace == parent_namespace {
                format!("{} {}", o.kind, o.name)
            } else {
                format!("{} {}/{}", o.kind, o.namespace, o.name)
            }
        };
        let mut parts: Vec<String> = [
            ("created", &self.created),
            ("recreated", &self.recreated),
            ("updated", &self.updated),
            ("deleted", &self.deleted),
            ("released", &self.released),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(verb, list)| format!("{verb} {}", list.iter().map(name).collect::<Vec<_>>().join(", ")))
        .collect();
        parts.extend(self.ran.iter().cloned());
        parts.join("; ")
    }

    /// Publishes the reconcile's one Event, if it changed anything.
    pub(crate) fn publish(&self, cluster: &Cluster<'_>, parent: &ParentHandle) {
        if let Some(reason) = self.reason() {
            let namespace = parent.reference.namespace.clone().unwrap_or_default();
            publish(cluster, parent, None, EventType::Normal, reason, self.note(&namespace));
        }
    }
}

/// What one successful action run did: the guard value it ran for, its key and its effect.
pub(crate) fn action_run_note(decision: &ActionDecision) -> String {
    let guard = decision.guard_value.as_deref().unwrap_or("?");
    let key = decision.key.as_deref().unwrap_or("?");
    let effect = match &decision.effect {
        Some(Effect::Create(object)) => {
            let text = |p: &str| object.pointer(p).and_then(serde_json::Value::as_str).unwrap_or("?");
            format!("created {} {}", text("/kind"), text("/metadata/name"))
        }
        Some(Effect::Http(request)) => format!(
            "sent {} {}",
            request.method,
            crate::engine::egress::origin(&request.url)
        ),
        None => "nothing to do".to_owned(),
    };
    let skipped = match decision.skipped_slots {
        0 => String::new(),
        n => format!(", {n} earlier slot(s) skipped"),
    };
    format!("ran {} for {guard} (key {key}{skipped}): {effect}", decision.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn a_repeat_within_the_window_is_a_series_of_the_first_and_after_it_a_new_event() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let log = EventLog::new(Client::try_from(config).expect("client"));
        let start = Instant::now();
        let Send::Create(first) = log.record(1, "orders", start) else {
            panic!("a first occurrence is a new Event")
        };
        assert!(first.starts_with("orders."), "{first}");
        assert!(
            matches!(log.record(2, "orders", start), Send::Create(_)),
            "another note, another Event"
        );
        match log.record(1, "orders", start + Duration::from_secs(60)) {
            Send::Series { name, count } => assert_eq!((name, count), (first.clone(), 2)),
            Send::Create(_) => panic!("a repeat is a series"),
        }
        let later = start + Duration::from_secs(60) + SERIES_WINDOW;
        assert!(matches!(log.record(1, "orders", later), Send::Create(name) if name != first));
        assert_eq!(log.len(), 1, "the other Event left the window and was forgotten");
    }

    #[test]
    fn a_summary_lists_what_the_reconcile_did_and_is_named_after_the_most_notable() {
        let mut summary = Summary::default();
        assert_eq!(summary.reason(), None, "nothing changed, no Event");
        summary.child(&object("Service", "shop", "orders-svc"), &ChildOutcome::Created);
        summary.child(&object("StatefulSet", "shop", "orders"), &ChildOutcome::Created);
        summary.child(&object("ConfigMap", "shop", "same"), &ChildOutcome::Unchanged);
        summary.child(&object("Namespace", "", "tenant-a"), &ChildOutcome::Updated);
        summary.deleted(&object("ResourceQuota", "tenant-a", "quota"));
        assert_eq!(summary.reason(), Some("ChildCreated"));
        summary.ran(&ActionDecision {
            id: "backup".into(),
            run: true,
            reason: String::new(),
            guard_value: Some("generation=1".into()),
            key: Some("abc".into()),
            effect: Some(Effect::Create(
                json!({"kind": "Job", "metadata": {"name": "orders-backup-abc"}}),
            )),
            retry_in_ms: None,
            skipped_slots: 0,
        });
        assert_eq!(summary.reason(), Some("ActionRan"));
        assert_eq!(
            summary.note("shop"),
            "created Service orders-svc, StatefulSet orders; updated Namespace tenant-a; \
             deleted ResourceQuota tenant-a/quota; ran backup for generation=1 (key abc): created Job orders-backup-abc"
        );
    }
}
