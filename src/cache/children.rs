//! The children cache: objects of one child kind carrying a rule's label, grouped by the UID
//! of their parent, fed by a watch stream. A reconcile reads one parent's children directly
//! instead of scanning every child of the kind (which made N reconciles cost O(N^2)).
//! Objects are kept as compressed JSON text ([`Packed`]): a parsed object tree takes several
//! times the memory of its text, and parsing a few children per reconcile costs microseconds.
//! The index trusts the `ruleop.io/parent-uid` label only to group objects: a label is a claim
//! anyone can copy, so what a reader takes as a parent's child is decided by
//! `engine::plan::ownership` (ownerReference or annotation, namespace), never by this index.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::cache::packed::{Packed, Packer};
use crate::engine::plan::context::LABEL_PARENT_UID;

/// A string held once however many maps name it: an object's key, its parent's UID.
type Shared = Arc<str>;

#[derive(Debug, Default)]
struct Children {
    /// parent UID -> its objects of this kind ("namespace/name", JSON text). A parent has one or
    /// a few: a short list takes a fraction of the memory of a map of its own.
    by_parent: HashMap<Shared, Vec<(Shared, Packed)>>,
    /// "namespace/name" -> parent UID, to move or drop an object on update and delete (the same
    /// strings as in `by_parent`).
    parent_of: HashMap<Shared, Shared>,
    /// Objects of a relist in progress (already as text: a relist of every child at start-up
    /// must not hold them all as object trees), swapped in whole when it completes.
    relist: Option<Vec<Entry>>,
    /// Objects the last completed relist no longer listed (deleted while the watch was down: no
    /// Delete event names them), until [`ChildIndex::take_vanished`].
    vanished: Vec<Packed>,
}

/// One object as the index keeps it: its key, its parent's UID and its packed JSON text.
#[derive(Debug)]
struct Entry {
    key: String,
    parent: String,
    text: Packed,
}

impl Entry {
    /// `None` for an object without a parent label (not ours to index).
    fn of(object: &DynamicObject, packer: &Packer) -> Option<Entry> {
        let parent = object.labels().get(LABEL_PARENT_UID)?.clone();
        Some(Entry {
            key: key(object),
            parent,
            text: packer.pack(object)?,
        })
    }
}

/// Children of one kind by parent.
#[derive(Debug)]
pub(crate) struct ChildIndex {
    children: RwLock<Children>,
    /// Outlives relists: every object held was packed by it.
    packer: Packer,
    synced: watch::Sender<bool>,
}

impl Default for ChildIndex {
    fn default() -> Self {
        ChildIndex {
            children: RwLock::default(),
            packer: Packer::default(),
            synced: watch::channel(false).0,
        }
    }
}

fn key(object: &DynamicObject) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

impl Children {
    fn insert(&mut self, object: &DynamicObject, packer: &Packer) {
        match Entry::of(object, packer) {
            Some(entry) => self.insert_entry(entry),
            None => self.remove(&key(object)),
        }
    }

    /// Files `entry` under its parent, in place of the object of the same key if one is held.
    fn insert_entry(&mut self, Entry { key, parent, text }: Entry) {
        self.remove(&key);
        let key = Shared::from(key);
        let parent = match self.by_parent.get_key_value(parent.as_str()) {
            Some((held, _)) => held.clone(),
            None => Shared::from(parent),
        };
        self.parent_of.insert(key.clone(), parent.clone());
        self.by_parent
            .entry(parent)
            .or_insert_with(|| Vec::with_capacity(1))
            .push((key, text));
    }

    fn len(&self) -> usize {
        self.parent_of.len()
    }

    fn remove(&mut self, key: &str) {
        if let Some(parent) = self.parent_of.remove(key)
            && let Some(siblings) = self.by_parent.get_mut(&parent)
        {
            siblings.retain(|(held, _)| &**held != key);
            if siblings.is_empty() {
                self.by_parent.remove(&parent);
            }
        }
    }
}

impl ChildIndex {
    /// Applies one watch event.
    pub(crate) fn apply(&self, event: &Event<DynamicObject>) {
        let Ok(mut children) = self.children.write() else {
            return;
        };
        match event {
            Event::Apply(object) => children.insert(object, &self.packer),
            Event::Delete(object) => children.remove(&key(object)),
            Event::Init => children.relist = Some(Vec::new()),
            Event::InitApply(object) => {
                if let Some(entry) = Entry::of(object, &self.packer) {
                    children.relist.get_or_insert_with(Vec::new).push(entry);
                }
            }
            Event::InitDone => {
                let listed = children.relist.take().unwrap_or_default();
                let previous = std::mem::take(&mut *children);
                for entry in listed {
                    children.insert_entry(entry);
                }
                children.vanished = previous
                    .by_parent
                    .into_values()
                    .flatten()
                    .filter(|(key, _)| !children.parent_of.contains_key(key))
                    .map(|(_, text)| text)
                    .collect();
                drop(children);
                self.synced.send_replace(true);
            }
        }
    }

    /// The children of the parent with this UID, as JSON values.
    pub(crate) fn children_of(&self, parent_uid: &str) -> Vec<serde_json::Value> {
        let texts: Vec<Packed> = self
            .children
            .read()
            .ok()
            .and_then(|c| {
                let siblings = c.by_parent.get(parent_uid)?;
                Some(siblings.iter().map(|(_, text)| text.clone()).collect())
            })
            .unwrap_or_default();
        texts.iter().filter_map(|text| self.packer.unpack(text)).collect()
    }

    /// The objects the last completed relist no longer listed, once: their parents must look
    /// again, though no Delete event came ([`crate::cache::relist`]).
    pub(crate) fn take_vanished(&self) -> Vec<DynamicObject> {
        let texts = self
            .children
            .write()
            .map(|mut c| std::mem::take(&mut c.vanished))
            .unwrap_or_default();
        texts.iter().filter_map(|text| self.packer.unpack(text)).collect()
    }

    /// Objects cached (the last complete list and the events since).
    pub(crate) fn len(&self) -> usize {
        self.children.read().map_or(0, |children| children.len())
    }

    /// Becomes true once the first list completed.
    pub(crate) fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(name: &str, parent: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "labels": {LABEL_PARENT_UID: parent}},
        }))
        .expect("object")
    }

    #[test]
    fn a_relist_that_no_longer_lists_a_child_hands_it_on_once_as_vanished() {
        let index = ChildIndex::default();
        for (event, _) in [
            (Event::Init, ()),
            (Event::InitApply(child("a", "p1")), ()),
            (Event::InitApply(child("b", "p2")), ()),
        ] {
            index.apply(&event);
        }
        index.apply(&Event::InitDone);
        assert!(
            index.take_vanished().is_empty(),
            "the first list: nothing was there before"
        );
        // "b" was deleted while the watch was down: the next relist lists only "a".
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(child("a", "p1")));
        index.apply(&Event::InitDone);
        let vanished = index.take_vanished();
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].metadata.name.as_deref(), Some("b"));
        assert!(index.take_vanished().is_empty(), "handed on once");
        assert!(index.children_of("p2").is_empty());
    }

    #[test]
    fn children_are_grouped_by_parent_and_follow_updates_and_deletes() {
        let index = ChildIndex::default();
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(child("a", "p1")));
        assert!(index.children_of("p1").is_empty(), "a relist shows only when done");
        index.apply(&Event::InitDone);
        index.apply(&Event::Apply(child("b", "p1")));
        index.apply(&Event::Apply(child("c", "p2")));
        assert_eq!(index.children_of("p1").len(), 2);
        index.apply(&Event::Apply(child("b", "p2")));
        assert_eq!(index.children_of("p1").len(), 1, "b moved to p2");
        index.apply(&Event::Delete(child("c", "p2")));
        assert_eq!(index.children_of("p2").len(), 1);
        assert!(*index.synced().borrow());
    }

    #[test]
    fn an_update_replaces_the_object_it_updates() {
        let index = ChildIndex::default();
        index.apply(&Event::Apply(child("a", "p1")));
        index.apply(&Event::Apply(child("a", "p1")));
        index.apply(&Event::Apply(child("b", "p1")));
        assert_eq!(index.children_of("p1").len(), 2);
        assert_eq!(index.len(), 2);
        let mut unlabelled = child("a", "p1");
        unlabelled.metadata.labels = None;
        index.apply(&Event::Apply(unlabelled));
        assert_eq!(index.children_of("p1").len(), 1, "no longer ours to index");
        assert_eq!(index.len(), 1);
    }
}
