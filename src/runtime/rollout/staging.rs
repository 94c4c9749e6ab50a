//! Staged rollouts in the running operator: a changed rule with `spec.rollout` keeps the rule set
//! it replaced beside the new one; each reconcile asks which of the two its parent is under, and
//! a moved parent that stops being ready counts against `maxFailures`. The decisions are the
//! engine's (`engine::rollout`); this holds the state between reconciles and the step clock.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::rollout::select::{Phase, Revisions, RolloutState};
use crate::engine::rules::RuleSet;
use crate::engine::rules::model::OnFailure;
use crate::engine::rules::rollout_policy::Rollout;
use crate::records::rollouts::{Recorded, encode};

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
    /// The parents the published state moves, kept until the state or the parents change: every
    /// reconcile asks, and working it out ranks every parent (a SHA-256 each).
    moved: Mutex<Option<Moved>>,
}

/// Which of a rule's parents are cached, as far as the moved set depends on it: how many, and
/// how many times one may have left the cache (a delete, a relist). Both are read before the
/// parents themselves, and a departure is counted after the cache has it, so a moved set worked
/// out from the parents read later is never older than the membership it is kept under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Membership {
    /// Deletes and relists seen (`ParentIndex::departures`).
    pub(crate) departures: u64,
    /// Parents cached.
    pub(crate) count: usize,
}

/// The UIDs a state moves, among the parents of one membership.
struct Moved {
    state: RolloutState,
    membership: Membership,
    uids: HashSet<String>,
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

/// A cached parent as a rollout's baseline reads it.
pub(crate) struct ParentNow {
    /// Its UID.
    pub(crate) uid: String,
    /// Its body, `status.conditions` included.
    pub(crate) body: Value,
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
    /// A rollout from revision `from` (rule set `previous`) to `to`, at its first step. Until
    /// that step is on record ([`Staging::publish`], or [`Staging::follow`] of another replica's
    /// record), reconciles keep every parent on `from`.
    pub(crate) fn new(previous: Arc<RuleSet>, rollout: Rollout, from: u64, to: u64) -> Self {
        let state = RolloutState {
            from,
            to,
            step: 0,
            phase: Phase::Progressing,
        };
        let nobody_moved = RolloutState {
            phase: Phase::RolledBack,
            ..state.clone()
        };
        Self::at(
            previous,
            rollout,
            (state, nobody_moved),
            Instant::now(),
            jiff::Timestamp::now(),
        )
    }

    /// A rollout in `state` whose reconciles follow `published`, its step begun at
    /// `step_started` (`step_started_at` on the clock).
    fn at(
        previous: Arc<RuleSet>,
        rollout: Rollout,
        (state, published): (RolloutState, RolloutState),
        step_started: Instant,
        step_started_at: jiff::Timestamp,
    ) -> Self {
        Staging {
            previous,
            rollout,
            progress: Mutex::new(Progress {
                published,
                state,
                step_started,
                step_started_at,
                baseline: BTreeMap::new(),
                failed: BTreeMap::new(),
                note: None,
            }),
            moved: Mutex::new(None),
        }
    }

    /// The rollout a recorded state describes ([`crate::records::rollouts::recorded`]), going on from `previous` at its
    /// step, with the step's time counted from when it began.
    pub(crate) fn resumed(
        previous: Arc<RuleSet>,
        rollout: Rollout,
        Recorded {
            mut state,
            started_at,
            note,
            failed,
        }: Recorded,
    ) -> Self {
        state.step = state.step.min(rollout.steps.len().saturating_sub(1));
        // On record already: followed at once.
        let staging = Self::at(
            previous,
            rollout,
            (state.clone(), state),
            instant_of(started_at),
            started_at,
        );
        let mut progress = staging.progress();
        progress.note = note;
        progress.failed = failed;
        drop(progress);
        staging
    }

    /// Takes the state another replica recorded for this same rollout (the same `from` and
    /// `to`): its step, phase, step start and note, with the failures it names added to those
    /// seen here. Followed by reconciles at once (it is on record). Returns whether the parents'
    /// revisions may have changed (the state followed is not the one followed before).
    /// `parents` (as [`Staging::watch_from_now`] takes them) is asked only when the state is new.
    pub(crate) fn follow(&self, recorded: &Recorded, parents: impl FnOnce() -> Vec<ParentNow>) -> bool {
        let mut state = recorded.state.clone();
        state.step = state.step.min(self.rollout.steps.len().saturating_sub(1));
        if self.progress().published == state {
            return false;
        }
        // Read from the cache before taking the lock, which reconciles wait on.
        let parents = parents();
        let mut progress = self.progress();
        if state.phase == Phase::Progressing && progress.state.phase != Phase::Progressing {
            // Resumed: the parents are watched again from now, as `take` does.
            progress.failed.clear();
            progress.baseline.clear();
        }
        self.take_baseline(&mut progress, &state, &parents);
        for (who, why) in &recorded.failed {
            progress.failed.entry(who.clone()).or_insert_with(|| why.clone());
        }
        progress.step_started = instant_of(recorded.started_at);
        progress.step_started_at = recorded.started_at;
        progress.note.clone_from(&recorded.note);
        progress.state = state.clone();
        progress.published = state;
        true
    }

    /// Takes, before the state taken is published, the watched condition of each parent it
    /// moves (`parents`, as cached now) as that parent's baseline: what it was before it moved,
    /// whichever replica moves it and whenever this one next sees it.
    pub(crate) fn watch_from_now(&self, parents: &[ParentNow]) {
        let mut progress = self.progress();
        let state = progress.state.clone();
        self.take_baseline(&mut progress, &state, parents);
    }

    fn take_baseline(&self, progress: &mut Progress, state: &RolloutState, parents: &[ParentNow]) {
        if state.phase != Phase::Progressing {
            return;
        }
        let kept = BTreeSet::from([state.from, state.to]);
        let uids = parents.iter().map(|p| p.uid.as_str());
        let revisions = Revisions::new(&kept, state.to).staged(&self.rollout, state, uids);
        for parent in parents {
            if revisions.by_rollout(Some(&parent.uid)).revision == state.to {
                let ready = condition(&parent.body, &self.rollout.condition).0 == "True";
                progress.baseline.entry(parent.uid.clone()).or_insert(ready);
            }
        }
    }

    /// Whether it goes from `from` to `to`.
    pub(crate) fn is_between(&self, from: u64, to: u64) -> bool {
        let progress = self.progress();
        progress.state.from == from && progress.state.to == to
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

    /// Whether the state taken is not yet the one reconciles follow.
    pub(crate) fn unpublished(&self) -> bool {
        let progress = self.progress();
        progress.published != progress.state
    }

    /// Lets reconciles follow the state as it is now (once it is on record).
    pub(crate) fn publish(&self) {
        let mut progress = self.progress();
        progress.published = progress.state.clone();
    }

    /// Whether the parent with `uid` is on the new revision. The rule's parents (`uids`, the
    /// UIDs cached) are read only when the state followed or their `membership` changed.
    pub(crate) fn moves(&self, uid: &str, membership: Membership, uids: impl FnOnce() -> Vec<String>) -> bool {
        let state = self.progress().published.clone();
        let mut moved = self.moved.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = moved.as_ref()
            && known.state == state
            && known.membership == membership
        {
            return known.uids.contains(uid);
        }
        let all = uids();
        let kept = BTreeSet::from([state.from, state.to]);
        let revisions = Revisions::new(&kept, state.to).staged(&self.rollout, &state, all.iter().map(String::as_str));
        let uids: HashSet<String> = all
            .iter()
            .filter(|u| revisions.by_rollout(Some(u)).revision == state.to)
            .cloned()
            .collect();
        let moves = uids.contains(uid);
        *moved = Some(Moved {
            state,
            membership,
            uids,
        });
        moves
    }

    /// Watches a moved parent (`who` is `namespace/name`) as it is now. Returns true when this
    /// observation halts the rollout: more than `maxFailures` moved parents went from `True` to
    /// not `True` on the watched condition during the current step. A replica that does not
    /// `decide` (it does not run the rollout's clock) only counts the failure: the replica that
    /// does sees it too, and records the halt that this one then follows.
    pub(crate) fn observe(&self, uid: &str, who: &str, parent: &Value, decides: bool) -> bool {
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
        // One line each: the record is read back line by line (`records::rollouts::decode`).
        let why = format!("{} {status}: {reason}: {message}", self.rollout.condition).replace(['\n', '\r'], " ");
        progress.failed.insert(who.to_owned(), why);
        decides && self.halt_when_over(&mut progress)
    }

    /// Halts it now when more moved parents failed than `maxFailures` allows: what a replica
    /// that takes over the decisions does with the failures it counted before. Returns whether
    /// it halted.
    pub(crate) fn halt_if_over(&self) -> bool {
        self.halt_when_over(&mut self.progress())
    }

    fn halt_when_over(&self, progress: &mut Progress) -> bool {
        if progress.state.phase != Phase::Progressing || progress.failed.len() <= self.rollout.max_failures as usize {
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

    /// Its state as `ruleop-status` shows it (`rollout.<rule>`, [`encode`]).
    pub(crate) fn describe(&self) -> String {
        let progress = self.progress();
        let percent = self.rollout.steps.get(progress.state.step).map_or(100, |s| s.percent);
        let recorded = Recorded {
            state: progress.state.clone(),
            started_at: progress.step_started_at,
            note: progress.note.clone(),
            failed: progress.failed.clone(),
        };
        encode(&recorded, self.rollout.steps.len(), percent)
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

/// The monotonic instant a step that began at `started_at` began at (now for a time to come;
/// at most a year back).
fn instant_of(started_at: jiff::Timestamp) -> Instant {
    let elapsed = jiff::Timestamp::now()
        .duration_since(started_at)
        .unsigned_abs()
        .min(std::time::Duration::from_secs(365 * 24 * 3600));
    Instant::now().checked_sub(elapsed).unwrap_or_else(Instant::now)
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
mod tests;
