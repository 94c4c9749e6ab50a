//! The staged rollouts' half of the reload loop: the step clock, halts, the requests of
//! `ruleop rollout`, and, with `--shards`, which replica does all that (the holder of shard 0,
//! `Writers::runs_rollouts`) while the others follow the state it records in `ruleop-status`.
//! A state is followed by reconciles only once it is on record, so every replica moves the
//! same parents.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::engine::rollout::select::Phase;
use crate::records::requests::{Requests, Seen};
use crate::records::revisions::RevisionStore;
use crate::records::rollouts::{Records, RolloutReport};
use crate::records::status::STATUS_CONFIGMAP;
use crate::runtime::controller::Shared;
use crate::runtime::rollout::resume;
use crate::runtime::rollout::staging::{Advanced, Staging};
use crate::runtime::supervisor::Supervisor;

/// Runs (or follows) the staged rollouts for the reload loop: whether this replica runs them,
/// the watches that go with either role, and their part of `ruleop-status`. Each step takes the
/// running controllers (`supervisor`, whose parents a step moves) and, where a rollout may
/// start from a kept revision, the kept revisions (`revisions`).
pub(crate) struct Driver {
    shared: Arc<Shared>,
    status_namespace: String,
    /// The staged rollouts' state in `ruleop-status`.
    report: RolloutReport,
    /// As of the last [`Driver::check`].
    runs: bool,
    /// The requests of `ruleop rollout pause|resume|undo`, watched while it runs them.
    pub(crate) requests: Option<Requests>,
    /// With `--shards`: the states recorded by the replica that runs them.
    pub(crate) records: Option<Records>,
}

/// The next request of `ruleop rollout`, while this replica runs the rollouts (`requests`).
pub(crate) async fn next_request(requests: &mut Option<Requests>) -> Option<Seen> {
    match requests {
        Some(requests) => requests.next().await,
        None => std::future::pending().await,
    }
}

/// The next states recorded by another replica (with `--shards`, `records`).
pub(crate) async fn next_records(records: &mut Option<Records>) -> Option<BTreeMap<String, String>> {
    match records {
        Some(records) => records.next().await,
        None => std::future::pending().await,
    }
}

impl Driver {
    /// Drives the rollouts of `shared`, recording into `ruleop-status` of `status_namespace`
    /// through `report` (read back already, [`resume::resume`]).
    pub(crate) fn new(shared: Arc<Shared>, status_namespace: &str, report: RolloutReport) -> Self {
        Driver {
            shared,
            status_namespace: status_namespace.to_owned(),
            report,
            runs: false,
            requests: None,
            records: None,
        }
    }

    /// A Warning Event on `ruleop-status`.
    fn warn(&self, reason: &str, action: &str, note: String) {
        crate::records::status::publish_warning(&self.shared.recorder, &self.status_namespace, reason, action, note);
    }

    /// Checks (every second) which replica runs the rollouts. Taking them over, it reads their
    /// recorded state back and follows it, decides on the failures it counted meanwhile, and
    /// watches the requests; giving them up, it stops. While it runs them, a state not yet on
    /// record (a write that failed, failures counted since) is recorded now.
    pub(crate) async fn check(&mut self, supervisor: &Supervisor, revisions: &RevisionStore) {
        let runs = self.shared.writers.runs_rollouts();
        if self.shared.writers.is_sharded() && self.records.is_none() {
            self.records = Some(Records::watch(self.shared.client.clone(), &self.status_namespace));
        }
        if runs && !self.runs {
            if self.shared.writers.is_sharded() {
                info!("this replica holds shard 0: it runs the staged rollouts");
            }
            let states = self.report.read_back().await;
            self.follow_states(states, supervisor, revisions).await;
            self.requests = Some(Requests::watch(self.shared.client.clone(), &self.status_namespace));
        } else if !runs && self.runs {
            info!("this replica no longer holds shard 0: it follows the staged rollouts another runs");
            self.requests = None;
        }
        self.runs = runs;
        if !runs {
            return;
        }
        for (rule, staging) in self.shared.rollouts.all() {
            if staging.halt_if_over() {
                self.halted(&rule, supervisor).await;
            } else if self.report.on_record(&rule) != Some(&staging.describe()) {
                // A step (or a new rollout) that could not be recorded before moves now.
                let moves = staging.unpublished();
                if self.record(&rule, &staging, supervisor).await && moves {
                    supervisor.reconcile_all(&rule);
                }
            }
        }
    }

    /// Lets a followed (or refused) request go.
    pub(crate) async fn request_done(&self, request: &Seen) {
        if let Some(requests) = &self.requests {
            requests.done(request).await;
        }
    }

    /// Records the state of `rule`'s rollout, then lets reconciles follow it. Returns whether it
    /// is on record.
    async fn record(&mut self, rule: &str, staging: &Staging, supervisor: &Supervisor) -> bool {
        // Before any replica can move a parent of the step: what each was before it moved.
        staging.watch_from_now(&supervisor.parents_now(rule));
        let recorded = self.report.write(rule, staging.describe()).await;
        if recorded {
            staging.publish();
        }
        recorded
    }

    /// On a replica that does not run the rollouts: follows the states just recorded.
    pub(crate) async fn follow_records(
        &mut self,
        states: BTreeMap<String, String>,
        supervisor: &Supervisor,
        revisions: &RevisionStore,
    ) {
        if self.runs {
            return;
        }
        self.report.heard(states.clone());
        self.follow_states(states, supervisor, revisions).await;
    }

    async fn follow_states(
        &mut self,
        states: BTreeMap<String, String>,
        supervisor: &Supervisor,
        revisions: &RevisionStore,
    ) {
        for (rule, text) in states {
            if self.follow_state(&rule, &text, supervisor, revisions).await {
                supervisor.reconcile_all(&rule);
            }
        }
    }

    /// Follows the recorded `text` of `rule`'s rollout ([`resume::follow`]).
    async fn follow_state(&self, rule: &str, text: &str, supervisor: &Supervisor, revisions: &RevisionStore) -> bool {
        let (set, kinds) = self.shared.snapshot();
        let parents = || supervisor.parents_now(rule);
        resume::follow(&self.shared.rollouts, (&set, &kinds), revisions, (rule, text), parents).await
    }

    /// After a reload staged (or ended) the rollouts of `staged`: a rollout already on record
    /// (another replica loaded the same files first and went on) is followed where it is; the
    /// replica that runs the rollouts records each, and its first step's parents move once it is
    /// on record.
    pub(crate) async fn staged(&mut self, staged: Vec<String>, supervisor: &Supervisor, revisions: &RevisionStore) {
        for rule in staged {
            if let Some(text) = self.report.on_record(&rule).cloned()
                && self.follow_state(&rule, &text, supervisor, revisions).await
            {
                supervisor.reconcile_all(&rule);
            }
            if !self.runs {
                continue;
            }
            match self.shared.rollouts.get(&rule) {
                Some(staging) => {
                    info!(rule, state = %staging.describe(), "staged rollout started");
                    if self.record(&rule, &staging, supervisor).await {
                        supervisor.reconcile_all(&rule);
                    }
                }
                None => {
                    let ended = "phase: Ended (the rule changed without spec.rollout, or is gone)\n";
                    self.report.write(&rule, ended.to_owned()).await;
                }
            }
        }
    }

    /// When the next step of a staged rollout is due here (never on a replica that does not run
    /// the rollouts).
    pub(crate) fn next_step(&self) -> Option<Instant> {
        if !self.runs {
            return None;
        }
        self.shared
            .rollouts
            .all()
            .iter()
            .filter_map(|(_, s)| s.next_due())
            .min()
    }

    /// Begins the next step of each rollout whose pause is over (its newly moved parents are
    /// reconciled; the others' plans are unchanged, so they cost no write), and ends the
    /// rollouts whose last step is done.
    pub(crate) async fn advance(&mut self, supervisor: &Supervisor) {
        for (rule, staging) in self.shared.rollouts.all() {
            match staging.advance(Instant::now()) {
                Advanced::No => continue,
                Advanced::Step(step) => info!(rule, step = step + 1, "staged rollout: next step"),
                Advanced::Complete => {
                    info!(rule, "staged rollout complete");
                    self.shared.rollouts.end(&rule);
                }
            }
            // Recorded before any parent of the step moves, so what the state says has begun.
            if self.record(&rule, &staging, supervisor).await {
                supervisor.reconcile_all(&rule);
            }
        }
    }

    /// A rollout halted: counted, a Warning Event `RolloutHalted` on `ruleop-status` naming the
    /// failed parents, and with `onFailure: rollback` every parent reconciled again (back on the
    /// previous revision).
    pub(crate) async fn halted(&mut self, rule: &str, supervisor: &Supervisor) {
        let Some(staging) = self.shared.rollouts.get(rule).filter(|_| self.runs) else {
            return;
        };
        let text = staging.describe();
        warn!(rule, state = %text, "staged rollout halted");
        self.shared.observability.metrics.rollout_halted(rule);
        self.warn(
            "RolloutHalted",
            "Halt",
            format!(
                "the staged rollout of rule {rule:?} halted: {}",
                text.replace('\n', "; ")
            ),
        );
        if self.record(rule, &staging, supervisor).await && staging.state().phase == Phase::RolledBack {
            supervisor.reconcile_all(rule);
        }
    }

    /// Follows `ruleop rollout pause|resume|undo` (`request`): the rollout takes the state the
    /// request leads to, which is recorded before any parent follows it; every parent of the rule
    /// is then reconciled (only those whose revision changed write). A refused request is logged
    /// and a Warning Event `RolloutRequestRefused`.
    pub(crate) async fn request(&mut self, request: &Seen, supervisor: &Supervisor, revisions: &RevisionStore) {
        let rule = request.rule.as_str();
        let text = match self.follow_request(request, revisions).await {
            Ok(text) => text,
            Err(why) => {
                warn!(rule, request = %request.name, error = %why, "rollout request refused");
                self.warn(
                    "RolloutRequestRefused",
                    "Refuse",
                    format!("the request {} about rule {rule:?} is refused: {why}", request.name),
                );
                return;
            }
        };
        info!(rule, state = %text, "rollout request followed");
        let recorded = match self.shared.rollouts.get(rule) {
            Some(staging) => self.record(rule, &staging, supervisor).await,
            None => self.report.write(rule, text).await,
        };
        if recorded {
            supervisor.reconcile_all(rule);
        }
    }

    /// The rollout's state after `request`, taken (not yet published), or why not.
    async fn follow_request(&mut self, request: &Seen, revisions: &RevisionStore) -> Result<String, String> {
        use crate::engine::rollout::control::{self, Command};
        let rule = request.rule.as_str();
        let parsed = control::Request::from_data(&request.data).map_err(|e| e.to_string())?;
        let (set, kinds) = self.shared.snapshot();
        let in_force = set.rule(rule).ok_or_else(|| format!("rule {rule:?} is not in force"))?;
        let revision = in_force.revision.unwrap_or_else(|| revisions.latest(rule));
        let staging = self.shared.rollouts.get(rule);
        let state = staging.as_ref().map(|s| s.state());
        let next = control::apply(state.as_ref(), revision, &parsed).map_err(|e| e.to_string())?;
        let note = format!(
            "{} by ruleop rollout {} at {}",
            match parsed.command {
                Command::Pause => "paused",
                Command::Resume => "resumed",
                Command::Undo => "undone",
            },
            parsed.command.as_str(),
            jiff::Timestamp::now()
        );
        // The same rollout, when the request was about it; else an undo from no rollout.
        if let Some(staging) =
            staging.filter(|_| state.as_ref().is_some_and(|s| s.to == next.to && s.from == next.from))
        {
            staging.take(next, note);
            return Ok(staging.describe());
        }
        let previous = crate::runtime::admit::kept(revisions.config_maps(), rule, next.from, &kinds)
            .await
            .map_err(|e| format!("revision {} does not load: {e}", next.from))?;
        let policy = in_force
            .rollout
            .clone()
            .unwrap_or_else(crate::engine::rules::rollout_policy::Rollout::all_at_once);
        let recorded = crate::records::rollouts::Recorded {
            state: next,
            started_at: jiff::Timestamp::now(),
            note: Some(note),
            failed: BTreeMap::new(),
        };
        // A new rollout is followed as soon as it starts: on record first.
        let staging = Staging::resumed(Arc::new(previous), policy, recorded);
        let text = staging.describe();
        if !self.report.write(rule, text.clone()).await {
            return Err(format!("the new state could not be recorded in {STATUS_CONFIGMAP}"));
        }
        self.shared.rollouts.start(rule, staging);
        Ok(text)
    }
}
