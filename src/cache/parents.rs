//! The parents of one rule as compressed JSON text ([`Packed`]), beside kube-runtime's store of the same parents
//! reduced to their metadata (all its queue, the triggers and the housekeeping read).
//! `status.observedGeneration`, which shard hand-over orders parents by, is kept beside each
//! body: in the store's copy it would cost two JSON maps per parent.
//!
//! A parsed object tree takes five to ten times the memory of its text (7.5 KB for a 1 KB
//! Database: every map entry, key and string is an allocation of its own), and the store keeps
//! one per parent for as long as the process runs. A reconcile parses one parent's text back in
//! microseconds, like the children cache ([`crate::cache::children`]) does for children.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use serde_json::{Map, Value};

use crate::cache::packed::{Packed, Packer};

/// One parent as the index keeps it.
#[derive(Debug)]
struct Body {
    /// The whole object (metadata included) as JSON text.
    text: Packed,
    /// Its `status.observedGeneration`.
    observed_generation: Option<i64>,
}

impl Body {
    fn of(object: &DynamicObject, packer: &Packer) -> Option<Body> {
        Some(Body {
            text: packer.pack(object)?,
            observed_generation: object
                .data
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64),
        })
    }
}

#[derive(Debug, Default)]
struct Bodies {
    /// "namespace/name" -> the parent.
    by_key: HashMap<String, Body>,
    /// Bodies of a relist in progress, swapped in whole when it completes.
    relist: Option<HashMap<String, Body>>,
}

/// The parents' JSON text by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct ParentIndex {
    bodies: RwLock<Bodies>,
    /// Outlives relists: every body held was packed by it.
    packer: Packer,
    /// Deletes and completed relists, counted once kube-runtime's store has them
    /// ([`ParentIndex::count_departure`]): a rollout's moved set is worked out again after each.
    departures: AtomicU64,
}

fn key(object: &DynamicObject) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

/// The reference kube-runtime keys a parent by: none of a cluster-scoped parent's has a
/// namespace (`namespace` empty). kube-runtime's queue tells parents apart by reference, so a
/// second spelling of one parent could be reconciled beside itself.
pub(crate) fn reference(resource: &ApiResource, namespace: &str, name: &str) -> ObjectRef<DynamicObject> {
    let reference = ObjectRef::new_with(name, resource.clone());
    if namespace.is_empty() {
        reference
    } else {
        reference.within(namespace)
    }
}

/// Reduces an object to what kube-runtime's store needs: its metadata.
fn stub(object: &mut DynamicObject) {
    object.data = Value::Object(Map::new());
}

impl ParentIndex {
    /// Parents cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.bodies.read().map_or(0, |bodies| bodies.by_key.len())
    }

    /// Takes the body of each object of a parent watch event into the index, leaving the event
    /// with the objects' metadata (see [`stub`]), before kube-runtime's store sees it.
    pub(crate) fn take(&self, event: &mut Event<DynamicObject>) {
        let Ok(mut bodies) = self.bodies.write() else {
            return;
        };
        let text = |object: &DynamicObject| Body::of(object, &self.packer);
        match event {
            Event::Apply(object) => {
                if let Some(body) = text(object) {
                    bodies.by_key.insert(key(object), body);
                }
                stub(object);
            }
            Event::Delete(object) => {
                bodies.by_key.remove(&key(object));
                stub(object);
            }
            Event::Init => bodies.relist = Some(HashMap::new()),
            Event::InitApply(object) => {
                if let Some(body) = text(object) {
                    bodies.relist.get_or_insert_with(HashMap::new).insert(key(object), body);
                }
                stub(object);
            }
            Event::InitDone => {
                bodies.by_key = bodies.relist.take().unwrap_or_default();
            }
        }
    }

    /// Counts a watch event after which a parent may be gone (a delete, a completed relist).
    /// Called once kube-runtime's store has applied it.
    pub(crate) fn count_departure(&self, event: &Event<DynamicObject>) {
        if matches!(event, Event::Delete(_) | Event::InitDone) {
            self.departures.fetch_add(1, Ordering::Release);
        }
    }

    /// How many departures were counted.
    pub(crate) fn departures(&self) -> u64 {
        self.departures.load(Ordering::Acquire)
    }

    /// Whether the cached parent `namespace/name` was reconciled at its generation
    /// (`status.observedGeneration` is `generation`); false when it is not cached.
    pub(crate) fn settled(&self, namespace: &str, name: &str, generation: Option<i64>) -> bool {
        self.bodies.read().is_ok_and(|bodies| {
            bodies
                .by_key
                .get(&format!("{namespace}/{name}"))
                .is_some_and(|body| body.observed_generation == generation)
        })
    }

    /// The parent `namespace/name` as JSON, with its apiVersion and kind (objects from a LIST
    /// carry none); `None` when it is not cached (deleted a moment ago).
    pub(crate) fn get(&self, namespace: &str, name: &str, resource: &ApiResource) -> Option<Value> {
        let body = self
            .bodies
            .read()
            .ok()?
            .by_key
            .get(&format!("{namespace}/{name}"))?
            .text
            .clone();
        let mut parent: Value = self.packer.unpack(&body)?;
        let map = parent.as_object_mut()?;
        map.insert("apiVersion".to_owned(), Value::from(resource.api_version.clone()));
        map.insert("kind".to_owned(), Value::from(resource.kind.clone()));
        Some(parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn database(name: &str, replicas: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 2},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("object")
    }

    fn resource() -> ApiResource {
        ApiResource {
            group: "myorg.io".into(),
            version: "v1".into(),
            api_version: "myorg.io/v1".into(),
            kind: "Database".into(),
            plural: "databases".into(),
        }
    }

    #[test]
    fn the_store_gets_metadata_and_the_index_the_whole_parent() {
        let index = ParentIndex::default();
        let mut event = Event::Apply(database("a", 3));
        index.take(&mut event);
        let Event::Apply(stubbed) = &event else { panic!() };
        assert_eq!(stubbed.metadata.generation, Some(2));
        assert_eq!(stubbed.data, json!({}));
        assert!(
            index.settled("ns", "a", Some(1)),
            "observedGeneration 1 is kept beside the body"
        );
        assert!(!index.settled("ns", "a", Some(2)));
        assert!(!index.settled("ns", "b", Some(1)), "not cached");
        let parent = index.get("ns", "a", &resource()).expect("cached");
        assert_eq!(parent["spec"]["replicas"], 3);
        assert_eq!(parent["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(
            (parent["apiVersion"].as_str(), parent["kind"].as_str()),
            (Some("myorg.io/v1"), Some("Database"))
        );
        assert_eq!(parent["metadata"]["uid"], "a");
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_completes_and_a_delete_drops_the_parent() {
        let index = ParentIndex::default();
        index.take(&mut Event::Apply(database("gone", 1)));
        index.take(&mut Event::Init);
        index.take(&mut Event::InitApply(database("a", 1)));
        assert!(
            index.get("ns", "gone", &resource()).is_some(),
            "until the relist completes"
        );
        index.take(&mut Event::InitApply(database("b", 1)));
        index.take(&mut Event::InitDone);
        assert!(index.get("ns", "gone", &resource()).is_none());
        assert_eq!(index.len(), 2);
        index.take(&mut Event::Delete(database("a", 1)));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn deletes_and_completed_relists_count_as_departures_and_nothing_else_does() {
        let index = ParentIndex::default();
        for event in [
            Event::Apply(database("a", 1)),
            Event::Init,
            Event::InitApply(database("b", 1)),
        ] {
            index.count_departure(&event);
        }
        assert_eq!(index.departures(), 0);
        index.count_departure(&Event::InitDone);
        index.count_departure(&Event::Delete(database("b", 1)));
        assert_eq!(index.departures(), 2);
    }

    #[test]
    fn a_reference_is_the_one_the_store_keys_the_parent_by() {
        let namespaced = database("a", 1);
        assert_eq!(
            reference(&resource(), "ns", "a"),
            ObjectRef::from_obj_with(&namespaced, resource())
        );
        let mut cluster_scoped = namespaced;
        cluster_scoped.metadata.namespace = None;
        assert_eq!(
            reference(&resource(), "", "a"),
            ObjectRef::from_obj_with(&cluster_scoped, resource())
        );
    }
}
