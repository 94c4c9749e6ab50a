//! Lookups at run time: one watched cache per looked-up kind of a rule (all namespaces, no label
//! selector), and an index from each looked-up object to the parents whose last plan read it (by
//! name, or by listing its namespace or every namespace), so a change to that object, a new
//! match included, re-reconciles exactly those parents.
//!
//! The index is fed by the reconciles (what each plan read, through [`Recording`]) and read by
//! the caches' watch streams; neither holds a client.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

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
    /// Replaces what `parent` read with `keys` (its latest plan's lookups).
    pub(crate) fn record(&self, parent: ParentKey, keys: Vec<LookupKey>) {
        let Ok(mut inner) = self.inner.lock() else { return };
        let same = inner
            .read
            .get(&parent)
            .is_some_and(|held| held.iter().map(|key| &**key).eq(keys.iter()));
        if same || (keys.is_empty() && !inner.read.contains_key(&parent)) {
            return;
        }
        inner.unlink(&parent);
        if keys.is_empty() {
            return;
        }
        let parent = Arc::new(parent);
        let keys: Box<[Arc<LookupKey>]> = keys
            .into_iter()
            .map(|key| {
                let key = match inner.readers.get_key_value(&key) {
                    Some((held, _)) => held.clone(),
                    None => Arc::new(key),
                };
                inner
                    .readers
                    .entry(key.clone())
                    .and_modify(|readers| readers.add(&parent))
                    .or_insert_with(|| Readers::One(parent.clone()));
                key
            })
            .collect();
        inner.read.insert(parent, keys);
    }

    /// Forgets a parent (deleted).
    pub(crate) fn forget(&self, parent: &ParentKey) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.unlink(parent);
        }
    }

    /// The parents whose last plan read the object of `key` by name, or listed its namespace
    /// (or every namespace): each once.
    pub(crate) fn readers_covering(&self, key: &LookupKey, namespaced: bool) -> Vec<ParentKey> {
        let list = |namespace: &str| LookupKey {
            namespace: namespace.to_owned(),
            name: String::new(),
            ..key.clone()
        };
        let mut keys = vec![key.clone(), list(&key.namespace)];
        if namespaced {
            keys.push(list(ALL_NAMESPACES));
        }
        let mut readers: Vec<ParentKey> = keys.iter().flat_map(|k| self.readers(k)).collect();
        readers.sort();
        readers.dedup();
        readers
    }

    /// The parents whose last plan read `key`.
    pub(crate) fn readers(&self, key: &LookupKey) -> Vec<ParentKey> {
        self.inner
            .lock()
            .ok()
            .and_then(|inner| inner.readers.get(key).map(Readers::parents))
            .unwrap_or_default()
    }
}

impl IndexInner {
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

    /// A source that remembers what a plan reads.
    pub(crate) fn recording(&self) -> Recording<'_> {
        Recording {
            lookups: self,
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
    read: Mutex<Vec<LookupKey>>,
}

impl Recording<'_> {
    /// Records what was read as `parent`'s lookups (also when the plan failed: a fix to the
    /// looked-up object must reach the parent).
    pub(crate) fn commit(self, parent: ParentKey) {
        let keys = self.read.into_inner().unwrap_or_default();
        self.lookups.index.record(parent, keys);
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
/// label selector). Returns the lookups and the stream of parents
/// to re-reconcile (the readers of each changed object; readers no longer in `parents` are
/// forgotten). No lookups: no cache, an empty stream.
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
                for parent in index.readers_covering(&key, namespaced) {
                    let reference = ObjectRef::new_with(&parent.1, parent_resource.clone()).within(&parent.0);
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
    let synced = synced(caches.values().map(|c| c.store.clone()).collect());
    Ok((
        RuleLookups { caches, index, synced },
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
        index.record(parent("by-name"), vec![key("defaults")]);
        index.record(parent("lists-ns"), vec![list("ns")]);
        index.record(parent("lists-all"), vec![list(ALL_NAMESPACES)]);
        index.record(parent("lists-other"), vec![list("other")]);
        assert_eq!(
            index.readers_covering(&key("defaults"), true),
            vec![parent("by-name"), parent("lists-all"), parent("lists-ns")]
        );
        assert_eq!(
            index.readers_covering(&key("new-match"), true),
            vec![parent("lists-all"), parent("lists-ns")],
            "an object no one read by name reaches the lists"
        );
    }

    #[test]
    fn readers_are_exactly_the_parents_whose_last_plan_read_the_object() {
        let index = LookupIndex::default();
        index.record(parent("a"), vec![key("defaults")]);
        index.record(parent("b"), vec![key("defaults"), key("b-override")]);
        index.record(parent("c"), vec![key("other")]);
        let mut readers = index.readers(&key("defaults"));
        readers.sort();
        assert_eq!(readers, vec![parent("a"), parent("b")]);

        index.record(parent("b"), vec![key("b-override")]);
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
        index.record(parent("a"), vec![key("defaults")]);
        index.record(parent("b"), vec![key("defaults")]);
        index.record(parent("a"), vec![key("defaults")]);
        let mut readers = index.readers(&key("defaults"));
        readers.sort();
        assert_eq!(readers, vec![parent("a"), parent("b")]);
        index.record(parent("b"), Vec::new());
        assert_eq!(index.readers(&key("defaults")), vec![parent("a")]);
        index.record(parent("a"), Vec::new());
        assert!(index.readers(&key("defaults")).is_empty());
        let inner = index.inner.lock().expect("not poisoned");
        assert!(
            inner.readers.is_empty() && inner.read.is_empty(),
            "nothing is kept for no reads"
        );
    }
}
