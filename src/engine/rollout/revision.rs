//! Revisions of a rule: each content of its files (the rule file and the templates it uses) that
//! comes into force gets the next sequence number, a content hash and the files it changed.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::engine::base::digest::{hex, sha256_hex};

/// One content of a rule's files that came into force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// 1 for the first content seen, then one more for each content that differs.
    pub number: u64,
    /// SHA-256 over every file's name and content hash: equal when the files are equal.
    pub digest: String,
    /// When it came into force.
    pub created: jiff::Timestamp,
    /// File name (as in `rules/` and `templates/`) -> SHA-256 of its content.
    pub files: BTreeMap<String, String>,
    /// The files added, changed or removed against the revision before (all files for the first).
    pub changed: Vec<String>,
}

impl Revision {
    /// The first revision of a rule: `files` maps each file's name to its content.
    pub fn first(files: &BTreeMap<String, String>, created: jiff::Timestamp) -> Revision {
        let files = hashes(files);
        Revision {
            number: 1,
            digest: digest(&files),
            created,
            changed: files.keys().cloned().collect(),
            files,
        }
    }

    /// The revision after this one for these contents, or `None` when they are this revision's
    /// (a reload that changed nothing of this rule makes no revision). The number saturates: a
    /// revision read back with a forged huge number cannot overflow it.
    pub fn next(&self, files: &BTreeMap<String, String>, created: jiff::Timestamp) -> Option<Revision> {
        let files = hashes(files);
        let digest = digest(&files);
        if digest == self.digest {
            return None;
        }
        let mut changed: Vec<String> = files
            .iter()
            .filter(|(name, hash)| self.files.get(*name) != Some(*hash))
            .map(|(name, _)| name.clone())
            .collect();
        changed.extend(self.files.keys().filter(|name| !files.contains_key(*name)).cloned());
        changed.sort();
        Some(Revision {
            number: self.number.saturating_add(1),
            digest,
            created,
            files,
            changed,
        })
    }
}

fn hashes(files: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(name, content)| (name.clone(), sha256_hex(content.as_bytes())))
        .collect()
}

fn digest(hashes: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (name, hash) in hashes {
        // Lengths first, so two different lists can never hash the same bytes.
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
        hasher.update(hash.as_bytes());
    }
    hex(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(n, c)| ((*n).to_owned(), (*c).to_owned()))
            .collect()
    }

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + second).expect("a time")
    }

    #[test]
    fn a_changed_template_makes_the_next_revision_naming_only_that_file() {
        let one = Revision::first(
            &files(&[("rules/database.yaml", "a"), ("database/service.yaml.j2", "b")]),
            at(0),
        );
        assert_eq!(one.number, 1);
        assert_eq!(one.changed, ["database/service.yaml.j2", "rules/database.yaml"]);
        let two = one
            .next(
                &files(&[("rules/database.yaml", "a"), ("database/service.yaml.j2", "c")]),
                at(60),
            )
            .expect("a new revision");
        assert_eq!(two.number, 2);
        assert_eq!(two.changed, ["database/service.yaml.j2"]);
        assert_eq!(two.created, at(60));
        assert_ne!(two.digest, one.digest);
    }

    #[test]
    fn the_same_contents_make_no_revision() {
        let one = Revision::first(&files(&[("rules/database.yaml", "a")]), at(0));
        assert_eq!(one.next(&files(&[("rules/database.yaml", "a")]), at(5)), None);
    }

    #[test]
    fn a_removed_file_is_a_change() {
        let one = Revision::first(&files(&[("rules/r.yaml", "a"), ("r/old.yaml.j2", "x")]), at(0));
        let two = one.next(&files(&[("rules/r.yaml", "a")]), at(1)).expect("a revision");
        assert_eq!(two.changed, ["r/old.yaml.j2"]);
    }

    #[test]
    fn names_and_contents_cannot_be_shifted_into_each_other() {
        let a = Revision::first(&files(&[("ab", "c")]), at(0));
        let b = Revision::first(&files(&[("a", "bc")]), at(0));
        assert_ne!(a.digest, b.digest);
    }

    #[test]
    fn the_number_saturates_instead_of_overflowing() {
        let mut last = Revision::first(&files(&[("r", "a")]), at(0));
        last.number = u64::MAX;
        let next = last.next(&files(&[("r", "b")]), at(1)).expect("a revision");
        assert_eq!(next.number, u64::MAX);
    }
}
