//! Wiring a rule's controller: the watches of its parents, children and lookups, what each
//! event queues (and why), and the kube-runtime Controller they feed.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use kube::api::{Api, DynamicObject};
use kube::core::DynamicResourceScope;
use kube::discovery::ApiResource;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use super::housekeeping::{Housekeeping, ParentMemory};
use crate::apply::deliveries::Deliveries;
use crate::apply::events;
use crate::cache::children::ChildIndex;
use crate::cache::discovery::{Kinds, NotResolved, ServedKind};
use crate::cache::lookups::{self};
use crate::cache::parents::{self, ParentIndex};
use crate::cache::watch::{SkipReporter, Skipped};
use crate::engine::plan::context::LABEL_RULE;
use crate::engine::plan::scope::ANNOTATION_PARENT;
use crate::engine::rules::Rule;
use crate::ops::metrics::Sampled;
use crate::runtime::queue::{self, Trigger, Triggers};
use crate::runtime::workers::Workers;

use super::policy::error_policy;
use super::reconcile::reconcile;
use super::resync;
use super::{RuleContext, RunningController, Shared, parent_key};

impl Shared {
    fn api<K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>>(&self, served: &ServedKind) -> Api<K> {
        match &self.namespace {
            Some(ns) if served.namespaced => Api::namespaced_with(self.client.clone(), ns, &served.resource),
            _ => Api::all_with(self.client.clone(), &served.resource),
        }
    }

    /// The watch of a rule's parents: like [`Shared::watch_in`], and a parent skipped for its
    /// size also gets `Ready=False` (`ObjectTooLarge`) on its status.
    fn watch_parents(
        self: &Arc<Self>,
        rule: &Rule,
        served: &ServedKind,
        config: watcher::Config,
    ) -> impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static {
        self.watch_skipping(self.api(served), rule, served, config, true)
    }

    /// A watch of one kind for one rule, through a given API handle (lookups and label-owned
    /// children watch every namespace), that counts for readiness and skips (and reports)
    /// objects that do not decode or are over `--max-object-size`.
    fn watch_in(
        self: &Arc<Self>,
        api: Api<crate::cache::watch::Tolerant>,
        rule: &Rule,
        served: &ServedKind,
        config: watcher::Config,
    ) -> impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static {
        self.watch_skipping(api, rule, served, config, false)
    }

    fn watch_skipping(
        self: &Arc<Self>,
        api: Api<crate::cache::watch::Tolerant>,
        rule: &Rule,
        served: &ServedKind,
        config: watcher::Config,
        parents: bool,
    ) -> impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static {
        let resource = &served.resource;
        let token = self.observability.health.register_watch(format!(
            "rule {:?}: watch of {} ({})",
            rule.name, resource.kind, resource.api_version
        ));
        let shared = Arc::downgrade(self);
        let served_kind = served.clone();
        let writes_status = rule.writes_status();
        let recorder = self.recorder.clone();
        let reporter = SkipReporter::new(resource.clone(), self.max_object_bytes, move |metadata, why| {
            crate::apply::skipped::publish_event(&recorder, &served_kind.resource, metadata, why);
            let Some(shared) = shared.upgrade() else { return };
            match why {
                Skipped::Undecodable(_) => shared.observability.metrics.undecodable(&served_kind.resource.kind),
                Skipped::TooLarge { .. } => shared.observability.metrics.too_large(&served_kind.resource.kind),
            }
            // Another replica's parent (`--shards`) is marked there.
            let held = shared.writers.of(metadata.uid.as_deref().unwrap_or_default()).held();
            if parents && writes_status && held && matches!(why, Skipped::TooLarge { .. }) {
                let (served, metadata, why) = (served_kind.clone(), metadata.clone(), why.clone());
                tokio::spawn(async move {
                    let now = crate::records::clock::now_rfc3339();
                    crate::apply::skipped::mark_parent(
                        shared.client.clone(),
                        &served,
                        &metadata,
                        &why,
                        now,
                        &shared.observability,
                    )
                    .await;
                });
            }
        });
        crate::cache::watch::watch(api, config, self.initial_list, token, Arc::new(reporter))
    }
}

/// A channel that turns true once every child cache has listed.
fn synced_signal(indexes: &[Arc<ChildIndex>]) -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(indexes.is_empty());
    let mut each: Vec<_> = indexes.iter().map(|index| index.synced()).collect();
    tokio::spawn(async move {
        for synced in &mut each {
            let _ = synced.wait_for(|done| *done).await;
        }
        let _ = tx.send(true);
    });
    rx
}

/// Starts the controller of one rule.
pub(crate) fn start(shared: Arc<Shared>, rule: &Rule, kinds: &Kinds) -> Result<RunningController, NotResolved> {
    let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
    let parent_kind = kinds.resolved(&watched.0, &watched.1)?.clone();
    let parent_writer = Writer::new(parent_kind.resource.clone());
    let parent_store = parent_writer.as_reader();
    let memory = ParentMemory::default();
    let triggers = Arc::new(Triggers::default());
    let bodies = Arc::new(ParentIndex::default());
    let parents = parent_events(&shared, rule, &parent_kind, parent_writer, &triggers, &bodies, &memory);
    let controller = Controller::for_stream_with(parents, parent_store.clone(), parent_kind.resource.clone());
    let (mut controller, children) = watch_children(controller, &shared, rule, kinds, &parent_kind, &triggers)?;
    if shared.writers.is_sharded() {
        let taken = parents_of_taken_shards(
            &shared.writers,
            parent_store.clone(),
            bodies.clone(),
            parent_kind.resource.clone(),
        );
        controller = queue_on(controller, &triggers, Trigger::ShardTaken, taken);
    }
    // Lookups may read shared objects (a platform namespace), so a lookup that names a
    // namespace ignores --namespace. Each cache is scoped as far as the rule allows: to the one
    // namespace its lookups name, to --namespace when they all read the parent's own, and to
    // the labels they match.
    let watch_lookups = |served: &ServedKind| {
        let (api_version, kind) = (&served.resource.api_version, &served.resource.kind);
        let api = match rule.lookup_namespace(api_version, kind) {
            Some(ns) if served.namespaced => Api::namespaced_with(shared.client.clone(), &ns, &served.resource),
            None if rule.lookups_read_the_parents_namespace(api_version, kind) => shared.api(served),
            _ => Api::all_with(shared.client.clone(), &served.resource),
        };
        let mut config = watcher::Config::default();
        if let Some(selector) = rule.lookup_selector(api_version, kind) {
            config = config.labels(&selector);
        }
        shared.watch_in(api, rule, served, config).boxed()
    };
    let (lookups, lookup_changes) =
        lookups::start(rule, kinds, &parent_kind.resource, parent_store.clone(), watch_lookups)?;
    if !rule.spec.lookups.is_empty() {
        controller = queue_on(controller, &triggers, Trigger::LookupEvent, lookup_changes);
    }
    let period = rule.resync.unwrap_or(shared.default_resync);
    let resyncs = resync::resync_wheel(
        parent_store.clone(),
        parent_kind.resource.clone(),
        period,
        shared.writers.clone(),
    );
    controller = queue_on(controller, &triggers, Trigger::Resync, resyncs);
    // A finished `http` delivery queues its parent, whose reconcile records the outcome.
    let (delivered, delivered_rx) = mpsc::unbounded();
    let deliveries = Arc::new(Deliveries::new(delivered));
    let resource = parent_kind.resource.clone();
    let delivered_parents =
        delivered_rx.map(move |(namespace, name): (String, String)| parents::reference(&resource, &namespace, &name));
    controller = queue_on(controller, &triggers, Trigger::Delivered, delivered_parents);
    let (reconcile_all, reconcile_all_rx) = mpsc::unbounded();
    let (queued, reloaded) = (triggers.clone(), parent_store.clone());
    let reconcile_all_rx = reconcile_all_rx.inspect(move |()| {
        for parent in reloaded.state() {
            queued.event(parent_key(&parent), Trigger::Reload);
        }
    });
    let (stop, stop_rx) = oneshot::channel::<()>();
    let workers = Arc::new(Workers::new(rule.spec.concurrency(), rule.spec.reload_in_flight()));
    let children_synced = synced_signal(&children.iter().map(|(_, index)| index.clone()).collect::<Vec<_>>());
    let events = Arc::new(events::EventLog::new(shared.client.clone()));
    let context = Arc::new(RuleContext {
        children_synced,
        shared,
        rule_name: rule.name.clone(),
        parent_kind,
        children,
        failures: memory.failures,
        written: memory.written,
        drift: memory.drift,
        events,
        deliveries,
        lookups,
        parents: parent_store,
        bodies,
        triggers,
        workers: workers.clone(),
    });
    context.shared.observability.metrics.rule_started(&rule.name);
    let sampled: Arc<dyn Sampled> = context.clone();
    context
        .shared
        .observability
        .metrics
        .sample(&rule.name, Arc::downgrade(&sampled));
    let listed = context.parents.clone();
    let bodies = (context.bodies.clone(), context.parent_kind.resource.clone());
    let task = spawn_controller(controller, reconcile_all_rx, stop_rx, context, rule.name.clone());
    info!(rule = %rule.name, watch = %format!("{} {}", watched.0, watched.1), "controller started");
    Ok(RunningController {
        watched,
        owned: rule.owned_kinds(),
        looked_up: rule.lookup_kinds(),
        digest: rule.digest.clone(),
        reconcile_all,
        workers,
        parents: listed,
        bodies,
        stop,
        task,
    })
}

/// The parents of `rule` as the controller reads them: watched (by the rule's label selector),
/// kept as text in `bodies` and as metadata in the store of `writer`, each event queued with its
/// trigger (`requested` for the reconcile annotation, else `parent_event`), and what ruleop wrote
/// forgotten by `memory` once the cache shows it.
fn parent_events(
    shared: &Arc<Shared>,
    rule: &Rule,
    parent_kind: &ServedKind,
    writer: Writer<DynamicObject>,
    triggers: &Arc<Triggers>,
    bodies: &Arc<ParentIndex>,
    memory: &ParentMemory,
) -> impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static {
    let mut config = watcher::Config::default();
    if let Some(selector) = &rule.spec.watch.label_selector {
        config = config.labels(selector);
    }
    let mut housekeeping = Housekeeping::new(memory.clone(), shared.observability.clone(), rule.name.clone());
    let (requested, gone, queued) = (triggers.clone(), triggers.clone(), triggers.clone());
    let (index, previous, resource) = (bodies.clone(), writer.as_reader(), parent_kind.resource.clone());
    let departures = bodies.clone();
    let written = memory.written.clone();
    let events = shared
        .watch_parents(rule, parent_kind, config)
        // The store keeps metadata; the parents themselves are kept as text.
        .map(move |event| {
            event.map(|mut event| {
                // Before the store has it: the version it replaces is still there.
                if let watcher::Event::Apply(parent) = &event {
                    let before = previous.get(&ObjectRef::from_obj_with(parent, resource.clone()));
                    if queue::reconcile_requested(before.as_deref(), parent) {
                        requested.event(parent_key(parent), Trigger::Requested);
                    }
                }
                index.take(&mut event);
                event
            })
        })
        .reflect(writer)
        // After the store has it: what we wrote is forgotten once the cache shows it.
        .inspect(move |event| {
            if let Ok(event) = event {
                housekeeping.observe(event);
                departures.count_departure(event);
                if let watcher::Event::Delete(parent) = event {
                    gone.forget(&parent_key(parent));
                }
            }
        })
        // Our own finalizer or status write coming back queues nothing (`WrittenParents::echo`).
        // During a staged rollout, the reconcile that wrote it watched what it wrote
        // (`observe_moved`).
        .filter(move |event| {
            let echo = matches!(event, Ok(watcher::Event::Apply(parent))
                if written.echo(&parent.uid().unwrap_or_default(), parent.resource_version().as_deref()));
            futures::future::ready(!echo)
        });
    // A relist's parents once the store and the bodies show it.
    crate::cache::relist::touched_after_relists(events, false, Vec::new)
        .inspect(move |parent| queued.event(parent_key(parent), Trigger::ParentEvent))
        .map(Ok)
}

/// Each owned kind's resource and its cache of the rule's children.
type ChildCaches = Vec<(ApiResource, Arc<ChildIndex>)>;

/// What a rule's children (and what its actions created) look like: one cache per owned kind,
/// each event queuing the parent it belongs to (`child_event`), by ownerReference or, for
/// children outside the parent's namespace, by the parent annotation.
fn watch_children(
    mut controller: Controller<DynamicObject>,
    shared: &Arc<Shared>,
    rule: &Rule,
    kinds: &Kinds,
    parent_kind: &ServedKind,
    triggers: &Arc<Triggers>,
) -> Result<(Controller<DynamicObject>, ChildCaches), NotResolved> {
    let mut children = Vec::new();
    for (api_version, kind) in &rule.owned_kinds() {
        let served = kinds.resolved(api_version, kind)?;
        let index = Arc::new(ChildIndex::default());
        children.push((served.resource.clone(), index.clone()));
        let ours = watcher::Config::default().labels(&format!("{LABEL_RULE}={}", rule.name));
        let (queued, parent_kind_of_child) = (triggers.clone(), parent_kind.clone());
        // Label-owned children live outside the parent's namespace, and a cluster-scoped
        // parent's children anywhere the rule allows: watch them cluster-wide and map each to its
        // parent by annotation or ownerReference (kube-runtime's `owns` would put a cluster-scoped
        // owner in its child's namespace).
        let by_label = rule.watches_children_cluster_wide();
        let api = if by_label {
            Api::all_with(shared.client.clone(), &served.resource)
        } else {
            shared.api(served)
        };
        let events = shared.watch_in(api, rule, served, ours).inspect({
            let index = index.clone();
            move |event| {
                if let Ok(event) = event {
                    index.apply(event);
                }
            }
        });
        // A relist's children once the index shows it, and those it no longer lists.
        let stream = crate::cache::relist::touched_after_relists(events, true, move || index.take_vanished())
            .inspect(move |child| {
                if let Some(parent) = parent_of(child, &parent_kind_of_child) {
                    let key = queue::key(parent.namespace.as_deref().unwrap_or_default(), &parent.name);
                    queued.event(key, Trigger::ChildEvent);
                }
            })
            .map(Ok);
        controller = if by_label {
            let parent_kind = parent_kind.clone();
            let mapper = move |child: DynamicObject| parent_of(&child, &parent_kind);
            controller.watches_stream_with(stream, mapper, served.resource.clone())
        } else {
            controller.owns_stream_with(stream, served.resource.clone())
        };
    }
    Ok((controller, children))
}

/// Also reconciles the parents `parents` names, each queued with `trigger` (what a reconcile
/// reports as the reason it ran).
fn queue_on(
    controller: Controller<DynamicObject>,
    triggers: &Arc<Triggers>,
    trigger: Trigger,
    parents: impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static,
) -> Controller<DynamicObject> {
    let queued = triggers.clone();
    controller.reconcile_on(parents.inspect(move |parent| {
        let key = queue::key(parent.namespace.as_deref().unwrap_or_default(), &parent.name);
        queued.event(key, trigger);
    }))
}

/// Runs `controller` in a task until `stop` fires: every reconcile waits for one of the rule's
/// workers, in turn (see `workers::Workers` for why not kube-runtime's own limit), up to
/// `HELD_RECONCILES` held at once; `reconcile_all` re-queues every parent (a reload).
fn spawn_controller(
    controller: Controller<DynamicObject>,
    reconcile_all: impl futures::Stream<Item = ()> + Send + 'static,
    stop: oneshot::Receiver<()>,
    context: Arc<RuleContext>,
    name: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        controller
            .with_config(Config::default().concurrency(queue::HELD_RECONCILES))
            .reconcile_all_on(reconcile_all)
            .graceful_shutdown_on(async move {
                let _ = stop.await;
            })
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(e) = result {
                    debug!(error = %e, "reconcile did not complete");
                }
            })
            .await;
        info!(rule = %name, "controller stopped");
    })
}

/// How much later than the parents changed since their last reconcile the rest of a taken
/// shard's parents are queued.
const SETTLED_PARENTS_DELAY: Duration = Duration::from_millis(250);

/// References to the cached parents of each shard as this replica takes it: they were skipped
/// while another replica held the shard, so nothing else would reconcile them now. Parents
/// changed since their last reconcile (`status.observedGeneration` behind) come first and the
/// rest a moment later: the controller's queue keeps no order among parents due at once, and
/// after a failover the changed ones are what waited.
fn parents_of_taken_shards(
    writers: &Arc<crate::ha::shard::Writers>,
    store: kube::runtime::reflector::Store<DynamicObject>,
    bodies: Arc<ParentIndex>,
    resource: ApiResource,
) -> impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    let shards = writers.count();
    // Unordered: a second shard taken at once must not wait behind the first one's settled parents.
    writers.subscribe().flat_map_unordered(None, move |shard| {
        let (changed, settled): (Vec<_>, Vec<_>) = store
            .state()
            .into_iter()
            .filter(|p| crate::ha::shard::shard_of(&p.uid().unwrap_or_default(), shards) == shard)
            .partition(|p| {
                let (namespace, name) = (p.namespace().unwrap_or_default(), p.name_any());
                !bodies.settled(&namespace, &name, p.meta().generation)
            });
        debug!(
            shard,
            changed = changed.len(),
            settled = settled.len(),
            "shard taken: reconciling its parents"
        );
        let refs = |parents: Vec<Arc<DynamicObject>>| {
            parents
                .iter()
                .map(|p| ObjectRef::from_obj_with(p.as_ref(), resource.clone()))
                .collect::<Vec<_>>()
        };
        let settled = refs(settled);
        futures::stream::iter(refs(changed))
            .chain(
                futures::stream::once(tokio::time::sleep(SETTLED_PARENTS_DELAY))
                    .flat_map(move |()| futures::stream::iter(settled.clone())),
            )
            .boxed()
    })
}

/// The parent of a child seen by a watch: from the `ruleop.io/parent` annotation of a
/// label-owned child (`<namespace>/<name>`, or `<name>` for a cluster-scoped parent), or from a
/// controller ownerReference of the parent's kind (in the child's namespace, or in none for a
/// cluster-scoped parent).
fn parent_of(child: &DynamicObject, parent: &ServedKind) -> Option<ObjectRef<DynamicObject>> {
    let named = |name: &str, namespace: Option<&str>| {
        let reference = ObjectRef::new_with(name, parent.resource.clone());
        match namespace {
            Some(namespace) if parent.namespaced => Some(reference.within(namespace)),
            None if !parent.namespaced => Some(reference),
            _ => None,
        }
    };
    if let Some(annotated) = child.annotations().get(ANNOTATION_PARENT) {
        return match annotated.split_once('/') {
            Some((namespace, name)) => named(name, Some(namespace)),
            None => named(annotated, None),
        };
    }
    let owner = child
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == parent.resource.kind)?;
    let namespace = child.namespace();
    named(&owner.name, namespace.as_deref().filter(|_| parent.namespaced))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;

    fn database() -> ServedKind {
        served("Database", true)
    }

    fn served(kind: &str, namespaced: bool) -> ServedKind {
        ServedKind {
            resource: ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", kind)),
            namespaced,
        }
    }

    fn child(json: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json).expect("a child")
    }

    #[test]
    fn a_label_owned_child_names_its_parent_in_an_annotation() {
        let child = child(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "tenant-a", "annotations": {ANNOTATION_PARENT: "team/db-1"}},
        }));
        let parent = parent_of(&child, &database()).expect("a parent");
        assert_eq!(
            (parent.namespace.as_deref(), parent.name.as_str()),
            (Some("team"), "db-1")
        );
    }

    #[test]
    fn an_owned_child_names_its_parent_in_a_controller_reference_of_the_parents_kind() {
        let reference = |kind: &str, name: &str, controller: bool| serde_json::json!({"apiVersion": "example.com/v1", "kind": kind, "name": name, "uid": "u", "controller": controller});
        let child = child(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-1-creds", "namespace": "team", "ownerReferences": [
                reference("Database", "not-the-controller", false),
                reference("Cache", "other-kind", true),
                reference("Database", "db-1", true),
            ]},
        }));
        let parent = parent_of(&child, &database()).expect("a parent");
        assert_eq!(
            (parent.namespace.as_deref(), parent.name.as_str()),
            (Some("team"), "db-1")
        );
    }

    #[test]
    fn a_child_with_neither_annotation_nor_controller_reference_has_no_parent() {
        let child = child(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "stray", "namespace": "team", "annotations": {ANNOTATION_PARENT: "no-slash"}},
        }));
        assert!(parent_of(&child, &database()).is_none());
    }

    #[test]
    fn a_cluster_scoped_parent_is_named_without_a_namespace_whatever_its_childs_namespace() {
        let owned = child(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "copy", "namespace": "team", "ownerReferences": [
                {"apiVersion": "example.com/v1", "kind": "Propagation", "name": "p", "uid": "u", "controller": true},
            ]},
        }));
        let propagation = served("Propagation", false);
        let parent = parent_of(&owned, &propagation).expect("a parent");
        assert_eq!((parent.namespace.as_deref(), parent.name.as_str()), (None, "p"));
        let annotated = child(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "copy", "namespace": "team", "annotations": {ANNOTATION_PARENT: "p"}},
        }));
        let parent = parent_of(&annotated, &propagation).expect("a parent");
        assert_eq!((parent.namespace.as_deref(), parent.name.as_str()), (None, "p"));
        // A namespaced annotation never names a cluster-scoped parent, nor a bare name a namespaced one.
        let forged = child(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "copy", "namespace": "team", "annotations": {ANNOTATION_PARENT: "team/p"}},
        }));
        assert!(parent_of(&forged, &propagation).is_none());
        assert!(parent_of(&annotated, &database()).is_none());
    }
}
