//! The apply layer, the only code that writes to the cluster: children (server-side apply),
//! prune, guarded actions, status and Events. It sends a request only where the live state
//! differs from the plan, so reconciling a converged parent writes nothing.

pub(crate) mod actions;
pub(crate) mod api_error;
pub(crate) mod backpressure;
pub(crate) mod children;
pub(crate) mod cleanup;
pub(crate) mod client;
pub(crate) mod compare;
pub(crate) mod deliveries;
pub(crate) mod drift_limit;
pub(crate) mod events;
pub(crate) mod reconcile;
pub(crate) mod secrets;
pub(crate) mod skipped;
pub(crate) mod status_write;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::Recorder;
use serde_json::Value;

use crate::cache::discovery::{Kinds, ServedKind};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::children::ObjectRef;
use crate::ops::Observability;

/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "ruleop";

/// A failed write.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    /// A kind the rule declares is not known to the API server (it was not resolved).
    #[error("{0} is not a resolved kind")]
    UnknownKind(String),
    /// The API server rejected or failed a write to a child.
    #[error("applying {target} failed: {}", api_error::describe(source))]
    Child {
        /// The child.
        target: ObjectRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A child's apply changed an immutable field and its rule says to report it.
    #[error(
        "{target} cannot be updated in place: {} (set onImmutableChange: recreate to replace it)",
        bounded(message, MESSAGE_LIMIT)
    )]
    Immutable {
        /// The child.
        target: ObjectRef,
        /// The API server's message.
        message: String,
    },
    /// Deleting a child no longer desired failed.
    #[error("pruning {target} failed: {}", api_error::describe(source))]
    Prune {
        /// The child.
        target: ObjectRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Writing the parent's status failed.
    #[error("writing status failed: {}", api_error::describe(.0))]
    Status(#[source] Box<kube::Error>),
    /// Applying `spec.parentMetadata` onto the parent failed.
    #[error("applying the parent's labels and annotations failed: {}", api_error::describe(.0))]
    ParentMetadata(#[source] Box<kube::Error>),
    /// Adding or removing the parent's finalizer failed.
    #[error("updating the parent's finalizer failed: {0}")]
    Finalizer(#[source] Box<kube::Error>),
    /// Listing a deleting parent's objects failed.
    #[error("listing {kind} objects of the parent failed: {source}")]
    List {
        /// The kind listed.
        kind: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A child's name is taken by an object this parent does not own (no `ruleop.io/parent-uid`
    /// label and no controller ownerReference to it).
    #[error(
        "child {id:?}: {target} already exists and is not owned by this parent; ruleop does not take it over \
         (only the rule can allow that, with adopt: true on the child)"
    )]
    NotOurs {
        /// Child id.
        id: String,
        /// The existing object.
        target: ObjectRef,
    },
    /// Another writer changed the parent between our read and our intent record.
    #[error("the parent changed while recording action {0:?}; retrying")]
    Conflict(String),
    /// An action's effect failed.
    #[error("action {id:?} failed: {}", bounded(message, MESSAGE_LIMIT))]
    Action {
        /// Action id.
        id: String,
        /// What failed.
        message: String,
    },
    /// An `http` action's request was refused by the egress policy; nothing was sent.
    #[error("action {id:?} refused: {}", bounded(message, MESSAGE_LIMIT))]
    EgressDenied {
        /// Action id.
        id: String,
        /// Why (the rule's location, scheme and host only).
        message: String,
    },
}

impl ApplyError {
    /// A CamelCase reason for conditions, Events and metrics.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            ApplyError::UnknownKind(_) => "UnknownKind",
            ApplyError::Child { .. } => "ApplyFailed",
            ApplyError::Immutable { .. } => "ImmutableFieldChanged",
            ApplyError::Prune { .. } => "PruneFailed",
            ApplyError::Status(_) => "StatusWriteFailed",
            ApplyError::Finalizer(_) => "FinalizerFailed",
            ApplyError::ParentMetadata(_) => "ParentMetadataFailed",
            ApplyError::List { .. } => "ListFailed",
            ApplyError::NotOurs { .. } => "ChildNotOwned",
            ApplyError::Conflict(_) => "Conflict",
            ApplyError::Action { .. } => "ActionFailed",
            ApplyError::EgressDenied { .. } => crate::engine::egress::EGRESS_DENIED,
        }
    }
}

/// How many of a parent's own writes are remembered until their watch events come back.
const ECHOES_KEPT: usize = 16;

/// What our own writes left, by parent UID, until the caches catch up: the parent as our last
/// status write returned it, and the resourceVersion each child write returned (or that it
/// deleted the child).
///
/// Our writes reach the caches through the watches, a moment later; a reconcile triggered in
/// between (by our own finalizer or status write) would plan on the older state: decide an
/// action is due again, or apply a child it created a moment before once more (a second write
/// and a second Event for nothing).
///
/// It also keeps the resourceVersion each of our parent writes returned until the parent watch
/// delivers it ([`WrittenParents::echo`]): that event is our own write coming back, and the
/// reconcile that sent it planned on everything it shows, so it queues no reconcile.
#[derive(Debug, Default)]
pub(crate) struct WrittenParents {
    parents: std::sync::Mutex<std::collections::HashMap<String, Value>>,
    children: std::sync::Mutex<std::collections::HashMap<String, std::collections::HashMap<ObjectRef, Option<u64>>>>,
    echoes: std::sync::Mutex<std::collections::HashMap<String, Vec<u64>>>,
}

/// A resourceVersion as a number: the API server takes it from etcd's monotonic revision.
fn resource_version(object: &Value) -> Option<u64> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)?
        .parse::<u64>()
        .ok()
}

/// Whether a parent as a write of ours returned it (`after`) differs from the parent the write
/// planned on (`before`) only in what our parent writes change (its status, its finalizers): the
/// same generation, spec, labels, annotations and deletion. Then a reconcile on it plans what the
/// writing reconcile planned, whoever made its resourceVersion: a write that changed nothing
/// returns the version of the write before it, which may be someone else's, with more in it.
/// Both are kept as the caches keep parents ([`crate::cache::watch::as_cached`]).
fn only_ours_changed(before: &Value, after: &Value) -> bool {
    const PLANNED_ON: [&str; 5] = [
        "/spec",
        "/metadata/generation",
        "/metadata/labels",
        "/metadata/annotations",
        "/metadata/deletionTimestamp",
    ];
    PLANNED_ON
        .iter()
        .all(|path| before.pointer(path) == after.pointer(path))
}

impl WrittenParents {
    /// Remembers our write to parent `uid`: `before` as the write planned on it, `parent` as
    /// the write returned it.
    fn record(&self, uid: &str, before: &Value, parent: &Value) {
        if only_ours_changed(before, parent)
            && let Some(version) = resource_version(parent)
        {
            self.expect_echo(uid, version);
        }
        if let Ok(mut written) = self.parents.lock() {
            written.insert(uid.to_owned(), parent.clone());
        }
    }

    /// Remembers that a write of ours to parent `uid` returned `version`, until its watch event
    /// comes back ([`WrittenParents::echo`]). At most [`ECHOES_KEPT`] per parent: one the watch
    /// never delivers (a relist went past it) is pushed out by later ones, or forgotten with the
    /// parent.
    fn expect_echo(&self, uid: &str, version: u64) {
        if let Ok(mut echoes) = self.echoes.lock() {
            let ours = echoes.entry(uid.to_owned()).or_default();
            if ours.len() >= ECHOES_KEPT {
                ours.remove(0);
            }
            ours.push(version);
        }
    }

    /// Whether a parent watch event (once the cache has it) showing `uid` at `version` is one of
    /// our own writes coming back: exactly a resourceVersion a write of ours returned, showing
    /// nothing but what the write changed ([`only_ours_changed`]). A version between two of ours
    /// is someone else's write: never an echo. An echo is forgotten once seen.
    pub(crate) fn echo(&self, uid: &str, version: Option<&str>) -> bool {
        let Some(version) = version.and_then(|v| v.parse::<u64>().ok()) else {
            return false;
        };
        let Ok(mut echoes) = self.echoes.lock() else {
            return false;
        };
        let Some(ours) = echoes.get_mut(uid) else {
            return false;
        };
        let Some(at) = ours.iter().position(|&v| v == version) else {
            return false;
        };
        ours.remove(at);
        if ours.is_empty() {
            echoes.remove(uid);
        }
        true
    }

    /// Forgets what we wrote for parent `uid` once the cache holds that version or a newer one
    /// (the parent watch delivered it), rather than at the parent's next reconcile, which may be
    /// a resync period away.
    pub(crate) fn caught_up(&self, uid: &str, cached_version: Option<&str>) {
        let Some(cached) = cached_version.and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        if let Ok(mut written) = self.parents.lock()
            && written
                .get(uid)
                .and_then(resource_version)
                .is_some_and(|ours| ours <= cached)
        {
            written.remove(uid);
        }
    }

    /// Remembers a write to a child of parent `uid`: the resourceVersion it returned, `None`
    /// for a delete.
    pub(crate) fn record_child(&self, uid: &str, target: &ObjectRef, version: Option<u64>) {
        if let Ok(mut children) = self.children.lock() {
            children
                .entry(uid.to_owned())
                .or_default()
                .insert(target.clone(), version);
        }
    }

    /// Whether `cached` (the parent's children in the caches) lacks one of our child writes:
    /// an object older than we wrote it, or one we deleted still there. Forgets the writes the
    /// caches have caught up with.
    pub(crate) fn children_unseen(&self, uid: &str, cached: &[Value]) -> bool {
        let Ok(mut children) = self.children.lock() else {
            return false;
        };
        let Some(written) = children.get_mut(uid) else {
            return false;
        };
        written.retain(|target, version| {
            let live = cached.iter().find(|c| ObjectRef::of(c).as_ref() == Some(target));
            match (version, live) {
                (Some(ours), Some(live)) => resource_version(live) < Some(*ours),
                (Some(_), None) => true,
                (None, Some(live)) => live.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null),
                (None, None) => false,
            }
        });
        let unseen = !written.is_empty();
        if !unseen {
            children.remove(uid);
        }
        unseen
    }

    /// Forgets one parent (it was deleted).
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut written) = self.parents.lock() {
            written.remove(uid);
        }
        if let Ok(mut children) = self.children.lock() {
            children.remove(uid);
        }
        if let Ok(mut echoes) = self.echoes.lock() {
            echoes.remove(uid);
        }
    }

    /// Keeps only these parents (the others are gone).
    pub(crate) fn retain(&self, live: &std::collections::HashSet<String>) {
        if let Ok(mut written) = self.parents.lock() {
            written.retain(|uid, _| live.contains(uid));
        }
        if let Ok(mut children) = self.children.lock() {
            children.retain(|uid, _| live.contains(uid));
        }
        if let Ok(mut echoes) = self.echoes.lock() {
            echoes.retain(|uid, _| live.contains(uid));
        }
    }

    /// Parents remembered (in any of the maps).
    pub(crate) fn len(&self) -> usize {
        self.parents.lock().map_or(0, |written| written.len())
            + self.children.lock().map_or(0, |c| c.len())
            + self.echoes.lock().map_or(0, |e| e.len())
    }

    /// Whether no parent is remembered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newer (by resourceVersion) of the cached parent and what we last wrote for `uid`;
    /// `None` when the cache has no such parent. `read_cached` reads the cache.
    ///
    /// What we wrote is read *before* the cache, never after: the parent watch forgets our
    /// write ([`WrittenParents::caught_up`]) only once the cache holds it, so a write not found
    /// here is already in the cache read next. Read the other way round, the watch could
    /// deliver our status write between the two reads: the cache read would miss it and the
    /// record would be gone, and the reconcile would plan on the parent from before its own
    /// last write (an action's run unrecorded, decided a second time: a `POST` meeting 409).
    pub(crate) fn newest(&self, uid: &str, read_cached: impl FnOnce() -> Option<Value>) -> Option<Value> {
        let ours = self.parents.lock().ok().and_then(|written| written.get(uid).cloned());
        let cached = read_cached()?;
        match ours {
            Some(ours) if resource_version(&ours) > resource_version(&cached) => Some(ours),
            Some(_) => {
                // The cache caught up: forget ours unless a newer write of ours came meanwhile.
                if let Ok(mut written) = self.parents.lock()
                    && written
                        .get(uid)
                        .is_some_and(|w| resource_version(w) <= resource_version(&cached))
                {
                    written.remove(uid);
                }
                Some(cached)
            }
            None => Some(cached),
        }
    }
}

/// What the apply layer needs: a client, resolved kinds, the Event recorder and counters.
pub(crate) struct Cluster<'a> {
    /// The API client.
    pub client: &'a Client,
    /// Resolved kinds.
    pub kinds: &'a Kinds,
    /// Publishes the drift-fight Warning (kube's recorder).
    pub recorder: &'a Recorder,
    /// Publishes every other Event, folding repeats into series.
    pub events: &'a std::sync::Arc<events::EventLog>,
    /// Counters.
    pub observability: &'a Observability,
    /// Parents as our own status writes left them.
    pub written: &'a WrittenParents,
    /// Drift-repair budgets per parent.
    pub drift: &'a drift_limit::DriftLimiter,
    /// Addresses `http` actions never reach through a name (`--egress-deny-cidr`, the API server).
    pub egress: &'a [ipnet::IpNet],
    /// The rule's `http` requests in flight.
    pub deliveries: &'a std::sync::Arc<deliveries::Deliveries>,
}

impl Cluster<'_> {
    /// The served kind of `(apiVersion, kind)`.
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Result<&ServedKind, ApplyError> {
        self.kinds
            .get(api_version, kind)
            .ok_or_else(|| ApplyError::UnknownKind(format!("{api_version} {kind}")))
    }

    /// An API handle for objects of a kind in a namespace.
    pub(crate) fn api(&self, api_version: &str, kind: &str, namespace: &str) -> Result<Api<DynamicObject>, ApplyError> {
        let served = self.kind(api_version, kind)?;
        Ok(if served.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &served.resource)
        } else {
            Api::all_with(self.client.clone(), &served.resource)
        })
    }

    /// Counts one write request.
    pub(crate) fn count_write(&self, verb: &str, kind: &str) {
        self.observability.metrics.api_write(verb, kind);
    }

    /// Server-side applies `spec.parentMetadata`'s labels and annotations onto the parent.
    pub(crate) async fn apply_parent_metadata(&self, parent: &ParentHandle, apply: &Value) -> Result<(), ApplyError> {
        self.count_write("PATCH", &parent.kind);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        parent
            .api
            .patch(&parent.name, &params, &Patch::Apply(apply))
            .await
            .map(drop)
            .map_err(|e| ApplyError::ParentMetadata(Box::new(e)))
    }

    /// Merge-patches the status subresource of the parent (`before`, as the patch was planned
    /// on it) and returns the updated parent.
    pub(crate) async fn patch_status(
        &self,
        parent: &ParentHandle,
        before: &Value,
        patch: &Value,
    ) -> Result<Value, kube::Error> {
        self.count_write("PATCH", &format!("{}/status", parent.kind));
        let updated = parent
            .api
            .patch_status(&parent.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        let updated = crate::cache::watch::as_cached(updated);
        if let Some(uid) = &parent.reference.uid {
            self.written.record(uid, before, &updated);
        }
        Ok(updated)
    }
}

/// The parent being reconciled.
pub(crate) struct ParentHandle {
    /// Its API (namespaced).
    pub api: Api<DynamicObject>,
    /// Its name.
    pub name: String,
    /// Its kind, for metrics.
    pub kind: String,
    /// Its reference, for Events.
    pub reference: k8s_openapi::api::core::v1::ObjectReference,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(name: &str, version: &str, deleting: bool) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": version}});
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-30T10:00:00Z");
        }
        object
    }

    fn target(name: &str) -> ObjectRef {
        ObjectRef::of(&service(name, "1", false)).expect("a reference")
    }

    fn database(version: &str, ran_for: &str) -> Value {
        json!({"apiVersion": "myorg.io/v1", "kind": "Database",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u", "resourceVersion": version, "generation": 3},
            "status": {"actions": {"backup": {"guardValue": ran_for, "phase": "Done"}}}})
    }

    fn resource() -> kube::discovery::ApiResource {
        kube::discovery::ApiResource {
            group: "myorg.io".into(),
            version: "v1".into(),
            api_version: "myorg.io/v1".into(),
            kind: "Database".into(),
            plural: "databases".into(),
        }
    }

    /// The parent watch delivers an object (decoded as the watches decode it) into the index and
    /// forgets our write it shows, in the order the controller's parent stream does.
    fn deliver(index: &crate::cache::parents::ParentIndex, written: &WrittenParents, object: &Value) {
        let crate::cache::watch::Slim(object) = serde_json::from_value(object.clone()).expect("object");
        let version = object.metadata.resource_version.clone();
        index.take(&mut kube::runtime::watcher::Event::Apply(object));
        written.caught_up("u", version.as_deref());
        written.echo("u", version.as_deref());
    }

    #[test]
    fn only_the_exact_versions_our_writes_returned_come_back_as_echoes() {
        let written = WrittenParents::default();
        // Our finalizer patch returned 11, our status write 13; someone else wrote 12 between.
        let before = database("10", "generation=2");
        written.record("u", &before, &database("11", "generation=3"));
        written.record("u", &before, &database("13", "generation=3"));
        assert!(written.echo("u", Some("11")));
        assert!(
            !written.echo("u", Some("12")),
            "someone else's write between two of ours"
        );
        assert!(written.echo("u", Some("13")));
        assert!(!written.echo("u", Some("13")), "delivered once");
        assert!(!written.echo("v", Some("13")), "another parent");
        assert!(!written.echo("u", None));
        // A write returned a parent someone else changed more than the status: no echo.
        let mut respec = database("30", "generation=3");
        respec["spec"] = json!({"replicas": 3});
        written.record("u", &before, &respec);
        assert!(!written.echo("u", Some("30")), "a spec change came back with it");
        // kubectl's last-applied copy comes back with a write but is never cached: a write's
        // return kept as the cache keeps it compares equal with the cached parent.
        let kubectl_applied = |version: &str| {
            let mut applied = database(version, "generation=3");
            applied["metadata"]["annotations"] = json!({crate::cache::watch::LAST_APPLIED: "{}"});
            applied
        };
        let index = crate::cache::parents::ParentIndex::default();
        deliver(&index, &written, &kubectl_applied("30"));
        let cached = index.get("shop", "orders", &resource()).expect("cached");
        let returned = serde_json::from_value(kubectl_applied("31")).expect("a parent");
        written.record("u", &cached, &crate::cache::watch::as_cached(returned));
        assert!(written.echo("u", Some("31")));
        // Echoes the watch never delivers are pushed out.
        for version in 100..100 + ECHOES_KEPT as u64 + 1 {
            written.expect_echo("u", version);
        }
        assert!(!written.echo("u", Some("100")), "pushed out");
        assert!(written.echo("u", Some("101")));
        written.forget("u");
        assert!(!written.echo("u", Some("102")), "forgotten with the parent");
    }

    #[test]
    fn a_status_write_the_watch_delivers_while_the_cache_is_read_is_not_lost() {
        let (index, written) = (crate::cache::parents::ParentIndex::default(), WrittenParents::default());
        // The spec change to generation 3 is cached; our status write recording the run for it
        // returned resourceVersion 11, and its watch event is on its way.
        deliver(&index, &written, &database("10", "generation=2"));
        written.record("u", &database("10", "generation=2"), &database("11", "generation=3"));
        let read = written.newest("u", || {
            let cached = index.get("shop", "orders", &resource());
            // The watch delivers our write right after the cache was read.
            deliver(&index, &written, &database("11", "generation=3"));
            cached
        });
        let read = read.expect("the parent");
        assert_eq!(
            (
                read["metadata"]["resourceVersion"].as_str(),
                read.pointer("/status/actions/backup/guardValue")
            ),
            (Some("11"), Some(&json!("generation=3"))),
            "the reconcile plans on our own last write, not on the parent from before it"
        );
        let read = written.newest("u", || index.get("shop", "orders", &resource()));
        assert_eq!(
            read.map(|r| r["metadata"]["resourceVersion"].clone()),
            Some(json!("11"))
        );
        assert!(written.is_empty(), "caught up, forgotten");
    }

    #[test]
    fn our_child_writes_are_unseen_until_the_cache_holds_them_then_forgotten() {
        let written = WrittenParents::default();
        assert!(
            !written.children_unseen("p", &[]),
            "nothing written, nothing to wait for"
        );
        written.record_child("p", &target("a"), Some(12));
        written.record_child("p", &target("gone"), None);
        assert!(
            written.children_unseen("p", &[service("gone", "9", false)]),
            "a not seen yet"
        );
        assert!(written.children_unseen("p", &[service("a", "11", false), service("gone", "9", false)]));
        assert!(
            written.children_unseen("p", &[service("a", "12", false), service("gone", "9", false)]),
            "a caught up, the deleted one is still cached"
        );
        assert!(
            !written.children_unseen("p", &[service("gone", "9", true)]),
            "being deleted counts"
        );
        assert!(written.is_empty(), "everything seen is forgotten");
    }
}
