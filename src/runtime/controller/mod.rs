//! One kube-runtime Controller per rule: watch the parent kind, own the child kinds, and
//! reconcile each parent from the caches (never from an event payload): plan, then apply.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use kube::api::{Api, DynamicObject};
use kube::core::DynamicResourceScope;
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::apply::drift_limit::DriftLimiter;
use crate::apply::reconcile::{apply_plan, report_failure};
use crate::apply::{ApplyError, Cluster, ParentHandle, WrittenParents, cleanup, events};
use crate::cache::children::ChildIndex;
use crate::cache::discovery::{Kinds, NotResolved, ServedKind};
use crate::cache::lookups::{self, RuleLookups};
use crate::cache::parents::ParentIndex;
use crate::cache::watch::{SkipReporter, Skipped};
use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};
use crate::engine::plan::context::{LABEL_RULE, ParentRef};
use crate::engine::plan::deletion;
use crate::engine::plan::ownership;
use crate::engine::plan::scope::ANNOTATION_PARENT;
use crate::engine::plan::{self, PlanError};
use crate::engine::rules::{Rule, RuleSet};
use crate::ops::Observability;
use crate::ops::metrics::{Outcome, Sampled};
use crate::runtime::clock::now_rfc3339;
use crate::runtime::housekeeping::{FailureCounts, Housekeeping, ParentMemory};
use crate::runtime::queue::{self, Trigger, Triggers};
use crate::runtime::workers::Workers;

/// Reconciles per rule when the rule does not say (`maxConcurrentReconciles`; a reload may burst
/// above it, see [`Workers`]).
pub const DEFAULT_CONCURRENCY: u16 = 5;
/// Longest a reconcile waits for its rule's caches to sync before it is retried later.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// Longest a reconcile waits for the child caches to show our own last writes.
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between retries of a failing parent.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// State shared by every controller of the process.
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// The current rule set and the kinds it resolved to; swapped whole on reload.
    pub current: RwLock<(Arc<RuleSet>, Arc<Kinds>)>,
    /// Counters and readiness.
    pub observability: Arc<Observability>,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Resync period for rules without `resync`.
    pub default_resync: Duration,
    /// Restricts every watch to one namespace.
    pub namespace: Option<String>,
    /// Where each parent's writes go, and which parents are this replica's (`--shards`).
    pub writers: Arc<crate::ha::shard::Writers>,
    /// How every watch lists first (`--initial-list`).
    pub initial_list: crate::cache::watch::InitialList,
    /// Watched objects whose JSON text is longer are not cached (`--max-object-size`).
    pub max_object_bytes: usize,
    /// Addresses `http` actions never reach through a name: `--egress-deny-cidr` and the API
    /// server's own addresses.
    pub egress_deny: Vec<ipnet::IpNet>,
}

impl Shared {
    /// The rule set and kinds a reconcile uses from start to end.
    pub fn snapshot(&self) -> (Arc<RuleSet>, Arc<Kinds>) {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

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
        let reporter = SkipReporter::new(
            resource.clone(),
            self.recorder.clone(),
            self.max_object_bytes,
            move |metadata, why| {
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
                        let now = crate::runtime::clock::now_rfc3339();
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
            },
        );
        crate::cache::watch::watch(api, config, self.initial_list, token, Arc::new(reporter))
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// No plan could be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A write failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The child or lookup caches have not listed yet (a watch failing, see `/readyz`).
    #[error("the caches of this rule have not synced within {0:?}; retrying")]
    NotSynced(Duration),
}

impl ReconcileError {
    fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Plan(e) => e.reason(),
            ReconcileError::Apply(e) => e.reason(),
            ReconcileError::NotSynced(_) => "CachesNotSynced",
        }
    }
}

/// What one rule's reconciles share.
struct RuleContext {
    shared: Arc<Shared>,
    rule_name: String,
    parent_kind: ServedKind,
    children: Vec<(kube::discovery::ApiResource, Arc<ChildIndex>)>,
    /// Failed reconciles in a row per parent (the backoff exponent).
    failures: Arc<FailureCounts>,
    /// Parents as our own status writes left them, until the cache catches up.
    written: Arc<WrittenParents>,
    /// Drift-repair budgets per parent.
    drift: Arc<DriftLimiter>,
    /// Events published recently, so a repeat becomes a series.
    events: Arc<events::EventLog>,
    /// Caches of looked-up kinds and who read what.
    lookups: RuleLookups,
    /// Becomes true once every child cache has listed. A watch channel, because kube-runtime's
    /// `Store::wait_until_ready` wakes only the last of several concurrent waiters.
    children_synced: tokio::sync::watch::Receiver<bool>,
    /// The parent cache (metadata).
    parents: Store<DynamicObject>,
    /// The parents as JSON text.
    bodies: Arc<ParentIndex>,
    /// What queued each parent (the span's `trigger`, the queue depth).
    triggers: Arc<Triggers>,
    /// The rule's workers (`maxConcurrentReconciles`), handed out round-robin by namespace.
    workers: Arc<Workers>,
}

impl Sampled for RuleContext {
    fn queue_depth(&self) -> usize {
        // Queued and not started, or started and waiting for a worker.
        self.triggers.depth() + self.workers.waiting()
    }

    fn cached_objects(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        let children = self.children.iter().map(|(r, index)| (r.kind.as_str(), index.len()));
        let parents = std::iter::once((self.parent_kind.resource.kind.as_str(), self.parents.len()));
        for (kind, count) in parents.chain(children).chain(self.lookups.cached_objects()) {
            *counts.entry(kind.to_owned()).or_default() += count;
        }
        counts
    }
}

/// The trigger key of a parent.
fn parent_key(parent: &DynamicObject) -> String {
    queue::key(&parent.namespace().unwrap_or_default(), &parent.name_any())
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

/// A running controller and the handles to steer it.
pub struct RunningController {
    /// `(apiVersion, kind)` watched.
    pub watched: (String, String),
    /// Kinds owned (watched for changes to children).
    pub owned: Vec<(String, String)>,
    /// Kinds looked up (a cache each).
    pub looked_up: Vec<(String, String)>,
    /// The rule digest it was started or last re-triggered with.
    pub digest: String,
    reconcile_all: mpsc::UnboundedSender<()>,
    workers: Arc<Workers>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningController {
    /// Re-reconciles every parent (the rule changed).
    pub fn reconcile_all(&self) {
        let _ = self.reconcile_all.unbounded_send(());
    }

    /// The task that runs it, to learn when it ends by itself.
    pub fn task(&mut self) -> &mut tokio::task::JoinHandle<()> {
        &mut self.task
    }

    /// Stops watching; in-flight reconciles finish first (those still waiting for a worker are
    /// dropped). What has not finished by `deadline` is aborted, so a stop always ends.
    pub async fn stop_by(mut self, deadline: tokio::time::Instant) {
        self.workers.close();
        let _ = self.stop.send(());
        if tokio::time::timeout_at(deadline, &mut self.task).await.is_err() {
            self.task.abort();
            warn!(watch = %format!("{} {}", self.watched.0, self.watched.1), "the controller did not stop in time; aborted");
        }
    }
}

/// Starts the controller of one rule.
pub fn start(shared: Arc<Shared>, rule: &Rule, kinds: &Kinds) -> Result<RunningController, NotResolved> {
    let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
    let parent_kind = kinds.resolved(&watched.0, &watched.1)?.clone();
    let mut config = watcher::Config::default();
    if let Some(selector) = &rule.spec.watch.label_selector {
        config = config.labels(selector);
    }
    let parent_writer = Writer::new(parent_kind.resource.clone());
    let parent_store = parent_writer.as_reader();
    let memory = ParentMemory::default();
    let mut housekeeping = Housekeeping::new(memory.clone(), shared.observability.clone(), rule.name.clone());
    let triggers = Arc::new(Triggers::default());
    let (gone, queued) = (triggers.clone(), triggers.clone());
    let bodies = Arc::new(ParentIndex::default());
    let index = bodies.clone();
    let (requested, previous, resource) = (triggers.clone(), parent_store.clone(), parent_kind.resource.clone());
    let parents = shared
        .watch_parents(rule, &parent_kind, config)
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
        .reflect(parent_writer)
        // After the store has it: what we wrote is forgotten once the cache shows it.
        .inspect(move |event| {
            if let Ok(event) = event {
                housekeeping.observe(event);
                if let watcher::Event::Delete(parent) = event {
                    gone.forget(&parent_key(parent));
                }
            }
        })
        .applied_objects()
        .inspect(move |parent| {
            if let Ok(parent) = parent {
                queued.event(parent_key(parent), Trigger::ParentEvent);
            }
        });
    let mut controller = Controller::for_stream_with(parents, parent_store.clone(), parent_kind.resource.clone());
    // Children and what actions created (status reads a run's object): both are cached.
    let owned = rule.owned_kinds();
    let mut children = Vec::new();
    for (api_version, kind) in &owned {
        let served = kinds.resolved(api_version, kind)?;
        let index = Arc::new(ChildIndex::default());
        children.push((served.resource.clone(), index.clone()));
        let ours = watcher::Config::default().labels(&format!("{LABEL_RULE}={}", rule.name));
        let (queued, parent_resource) = (triggers.clone(), parent_kind.resource.clone());
        // Label-owned children live outside the parent's namespace: watch them cluster-wide and
        // map them to their parent by annotation, as they carry no ownerReference.
        let by_label = rule.may_own_by_label();
        let api = if by_label {
            Api::all_with(shared.client.clone(), &served.resource)
        } else {
            shared.api(served)
        };
        let stream = shared
            .watch_in(api, rule, served, ours)
            .inspect(move |event| {
                if let Ok(event) = event {
                    index.apply(event);
                }
            })
            .touched_objects()
            .inspect(move |child| {
                if let Some(parent) = child.as_ref().ok().and_then(|c| parent_of(c, &parent_resource)) {
                    let key = queue::key(parent.namespace.as_deref().unwrap_or_default(), &parent.name);
                    queued.event(key, Trigger::ChildEvent);
                }
            });
        controller = if by_label {
            let parent_resource = parent_kind.resource.clone();
            let mapper = move |child: DynamicObject| parent_of(&child, &parent_resource);
            controller.watches_stream_with(stream, mapper, served.resource.clone())
        } else {
            controller.owns_stream_with(stream, served.resource.clone())
        };
    }
    // Lookups read shared objects (a platform namespace), so their caches ignore --namespace.
    // Each is scoped as far as the rule allows: to the one namespace its lookups name, and to
    // the labels they match.
    let watch_lookups = |served: &ServedKind| {
        let (api_version, kind) = (&served.resource.api_version, &served.resource.kind);
        let api = match rule.lookup_namespace(api_version, kind) {
            Some(ns) if served.namespaced => Api::namespaced_with(shared.client.clone(), &ns, &served.resource),
            _ => Api::all_with(shared.client.clone(), &served.resource),
        };
        let mut config = watcher::Config::default();
        if let Some(selector) = rule.lookup_selector(api_version, kind) {
            config = config.labels(&selector);
        }
        shared.watch_in(api, rule, served, config).boxed()
    };
    if shared.writers.is_sharded() {
        let queued = triggers.clone();
        controller = controller.reconcile_on(
            parents_of_taken_shards(&shared.writers, parent_store.clone(), parent_kind.resource.clone()).inspect(
                move |parent| {
                    let key = queue::key(parent.namespace.as_deref().unwrap_or_default(), &parent.name);
                    queued.event(key, Trigger::ShardTaken);
                },
            ),
        );
    }
    let (lookups, lookup_changes) =
        lookups::start(rule, kinds, &parent_kind.resource, parent_store.clone(), watch_lookups)?;
    if !rule.spec.lookups.is_empty() {
        let queued = triggers.clone();
        controller = controller.reconcile_on(lookup_changes.inspect(move |parent| {
            let key = queue::key(parent.namespace.as_deref().unwrap_or_default(), &parent.name);
            queued.event(key, Trigger::LookupEvent);
        }));
    }
    let (reconcile_all, reconcile_all_rx) = mpsc::unbounded();
    let (queued, reloaded) = (triggers.clone(), parent_store.clone());
    let reconcile_all_rx = reconcile_all_rx.inspect(move |()| {
        for parent in reloaded.state() {
            queued.event(parent_key(&parent), Trigger::Reload);
        }
    });
    let (stop, stop_rx) = oneshot::channel::<()>();
    let workers = Arc::new(Workers::new(
        rule.spec.max_concurrent_reconciles.unwrap_or(DEFAULT_CONCURRENCY),
    ));
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
    let name = rule.name.clone();
    let task = tokio::spawn(async move {
        controller
            // Every reconcile waits for one of the rule's workers, in turn (see `workers::Workers`
            // for why not kube-runtime's own limit), up to `HELD_RECONCILES` held at once.
            .with_config(Config::default().concurrency(queue::HELD_RECONCILES))
            .reconcile_all_on(reconcile_all_rx)
            .graceful_shutdown_on(async move {
                let _ = stop_rx.await;
            })
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(e) = result {
                    debug!(error = %e, "reconcile did not complete");
                }
            })
            .await;
        info!(rule = %name, "controller stopped");
    });
    info!(rule = %rule.name, watch = %format!("{} {}", watched.0, watched.1), "controller started");
    Ok(RunningController {
        watched,
        owned,
        looked_up: rule.lookup_kinds(),
        digest: rule.digest.clone(),
        reconcile_all,
        workers,
        stop,
        task,
    })
}

/// Runs one reconcile once it has a worker, in a span of its own (`rule`, `namespace`, `parent`,
/// `generation`, `trigger`), so every log line of the reconcile carries them. The trigger is
/// taken when kube starts the reconcile: what comes while it waits for a worker makes kube run
/// the parent again afterwards. The span's parent is kube's `reconciling object` span (JSON logs
/// list both).
fn reconcile(
    parent: Arc<DynamicObject>,
    ctx: Arc<RuleContext>,
) -> impl Future<Output = Result<Action, ReconcileError>> + Send {
    let trigger = ctx.triggers.started(&parent_key(&parent));
    // Another replica's parent (`--shards`) is not reconciled here, so not counted either.
    if ctx.shared.writers.of(&parent.uid().unwrap_or_default()).held() {
        ctx.shared
            .observability
            .metrics
            .triggered(&ctx.rule_name, trigger.as_str());
    }
    async move {
        let namespace = parent.namespace().unwrap_or_default();
        let Some(_worker) = ctx.workers.acquire(&namespace, trigger == Trigger::Reload).await else {
            // The controller is stopping.
            return Ok(Action::await_change());
        };
        // The parent as it is now: it may have changed (or gone) while it waited.
        let reference = ObjectRef::from_obj_with(parent.as_ref(), ctx.parent_kind.resource.clone());
        let Some(parent) = ctx.parents.get(&reference) else {
            return Ok(Action::await_change());
        };
        let span = info_span!(
            "reconcile",
            rule = %ctx.rule_name,
            namespace = %parent.namespace().unwrap_or_default(),
            // Not `name`: JSON logs use that key for the span's own name.
            parent = %parent.name_any(),
            generation = parent.meta().generation.unwrap_or_default(),
            trigger = trigger.as_str(),
        );
        // Boxed: a reconcile waiting for a worker holds only a pointer's worth of its state.
        Box::pin(reconcile_in_span(parent, ctx).instrument(span)).await
    }
}

async fn reconcile_in_span(parent: Arc<DynamicObject>, ctx: Arc<RuleContext>) -> Result<Action, ReconcileError> {
    // Before anything else, so before any write: another replica's shard is not ours to touch.
    // Its parents are reconciled here again when the shard is taken (`parents_of_taken_shards`).
    let writer = ctx.shared.writers.of(&parent.uid().unwrap_or_default());
    if !writer.held() {
        return Ok(Action::await_change());
    }
    let (set, kinds) = ctx.shared.snapshot();
    let Some(rule) = set.rule(&ctx.rule_name) else {
        return Ok(Action::await_change());
    };
    let namespace = parent.namespace().unwrap_or_default();
    if parent.meta().deletion_timestamp.is_some() {
        ctx.lookups.index.forget(&(namespace.clone(), parent.name_any()));
    }
    // A parent being deleted needs us only while it holds our finalizer.
    let deleting_without_us =
        parent.meta().deletion_timestamp.is_some() && !parent.finalizers().iter().any(|f| f == deletion::FINALIZER);
    // An unselected parent (`watch.annotationSelector`) is left alone, unless it is being deleted
    // with our finalizer: that cleanup must finish whatever its annotations say now.
    let unselected = parent.meta().deletion_timestamp.is_none()
        && !rule.spec.watch.annotation_selector.is_empty()
        && !rule.selects(&serde_json::json!({"metadata": {"annotations": parent.annotations()}}));
    if deleting_without_us
        || unselected
        || (!rule.spec.watch.namespaces.is_empty() && !rule.spec.watch.namespaces.contains(&namespace))
    {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let _in_flight = ctx.shared.observability.health.reconcile_started(format!(
        "rule {:?} parent {namespace}/{}",
        rule.name,
        parent.name_any()
    ));
    let _worker = ctx.shared.observability.metrics.reconcile_started(&rule.name);
    if ctx.shared.writers.is_sharded() {
        ctx.shared.observability.metrics.shard_reconciled(writer.index());
    }
    let result = reconcile_parent(&ctx, writer, &set, rule, &kinds, &parent, &namespace).await;
    debug!(parent = %parent.name_any(), elapsed = ?started.elapsed(), ok = result.is_ok(), "reconciled");
    let outcome = match &result {
        Ok(_) => Outcome::Ok,
        // An optimistic-concurrency retry (stale cache), not a failure.
        Err(ReconcileError::Apply(ApplyError::Conflict(_))) => Outcome::Conflict,
        Err(e) => {
            // Failures reported on the parent were logged with it (`report_failure`).
            if matches!(
                e,
                ReconcileError::NotSynced(_)
                    | ReconcileError::Apply(ApplyError::Action { .. } | ApplyError::EgressDenied { .. })
            ) {
                let error = e.to_string();
                warn!(reason = e.reason(), error = %bounded(&error, MESSAGE_LIMIT), "reconcile failed");
            }
            Outcome::Error(e.reason())
        }
    };
    ctx.shared
        .observability
        .metrics
        .reconciled(&rule.name, outcome, started.elapsed());
    result
}

async fn reconcile_parent(
    ctx: &RuleContext,
    writer: &crate::ha::shard::ShardWriter,
    set: &RuleSet,
    rule: &Rule,
    kinds: &Kinds,
    parent: &DynamicObject,
    namespace: &str,
) -> Result<Action, ReconcileError> {
    let uid = parent.uid().unwrap_or_default();
    // Planning against a child cache that has not listed yet would see every child missing. The
    // wait is bounded: a kind that cannot be listed must not hold a reconcile (and so a
    // controller's shutdown, and the reloads waiting on it) forever; the parent is retried.
    if !*ctx.children_synced.borrow() {
        debug!(parent = %parent.name_any(), "waiting for the child caches to sync");
    }
    let synced = async {
        let _ = ctx.children_synced.clone().wait_for(|synced| *synced).await;
        ctx.lookups.wait_synced().await;
    };
    if tokio::time::timeout(SYNC_WAIT, synced).await.is_err() {
        return Err(ReconcileError::NotSynced(SYNC_WAIT));
    }
    let cached = || ctx.bodies.get(namespace, &parent.name_any(), &ctx.parent_kind.resource);
    let Some(parent_json) = ctx.written.newest(&uid, cached) else {
        // Deleted a moment ago: its delete event is on its way.
        return Ok(Action::await_change());
    };
    let now = now_rfc3339();
    // Every write of this reconcile goes through the parent's shard, fenced by its lease.
    let cluster = Cluster {
        client: &writer.client,
        kinds,
        recorder: &writer.recorder,
        observability: &ctx.shared.observability,
        written: &ctx.written,
        drift: &ctx.drift,
        events: &ctx.events,
        egress: &ctx.shared.egress_deny,
    };
    let observed: Vec<Value> = if parent.meta().deletion_timestamp.is_some() {
        // The finalizer is removed on what this says: read it fresh, not from a lagging cache.
        cleanup::list_owned(&cluster, &rule.owned_kinds(), &uid).await?
    } else {
        cached_children(ctx, &uid).await
    };
    // The caches and the fresh list select by label, which anyone can copy: only objects proven
    // to be this parent's count, for the plan and for the live view the applies compare with.
    let observed: Vec<Value> = match ParentRef::read(&parent_json) {
        Ok(parent_ref) => ownership::owned(rule, &parent_ref, &observed, &ctx.lookups)
            .into_iter()
            .cloned()
            .collect(),
        Err(_) => observed,
    };
    let handle = ParentHandle {
        api: Api::namespaced_with(writer.client.clone(), namespace, &ctx.parent_kind.resource),
        name: parent.name_any(),
        kind: ctx.parent_kind.resource.kind.clone(),
        reference: parent.object_ref(&ctx.parent_kind.resource),
    };
    debug!(parent = %parent.name_any(), children = observed.len(), "planning");
    let read = ctx.lookups.recording();
    let plan = plan::plan_with(&set.renderer, rule, &parent_json, &observed, &read, &now);
    read.commit((namespace.to_owned(), parent.name_any()));
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            report_failure(&cluster, &handle, rule, &parent_json, e.reason(), &e.to_string(), &now).await;
            return Err(e.into());
        }
    };
    if plan.paused {
        ctx.shared.observability.metrics.paused(&rule.name);
    }
    for problem in &plan.status_problems {
        warn!(parent = %handle.name, problem = %bounded(problem, MESSAGE_LIMIT), "status expression failed");
    }
    let retry = plan.next_retry();
    match apply_plan(&cluster, &handle, rule, plan, parent_json.clone(), &observed, &now).await {
        Ok(actions_ran) => {
            if let Ok(mut failures) = ctx.failures.lock() {
                failures.remove(&uid);
            }
            let resync = jittered(rule.resync.unwrap_or(ctx.shared.default_resync), &uid);
            let mut next = if actions_ran { Duration::from_secs(1) } else { resync };
            // Drift left uncorrected by the rate limit is corrected when the budget allows.
            if let Some(wait) = ctx.drift.wait(&uid, std::time::Instant::now()) {
                next = next.min(wait);
            }
            let after = retry.map_or(next, |retry| retry.min(next));
            let trigger = if after == resync {
                Trigger::Resync
            } else {
                Trigger::Requeue
            };
            ctx.triggers.schedule(parent_key(parent), after, trigger);
            Ok(Action::requeue(after))
        }
        Err(e @ ApplyError::Immutable { .. }) => {
            report_failure(&cluster, &handle, rule, &parent_json, e.reason(), &e.to_string(), &now).await;
            let resync = rule.resync.unwrap_or(ctx.shared.default_resync);
            ctx.triggers.schedule(parent_key(parent), resync, Trigger::Resync);
            Ok(Action::requeue(resync))
        }
        // The action layer already recorded these in status (and an Event); Ready is about children.
        Err(e @ (ApplyError::Action { .. } | ApplyError::EgressDenied { .. } | ApplyError::Conflict(_))) => {
            Err(e.into())
        }
        Err(e) => {
            report_failure(&cluster, &handle, rule, &parent_json, e.reason(), &e.to_string(), &now).await;
            Err(e.into())
        }
    }
}

/// The parent's children from the caches, once they show this process's own last writes to
/// them: a reconcile right after ours (triggered by our own status or finalizer write) would
/// otherwise apply a child again that it does not see yet. The watch is usually milliseconds
/// behind; the wait is bounded (a child deleted by someone else meanwhile never shows).
async fn cached_children(ctx: &RuleContext, uid: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
    loop {
        let cached: Vec<Value> = ctx
            .children
            .iter()
            .flat_map(|(resource, index)| {
                index.children_of(uid).into_iter().map(move |mut child| {
                    set_type(&mut child, resource);
                    child
                })
            })
            .collect();
        if !ctx.written.children_unseen(uid, &cached) || tokio::time::Instant::now() >= deadline {
            return cached;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn error_policy(parent: Arc<DynamicObject>, error: &ReconcileError, ctx: Arc<RuleContext>) -> Action {
    if matches!(error, ReconcileError::Apply(ApplyError::Conflict(_))) {
        let after = Duration::from_millis(200);
        ctx.triggers.schedule(parent_key(&parent), after, Trigger::Retry);
        return Action::requeue(after);
    }
    // A write the lease fence refused: a renewal running late (the fence reopens when it lands)
    // or the lease lost (the next reconcile skips the parent). Neither is the parent's failure.
    if crate::ha::leader::is_fenced(error) {
        let after = Duration::from_millis(500);
        ctx.triggers.schedule(parent_key(&parent), after, Trigger::Retry);
        return Action::requeue(after);
    }
    let uid = parent.uid().unwrap_or_default();
    let failures = ctx.failures.lock().map_or(1, |mut failures| {
        let count = failures.entry(uid).or_insert(0);
        *count += 1;
        *count
    });
    ParentMemory {
        failures: ctx.failures.clone(),
        written: ctx.written.clone(),
        drift: ctx.drift.clone(),
    }
    .publish(&ctx.shared.observability, &ctx.rule_name);
    let delay = Duration::from_millis(500)
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_BACKOFF);
    debug!(parent = %parent.name_any(), reason = error.reason(), ?delay, "backing off");
    ctx.triggers.schedule(parent_key(&parent), delay, Trigger::Retry);
    Action::requeue(delay)
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
    resource: ApiResource,
) -> impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    let shards = writers.count();
    // Unordered: a second shard taken at once must not wait behind the first one's settled parents.
    writers.subscribe().flat_map_unordered(None, move |shard| {
        let (changed, settled): (Vec<_>, Vec<_>) = store
            .state()
            .into_iter()
            .filter(|p| crate::ha::shard::shard_of(&p.uid().unwrap_or_default(), shards) == shard)
            .partition(|p| p.data["status"]["observedGeneration"].as_i64() != p.meta().generation);
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
/// label-owned child, or from a controller ownerReference of the parent's kind.
fn parent_of(child: &DynamicObject, parent: &kube::discovery::ApiResource) -> Option<ObjectRef<DynamicObject>> {
    if let Some((namespace, name)) = child
        .annotations()
        .get(ANNOTATION_PARENT)
        .and_then(|p| p.split_once('/'))
    {
        return Some(ObjectRef::new_with(name, parent.clone()).within(namespace));
    }
    let owner = child
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == parent.kind)?;
    let mut reference = ObjectRef::new_with(&owner.name, parent.clone());
    if let Some(namespace) = child.namespace() {
        reference = reference.within(&namespace);
    }
    Some(reference)
}

/// Sets a cached object's apiVersion and kind: objects that came from a LIST carry no type
/// fields, and a child without them would never match its desired self.
fn set_type(json: &mut Value, resource: &kube::discovery::ApiResource) {
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".to_owned(), Value::from(resource.api_version.clone()));
        map.insert("kind".to_owned(), Value::from(resource.kind.clone()));
    }
}

/// `period` plus up to 10% spread by parent and time, so N parents do not resync in one burst.
fn jittered(period: Duration, uid: &str) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut hasher);
    std::time::SystemTime::now().hash(&mut hasher);
    let spread = period.as_millis() as u64 / 10;
    period + Duration::from_millis(if spread == 0 { 0 } else { hasher.finish() % spread })
}
