//! The order parents move in: by a hash of their UID, the same in every process, so a restarted
//! operator, a new leader or another shard agrees on which parents a step has moved.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

/// A parent's place in every rollout: the first 8 bytes of the SHA-256 of its UID, big-endian.
/// Unlike the standard library's hasher it is unseeded, so every process computes the same.
pub fn rank(uid: &str) -> u64 {
    let digest = Sha256::digest(uid.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// How many of `parents` a step of `percent` moves: rounded up, so a step that moves anyone moves
/// at least one parent, and 100% moves them all.
pub fn moved_count(parents: usize, percent: u8) -> usize {
    // In u128, where `parents × 100` cannot overflow.
    let moved = (parents as u128 * u128::from(percent.min(100))).div_ceil(100);
    usize::try_from(moved).map_or(parents, |moved| moved.min(parents))
}

/// The UIDs a step of `percent` moves: the first [`moved_count`] in the order of
/// `(rank, uid)` (the UID breaks the tie of two equal ranks). Duplicates count once.
pub fn moved<'a>(uids: impl IntoIterator<Item = &'a str>, percent: u8) -> BTreeSet<&'a str> {
    let ordered: BTreeSet<(u64, &str)> = uids.into_iter().map(|uid| (rank(uid), uid)).collect();
    let count = moved_count(ordered.len(), percent);
    ordered.into_iter().take(count).map(|(_, uid)| uid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("3f0c11ee-0000-4000-8000-{i:012}")).collect()
    }

    #[test]
    fn ten_percent_of_twenty_parents_is_exactly_two() {
        let all = uids(20);
        assert_eq!(moved(all.iter().map(String::as_str), 10).len(), 2);
        assert_eq!(moved(all.iter().map(String::as_str), 100).len(), 20);
    }

    #[test]
    fn a_step_moves_at_least_one_parent_and_never_more_than_there_are() {
        assert_eq!(moved_count(5, 10), 1);
        assert_eq!(moved_count(0, 10), 0);
        assert_eq!(moved_count(3, 100), 3);
        assert_eq!(moved_count(3, 250), 3, "a percent above 100 counts as 100");
        assert_eq!(moved_count(usize::MAX, 50), usize::MAX / 2 + 1, "no overflow");
        assert_eq!(moved_count(usize::MAX, 100), usize::MAX);
    }

    #[test]
    fn the_order_does_not_depend_on_the_order_parents_are_listed_in() {
        let all = uids(50);
        let forward = moved(all.iter().map(String::as_str), 30);
        let backward = moved(all.iter().rev().map(String::as_str), 30);
        assert_eq!(forward, backward);
    }

    #[test]
    fn a_later_step_moves_every_parent_an_earlier_step_moved() {
        let all = uids(200);
        let mut before = BTreeSet::new();
        for percent in [1, 10, 50, 99, 100] {
            let now = moved(all.iter().map(String::as_str), percent);
            assert!(
                now.is_superset(&before),
                "step {percent}% keeps the parents moved before"
            );
            before = now;
        }
    }

    #[test]
    fn the_rank_is_the_same_in_every_process() {
        // A fixed value: a change of hash would reshuffle every rollout in progress on upgrade.
        assert_eq!(rank(""), 0xe3b0_c442_98fc_1c14);
    }
}
