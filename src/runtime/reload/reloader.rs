//! The reload loop's state and steps: serialised reloads, one at a time, each admitting a
//! complete new rule set ([`crate::runtime::admit`]) and carrying out what [`decide`] makes of
//! it: swap it in and re-sync the controllers, reject it (the last good set keeps running, every
//! error reported with its location), or retry with backoff.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::cache::discovery::UnknownKind;
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::load;
use crate::records::revisions::{RevisionStore, stamped};
use crate::records::status::{ReloadState, StatusReport};
use crate::runtime::admit::{self, Admitted, Refused};
use crate::runtime::controller::Shared;
use crate::runtime::reload::decide::{self, Decision, Look, RETRY_MAX, Recheck, SchemaRejection};
use crate::runtime::reload::rollouts::Driver;
use crate::runtime::reload::watch::fingerprint;
use crate::runtime::rollout::staging;
use crate::runtime::supervisor::{Ended, Supervisor};

/// Where the reloads read from.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    /// Where the rules are.
    pub(crate) rules: std::path::PathBuf,
    /// Where the templates are.
    pub(crate) templates: std::path::PathBuf,
}

/// The reload loop's state.
pub(crate) struct Reloader {
    pub(crate) sources: Sources,
    pub(crate) shared: Arc<Shared>,
    pub(crate) supervisor: Supervisor,
    /// The files last dealt with for good: put in force, or rejected for their content. A set
    /// that failed for a passing reason (discovery, a controller start) is not recorded, so it
    /// is tried again.
    fingerprint: String,
    /// After such a failure: when to try again and the wait that led there.
    retry: Option<(Instant, Duration)>,
    /// The CRDs (names and resource versions) the rules in force were last checked against.
    schemas: String,
    /// What the last schema check refused: the files (loaded against older CRDs), or the rules
    /// in force (after a CRD changed under them).
    rejected_by_schemas: Option<SchemaRejection>,
    status: StatusReport,
    /// The kept revisions of each rule.
    pub(crate) revisions: RevisionStore,
    /// The staged rollouts.
    pub(crate) rollouts: Driver,
}

/// What the reloader starts from: the set put in force at start-up and what went with it.
pub(crate) struct Started {
    /// The fingerprint of the files the set was loaded from.
    pub(crate) fingerprint: String,
    /// The CRDs it was checked against.
    pub(crate) schemas: String,
    /// The `revisions` lines of `ruleop-status`.
    pub(crate) revision_lines: String,
}

impl Reloader {
    /// The reloader of the set `started` put in force, reporting into `status`.
    pub(crate) fn new(
        sources: Sources,
        (shared, supervisor): (Arc<Shared>, Supervisor),
        (mut status, started): (StatusReport, Started),
        revisions: RevisionStore,
        rollouts: Driver,
    ) -> Self {
        status.revisions = started.revision_lines;
        Reloader {
            sources,
            shared,
            supervisor,
            fingerprint: started.fingerprint,
            retry: None,
            schemas: started.schemas,
            rejected_by_schemas: None,
            status,
            revisions,
            rollouts,
        }
    }

    /// When the retry of a set that failed for a passing reason is due.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry.map(|(at, _)| at)
    }

    /// Reports the set in force at start-up: Loaded, or waiting for the kinds of `waiting`.
    pub(crate) async fn report_started(&mut self, set: &RuleSet, waiting: &[UnknownKind]) {
        if waiting.is_empty() {
            let _ = self
                .status
                .report(ReloadState::Loaded, &rule_names(set), &self.fingerprint)
                .await;
        } else {
            // Not recorded as dealt with, so the retry loads the files again.
            let fingerprint = std::mem::take(&mut self.fingerprint);
            self.wait_for_kinds(&fingerprint, set, waiting).await;
        }
    }

    /// Rebuilds the rule set if the files changed (or a retry is due). Valid: swap it in and
    /// re-sync controllers. Invalid: keep the last good set running and report every error with
    /// its location. Not resolvable yet: report it and retry with backoff.
    pub(crate) async fn reload(&mut self) {
        let templates = self.sources.templates.clone();
        let fingerprint = fingerprint(&self.sources.rules, &templates);
        if fingerprint == self.fingerprint {
            self.retry = None;
            // The files are as they were: a CRD may have changed under the rules (checked at
            // every reload tick, --reload-interval).
            let (set, kinds) = self.shared.snapshot();
            let live = admit::read_live_schemas(&self.shared.client, &set, &kinds).await;
            let look = decide::look(live.fingerprint != self.schemas, self.rejected_by_schemas);
            if look == Look::Nothing {
                return;
            }
            self.schemas = live.fingerprint.clone();
            if look == Look::RecheckInForce {
                let checked = admit::check_against(&set, &live, &templates);
                self.report_in_force_check(&set, checked).await;
                return;
            }
            // Files refused against the older CRDs are tried again against the new ones.
        }
        let started = std::time::Instant::now();
        let (current_set, current_kinds) = self.shared.snapshot();
        let admission = match load(&self.sources.rules, &templates) {
            Ok(loaded) => {
                let in_force: BTreeSet<String> = current_set.rules.iter().map(|r| r.name.clone()).collect();
                admit::admit(
                    &self.shared.client,
                    loaded,
                    (*current_kinds).clone(),
                    &in_force,
                    &templates,
                )
                .await
            }
            Err(diagnostics) => Err(Refused::Invalid(diagnostics)),
        };
        match decide::decide(admission) {
            Decision::Swap { admitted, wait } => {
                self.swap(&fingerprint, &current_set, (*admitted, wait), started).await;
            }
            Decision::Retry(refused) => {
                self.retry_later(
                    &fingerprint,
                    "the rules name a kind the API server does not serve",
                    &refused.to_string(),
                    &rule_names(&current_set),
                )
                .await;
            }
            Decision::Reject { refused, by_schemas } => {
                if let Refused::Schemas { schemas, .. } = &refused {
                    self.schemas.clone_from(schemas);
                }
                if by_schemas {
                    self.rejected_by_schemas = Some(SchemaRejection::Files);
                }
                self.reject(&fingerprint, &refused).await;
            }
        }
    }

    /// Puts an admitted set in force: its revisions recorded and stamped, the rollouts staged,
    /// the controllers re-synced; reported Loaded, or waiting for the kinds set aside.
    async fn swap(
        &mut self,
        fingerprint: &str,
        current_set: &Arc<RuleSet>,
        (admitted, wait): (Admitted, bool),
        started: std::time::Instant,
    ) {
        let Admitted {
            set,
            kinds,
            waiting,
            schemas,
        } = admitted;
        self.schemas = schemas;
        self.rejected_by_schemas = None;
        let before: std::collections::BTreeMap<String, u64> = set
            .rules
            .iter()
            .map(|r| (r.name.clone(), self.revisions.latest(&r.name)))
            .collect();
        let in_force = self.revisions.record(&set).await;
        let set = stamped(set, &in_force.numbers);
        self.status.revisions = in_force.lines;
        self.shared.pins.set_kept(self.revisions.kept()).await;
        let staged = staging::stage(&self.shared.rollouts, current_set, &set, |rule| {
            (before.get(rule).copied().unwrap_or(0), self.revisions.latest(rule))
        });
        let (set, kinds) = (Arc::new(set), Arc::new(kinds));
        match self.shared.current.write() {
            Ok(mut current) => *current = (set.clone(), kinds.clone()),
            Err(poisoned) => *poisoned.into_inner() = (set.clone(), kinds.clone()),
        }
        if let Err(e) = self.supervisor.sync(&set, &kinds).await {
            self.retry_later(
                fingerprint,
                "starting controllers for the new rules failed",
                &format!("{e:#}"),
                &rule_names(&set),
            )
            .await;
            return;
        }
        self.shared
            .observability
            .health
            .set_waiting(waiting.iter().map(ToString::to_string).collect());
        if wait {
            self.wait_for_kinds(fingerprint, &set, &waiting).await;
            return;
        }
        self.fingerprint = fingerprint.to_owned();
        self.retry = None;
        self.shared.observability.metrics.reloaded("ok");
        info!(rules = %rule_names(&set), elapsed = ?started.elapsed(), "rules reloaded");
        self.rollouts.staged(staged, &self.supervisor, &self.revisions).await;
        let _ = self
            .status
            .report(ReloadState::Loaded, &rule_names(&set), fingerprint)
            .await;
    }

    /// Files refused for their content: recorded as dealt with (not retried until they change),
    /// counted, and reported with every error; the last good rules keep running.
    async fn reject(&mut self, fingerprint: &str, refused: &Refused) {
        match refused {
            Refused::Invalid(diagnostics) => {
                for diagnostic in &diagnostics.0 {
                    error!(%diagnostic, "rule reload rejected; the last good rules keep running");
                }
            }
            Refused::Schemas { diagnostics, .. } => {
                for diagnostic in &diagnostics.0 {
                    error!(%diagnostic, "rule reload rejected: the rules do not match the CRDs; the last good rules keep running");
                }
            }
            other => error!(error = %other, "rule reload rejected; the last good rules keep running"),
        }
        self.shared.observability.metrics.reloaded("invalid");
        self.fingerprint = fingerprint.to_owned();
        self.retry = None;
        let _ = self
            .status
            .report(ReloadState::Rejected(refused.to_string()), "", fingerprint)
            .await;
    }

    /// After a CRD changed under the rules in force: a failed check reports them Rejected (they
    /// keep running: there is nothing better to run); a passing one after that reports them
    /// Loaded again.
    async fn report_in_force_check(
        &mut self,
        set: &RuleSet,
        checked: Result<(), crate::engine::diagnostic::Diagnostics>,
    ) {
        match (decide::recheck(checked.is_ok(), self.rejected_by_schemas), checked) {
            (Recheck::Rejected, Err(diagnostics)) => {
                for diagnostic in &diagnostics.0 {
                    error!(%diagnostic, "a CRD changed and the rules in force no longer match it; they keep running");
                }
                self.shared.observability.metrics.reloaded("invalid");
                self.rejected_by_schemas = Some(SchemaRejection::InForce);
                let _ = self
                    .status
                    .report(
                        ReloadState::Rejected(diagnostics.to_string()),
                        &rule_names(set),
                        &self.fingerprint,
                    )
                    .await;
            }
            (Recheck::LoadedAgain, _) => {
                self.rejected_by_schemas = None;
                info!("the rules in force match the changed CRDs again");
                let _ = self
                    .status
                    .report(ReloadState::Loaded, &rule_names(set), &self.fingerprint)
                    .await;
            }
            _ => {}
        }
    }

    /// The other rules run; these wait for their kinds, reported and retried with backoff.
    async fn wait_for_kinds(&mut self, fingerprint: &str, set: &RuleSet, waiting: &[UnknownKind]) {
        let errors: Vec<String> = waiting.iter().map(ToString::to_string).collect();
        self.retry_later(
            fingerprint,
            "a rule names a kind the API server does not serve; the other rules run",
            &errors.join("\n"),
            &rule_names(set),
        )
        .await;
    }

    /// Reports a failure that may pass and schedules the next attempt.
    async fn retry_later(&mut self, fingerprint: &str, what: &str, error: &str, rules: &str) {
        let delay = decide::next_retry(self.retry.map(|(_, last)| last));
        self.retry = Some((Instant::now() + delay, delay));
        warn!(%error, retry_in = ?delay, "rule reload failed: {what}; the last good rules keep running");
        self.shared.observability.metrics.reloaded("retrying");
        let errors = format!(
            "{error}\n(retrying with backoff, at least every {}s)",
            RETRY_MAX.as_secs()
        );
        let _ = self
            .status
            .report(ReloadState::Rejected(errors), rules, fingerprint)
            .await;
    }

    /// A Warning Event `ControllerRestarted` on the `ruleop-status` ConfigMap, where the state
    /// of the rules is reported.
    pub(crate) fn report_ended(&self, ended: &Ended, status_namespace: &str) {
        let note = format!(
            "the controller of rule {:?} ended ({}); it starts again in {:?} (restart {} in a row)",
            ended.rule,
            ended.why,
            ended.restart_at.saturating_duration_since(Instant::now()),
            ended.attempt
        );
        crate::records::status::publish_warning(
            &self.shared.recorder,
            status_namespace,
            "ControllerRestarted",
            "Restart",
            note,
        );
    }
}

/// The names of the rules of `set`, comma-separated, as `ruleop-status` lists them.
pub(crate) fn rule_names(set: &RuleSet) -> String {
    set.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(",")
}
