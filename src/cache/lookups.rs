//! Lookups at run time: one watched cache per looked-up kind of a rule (all namespaces, no label
//! selector), and an index from each looked-up object to the parents whose last plan read it (by
//! name, or by listing its namespace or every namespace), so a change to that object, a new
//! match included, re-reconciles exactly those parents.
//!
//! The index is fed by the reconciles (what each plan read, through [`Recording`]) and read by
//! the caches' watch streams; neither holds a client. A change that lands while a plan runs (after
//! it read the object, before it recorded the read) finds no reader yet: the index keeps the
//! latest changes, and a plan that recorded a read one of them covers is queued again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

use crate::cache::discovery::{Kinds, NotResolved, ServedKind};
use crate::cache::parents;
use crate::engine::plan::lookups::{ALL_NAMESPACES, LookupKey, LookupSource};
use crate::engine::rules::Rule;

/// A parent of one rule: (namespace, name).
pub(crate) type ParentKey = (String, String);

/// Looked-up object -> parents whose last plan read it.
#[derive(Debug, Default)]
pub(crate) struct LookupIndex {
    inner: Mutex<IndexInner>,
}

/// The index kept for as long as its parents live: each key and parent is held once (shared by
/// both maps), and an object read by one parent (the common case: a parent's own pod) holds no
/// set of its own.
#[derive(Debug, Default)]
struct IndexInner {
    readers: HashMap<Arc<LookupKey>, Readers>,
    read: HashMap<Arc<ParentKey>, Box<[Arc<LookupKey>]>>,
    changes: Changes,
}

/// How many of the latest changes the index keeps for plans still running. A plan that runs
/// across more changes than this is queued again whatever it read.
const RECENT_CHANGES: usize = 256;

/// The latest changes to looked-up objects, each numbered.
#[derive(Debug, Default)]
struct Changes {
    /// The number the next change gets.
    next: u64,
    /// Oldest first: (number, the changed object's key, whether its kind is namespaced).
    recent: VecDeque<(u64, LookupKey, bool)>,
}

impl Changes {
    fn push(&mut self, key: &LookupKey, namespaced: bool) {
        if self.recent.len() == RECENT_CHANGES {
            self.recent.pop_front();
        }
        self.recent.push_back((self.next, key.clone(), namespaced));
        self.next += 1;
    }

    /// Whether a change numbered `since` or later may have changed what `read` names (also
    /// when such changes are no longer kept).
    fn cover(&self, since: u64, read: &[LookupKey]) -> bool {
        let forgotten = self.recent.front().map_or(self.next, |(number, ..)| *number);
        since < forgotten
            || self
                .recent
                .iter()
                .rev()
                .take_while(|(number, ..)| *number >= since)
                .any(|(_, key, namespaced)| covering(key, *namespaced).iter().any(|k| read.contains(k)))
    }
}

/// The keys whose readers an object of `key` concerns: its name, a list of its namespace, and
/// (namespaced kinds) a list of every namespace.
fn covering(key: &LookupKey, namespaced: bool) -> Vec<LookupKey> {
    let list = |namespace: &str| LookupKey {
        namespace: namespace.to_owned(),
        name: String::new(),
        ..key.clone()
    };
    let mut keys = vec![key.clone(), list(&key.namespace)];
    if namespaced {
        keys.push(list(ALL_NAMESPACES));
    }
    keys
}

/// The parents whose last plan read one object.
#[derive(Debug)]
enum Readers {
    One(Arc<ParentKey>),
    #[expect(
        clippy::box_collection,
        reason = "boxed, the set keeps every map slot at 16 bytes instead of 48, for the rare object many parents read"
    )]
    Many(Box<HashSet<Arc<ParentKey>>>),
}

impl Readers {
    fn add(&mut self, parent: &Arc<ParentKey>) {
        match self {
            Readers::One(only) if only == parent => {}
            Readers::One(only) => *self = Readers::Many(Box::new(HashSet::from([only.clone(), parent.clone()]))),
            Readers::Many(set) => {
                set.insert(parent.clone());
            }
        }
    }

    /// Drops `parent`; true when none is left.
    fn remove(&mut self, parent: &ParentKey) -> bool {
        match self {
            Readers::One(only) => **only == *parent,
            Readers::Many(set) => {
                set.remove(parent);
                set.is_empty()
            }
        }
    }

    fn parents(&self) -> Vec<ParentKey> {
        match self {
            Readers::One(only) => vec![ParentKey::clone(only)],
            Readers::Many(set) => set.iter().map(|parent| ParentKey::clone(parent)).collect(),
        }
    }
}

impl LookupIndex {
    /// The number the next change gets: a plan takes it before it reads.
    pub(crate) fn mark(&self) -> u64 {
        self.inner.lock().map_or(0, |inner| inner.changes.next)
    }

    /// Replaces what `parent` read with `keys` (its latest plan's lookups, read after
    /// [`LookupIndex::mark`] gave `since`). True when a change since then may have changed one of
    /// them: the plan may have read it before the change, which found no reader to queue.
    pub(crate) fn record(&self, parent: ParentKey, keys: Vec<LookupKey>, since: u64) -> bool {
        let Ok(mut inner) = self.inner.lock() else { return false };
        let stale = inner.changes.cover(since, &keys);
        inner.replace(parent, keys);
        stale
    }

    /// Forgets a parent (deleted).
    pub(crate) fn forget(&self, parent: &ParentKey) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.unlink(parent);
        }
    }

    /// Notes a change to the object of `key` and returns the parents whose last plan read it by
    /// name, or listed its namespace (or every namespace): each once.
    pub(crate) fn changed(&self, key: &LookupKey, namespaced: bool) -> Vec<ParentKey> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        inner.changes.push(key, namespaced);
        let mut readers: Vec<ParentKey> = covering(key, namespaced)
            .iter()
            .flat_map(|k| inner.readers_of(k))
            .collect();
        readers.sort();
        readers.dedup();
        readers
    }

    /// The parents whose last plan read `key`.
    #[cfg(test)]
    fn readers(&self, key: &LookupKey) -> Vec<ParentKey> {
        self.inner.lock().map(|inner| inner.readers_of(key)).unwrap_or_default()
    }
}

impl IndexInner {
    fn readers_of(&self, key: &LookupKey) -> Vec<ParentKey> {
        self.readers.get(key).map(Readers::parents).unwrap_or_default()
    }

    /// Replaces what `parent` read with `keys`.
    fn replace(&mut self, parent: ParentKey, keys: Vec<LookupKey>) {
        let same = self
            .read
            .get(&parent)
            .is_some_and(|held| held.iter().map(|key| &**key).eq(keys.iter()));
        if same || (keys.is_empty() && !self.read.contains_key(&parent)) {
            return;
        }
        self.unlink(&parent);
        if keys.is_empty() {
            return;
        }
        let parent = Arc::new(parent);
        let keys: Box<[Arc<LookupKey>]> = keys
            .into_iter()
            .map(|key| {
                let key = match self.readers.get_key_value(&key) {
                    Some((held, _)) => held.clone(),
                    None => Arc::new(key),
                };
                self.readers
                    .entry(key.clone())
                    .and_modify(|readers| readers.add(&parent))
                    .or_insert_with(|| Readers::One(parent.clone()));
                key
            })
            .collect();
        self.read.insert(parent, keys);
    }

    fn unlink(&mut self, parent: &ParentKey) {
        for key in self.read.remove(parent).unwrap_or_default() {
            if let Some(readers) = self.readers.get_mut(&key)
                && readers.remove(parent)
            {
                self.readers.remove(&key);
            }
        }
    }
}

/// One looked-up kind's cache.
#[derive(Clone)]
struct Cache {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
}

/// The caches of one rule's looked-up kinds, the index of who read what, and whether every cache
/// has listed.
pub(crate) struct RuleLookups {
    caches: HashMap<(String, String), Cache>,
    /// Who read what.
    pub index: Arc<LookupIndex>,
    synced: watch::Receiver<bool>,
    /// Parents whose plan read what changed while it ran, for the stream [`start`] returns.
    again: mpsc::UnboundedSender<ParentKey>,
}

impl RuleLookups {
    /// Waits until every cache has listed: a plan on an unlisted cache would see every lookup absent.
    pub(crate) async fn wait_synced(&self) {
        let _ = self.synced.clone().wait_for(|synced| *synced).await;
    }

    /// Objects cached per looked-up kind.
    pub(crate) fn cached_objects(&self) -> impl Iterator<Item = (&str, usize)> {
        self.caches
            .values()
            .map(|cache| (cache.resource.kind.as_str(), cache.store.len()))
    }

    /// A source that remembers what a plan reads, to be taken right before the plan.
    pub(crate) fn recording(&self) -> Recording<'_> {
        Recording {
            lookups: self,
            since: self.index.mark(),
            read: Mutex::new(Vec::new()),
        }
    }

    /// The key as the cache knows it: no namespace for cluster-scoped kinds (a list of every
    /// namespace included).
    fn normalize(&self, key: &LookupKey) -> LookupKey {
        let mut key = key.clone();
        if self
            .caches
            .get(&(key.api_version.clone(), key.kind.clone()))
            .is_some_and(|c| !c.namespaced)
        {
            key.namespace.clear();
        }
        key
    }
}

/// A cached object as a plan reads it, with its type fields (objects from a LIST carry none).
fn typed_json(object: &DynamicObject, key: &LookupKey) -> Option<Value> {
    let mut json = serde_json::to_value(object).ok()?;
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".to_owned(), Value::from(key.api_version.clone()));
        map.insert("kind".to_owned(), Value::from(key.kind.clone()));
    }
    Some(json)
}

impl LookupSource for RuleLookups {
    fn get(&self, key: &LookupKey) -> Option<Value> {
        let cache = self.caches.get(&(key.api_version.clone(), key.kind.clone()))?;
        let mut reference = ObjectRef::new_with(&key.name, cache.resource.clone());
        if cache.namespaced {
            reference = reference.within(&key.namespace);
        }
        typed_json(cache.store.get(&reference)?.as_ref(), key)
    }

    fn list(&self, key: &LookupKey) -> Vec<Value> {
        let Some(cache) = self.caches.get(&(key.api_version.clone(), key.kind.clone())) else {
            return Vec::new();
        };
        cache
            .store
            .state()
            .iter()
            .filter(|object| !cache.namespaced || key.covers(&object.namespace().unwrap_or_default(), ""))
            .filter_map(|object| typed_json(object, key))
            .collect()
    }
}

/// A [`LookupSource`] that remembers every key read, for the index.
pub(crate) struct Recording<'a> {
    lookups: &'a RuleLookups,
    /// The number of the first change the plan may not have seen.
    since: u64,
    read: Mutex<Vec<LookupKey>>,
}

impl Recording<'_> {
    /// Records what was read as `parent`'s lookups (also when the plan failed: a fix to the
    /// looked-up object must reach the parent), and queues the parent again when one of them
    /// changed while the plan ran.
    pub(crate) fn commit(self, parent: ParentKey) {
        let keys = self.read.into_inner().unwrap_or_default();
        if self.lookups.index.record(parent.clone(), keys, self.since) {
            // Closed only when the controller is gone.
            let _ = self.lookups.again.unbounded_send(parent);
        }
    }
}

impl Recording<'_> {
    fn remember(&self, key: &LookupKey) -> LookupKey {
        let key = self.lookups.normalize(key);
        if let Ok(mut read) = self.read.lock() {
            read.push(key.clone());
        }
        key
    }
}

impl LookupSource for Recording<'_> {
    fn get(&self, key: &LookupKey) -> Option<Value> {
        self.lookups.get(&self.remember(key))
    }

    fn list(&self, key: &LookupKey) -> Vec<Value> {
        self.lookups.list(&self.remember(key))
    }
}

/// Starts one cache per looked-up kind of `rule`, each fed by `watch` (every namespace, no
/// label selector). Returns the lookups and the stream of parents to re-reconcile (the readers
/// of each changed object, readers no longer in `parents` forgotten, and the parents whose plan
/// ran across a change to what it read). No lookups: no cache, a stream of nothing.
pub(crate) fn start(
    rule: &Rule,
    kinds: &Kinds,
    parent_resource: &ApiResource,
    parents: Store<DynamicObject>,
    watch: impl Fn(&ServedKind) -> BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>,
) -> Result<
    (
        RuleLookups,
        impl Stream<Item = ObjectRef<DynamicObject>> + Send + 'static,
    ),
    NotResolved,
> {
    let index = Arc::new(LookupIndex::default());
    let mut caches = HashMap::new();
    let mut streams = Vec::new();
    for (api_version, kind) in rule.lookup_kinds() {
        let served = kinds.resolved(&api_version, &kind)?;
        let writer = Writer::new(served.resource.clone());
        let store = writer.as_reader();
        caches.insert(
            (api_version.clone(), kind.clone()),
            Cache {
                resource: served.resource.clone(),
                namespaced: served.namespaced,
                store,
            },
        );
        let (index, parents, parent_resource) = (index.clone(), parents.clone(), parent_resource.clone());
        let namespaced = served.namespaced;
        // A relist's objects once the store shows it.
        let stream = super::relist::touched_after_relists(watch(served).reflect(writer), true, Vec::new).flat_map(
            move |object| {
                let key = LookupKey {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespace: if namespaced {
                        object.namespace().unwrap_or_default()
                    } else {
                        String::new()
                    },
                    name: object.name_any(),
                };
                let mut due = Vec::new();
                for parent in index.changed(&key, namespaced) {
                    let reference = parents::reference(&parent_resource, &parent.0, &parent.1);
                    if parents.get(&reference).is_some() {
                        due.push(reference);
                    } else {
                        index.forget(&parent);
                    }
                }
                futures::stream::iter(due)
            },
        );
        streams.push(stream.boxed());
    }
    let (again, again_rx) = mpsc::unbounded();
    let parent_resource = parent_resource.clone();
    streams.push(
        again_rx
            .map(move |(namespace, name): ParentKey| parents::reference(&parent_resource, &namespace, &name))
            .boxed(),
    );
    let synced = synced(caches.values().map(|c| c.store.clone()).collect());
    Ok((
        RuleLookups {
            caches,
            index,
            synced,
            again,
        },
        futures::stream::select_all(streams),
    ))
}

/// A channel that turns true once every store has listed (one waiter per store: kube-runtime's
/// `wait_until_ready` wakes only the last of several concurrent waiters).
fn synced(stores: Vec<Store<DynamicObject>>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(stores.is_empty());
    if !stores.is_empty() {
        tokio::spawn(async move {
            for store in stores {
                let _ = store.wait_until_ready().await;
            }
            let _ = tx.send(true);
        });
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn key(name: &str) -> LookupKey {
        LookupKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn parent(name: &str) -> ParentKey {
        ("ns".into(), name.into())
    }

    #[test]
    fn a_list_read_covers_every_object_of_its_namespace_or_of_all_namespaces() {
        let index = LookupIndex::default();
        let list = |namespace: &str| LookupKey {
            namespace: namespace.into(),
            name: String::new(),
            ..key("")
        };
        index.record(parent("by-name"), vec![key("defaults")], 0);
        index.record(parent("lists-ns"), vec![list("ns")], 0);
        index.record(parent("lists-all"), vec![list(ALL_NAMESPACES)], 0);
        index.record(parent("lists-other"), vec![list("other")], 0);
        assert_eq!(
            index.changed(&key("defaults"), true),
            vec![parent("by-name"), parent("lists-all"), parent("lists-ns")]
        );
        assert_eq!(
            index.changed(&key("new-match"), true),
            vec![parent("lists-all"), parent("lists-ns")],
            "an object no one read by name reaches the lists"
        );
    }

    #[test]
    fn readers_are_exactly_the_parents_whose_last_plan_read_the_object() {
        let index = LookupIndex::default();
        index.record(parent("a"), vec![key("defaults")], 0);
        index.record(parent("b"), vec![key("defaults"), key("b-override")], 0);
        index.record(parent("c"), vec![key("other")], 0);
        let mut readers = index.readers(&key("defaults"));
        readers.sort();
        assert_eq!(readers, vec![parent("a"), parent("b")]);

        index.record(parent("b"), vec![key("b-override")], 0);
        assert_eq!(
            index.readers(&key("defaults")),
            vec![parent("a")],
            "b no longer reads it"
        );
        index.forget(&parent("a"));
        assert!(index.readers(&key("defaults")).is_empty());
        assert_eq!(index.readers(&key("b-override")), vec![parent("b")]);
    }

    #[test]
    fn the_same_reads_again_change_nothing_and_no_reads_forget_the_parent() {
        let index = LookupIndex::default();
        index.record(parent("a"), vec![key("defaults")], 0);
        index.record(parent("b"), vec![key("defaults")], 0);
        index.record(parent("a"), vec![key("defaults")], 0);
        let mut readers = index.readers(&key("defaults"));
        readers.sort();
        assert_eq!(readers, vec![parent("a"), parent("b")]);
        index.record(parent("b"), Vec::new(), 0);
        assert_eq!(index.readers(&key("defaults")), vec![parent("a")]);
        index.record(parent("a"), Vec::new(), 0);
        assert!(index.readers(&key("defaults")).is_empty());
        let inner = index.inner.lock().expect("not poisoned");
        assert!(
            inner.readers.is_empty() && inner.read.is_empty(),
            "nothing is kept for no reads"
        );
    }

    #[test]
    fn a_plan_that_ran_across_a_change_to_what_it_read_is_told_so() {
        let index = LookupIndex::default();
        index.changed(&key("defaults"), true);
        let since = index.mark();
        assert!(
            !index.record(parent("a"), vec![key("defaults")], since),
            "a change before the plan read was seen by it"
        );

        let since = index.mark();
        assert!(index.changed(&key("defaults"), true).contains(&parent("a")));
        index.changed(&key("unrelated"), true);
        assert!(
            index.record(parent("b"), vec![key("defaults")], since),
            "b's plan may have read defaults before it changed, when b was no reader yet"
        );
        assert!(!index.record(parent("c"), vec![key("other")], since));

        let list = LookupKey {
            name: String::new(),
            ..key("")
        };
        let since = index.mark();
        index.changed(&key("new-match"), true);
        assert!(
            index.record(parent("d"), vec![list], since),
            "a new object in a listed namespace"
        );
    }

    #[test]
    fn a_plan_that_ran_across_more_changes_than_are_kept_is_told_so_whatever_it_read() {
        let index = LookupIndex::default();
        let since = index.mark();
        for n in 0..RECENT_CHANGES {
            index.changed(&key(&format!("other-{n}")), true);
        }
        assert!(!index.record(parent("a"), vec![key("defaults")], since), "all kept");
        index.changed(&key("one-more"), true);
        assert!(index.record(parent("a"), vec![key("defaults")], since), "one forgotten");
    }

    /// Where a test sends the watch events of the looked-up kind.
    type Events = mpsc::UnboundedSender<Result<watcher::Event<DynamicObject>, watcher::Error>>;

    /// A rule with one lookup (ConfigMap `defaults` of the parent's namespace), its lookups
    /// started over a channel of watch events, and the stream of parents to reconcile again.
    fn started_over_a_channel() -> (RuleLookups, BoxStream<'static, ObjectRef<DynamicObject>>, Events) {
        let rule = Rule::from_spec_yaml(
            "watch: {apiVersion: myorg.io/v1, kind: Database}\nlookups:\n  - {id: defaults, apiVersion: v1, kind: ConfigMap, name: defaults}\n",
        );
        let config_maps = ServedKind {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
        };
        let kinds = Kinds::default().with("v1", "ConfigMap", config_maps);
        let parent_resource = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("myorg.io", "v1", "Database"));
        let mut parents = Writer::new(parent_resource.clone());
        let parent: DynamicObject =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}}))
                .expect("a parent");
        parents.apply_watcher_event(&watcher::Event::Apply(parent));
        let (events, events_rx) = mpsc::unbounded();
        let events_rx = Mutex::new(Some(events_rx));
        let (lookups, again) = start(&rule, &kinds, &parent_resource, parents.as_reader(), |_| {
            events_rx
                .lock()
                .expect("not poisoned")
                .take()
                .expect("one kind")
                .boxed()
        })
        .expect("started");
        (lookups, again.boxed(), events)
    }

    fn defaults(color: &str) -> Result<watcher::Event<DynamicObject>, watcher::Error> {
        let object = serde_json::json!({"metadata": {"name": "defaults", "namespace": "ns"}, "data": {"color": color}});
        Ok(watcher::Event::Apply(
            serde_json::from_value(object).expect("a ConfigMap"),
        ))
    }

    /// The parents the stream queues with what it was sent so far (it is not waited on).
    fn queued(again: &mut BoxStream<'static, ObjectRef<DynamicObject>>) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(Some(reference)) = again.next().now_or_never() {
            names.push(reference.to_string());
        }
        names
    }

    #[tokio::test]
    async fn a_change_between_a_plans_read_and_its_record_queues_the_parent_again() {
        let (lookups, mut again, events) = started_over_a_channel();
        for event in [Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)] {
            events.unbounded_send(event).expect("sent");
        }
        assert!(queued(&mut again).is_empty());

        // The first plan of parent a reads `defaults` (absent); the object comes before the
        // plan records the read, when a is no reader yet.
        let read = lookups.recording();
        let key = key("defaults");
        assert!(read.get(&key).is_none());
        events.unbounded_send(defaults("blue")).expect("sent");
        assert!(queued(&mut again).is_empty(), "no reader yet");
        read.commit(parent("a"));
        assert_eq!(queued(&mut again), vec!["Database.v1.myorg.io/a.ns"]);

        // Its next plan sees the object, and nothing changes while it runs: nothing more.
        let read = lookups.recording();
        assert!(read.get(&key).is_some());
        read.commit(parent("a"));
        assert!(queued(&mut again).is_empty());

        // A change after the record reaches a as a reader.
        events.unbounded_send(defaults("red")).expect("sent");
        assert_eq!(queued(&mut again), vec!["Database.v1.myorg.io/a.ns"]);
    }
}
