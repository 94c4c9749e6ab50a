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
use crate::runtime::rollout::{self, Advanced, Staging};
use crate::runtime::rollout_control::{Requests, Seen};
use crate::runtime::rollout_resume::{self, Records};
use crate::runtime::run::{Reloader, STATUS_CONFIGMAP};

/// Whether this replica runs the rollouts, and the watches that go with either role.
#[derive(Default)]
pub(crate) struct Driving {
    /// As of the last [`Reloader::check_rollouts`].
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

impl Reloader {
    /// Checks (every second) which replica runs the rollouts. Taking them over, it reads their
    /// recorded state back and follows it, decides on the failures it counted meanwhile, and
    /// watches the requests; giving them up, it stops. While it runs them, a state not yet on
    /// record (a write that failed, failures counted since) is recorded now.
    pub(crate) async fn check_rollouts(&mut self) {
        let runs = self.shared.writers.runs_rollouts();
        if self.shared.writers.is_sharded() && self.driving.records.is_none() {
            self.driving.records = Some(Records::watch(
                self.shared.client.clone(),
                &self.settings.status_namespace,
            ));
        }
        if runs && !self.driving.runs {
            if self.shared.writers.is_sharded() {
                info!("this replica holds shard 0: it runs the staged rollouts");
            }
            let states = self.rollout_report.read_back().await;
            self.follow_states(states).await;
            self.driving.requests = Some(Requests::watch(
                self.shared.client.clone(),
                &self.settings.status_namespace,
            ));
        } else if !runs && self.driving.runs {
            info!("this replica no longer holds shard 0: it follows the staged rollouts another runs");
            self.driving.requests = None;
        }
        self.driving.runs = runs;
        if !runs {
            return;
        }
        for (rule, staging) in self.shared.rollouts.all() {
            if staging.halt_if_over() {
                self.rollout_halted(&rule).await;
            } else if self.rollout_report.on_record(&rule) != Some(&staging.describe()) {
                // A step (or a new rollout) that could not be recorded before moves now.
                let moves = staging.unpublished();
                if self.record(&rule, &staging).await && moves {
                    self.supervisor.reconcile_all(&rule);
                }
            }
        }
    }

    /// Lets a followed (or refused) request go.
    pub(crate) async fn request_done(&self, request: &Seen) {
        if let Some(requests) = &self.driving.requests {
            requests.done(request).await;
        }
    }

    /// Records the state of `rule`'s rollout, then lets reconciles follow it. Returns whether it
    /// is on record.
    async fn record(&mut self, rule: &str, staging: &Staging) -> bool {
        // Before any replica can move a parent of the step: what each was before it moved.
        staging.watch_from_now(&self.supervisor.parents_now(rule));
        let recorded = self.rollout_report.write(rule, staging.describe()).await;
        if recorded {
            staging.publish();
        }
        recorded
    }

    /// On a replica that does not run the rollouts: follows the states just recorded.
    pub(crate) async fn follow_records(&mut self, states: BTreeMap<String, String>) {
        if self.driving.runs {
            return;
        }
        self.rollout_report.heard(states.clone());
        self.follow_states(states).await;
    }

    async fn follow_states(&mut self, states: BTreeMap<String, String>) {
        for (rule, text) in states {
            if self.follow_state(&rule, &text).await {
                self.supervisor.reconcile_all(&rule);
            }
        }
    }

    /// Follows the recorded `text` of `rule`'s rollout ([`rollout_resume::follow`]).
    async fn follow_state(&self, rule: &str, text: &str) -> bool {
        let (set, kinds) = self.shared.snapshot();
        let parents = || self.supervisor.parents_now(rule);
        rollout_resume::follow(
            &self.shared.rollouts,
            (&set, &kinds),
            &self.revisions,
            (rule, text),
            parents,
        )
        .await
    }

    /// After a reload staged (or ended) the rollouts of `staged`: a rollout already on record
    /// (another replica loaded the same files first and went on) is followed where it is; the
    /// replica that runs the rollouts records each, and its first step's parents move once it is
    /// on record.
    pub(crate) async fn staged(&mut self, staged: Vec<String>) {
        for rule in staged {
            if let Some(text) = self.rollout_report.on_record(&rule).cloned()
                && self.follow_state(&rule, &text).await
            {
                self.supervisor.reconcile_all(&rule);
            }
            if !self.driving.runs {
                continue;
            }
            match self.shared.rollouts.get(&rule) {
                Some(staging) => {
                    info!(rule, state = %staging.describe(), "staged rollout started");
                    if self.record(&rule, &staging).await {
                        self.supervisor.reconcile_all(&rule);
                    }
                }
                None => {
                    let ended = "phase: Ended (the rule changed without spec.rollout, or is gone)\n";
                    self.rollout_report.write(&rule, ended.to_owned()).await;
                }
            }
        }
    }

    /// When the next step of a staged rollout is due here (never on a replica that does not run
    /// the rollouts).
    pub(crate) fn next_step(&self) -> Option<Instant> {
        if !self.driving.runs {
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
    pub(crate) async fn advance_rollouts(&mut self) {
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
            if self.record(&rule, &staging).await {
                self.supervisor.reconcile_all(&rule);
            }
        }
    }

    /// A rollout halted: counted, a Warning Event `RolloutHalted` on `ruleop-status` naming the
    /// failed parents, and with `onFailure: rollback` every parent reconciled again (back on the
    /// previous revision).
    pub(crate) async fn rollout_halted(&mut self, rule: &str) {
        let Some(staging) = self.shared.rollouts.get(rule).filter(|_| self.driving.runs) else {
            return;
        };
        let text = staging.describe();
        warn!(rule, state = %text, "staged rollout halted");
        self.shared.observability.metrics.rollout_halted(rule);
        self.publish_warning(
            "RolloutHalted",
            "Halt",
            format!(
                "the staged rollout of rule {rule:?} halted: {}",
                text.replace('\n', "; ")
            ),
        );
        if self.record(rule, &staging).await && staging.state().phase == Phase::RolledBack {
            self.supervisor.reconcile_all(rule);
        }
    }

    /// Follows `ruleop rollout pause|resume|undo` (`request`): the rollout takes the state the
    /// request leads to, which is recorded before any parent follows it; every parent of the rule
    /// is then reconciled (only those whose revision changed write). A refused request is logged
    /// and a Warning Event `RolloutRequestRefused`.
    pub(crate) async fn rollout_request(&mut self, request: &Seen) {
        let rule = request.rule.as_str();
        let text = match self.follow_request(request).await {
            Ok(text) => text,
            Err(why) => {
                warn!(rule, request = %request.name, error = %why, "rollout request refused");
                self.publish_warning(
                    "RolloutRequestRefused",
                    "Refuse",
                    format!("the request {} about rule {rule:?} is refused: {why}", request.name),
                );
                return;
            }
        };
        info!(rule, state = %text, "rollout request followed");
        let recorded = match self.shared.rollouts.get(rule) {
            Some(staging) => self.record(rule, &staging).await,
            None => self.rollout_report.write(rule, text).await,
        };
        if recorded {
            self.supervisor.reconcile_all(rule);
        }
    }

    /// The rollout's state after `request`, taken (not yet published), or why not.
    async fn follow_request(&mut self, request: &Seen) -> Result<String, String> {
        use crate::engine::rollout::control::{self, Command};
        let rule = request.rule.as_str();
        let parsed = control::Request::from_data(&request.data).map_err(|e| e.to_string())?;
        let (set, kinds) = self.shared.snapshot();
        let in_force = set.rule(rule).ok_or_else(|| format!("rule {rule:?} is not in force"))?;
        let revision = in_force.revision.unwrap_or_else(|| self.revisions.latest(rule));
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
        let previous =
            crate::runtime::rollout_resume::previous_set(self.revisions.config_maps(), rule, next.from, &kinds)
                .await
                .map_err(|e| format!("revision {} does not load: {e}", next.from))?;
        let policy = in_force
            .rollout
            .clone()
            .unwrap_or_else(crate::engine::rules::rollout_policy::Rollout::all_at_once);
        let recorded = rollout::Recorded {
            state: next,
            started_at: jiff::Timestamp::now(),
            note: Some(note),
            failed: BTreeMap::new(),
        };
        // A new rollout is followed as soon as it starts: on record first.
        let staging = rollout::Staging::resumed(Arc::new(previous), policy, recorded);
        let text = staging.describe();
        if !self.rollout_report.write(rule, text.clone()).await {
            return Err(format!("the new state could not be recorded in {STATUS_CONFIGMAP}"));
        }
        self.shared.rollouts.start(rule, staging);
        Ok(text)
    }
}
