//! Cached objects as LZ4-compressed compact JSON (issue 13: bytes per cached object).
//!
//! The parent and children caches keep every object for as long as the process runs, and read
//! one parent's objects per reconcile. JSON text of Kubernetes objects compresses two to three
//! times with LZ4 (repeated keys, labels, names), and decompressing a few kilobytes costs a few
//! microseconds, far below the parse that follows it.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One object as compressed JSON text; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Packed(Arc<[u8]>);

impl Packed {
    /// Serializes and compresses `value`; `None` if it does not serialize.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Option<Packed> {
        let text = serde_json::to_vec(value).ok()?;
        Some(Packed(Arc::from(lz4_flex::compress_prepend_size(&text))))
    }

    /// Decompresses and parses the object; `None` if it does not parse as `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Option<T> {
        let text = lz4_flex::decompress_size_prepended(&self.0).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Bytes held (compressed).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is held (never, for a packed object).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
        let packed = Packed::of(&object).expect("serializes");
        assert_eq!(packed.parse::<Value>(), Some(object.clone()));
        let text = serde_json::to_vec(&object).expect("serializes");
        assert!(packed.len() < text.len() / 2, "{} of {}", packed.len(), text.len());
    }
}
