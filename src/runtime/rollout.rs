//! Staged rollouts in the running operator: a changed rule with `spec.rollout` keeps the rule set
//! it replaced beside the new one; each reconcile asks which of the two its parent is under, and
//! a moved parent that stops being ready counts against `maxFailures`. The decisions are the
//! engine's (`engine::rollout`); this holds the state between reconciles and the step clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::rollout::policy::Rollout;
use crate::engine::rollout::select::{Phase, Revisions, RolloutState};
use crate::engine::rules::RuleSet;
use crate::engine::rules::model::OnFailure;

/// The staged rollouts under way, by rule, and where a halt is announced.
pub(crate) struct Rollouts {
    staged: RwLock<BTreeMap<String, Arc<Staging>>>,
    halts: mpsc::UnboundedSender<String>,
}

impl Rollouts {
    /// No rollout under way; halts are announced on the receiver.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<String>) {
        let (halts, announced) = mpsc::unbounded_channel();
        (
            Rollouts {
                staged: RwLock::new(BTreeMap::new()),
                halts,
            },
            announced,
        )
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Staging>>> {
        self.staged.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Staging>>> {
        self.staged.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The rollout of `rule` under way, if any.
    pub(crate) fn get(&self, rule: &str) -> Option<Arc<Staging>> {
        self.read().get(rule).cloned()
    }

    /// Starts (or supersedes) the rollout of `rule`.
    pub(crate) fn start(&self, rule: &str, staging: Staging) -> Arc<Staging> {
        let staging = Arc::new(staging);
        self.write().insert(rule.to_owned(), staging.clone());
        staging
    }

    /// Ends the rollout of `rule`: every parent is on the rule in force.
    pub(crate) fn end(&self, rule: &str) -> Option<Arc<Staging>> {
        self.write().remove(rule)
    }

    /// Every rollout under way.
    pub(crate) fn all(&self) -> Vec<(String, Arc<Staging>)> {
        self.read().iter().map(|(rule, s)| (rule.clone(), s.clone())).collect()
    }

    /// Announces that the rollout of `rule` halted.
    pub(crate) fn announce_halt(&self, rule: &str) {
        let _ = self.halts.send(rule.to_owned());
    }
}

/// One rule's rollout from the set it replaced to the set in force.
pub(crate) struct Staging {
    /// The rule set in force before the change: the unmoved parents' rule and templates.
    pub(crate) previous: Arc<RuleSet>,
    /// The new rule's policy.
    pub(crate) rollout: Rollout,
    progress: Mutex<Progress>,
}

struct Progress {
    state: RolloutState,
    /// What reconciles follow: `state` once it has been recorded in the cluster
    /// ([`Staging::publish`]), so no parent of a step moves before the step is on record.
    published: RolloutState,
    /// When the current step began.
    step_started: Instant,
    /// The same, for people.
    step_started_at: jiff::Timestamp,
    /// Moved parents by UID: whether the watched condition was `True` when first seen moved.
    baseline: BTreeMap<String, bool>,
    /// Moved parents that went from `True` to not `True`: `namespace/name` -> condition status,
    /// reason and message.
    failed: BTreeMap<String, String>,
    /// What an operator asked of it last (`ruleop rollout pause|resume|undo`), for people.
    note: Option<String>,
}

/// What the step clock did to a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advanced {
    /// Nothing: its pause is not over, or it is halted.
    No,
    /// The next step began (its index).
    Step(usize),
    /// Every step is done: every parent is on the new revision.
    Complete,
}

impl Staging {
    /// A rollout from revision `from` (rule set `previous`) to `to`, at its first step.
    pub(crate) fn new(previous: Arc<RuleSet>, rollout: Rollout, from: u64, to: u64) -> Self {
        let state = RolloutState {
            from,
            to,
            step: 0,
            phase: Phase::Progressing,
        };
        Self::at(previous, rollout, state, Instant::now(), jiff::Timestamp::now())
    }

    /// A rollout in `state`, its step begun at `step_started` (`step_started_at` on the clock).
    fn at(
        previous: Arc<RuleSet>,
        rollout: Rollout,
        state: RolloutState,
        step_started: Instant,
        step_started_at: jiff::Timestamp,
    ) -> Self {
        Staging {
            previous,
            rollout,
            progress: Mutex::new(Progress {
                published: state.clone(),
                state,
                step_started,
                step_started_at,
                baseline: BTreeMap::new(),
                failed: BTreeMap::new(),
                note: None,
            }),
        }
    }

    /// The rollout a recorded state describes ([`recorded`]), going on from `previous` at its
    /// step, with the step's time counted from when it began.
    pub(crate) fn resumed(
        previous: Arc<RuleSet>,
        rollout: Rollout,
        Recorded {
            mut state,
            started_at,
            note,
        }: Recorded,
    ) -> Self {
        state.step = state.step.min(rollout.steps.len().saturating_sub(1));
        let elapsed = jiff::Timestamp::now()
            .duration_since(started_at)
            .unsigned_abs()
            .min(std::time::Duration::from_secs(365 * 24 * 3600));
        let step_started = Instant::now().checked_sub(elapsed).unwrap_or_else(Instant::now);
        let staging = Self::at(previous, rollout, state, step_started, started_at);
        staging.progress().note = note;
        staging
    }

    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where it stands.
    pub(crate) fn state(&self) -> RolloutState {
        self.progress().state.clone()
    }

    /// Takes the state an operator's request leads to ([`crate::engine::rollout::control::apply`]),
    /// with a note saying who asked. Going on again (`resume`) starts the current step's pause
    /// anew and forgets the failures seen so far: the parents are watched again from now.
    /// Followed by reconciles once published, like a step.
    pub(crate) fn take(&self, state: RolloutState, note: String) {
        let mut progress = self.progress();
        if state.phase == Phase::Progressing && progress.state.phase != Phase::Progressing {
            progress.step_started = Instant::now();
            progress.step_started_at = jiff::Timestamp::now();
            progress.failed.clear();
            progress.baseline.clear();
        }
        progress.state = state;
        progress.note = Some(note);
    }

    /// Lets reconciles follow the state as it is now (once it is on record).
    pub(crate) fn publish(&self) {
        let mut progress = self.progress();
        progress.published = progress.state.clone();
    }

    /// Whether the parent with `uid` is on the new revision, among the rule's parents `uids`.
    pub(crate) fn moves(&self, uid: &str, uids: &[&str]) -> bool {
        let state = self.progress().published.clone();
        let kept = BTreeSet::from([state.from, state.to]);
        let revisions = Revisions::new(&kept, state.to).staged(&self.rollout, &state, uids.iter().copied());
        revisions.by_rollout(Some(uid)).revision == state.to
    }

    /// Watches a moved parent (`who` is `namespace/name`) as it is now. Returns true when this
    /// observation halts the rollout: more than `maxFailures` moved parents went from `True` to
    /// not `True` on the watched condition during the current step.
    pub(crate) fn observe(&self, uid: &str, who: &str, parent: &Value) -> bool {
        let (status, reason, message) = condition(parent, &self.rollout.condition);
        let ready = status == "True";
        let mut progress = self.progress();
        if progress.state.phase != Phase::Progressing {
            return false;
        }
        let was_ready = *progress.baseline.entry(uid.to_owned()).or_insert(ready);
        if !was_ready || ready || progress.failed.contains_key(who) {
            return false;
        }
        progress.failed.insert(
            who.to_owned(),
            format!("{} {status}: {reason}: {message}", self.rollout.condition),
        );
        if progress.failed.len() <= self.rollout.max_failures as usize {
            return false;
        }
        progress.state.phase = match self.rollout.on_failure {
            OnFailure::Halt => Phase::Halted,
            OnFailure::Rollback => Phase::RolledBack,
        };
        true
    }

    /// When the current step's pause ends, while it goes on.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let progress = self.progress();
        if progress.state.phase != Phase::Progressing {
            return None;
        }
        let pause = self.rollout.steps.get(progress.state.step)?.pause;
        Some(progress.step_started + pause)
    }

    /// Begins the next step once the current step's pause is over.
    pub(crate) fn advance(&self, now: Instant) -> Advanced {
        if self.next_due().is_none_or(|due| due > now) {
            return Advanced::No;
        }
        let mut progress = self.progress();
        let next = progress.state.step + 1;
        if next >= self.rollout.steps.len() {
            progress.state.phase = Phase::Complete;
            return Advanced::Complete;
        }
        progress.state.step = next;
        progress.step_started = now;
        progress.step_started_at = jiff::Timestamp::now();
        Advanced::Step(next)
    }

    /// Its state as `ruleop-status` shows it (`rollout.<rule>`), one `key: value` per line.
    pub(crate) fn describe(&self) -> String {
        let progress = self.progress();
        let state = &progress.state;
        let percent = self.rollout.steps.get(state.step).map_or(100, |s| s.percent);
        let phase = crate::engine::rollout::control::phase_name(state.phase);
        let mut text = format!(
            "from: {}\nto: {}\nstep: {} of {} ({percent}%)\nphase: {phase}\nstepStartedAt: {}\n",
            state.from,
            state.to,
            state.step + 1,
            self.rollout.steps.len(),
            progress.step_started_at
        );
        if let Some(note) = &progress.note {
            text.push_str(&format!("note: {note}\n"));
        }
        if !progress.failed.is_empty() {
            text.push_str("failed:\n");
            for (who, why) in &progress.failed {
                text.push_str(&format!("  {who}: {why}\n"));
            }
        }
        text
    }
}

/// After a reload from `current` to `new`: starts a rollout for each rule with `spec.rollout`
/// whose files changed, ends the rollouts of rules that lost `spec.rollout` or are gone, and
/// leaves the others. A rule added is not staged, nor one whose watched, owned or looked-up
/// kinds changed (its controller restarts). A change during a rollout supersedes it: the
/// unmoved parents' set and revision stay `from`, the new revision is `to`, from the first step.
/// `revision` gives a rule's revision before and after the reload. Returns the rules whose
/// rollout started or ended.
pub(crate) fn stage(
    rollouts: &Rollouts,
    current: &Arc<RuleSet>,
    new: &RuleSet,
    revision: impl Fn(&str) -> (u64, u64),
) -> Vec<String> {
    let mut changed = Vec::new();
    for (name, _) in rollouts.all() {
        // Gone, or changed without a rollout of its own (an undone rule without `spec.rollout`
        // stays undone until its files change).
        let ends = new
            .rule(&name)
            .is_none_or(|r| r.rollout.is_none() && current.rule(&name).is_none_or(|old| old.digest != r.digest));
        if ends {
            rollouts.end(&name);
            changed.push(name);
        }
    }
    for rule in &new.rules {
        let (Some(policy), Some(old)) = (&rule.rollout, current.rule(&rule.name)) else {
            continue;
        };
        if old.digest == rule.digest {
            continue;
        }
        let same_kinds = crate::runtime::pins::same_kinds(old, rule);
        let under_way = rollouts
            .get(&rule.name)
            .filter(|s| matches!(s.state().phase, Phase::Progressing | Phase::Halted | Phase::RolledBack));
        if !same_kinds {
            if rollouts.end(&rule.name).is_some() {
                changed.push(rule.name.clone());
            }
            continue;
        }
        let (before, after) = revision(&rule.name);
        let staging = match under_way {
            Some(superseded) => Staging::new(
                superseded.previous.clone(),
                policy.clone(),
                superseded.state().from,
                after,
            ),
            None => Staging::new(current.clone(), policy.clone(), before, after),
        };
        rollouts.start(&rule.name, staging);
        changed.push(rule.name.clone());
    }
    changed
}

/// A rollout as `ruleop-status` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Where it stands.
    pub(crate) state: RolloutState,
    /// When its current step began.
    pub(crate) started_at: jiff::Timestamp,
    /// What an operator asked of it last.
    pub(crate) note: Option<String>,
}

/// What a recorded text (what [`Staging::describe`] wrote) says; `None` when it is not such a
/// text, or says the rollout is over.
pub(crate) fn recorded(text: &str) -> Option<Recorded> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(": "))
            .map(str::trim)
    };
    let phase = match field("phase")? {
        "Progressing" => Phase::Progressing,
        "Halted" => Phase::Halted,
        "RolledBack" => Phase::RolledBack,
        _ => return None,
    };
    let state = RolloutState {
        from: field("from")?.parse().ok()?,
        to: field("to")?.parse().ok()?,
        step: field("step")?
            .split_whitespace()
            .next()?
            .parse::<usize>()
            .ok()?
            .checked_sub(1)?,
        phase,
    };
    Some(Recorded {
        state,
        started_at: field("stepStartedAt")?.parse().ok()?,
        note: field("note").map(str::to_owned),
    })
}

/// `(status, reason, message)` of the parent's condition of `type_` (`Unknown` when absent).
fn condition(parent: &Value, type_: &str) -> (String, String, String) {
    let found = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == type_));
    let field = |key: &str| {
        found
            .and_then(|c| c[key].as_str())
            .map(|v| crate::engine::diagnostic::bounded(v, 200).into_owned())
            .unwrap_or_default()
    };
    let status = found.map_or_else(|| "Unknown".to_owned(), |_| field("status"));
    (status, field("reason"), field("message"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn staging(max_failures: u32, on_failure: OnFailure) -> Staging {
        let set = crate::engine::rules::load::one_rule(
            "r",
            "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  watch: {apiVersion: example.com/v1, kind: R}\n",
        );
        let rollout = crate::engine::rollout::policy::ten_then_all(max_failures, on_failure);
        Staging::new(Arc::new(set), rollout, 1, 2)
    }

    fn parent(status: &str) -> Value {
        json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "R", "message": "m"}]}})
    }

    #[test]
    fn more_failures_than_allowed_halt_the_rollout_and_list_the_failed_parents() {
        let staging = staging(1, OnFailure::Halt);
        for who in ["a", "b"] {
            assert!(!staging.observe(who, who, &parent("True")));
        }
        assert!(!staging.observe("a", "a", &parent("False")), "one failure is allowed");
        assert!(!staging.observe("a", "a", &parent("False")), "a parent fails once");
        assert!(staging.observe("b", "b", &parent("False")), "the second halts it");
        assert_eq!(staging.state().phase, Phase::Halted);
        assert!(
            staging.describe().contains("  b: Ready False: R: m"),
            "{}",
            staging.describe()
        );
        assert_eq!(staging.next_due(), None, "a halted rollout takes no further step");
    }

    #[test]
    fn a_recorded_state_resumes_at_its_step_and_garbage_resumes_nothing() {
        let running = staging(0, OnFailure::Halt);
        running.advance(Instant::now() + Duration::from_secs(61));
        running.take(
            RolloutState {
                phase: Phase::Halted,
                ..running.state()
            },
            "paused by ruleop rollout pause".to_owned(),
        );
        let text = running.describe();
        let read = recorded(&text).expect("a state");
        assert_eq!(read.state, running.state());
        let resumed = Staging::resumed(running.previous.clone(), running.rollout.clone(), read);
        assert_eq!(resumed.describe(), text);
        for garbage in [
            "",
            "from: x",
            "phase: Complete\nfrom: 1\nto: 2\nstep: 1 of 2\nstepStartedAt: 2026-01-01T00:00:00Z",
            "from: 1\nto: 2\nstep: 0 of 2\nphase: Halted\nstepStartedAt: 2026-01-01T00:00:00Z",
            "from: 1\nto: 2\nstep: 1 of 2\nphase: Halted\nstepStartedAt: yesterday",
        ] {
            assert!(recorded(garbage).is_none(), "{garbage:?}");
        }
    }

    #[test]
    fn a_parent_that_was_never_ready_is_no_failure() {
        let staging = staging(0, OnFailure::Halt);
        assert!(!staging.observe("a", "a", &parent("False")));
        assert!(!staging.observe("a", "a", &json!({})));
        assert_eq!(staging.state().phase, Phase::Progressing);
    }

    #[test]
    fn a_rollback_puts_every_parent_back() {
        let staging = staging(0, OnFailure::Rollback);
        let uids: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
        let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
        assert!(!staging.observe("x", "x", &parent("True")));
        assert!(staging.observe("x", "x", &parent("False")));
        assert_eq!(staging.state().phase, Phase::RolledBack);
        assert!(
            uids.iter().any(|u| staging.moves(u, &uids)),
            "not before it is published"
        );
        staging.publish();
        assert!(uids.iter().all(|u| !staging.moves(u, &uids)));
    }

    #[test]
    fn the_next_step_begins_after_the_pause_and_the_last_completes_it() {
        let staging = staging(0, OnFailure::Halt);
        let uids: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
        let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
        let moved = |s: &Staging| uids.iter().filter(|u| s.moves(u, &uids)).count();
        assert_eq!(moved(&staging), 2);
        let started = Instant::now();
        assert_eq!(staging.advance(started), Advanced::No);
        let paused = started + Duration::from_secs(61);
        assert_eq!(staging.advance(paused), Advanced::Step(1));
        assert_eq!(moved(&staging), 2, "the step is followed once published");
        staging.publish();
        assert_eq!(moved(&staging), 20);
        assert_eq!(staging.advance(paused), Advanced::Complete);
    }
}
