//! The running controllers, one per rule: kept in step with the rule set on each reload, and
//! restarted with backoff when one ends by itself (a panic in a reconcile), reported meanwhile
//! in `/healthz`, a metric, a log line and an Event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt;
use tokio::time::Instant;
use tracing::{error, info};

use crate::cache::discovery::Kinds;
use crate::engine::rules::RuleSet;
use crate::runtime::controller::{self, RunningController, Shared};
use crate::runtime::rollout::staging::ParentNow;

/// How long a controller replaced or removed by a reload may take to finish its reconciles.
const CONTROLLER_STOP: Duration = Duration::from_secs(30);
/// Longest wait before a controller that ended is started again.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

/// The wait before the `attempt`-th restart in a row (from 1): 1 s, 2 s, 4 s, ... up to a minute.
pub(crate) fn restart_delay(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(6)).min(MAX_RESTART_DELAY)
}

/// A controller that ended by itself, waiting to be started again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    /// Its rule.
    pub rule: String,
    /// How it ended: `panicked: <message>` or `ended`.
    pub why: String,
    /// Restarts in a row so far, this one included.
    pub attempt: u32,
    /// When it is started again.
    pub restart_at: Instant,
}

/// The running controllers, kept in step with the current rule set.
pub(crate) struct Supervisor {
    shared: Arc<Shared>,
    running: BTreeMap<String, RunningController>,
    /// Controllers that ended by themselves, by rule.
    ended: BTreeMap<String, Ended>,
}

impl Supervisor {
    /// A supervisor with no controllers yet.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Supervisor {
            shared,
            running: BTreeMap::new(),
            ended: BTreeMap::new(),
        }
    }

    /// Makes the running controllers match `set`: start new rules, restart rules whose kinds
    /// changed, stop removed rules (their children stay in place), and re-reconcile every
    /// parent of a rule whose content changed. A rule whose controller ended is started now.
    pub(crate) async fn sync(&mut self, set: &RuleSet, kinds: &Kinds) -> anyhow::Result<()> {
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|name| set.rule(name).is_none())
            .cloned()
            .collect();
        for name in gone {
            if let Some(running) = self.running.remove(&name) {
                info!(rule = %name, "rule removed; stopping its controller (children are left in place)");
                running.stop_by(Instant::now() + CONTROLLER_STOP).await;
            }
        }
        self.ended.retain(|name, _| set.rule(name).is_some());
        for rule in &set.rules {
            let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
            let same_kinds = self.running.get(&rule.name).is_some_and(|r| {
                r.watched == watched && r.owned == rule.owned_kinds() && r.looked_up == rule.lookup_kinds()
            });
            if same_kinds {
                if let Some(running) = self.running.get_mut(&rule.name)
                    && running.digest != rule.digest
                {
                    info!(rule = %rule.name, "rule changed; re-reconciling every parent");
                    running.digest = rule.digest.clone();
                    running.reconcile_all();
                }
                continue;
            }
            if let Some(old) = self.running.remove(&rule.name) {
                old.stop_by(Instant::now() + CONTROLLER_STOP).await;
            }
            let started = controller::start(self.shared.clone(), rule, kinds)
                .with_context(|| format!("starting the controller of rule {:?}", rule.name))?;
            self.running.insert(rule.name.clone(), started);
            self.came_back(&rule.name);
        }
        Ok(())
    }

    /// Waits until a running controller ends by itself, takes it out and schedules its
    /// restart: reported in `/healthz` (failing until it runs again), the restart metric and an
    /// error log line. Never returns while none ends.
    pub(crate) async fn next_ended(&mut self) -> Ended {
        let (rule, why) = first_ended(self.running.iter_mut().map(|(rule, running)| (rule, running.task()))).await;
        self.running.remove(&rule);
        let attempt = self.ended.get(&rule).map_or(1, |e| e.attempt + 1);
        let delay = restart_delay(attempt);
        let ended = Ended {
            rule: rule.clone(),
            why,
            attempt,
            restart_at: Instant::now() + delay,
        };
        error!(rule = %rule, why = %ended.why, attempt, restart_in = ?delay, "a rule's controller ended; restarting it");
        let observability = &self.shared.observability;
        observability.metrics.controller_restarted(&rule);
        observability.health.set_controller_down(
            &rule,
            format!(
                "the controller of rule {rule:?} ended ({}); restarting in {delay:?}",
                ended.why
            ),
        );
        self.ended.insert(rule, ended.clone());
        ended
    }

    /// Re-reconciles every parent of `rule` (a rollout moved on).
    pub(crate) fn reconcile_all(&self, rule: &str) {
        if let Some(running) = self.running.get(rule) {
            running.reconcile_all();
        }
    }

    /// Every cached parent of `rule` with its body (none while its controller is down).
    pub(crate) fn parents_now(&self, rule: &str) -> Vec<ParentNow> {
        self.running
            .get(rule)
            .map(RunningController::parents_now)
            .unwrap_or_default()
    }

    /// When the next ended controller is due to start again.
    pub(crate) fn next_restart(&self) -> Option<Instant> {
        self.ended
            .values()
            .filter(|e| !self.running.contains_key(&e.rule))
            .map(|e| e.restart_at)
            .min()
    }

    /// Starts the ended controllers that are due, from the current rule set.
    pub(crate) fn restart_due(&mut self) {
        let (set, kinds) = self.shared.snapshot();
        let now = Instant::now();
        let due: Vec<String> = self
            .ended
            .values()
            .filter(|e| e.restart_at <= now && !self.running.contains_key(&e.rule))
            .map(|e| e.rule.clone())
            .collect();
        for name in due {
            let Some(rule) = set.rule(&name) else {
                self.ended.remove(&name);
                continue;
            };
            match controller::start(self.shared.clone(), rule, &kinds) {
                Ok(started) => {
                    info!(rule = %name, "the rule's controller is running again");
                    self.running.insert(name.clone(), started);
                    self.shared.observability.health.set_controller_up(&name);
                }
                Err(e) => {
                    if let Some(ended) = self.ended.get_mut(&name) {
                        ended.attempt += 1;
                        ended.restart_at = now + restart_delay(ended.attempt);
                        error!(rule = %name, error = %e, retry_in = ?restart_delay(ended.attempt), "restarting a rule's controller failed");
                    }
                }
            }
        }
    }

    /// A controller (re)started by a reload: whatever ended before is over.
    fn came_back(&mut self, rule: &str) {
        if self.ended.remove(rule).is_some() {
            self.shared.observability.health.set_controller_up(rule);
        }
    }

    /// Stops every controller at once, letting in-flight reconciles finish until `deadline`.
    pub(crate) async fn shutdown_by(self, deadline: Instant) {
        futures::future::join_all(self.running.into_values().map(|running| running.stop_by(deadline))).await;
    }
}

/// The first of `tasks` to end, and how: `panicked: <message>`, `cancelled` or `ended`. Pending
/// forever when there are none.
pub(crate) async fn first_ended<'a>(
    tasks: impl Iterator<Item = (&'a String, &'a mut tokio::task::JoinHandle<()>)>,
) -> (String, String) {
    let waits: Vec<_> = tasks
        .map(|(name, task)| {
            async move {
                let why = match task.await {
                    Ok(()) => "ended".to_owned(),
                    Err(e) if e.is_panic() => {
                        let payload = e.into_panic();
                        let message = payload
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a panic".to_owned());
                        format!("panicked: {}", crate::engine::diagnostic::bounded(&message, 300))
                    }
                    Err(_) => "cancelled".to_owned(),
                };
                (name.clone(), why)
            }
            .boxed()
        })
        .collect();
    if waits.is_empty() {
        return std::future::pending().await;
    }
    futures::future::select_all(waits).await.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_a_second_to_a_minute() {
        let delays: Vec<u64> = (1..=9).map(|a| restart_delay(a).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[tokio::test]
    async fn the_first_task_to_end_is_named_with_its_panic_message() {
        let mut tasks: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
        tasks.insert("quiet".to_owned(), tokio::spawn(std::future::pending()));
        tasks.insert(
            "broken".to_owned(),
            tokio::spawn(async {
                tokio::task::yield_now().await;
                panic!("byte index 10 is not a char boundary");
            }),
        );
        let (rule, why) = first_ended(tasks.iter_mut()).await;
        assert_eq!(rule, "broken");
        assert_eq!(why, "panicked: byte index 10 is not a char boundary");
        tasks.remove("broken");
        let still = tokio::time::timeout(Duration::from_millis(50), first_ended(tasks.iter_mut())).await;
        assert!(still.is_err(), "a running task has not ended");
    }

    #[tokio::test]
    async fn no_tasks_never_end() {
        let mut none: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
        let waited = tokio::time::timeout(Duration::from_millis(20), first_ended(none.iter_mut())).await;
        assert!(waited.is_err());
    }
}
