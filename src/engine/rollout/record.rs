//! A kept revision as the data of a ConfigMap: the revision and the full content of its files,
//! as one JSON document, so an operator that restarts, or a new leader, can serve a parent pinned
//! to it after the mounted files have moved on. Reading one back checks it, never trusts it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::revision::Revision;

/// The one data key of a revision's ConfigMap.
pub const DATA_KEY: &str = "revision.json";

/// The most a record may take: a ConfigMap holds at most 1 MiB (1,048,576 bytes) with its
/// metadata, of which this leaves 24 KiB to the name, labels and the API server's fields.
pub const MAX_RECORD_BYTES: usize = 1_024 * 1_000;

/// A revision with the content of its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The rule it is a revision of.
    pub rule: String,
    /// The revision.
    pub revision: Revision,
    /// File name -> content (what [`Revision::files`] hashes).
    pub contents: BTreeMap<String, String>,
}

/// Why a record cannot be kept, or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Its files are more than a ConfigMap holds.
    #[error(
        "revision {revision} of rule {rule:?} is too large to keep ({bytes} bytes, at most {MAX_RECORD_BYTES}): it is in force but cannot be pinned, nor served from the cluster after a restart"
    )]
    TooLarge {
        /// The rule.
        rule: String,
        /// The revision number.
        revision: u64,
        /// Its size as a record.
        bytes: usize,
    },
    /// The ConfigMap's data is not a record, or its contents do not hash to its digest.
    #[error("not a revision record: {0}")]
    Invalid(String),
}

/// The JSON shape of a record.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Stored {
    rule: String,
    number: u64,
    digest: String,
    /// RFC 3339.
    created: String,
    changed: Vec<String>,
    files: BTreeMap<String, String>,
}

impl Record {
    /// The ConfigMap data that keeps it, or why it cannot be kept.
    pub fn to_data(&self) -> Result<BTreeMap<String, String>, RecordError> {
        let stored = Stored {
            rule: self.rule.clone(),
            number: self.revision.number,
            digest: self.revision.digest.clone(),
            created: self.revision.created.to_string(),
            changed: self.revision.changed.clone(),
            files: self.contents.clone(),
        };
        let json = serde_json::to_string(&stored).map_err(|e| RecordError::Invalid(e.to_string()))?;
        if json.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge {
                rule: self.rule.clone(),
                revision: self.revision.number,
                bytes: json.len(),
            });
        }
        Ok(BTreeMap::from([(DATA_KEY.to_owned(), json)]))
    }

    /// Reads a record back from ConfigMap data: its contents must hash to its digest (a record
    /// edited by hand, or cut short, is refused rather than served).
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Record, RecordError> {
        let json = data
            .get(DATA_KEY)
            .ok_or_else(|| RecordError::Invalid(format!("no {DATA_KEY}")))?;
        if json.len() > MAX_RECORD_BYTES {
            return Err(RecordError::Invalid(format!("{} bytes", json.len())));
        }
        let stored: Stored = serde_json::from_str(json).map_err(|e| RecordError::Invalid(e.to_string()))?;
        let created: jiff::Timestamp = stored
            .created
            .parse()
            .map_err(|e| RecordError::Invalid(format!("created: {e}")))?;
        let mut revision = Revision::first(&stored.files, created);
        if revision.digest != stored.digest {
            return Err(RecordError::Invalid(format!(
                "revision {} of rule {:?}: its files do not hash to its digest",
                stored.number, stored.rule
            )));
        }
        revision.number = stored.number;
        revision.changed = stored.changed;
        Ok(Record {
            rule: stored.rule,
            revision,
            contents: stored.files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(content: &str) -> Record {
        let contents = BTreeMap::from([
            ("rules/database.yaml".to_owned(), "kind: Rule".to_owned()),
            ("templates/database/service.yaml.j2".to_owned(), content.to_owned()),
        ]);
        let mut revision = Revision::first(&contents, jiff::Timestamp::UNIX_EPOCH);
        revision.number = 7;
        Record {
            rule: "database".into(),
            revision,
            contents,
        }
    }

    #[test]
    fn a_record_reads_back_as_it_was_kept() {
        let kept = record("kind: Service");
        let data = kept.to_data().expect("kept");
        assert_eq!(Record::from_data(&data), Ok(kept));
    }

    #[test]
    fn a_revision_larger_than_a_config_map_holds_is_refused_with_its_size() {
        let big = record(&"x".repeat(MAX_RECORD_BYTES));
        match big.to_data() {
            Err(RecordError::TooLarge { rule, revision, bytes }) => {
                assert_eq!((rule.as_str(), revision), ("database", 7));
                assert!(bytes > MAX_RECORD_BYTES);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn an_edited_or_garbled_record_is_refused() {
        let mut data = record("kind: Service").to_data().expect("kept");
        let json = data.get_mut(DATA_KEY).expect("the key");
        *json = json.replace("kind: Service", "kind: Secret");
        assert!(matches!(Record::from_data(&data), Err(RecordError::Invalid(_))));
        for garbage in ["", "{", "null", "[1,2]", "{\"rule\": 1}"] {
            let data = BTreeMap::from([(DATA_KEY.to_owned(), garbage.to_owned())]);
            assert!(
                matches!(Record::from_data(&data), Err(RecordError::Invalid(_))),
                "{garbage:?}"
            );
        }
        assert!(matches!(
            Record::from_data(&BTreeMap::new()),
            Err(RecordError::Invalid(_))
        ));
    }
}
