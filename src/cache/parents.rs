//! The parents of one rule as compressed JSON text ([`Packed`]), beside kube-runtime's store of the same parents
//! reduced to their metadata (all its queue, the triggers and the housekeeping read).
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
use kube::runtime::watcher::Event;
use serde_json::{Map, Value, json};

use crate::cache::packed::{Packed, Packer};

#[derive(Debug, Default)]
struct Bodies {
    /// "namespace/name" -> the whole object (metadata included) as JSON text.
    by_key: HashMap<String, Packed>,
    /// Bodies of a relist in progress, swapped in whole when it completes.
    relist: Option<HashMap<String, Packed>>,
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

/// Reduces an object to what kube-runtime's store needs: its metadata, plus the
/// `status.observedGeneration` that shard hand-over orders parents by.
fn stub(object: &mut DynamicObject) {
    let observed = object.data.pointer("/status/observedGeneration").cloned();
    object.data = match observed {
        Some(generation) => json!({"status": {"observedGeneration": generation}}),
        None => Value::Object(Map::new()),
    };
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
        let text = |object: &DynamicObject| self.packer.pack(object);
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

    /// The parent `namespace/name` as JSON, with its apiVersion and kind (objects from a LIST
    /// carry none); `None` when it is not cached (deleted a moment ago).
    pub(crate) fn get(&self, namespace: &str, name: &str, resource: &kube::discovery::ApiResource) -> Option<Value> {
        let body = self
            .bodies
            .read()
            .ok()?
            .by_key
            .get(&format!("{namespace}/{name}"))?
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
    use kube::discovery::ApiResource;

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
        assert_eq!(stubbed.data, json!({"status": {"observedGeneration": 1}}));
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
}
