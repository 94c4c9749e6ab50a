//! Staged rollouts of rule changes, the pure part: revisions of a rule's files, the order parents
//! move in, and which revision a parent is reconciled under. The policy they follow is the
//! rule's validated `spec.rollout` (`rules/rollout_policy.rs`).
//!
//! Nothing here reads the cluster or a clock: the kept revisions, the rollout's state and the
//! time are inputs (see docs/concepts/rollouts.md).

pub mod control;
pub mod order;
pub mod record;
pub mod revision;
pub mod select;
