//! Which revision a parent is reconciled under: the one its `ruleop.io/revision` annotation pins,
//! else the one the rule's rollout gives its place in the order, else the rule's current one.

use std::collections::BTreeSet;

use super::order;
use crate::engine::rules::rollout_policy::Rollout;

/// The annotation that pins a parent to a kept revision of its rule: `ruleop.io/revision: "3"`.
pub const REVISION_ANNOTATION: &str = "ruleop.io/revision";

/// Where a rule's rollout from one revision to the next stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutState {
    /// The revision the parents are moving off.
    pub from: u64,
    /// The revision they are moving to.
    pub to: u64,
    /// The index of the current step in `spec.rollout.steps`.
    pub step: usize,
    /// Whether it goes on.
    pub phase: Phase,
}

/// Whether a rollout goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The current step's parents are on `to`; the next step begins after its pause.
    Progressing,
    /// Paused by an operator, or halted by failures: no further parent moves.
    Halted,
    /// Halted with `onFailure: rollback`, or undone: every parent is back on `from`.
    RolledBack,
    /// Every parent is on `to`.
    Complete,
}

/// Why a parent gets its revision (shown in status and `ruleop rollout status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its `ruleop.io/revision` annotation names it.
    Pinned,
    /// The rollout's current step has moved it (step index).
    Moved(usize),
    /// The rollout's current step has not reached it yet (step index).
    NotYetMoved(usize),
    /// The rollout was rolled back or undone.
    RolledBack,
    /// No rollout is under way: the rule's current revision.
    Current,
}

/// The revision a parent is reconciled under, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The revision number.
    pub revision: u64,
    /// Why this one.
    pub why: Why,
}

/// A pin that cannot be followed: the parent is not reconciled and its status says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// The annotation's value is not a revision number.
    #[error(
        "annotation {REVISION_ANNOTATION}: {value:?} is not a revision number; write one of the kept revisions, e.g. \"3\", or remove the annotation"
    )]
    NotANumber {
        /// The value, cut to 64 characters.
        value: String,
    },
    /// The annotation names a revision the operator does not keep.
    #[error(
        "annotation {REVISION_ANNOTATION}: revision {revision} is not kept (kept: {kept}); pin a kept revision or remove the annotation"
    )]
    NotKept {
        /// The revision named.
        revision: u64,
        /// The kept revisions, e.g. `3, 4, 5`.
        kept: String,
    },
}

impl PinError {
    /// The reason of the parent's Ready=False condition and Event.
    pub fn reason(&self) -> &'static str {
        match self {
            PinError::NotANumber { .. } => "InvalidRevisionPin",
            PinError::NotKept { .. } => "RevisionNotKept",
        }
    }
}

/// What decides a rule's parents' revisions: the kept revisions, the current one and, during a
/// rollout, its state and the parents its current step has moved.
#[derive(Debug)]
pub struct Revisions<'a> {
    kept: &'a BTreeSet<u64>,
    current: u64,
    staged: Option<Staged<'a>>,
}

#[derive(Debug)]
struct Staged<'a> {
    state: &'a RolloutState,
    moved: BTreeSet<&'a str>,
}

impl<'a> Revisions<'a> {
    /// No rollout under way: every parent not pinned is on `current`.
    pub fn new(kept: &'a BTreeSet<u64>, current: u64) -> Self {
        Revisions {
            kept,
            current,
            staged: None,
        }
    }

    /// A rollout under way over the parents with these UIDs. A state naming a revision that is
    /// not kept, or a step the policy does not have, cannot be followed: the last step counts,
    /// and without both revisions kept there is no rollout (every parent on `current`).
    pub fn staged(
        mut self,
        rollout: &Rollout,
        state: &'a RolloutState,
        uids: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        if !self.kept.contains(&state.from) || !self.kept.contains(&state.to) {
            return self;
        }
        let percent = match state.phase {
            Phase::Progressing | Phase::Halted => rollout
                .steps
                .get(state.step)
                .or(rollout.steps.last())
                .map_or(100, |s| s.percent),
            Phase::RolledBack => 0,
            Phase::Complete => 100,
        };
        self.staged = Some(Staged {
            state,
            moved: order::moved(uids, percent),
        });
        self
    }

    /// The revision this parent (a Kubernetes object as JSON) is reconciled under.
    pub fn for_parent(&self, parent: &serde_json::Value) -> Result<Choice, PinError> {
        if let Some(revision) = self.pin(parent)? {
            return Ok(Choice {
                revision,
                why: Why::Pinned,
            });
        }
        let uid = parent.pointer("/metadata/uid").and_then(serde_json::Value::as_str);
        Ok(self.by_rollout(uid))
    }

    /// The revision the rollout alone gives the parent with this UID (its pin left aside).
    pub fn by_rollout(&self, uid: Option<&str>) -> Choice {
        let Some(staged) = &self.staged else {
            return Choice {
                revision: self.current,
                why: Why::Current,
            };
        };
        let state = staged.state;
        match state.phase {
            Phase::RolledBack => Choice {
                revision: state.from,
                why: Why::RolledBack,
            },
            _ if uid.is_some_and(|uid| staged.moved.contains(uid)) => Choice {
                revision: state.to,
                why: Why::Moved(state.step),
            },
            _ => Choice {
                revision: state.from,
                why: Why::NotYetMoved(state.step),
            },
        }
    }

    /// The revision the parent's annotation pins, if it has one.
    fn pin(&self, parent: &serde_json::Value) -> Result<Option<u64>, PinError> {
        let Some(value) = parent
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(REVISION_ANNOTATION))
        else {
            return Ok(None);
        };
        let text = value.as_str().unwrap_or_default().trim();
        let not_a_number = || PinError::NotANumber {
            value: crate::engine::diagnostic::bounded(value.as_str().unwrap_or_default(), 64).into_owned(),
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(not_a_number());
        }
        let revision: u64 = text.parse().map_err(|_| not_a_number())?;
        if !self.kept.contains(&revision) {
            return Err(PinError::NotKept {
                revision,
                kept: self.kept.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
            });
        }
        Ok(Some(revision))
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::engine::rules::model::OnFailure;

    fn rollout() -> Rollout {
        crate::engine::rules::rollout_policy::ten_then_all(0, OnFailure::Halt)
    }

    fn uids() -> Vec<String> {
        (0..20).map(|i| format!("uid-{i:02}")).collect()
    }

    fn parent(uid: &str) -> serde_json::Value {
        json!({"metadata": {"name": uid, "namespace": "shop", "uid": uid}})
    }

    fn pinned(value: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "p", "uid": "uid-00", "annotations": {REVISION_ANNOTATION: value}}})
    }

    fn state(phase: Phase, step: usize) -> RolloutState {
        RolloutState {
            from: 1,
            to: 2,
            step,
            phase,
        }
    }

    fn revisions_of(kept: &BTreeSet<u64>, rollout: &Rollout, state: &RolloutState, uids: &[String]) -> Vec<u64> {
        let revisions = Revisions::new(kept, 2).staged(rollout, state, uids.iter().map(String::as_str));
        uids.iter()
            .map(|uid| revisions.for_parent(&parent(uid)).expect("a revision").revision)
            .collect()
    }

    #[test]
    fn the_first_step_moves_two_of_twenty_parents_and_the_others_stay_on_the_previous_revision() {
        let kept = BTreeSet::from([1, 2]);
        let all = uids();
        let got = revisions_of(&kept, &rollout(), &state(Phase::Progressing, 0), &all);
        assert_eq!(got.iter().filter(|r| **r == 2).count(), 2);
        assert_eq!(got.iter().filter(|r| **r == 1).count(), 18);
        let halted = revisions_of(&kept, &rollout(), &state(Phase::Halted, 0), &all);
        assert_eq!(
            got, halted,
            "a halt keeps the moved parents where they are and moves no more"
        );
    }

    #[test]
    fn the_last_step_and_a_complete_rollout_move_every_parent() {
        let kept = BTreeSet::from([1, 2]);
        let all = uids();
        assert!(
            revisions_of(&kept, &rollout(), &state(Phase::Progressing, 1), &all)
                .iter()
                .all(|r| *r == 2)
        );
        assert!(
            revisions_of(&kept, &rollout(), &state(Phase::Complete, 0), &all)
                .iter()
                .all(|r| *r == 2)
        );
    }

    #[test]
    fn a_rolled_back_rollout_puts_every_parent_on_the_previous_revision() {
        let kept = BTreeSet::from([1, 2]);
        let got = revisions_of(&kept, &rollout(), &state(Phase::RolledBack, 0), &uids());
        assert!(got.iter().all(|r| *r == 1));
    }

    #[test]
    fn a_step_the_policy_does_not_have_counts_as_the_last() {
        let kept = BTreeSet::from([1, 2]);
        let got = revisions_of(&kept, &rollout(), &state(Phase::Progressing, 99), &uids());
        assert!(got.iter().all(|r| *r == 2));
    }

    #[test]
    fn a_rollout_whose_revisions_are_not_kept_is_not_followed() {
        let kept = BTreeSet::from([2]);
        let got = revisions_of(&kept, &rollout(), &state(Phase::Progressing, 0), &uids());
        assert!(got.iter().all(|r| *r == 2), "every parent on the current revision");
    }

    #[test]
    fn a_pin_to_a_kept_revision_wins_over_the_rollout() {
        let kept = BTreeSet::from([1, 2, 3]);
        let state = state(Phase::Complete, 1);
        let all = uids();
        let revisions = Revisions::new(&kept, 2).staged(&rollout(), &state, all.iter().map(String::as_str));
        for value in ["3", " 3 ", "0003"] {
            assert_eq!(
                revisions.for_parent(&pinned(json!(value))),
                Ok(Choice {
                    revision: 3,
                    why: Why::Pinned
                }),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_hostile_pin_is_a_clear_error_never_a_panic() {
        let kept = BTreeSet::from([4, 5]);
        let revisions = Revisions::new(&kept, 5);
        let huge = "9".repeat(100_000);
        for value in [
            json!("latest"),
            json!(""),
            json!("-1"),
            json!("+3"),
            json!("3.0"),
            json!("٣"),
            json!("18446744073709551616"),
            json!(huge),
            json!(3),
            json!(null),
        ] {
            let err = revisions.for_parent(&pinned(value.clone())).expect_err("refused");
            assert_eq!(err.reason(), "InvalidRevisionPin", "{value}");
            assert!(err.to_string().len() < 300, "the message stays short: {err}");
        }
        for (value, revision) in [("0", 0), ("3", 3), ("18446744073709551615", u64::MAX)] {
            let err = revisions.for_parent(&pinned(json!(value))).expect_err("refused");
            assert_eq!(
                err,
                PinError::NotKept {
                    revision,
                    kept: "4, 5".into()
                }
            );
            assert_eq!(err.reason(), "RevisionNotKept");
        }
    }

    #[test]
    fn a_parent_without_a_uid_is_not_moved() {
        let kept = BTreeSet::from([1, 2]);
        let state = state(Phase::Progressing, 0);
        let revisions = Revisions::new(&kept, 2).staged(&rollout(), &state, ["a"]);
        let choice = revisions
            .for_parent(&json!({"metadata": {"name": "x"}}))
            .expect("a choice");
        assert_eq!(choice.revision, 1);
        assert_eq!(choice.why, Why::NotYetMoved(0));
    }
}
