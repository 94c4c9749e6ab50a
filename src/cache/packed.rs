//! Cached objects as LZ4-compressed compact JSON (issue 13: bytes per cached object).
//!
//! The parent and children caches keep every object for as long as the process runs, and read
//! one parent's objects per reconcile. JSON text of Kubernetes objects compresses two to three
//! times with LZ4 (repeated keys, labels, names), and decompressing a few kilobytes costs a few
//! microseconds, far below the parse that follows it.
//!
//! Objects of one kind differ mostly in names, UIDs and timestamps, so each cache compresses
//! against a dictionary: the first object it packed ([`Packer`]), replaced by the first object
//! that outgrows it. Measured on 200 converged Databases: a StatefulSet of 2,286 bytes packs to
//! 1,564 bytes alone and to 229 against the dictionary; a Service 912 -> 713 -> 204; a Database
//! 1,043 -> 695 -> 182. A parent is created small by its tenant and then grows a status: on 40
//! converged Databases (1,496 bytes of text), one packs to 631 bytes against a just-created
//! Database as the dictionary and to 194 against a converged one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// LZ4 looks back at most 64 KiB, so a longer dictionary would only cost memory.
const MAX_DICTIONARY: usize = 16 * 1024;
/// Dictionaries one packer takes at most: the first object and three that outgrew the one before
/// (whatever objects a tenant makes, a cache holds at most 64 KiB of them).
const MAX_DICTIONARIES: usize = 4;

/// Packs and unpacks the objects of one cache. Each object is packed against the packer's
/// current dictionary, and starts with that dictionary's index: dictionaries are kept for the
/// packer's lifetime, so what was packed against an earlier one still unpacks (a [`Packed`] is
/// read only by the packer that made it).
#[derive(Debug, Default)]
pub(crate) struct Packer {
    /// The dictionaries, in the order they were taken.
    dictionaries: [OnceLock<Box<[u8]>>; MAX_DICTIONARIES],
    /// How many are taken: the last one packs.
    taken: AtomicUsize,
    /// Held while a dictionary is taken.
    taking: Mutex<()>,
}

/// Whether an object's `text` outgrew `dictionary`: it is over one and a half times as long (a
/// parent that grew its status; a just-created object, shorter than a grown one, never replaces it).
fn outgrew(text: &[u8], dictionary: &[u8]) -> bool {
    text.len() * 2 > dictionary.len() * 3
}

impl Packer {
    /// Serializes and compresses `value`; `None` if it does not serialize.
    pub(crate) fn pack<T: Serialize + ?Sized>(&self, value: &T) -> Option<Packed> {
        let text = serde_json::to_vec(value).ok()?;
        let (mut index, mut dictionary) = match self.current() {
            Some(current) => current,
            None => self.take(&text, None)?,
        };
        if outgrew(&text, dictionary)
            && let Some(larger) = self.take(&text, Some(index))
        {
            (index, dictionary) = larger;
        }
        let packed = lz4_flex::block::compress_prepend_size_with_dict(&text, dictionary);
        let index = u8::try_from(index).ok()?;
        Some(Packed(std::iter::once(index).chain(packed).collect()))
    }

    /// Decompresses and parses an object this packer packed; `None` if it does not parse as `T`.
    pub(crate) fn unpack<T: DeserializeOwned>(&self, packed: &Packed) -> Option<T> {
        let (&index, compressed) = packed.0.split_first()?;
        let dictionary = self.dictionaries.get(usize::from(index))?.get()?;
        let text = lz4_flex::block::decompress_size_prepended_with_dict(compressed, dictionary).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The dictionary packing uses, and its index; `None` before the first object.
    fn current(&self) -> Option<(usize, &[u8])> {
        let index = self.taken.load(Ordering::Acquire).checked_sub(1)?;
        Some((index, self.dictionaries[index].get()?))
    }

    /// Takes `text` as the next dictionary, if the current one is still `seen` (not replaced
    /// meanwhile by another thread) and one is left; returns the current one after.
    fn take(&self, text: &[u8], seen: Option<usize>) -> Option<(usize, &[u8])> {
        let _taking = self.taking.lock().ok()?;
        let taken = self.taken.load(Ordering::Acquire);
        if taken.checked_sub(1) == seen && taken < MAX_DICTIONARIES {
            let _ = self.dictionaries[taken].set(Box::from(&text[..text.len().min(MAX_DICTIONARY)]));
            self.taken.store(taken + 1, Ordering::Release);
        }
        self.current()
    }
}

/// One object as compressed JSON text; cheap to clone (shared).
#[derive(Debug, Clone)]
pub(crate) struct Packed(Arc<[u8]>);

impl Packed {
    /// Bytes held (compressed).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn an_object_comes_back_as_it_went_in_and_smaller() {
        let labels: serde_json::Map<String, Value> = (0..8)
            .map(|i| (format!("ruleop.io/label-{i}"), json!("database-orders")))
            .collect();
        let object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "orders-svc", "namespace": "shop", "labels": labels},
            "spec": {"ports": [{"port": 5432, "targetPort": 5432, "protocol": "TCP"}]}});
        let packer = Packer::default();
        let packed = packer.pack(&object).expect("serializes");
        assert_eq!(packer.unpack::<Value>(&packed), Some(object.clone()));
        let text = serde_json::to_vec(&object).expect("serializes");
        assert!(packed.len() < text.len() / 2, "{} of {}", packed.len(), text.len());
    }

    #[test]
    fn objects_like_the_first_pack_to_a_fraction_of_their_text_and_come_back_whole() {
        let service = |name: &str, uid: &str| {
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("{name}-svc"), "namespace": "shop", "uid": uid,
                    "labels": {"app.kubernetes.io/name": name, "ruleop.io/rule": "database"}},
                "spec": {"selector": {"app": name}, "ports": [{"port": 5432, "targetPort": 5432, "protocol": "TCP"}],
                    "type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": ["IPv4"]}})
        };
        let packer = Packer::default();
        packer.pack(&service("orders", "0b6f-1")).expect("serializes");
        let other = service("invoices", "77a2-9");
        let packed = packer.pack(&other).expect("serializes");
        assert_eq!(packer.unpack::<Value>(&packed), Some(other.clone()));
        let text = serde_json::to_vec(&other).expect("serializes");
        assert!(packed.len() < text.len() / 4, "{} of {}", packed.len(), text.len());
        assert_eq!(
            Packer::default().unpack::<Value>(&packed),
            None,
            "another packer has no dictionary"
        );
    }

    /// A Database as its tenant creates it, and as it is once converged (with a status).
    fn database(name: &str, uid: &str, converged: bool) -> Value {
        let mut object = json!({"apiVersion": "myorg.io/v1", "kind": "Database",
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "generation": 1},
            "spec": {"version": "16", "replicas": 1, "storage": {"size": "1Gi"}}});
        if converged {
            let conditions: Vec<Value> = ["Ready", "BackupSucceeded", "ActionsSucceeded", "RestoreSucceeded"]
                .iter()
                .map(|kind| {
                    json!({"type": kind, "status": "True", "reason": "AllReplicasReady",
                    "message": format!("{name}: 1/1 replicas ready, backup Job {name}-backup-{uid} done"),
                    "lastTransitionTime": "2026-12-07T06:59:02Z", "observedGeneration": 1})
                })
                .collect();
            object["status"] = json!({"observedGeneration": 1, "conditions": conditions,
                "actions": {"backup": {"key": uid, "guardValue": "generation=1", "phase": "Done",
                    "startedAt": "2026-12-07T06:59:01Z", "completedAt": "2026-12-07T06:59:01Z", "runs": 1}},
                "lastBackupJob": format!("{name}-backup-{uid}")});
        }
        object
    }

    #[test]
    fn an_object_that_outgrew_the_dictionary_becomes_the_next_one_and_older_objects_still_unpack() {
        let packer = Packer::default();
        let created = database("orders", "0b6f-1", false);
        let packed_created = packer.pack(&created).expect("serializes");
        let first_converged = database("orders", "0b6f-1", true);
        packer.pack(&first_converged).expect("serializes");
        let converged = database("invoices", "77a2-9", true);
        let packed = packer.pack(&converged).expect("serializes");
        let text = serde_json::to_vec(&converged).expect("serializes");
        let created_text = serde_json::to_vec(&created).expect("serializes");
        let against_created = lz4_flex::block::compress_prepend_size_with_dict(&text, &created_text).len();
        assert!(
            packed.len() * 2 < against_created,
            "{} bytes against a converged one, {against_created} against the created one",
            packed.len()
        );
        assert_eq!(packer.unpack::<Value>(&packed), Some(converged));
        assert_eq!(
            packer.unpack::<Value>(&packed_created),
            Some(created),
            "packed against the first"
        );
        let created_later = database("users", "c3d4-5", false);
        let packed_later = packer.pack(&created_later).expect("serializes");
        assert_eq!(packer.unpack::<Value>(&packed_later), Some(created_later));
        assert_eq!(
            packer.taken.load(Ordering::Acquire),
            2,
            "a shorter object replaces nothing"
        );
    }

    #[test]
    fn a_packer_takes_at_most_four_dictionaries_and_every_object_unpacks() {
        let packer = Packer::default();
        // Each object longer than the last and unlike it: each would outgrow its dictionary.
        let objects: Vec<Value> = (1..12)
            .map(|i| {
                let field = |j: usize| format!("{:x}", (i * 7919 + j) * 104_729);
                json!({"items": (0..i * i * 8).map(field).collect::<Vec<_>>()})
            })
            .collect();
        let packed: Vec<Packed> = objects.iter().map(|o| packer.pack(o).expect("serializes")).collect();
        assert_eq!(packer.taken.load(Ordering::Acquire), MAX_DICTIONARIES);
        for (object, packed) in objects.iter().zip(&packed) {
            assert_eq!(packer.unpack::<Value>(packed).as_ref(), Some(object));
        }
    }
}
