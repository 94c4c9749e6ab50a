//! Liveness and readiness that do not lie: readiness follows the watches (every cache synced,
//! none failing), liveness follows the process (the async runtime ticks, no reconcile hangs).
//!
//! A network blip makes the watches fail, so the pod leaves the Service endpoints (readiness)
//! but is not restarted (liveness): restarting cannot fix the network, and every restart
//! re-lists every kind. A wedged runtime or a reconcile stuck for many minutes is what a
//! restart fixes, so only that fails liveness.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::watcher;
use tracing::{error, info, warn};

use crate::engine::diagnostic::bounded;
use crate::ops::watch_error::{is_gone, status_code};

/// Liveness fails when the runtime's heartbeat is older than this: the heartbeat task ticks
/// every second, so this is a runtime that ran nothing on time for many ticks in a row.
pub(crate) const HEARTBEAT_STALE: Duration = Duration::from_secs(30);
/// Liveness fails when one reconcile has run longer than this. API requests time out within
/// about 5 minutes (kube's read timeout) and actions within their own timeouts, so a reconcile
/// this old is stuck, not slow.
pub(crate) const RECONCILE_STUCK: Duration = Duration::from_secs(15 * 60);
/// How often a watch whose recovery is silent (a re-established watch emits nothing) is probed.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Longest error text kept for `/readyz` and logs.
const MAX_ERROR: usize = 300;

/// The health of the process, shared by the controllers and the admin server.
#[derive(Debug)]
pub(crate) struct Health {
    origin: Instant,
    /// Milliseconds since `origin` of the runtime's last heartbeat.
    heartbeat_ms: AtomicU64,
    /// Set once the first rule set's controllers are started; cleared at shutdown.
    started: AtomicBool,
    next_id: AtomicU64,
    /// Rules held back until the kinds they name are served, each with why.
    waiting: Mutex<Vec<String>>,
    /// Rules whose controller ended by itself and is not running again yet, each with why.
    down: Mutex<BTreeMap<String, String>>,
    watches: Mutex<BTreeMap<u64, WatchState>>,
    reconciles: Mutex<BTreeMap<u64, (String, Instant)>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            origin: Instant::now(),
            heartbeat_ms: AtomicU64::new(0),
            started: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            waiting: Mutex::default(),
            down: Mutex::default(),
            watches: Mutex::default(),
            reconciles: Mutex::default(),
        }
    }
}

#[derive(Debug, Clone)]
struct WatchState {
    /// `rule "database": watch of Database (myorg.io/v1)` and the like, for messages.
    what: String,
    synced: bool,
    failing: Option<Failure>,
}

#[derive(Debug, Clone)]
struct Failure {
    since: Instant,
    error: String,
    /// Recovery from this error emits no event (a re-established watch is silent), so it is probed.
    silent_recovery: bool,
}

impl Health {
    /// Marks the controllers started (or stopped, at shutdown).
    pub(crate) fn set_started(&self, started: bool) {
        self.started.store(started, Ordering::Relaxed);
    }

    /// Records the rules held back (not running) until the kinds they name are served.
    pub(crate) fn set_waiting(&self, waiting: Vec<String>) {
        match self.waiting.lock() {
            Ok(mut held) => *held = waiting,
            Err(poisoned) => *poisoned.into_inner() = waiting,
        }
    }

    /// Records that the controller of `rule` ended by itself (`why`): liveness fails until
    /// [`Health::set_controller_up`].
    pub(crate) fn set_controller_down(&self, rule: &str, why: String) {
        if let Ok(mut down) = self.down.lock() {
            down.insert(rule.to_owned(), why);
        }
    }

    /// Records that the controller of `rule` runs again.
    pub(crate) fn set_controller_up(&self, rule: &str) {
        if let Ok(mut down) = self.down.lock() {
            down.remove(rule);
        }
    }

    /// Records that the async runtime ran on time.
    pub(crate) fn beat(&self) {
        self.beat_at(Instant::now());
    }

    fn beat_at(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.origin).as_millis() as u64;
        self.heartbeat_ms.store(ms, Ordering::Relaxed);
    }

    /// Ticks [`Health::beat`] every second on the current runtime, for as long as it runs.
    pub(crate) fn spawn_heartbeat(health: Arc<Health>) {
        health.beat();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                health.beat();
            }
        });
    }

    /// `Ok` when the process makes progress; otherwise what is wedged.
    pub(crate) fn liveness(&self) -> Result<(), String> {
        self.liveness_at(Instant::now())
    }

    fn liveness_at(&self, now: Instant) -> Result<(), String> {
        let beat = self.origin + Duration::from_millis(self.heartbeat_ms.load(Ordering::Relaxed));
        let silent = now.saturating_duration_since(beat);
        if silent > HEARTBEAT_STALE {
            return Err(format!(
                "the async runtime has not run its heartbeat for {}s",
                silent.as_secs()
            ));
        }
        let down = self.down.lock().map_err(|_| "health state poisoned".to_owned())?;
        if !down.is_empty() {
            return Err(down.values().cloned().collect::<Vec<_>>().join("; "));
        }
        drop(down);
        let reconciles = self.reconciles.lock().map_err(|_| "health state poisoned".to_owned())?;
        if let Some((what, started)) = reconciles.values().min_by_key(|(_, started)| *started) {
            let running = now.saturating_duration_since(*started);
            if running > RECONCILE_STUCK {
                return Err(format!("the reconcile of {what} has run for {}s", running.as_secs()));
            }
        }
        Ok(())
    }

    /// `Ok` when the controllers are started, every cache has synced and no watch is failing;
    /// otherwise every reason it is not.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        self.readiness_at(Instant::now())
    }

    fn readiness_at(&self, now: Instant) -> Result<(), String> {
        if !self.started.load(Ordering::Relaxed) {
            return Err("controllers not started".to_owned());
        }
        let mut problems: Vec<String> = self
            .waiting
            .lock()
            .map_err(|_| "health state poisoned".to_owned())?
            .iter()
            .map(|why| format!("{why} (the rule waits; retrying)"))
            .collect();
        let watches = self.watches.lock().map_err(|_| "health state poisoned".to_owned())?;
        for state in watches.values() {
            if let Some(failure) = &state.failing {
                let secs = now.saturating_duration_since(failure.since).as_secs();
                problems.push(format!("{} failing for {secs}s: {}", state.what, failure.error));
            } else if !state.synced {
                problems.push(format!("{} not synced yet", state.what));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Registers a watch; it counts for readiness until the returned token is dropped.
    pub(crate) fn register_watch(self: &Arc<Self>, what: String) -> WatchToken {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut watches) = self.watches.lock() {
            watches.insert(
                id,
                WatchState {
                    what,
                    synced: false,
                    failing: None,
                },
            );
        }
        WatchToken {
            health: self.clone(),
            id,
        }
    }

    /// Tracks one reconcile until the returned guard is dropped (liveness: none may hang).
    pub(crate) fn reconcile_started(self: &Arc<Self>, what: String) -> ReconcileGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut reconciles) = self.reconciles.lock() {
            reconciles.insert(id, (what, Instant::now()));
        }
        ReconcileGuard {
            health: self.clone(),
            id,
        }
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut WatchState)) {
        if let Ok(mut watches) = self.watches.lock()
            && let Some(state) = watches.get_mut(&id)
        {
            change(state);
        }
    }
}

/// One registered watch; dropping it (the controller stopped) removes it from readiness.
#[derive(Debug)]
pub(crate) struct WatchToken {
    health: Arc<Health>,
    id: u64,
}

/// Whether a watcher error means the kind is not served (its CRD was deleted).
fn not_found(error: &watcher::Error) -> bool {
    status_code(error) == Some(404)
}

impl WatchToken {
    /// Follows one item of the watch stream: an event proves the watch works (`InitDone` also
    /// that the cache synced), an error marks it failing, except a 410 Gone (logged at info: the
    /// watcher lists again at once). Transitions are logged once each.
    pub(crate) fn observe<K>(&self, item: &Result<watcher::Event<K>, watcher::Error>) -> Transition {
        let mut transition = Transition::None;
        self.health.update(self.id, |state| match item {
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    state.synced = true;
                }
                if let Some(failure) = state.failing.take() {
                    info!(watch = %state.what, after = ?failure.since.elapsed(), "watch recovered");
                }
            }
            // The API server answered: the version expired, and the watcher lists again at once
            // (`cache::retry`); the relist's events show it working. Not a failure.
            Err(error) if is_gone(error) => {
                info!(watch = %state.what, error = %bounded(&error.to_string(), MAX_ERROR), "watch expired; listing again");
            }
            Err(error) => {
                let text = bounded(&error.to_string(), MAX_ERROR).into_owned();
                // A list error is followed by a new list, whose events show the recovery; a
                // watch that starts again after an error says nothing, so it is probed.
                let silent_recovery = !matches!(
                    error,
                    watcher::Error::InitialListFailed(_) | watcher::Error::NoResourceVersion
                );
                if state.failing.is_none() {
                    if not_found(error) {
                        error!(
                            watch = %state.what,
                            "the watched kind is no longer served (was its CRD deleted?); this rule does nothing until it is served again"
                        );
                    } else {
                        warn!(watch = %state.what, error = %text, "watch failing; retrying with backoff");
                    }
                    transition = Transition::Failing;
                }
                let since = state.failing.as_ref().map_or_else(Instant::now, |f| f.since);
                state.failing = Some(Failure {
                    since,
                    error: text,
                    silent_recovery,
                });
            }
        });
        transition
    }

    /// Whether the watch is failing with an error whose recovery only a probe can see.
    pub(crate) fn needs_probe(&self) -> bool {
        self.health.watches.lock().is_ok_and(|watches| {
            watches
                .get(&self.id)
                .and_then(|s| s.failing.as_ref())
                .is_some_and(|f| f.silent_recovery)
        })
    }

    /// A probe (a one-item LIST) succeeded: the API serves the kind again.
    pub(crate) fn probe_succeeded(&self) {
        self.health.update(self.id, |state| {
            if let Some(failure) = state.failing.take_if(|f| f.silent_recovery) {
                info!(watch = %state.what, after = ?failure.since.elapsed(), "watch recovered");
            }
        });
    }
}

impl Drop for WatchToken {
    fn drop(&mut self) {
        if let Ok(mut watches) = self.health.watches.lock() {
            watches.remove(&self.id);
        }
    }
}

/// What an observed item changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Nothing worth acting on.
    None,
    /// The watch just started failing.
    Failing,
}

/// One reconcile in flight; dropping it marks it finished.
#[derive(Debug)]
pub(crate) struct ReconcileGuard {
    health: Arc<Health>,
    id: u64,
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        if let Ok(mut reconciles) = self.health.reconciles.lock() {
            reconciles.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;

    fn not_served() -> watcher::Error {
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure("the server could not find the requested resource", "NotFound").with_code(404),
        )))
    }

    fn event(e: watcher::Event<DynamicObject>) -> Result<watcher::Event<DynamicObject>, watcher::Error> {
        Ok(e)
    }

    /// Started health with one watch, of a Database, that has listed.
    fn one_synced_watch() -> (Arc<Health>, WatchToken) {
        let health = Arc::new(Health::default());
        health.set_started(true);
        let watch = health.register_watch("rule \"db\": Database".to_owned());
        watch.observe(&event(watcher::Event::InitDone));
        (health, watch)
    }

    #[test]
    fn readiness_waits_for_start_and_for_every_cache_to_sync() {
        let health = Arc::new(Health::default());
        assert_eq!(health.readiness(), Err("controllers not started".to_owned()));
        let parents = health.register_watch("rule \"db\": Database".to_owned());
        let children = health.register_watch("rule \"db\": Service".to_owned());
        health.set_started(true);
        parents.observe(&event(watcher::Event::InitDone));
        assert_eq!(
            health.readiness(),
            Err("rule \"db\": Service not synced yet".to_owned())
        );
        children.observe(&event(watcher::Event::InitDone));
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn a_failing_watch_is_not_ready_until_an_event_or_a_probe_shows_it_works() {
        let (health, watch) = one_synced_watch();
        assert_eq!(watch.observe::<DynamicObject>(&Err(not_served())), Transition::Failing);
        assert_eq!(
            watch.observe::<DynamicObject>(&Err(not_served())),
            Transition::None,
            "logged once"
        );
        let why = health.readiness().expect_err("not ready");
        assert!(why.contains("rule \"db\": Database failing for 0s"), "{why}");
        assert!(why.contains("could not find the requested resource"), "{why}");
        assert!(watch.needs_probe());
        watch.probe_succeeded();
        assert_eq!(health.readiness(), Ok(()));

        watch.observe::<DynamicObject>(&Err(watcher::Error::NoResourceVersion));
        assert!(!watch.needs_probe(), "a relist shows its own recovery");
        watch.probe_succeeded();
        assert!(health.readiness().is_err());
        watch.observe(&event(watcher::Event::Init));
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn an_expired_watch_is_not_a_failing_one() {
        let (health, watch) = one_synced_watch();
        let expired = kube::core::Status::failure("too old resource version: 1 (2)", "Expired").with_code(410);
        let transition = watch.observe::<DynamicObject>(&Err(watcher::Error::WatchError(Box::new(expired))));
        assert_eq!(transition, Transition::None);
        assert_eq!(health.readiness(), Ok(()), "the watcher lists again at once");
    }

    #[test]
    fn a_stopped_controller_no_longer_counts() {
        let health = Arc::new(Health::default());
        health.set_started(true);
        let watch = health.register_watch("rule \"db\": Database".to_owned());
        assert!(health.readiness().is_err());
        drop(watch);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn liveness_fails_on_a_silent_runtime_or_a_stuck_reconcile_but_not_on_failing_watches() {
        let health = Arc::new(Health::default());
        health.beat();
        let watch = health.register_watch("rule \"db\": Database".to_owned());
        watch.observe::<DynamicObject>(&Err(not_served()));
        let now = Instant::now();
        assert_eq!(
            health.liveness_at(now),
            Ok(()),
            "a failing watch is not a wedged process"
        );
        let later = now + HEARTBEAT_STALE + Duration::from_secs(5);
        let why = health.liveness_at(later).expect_err("stale heartbeat");
        assert!(why.contains("has not run its heartbeat for 3"), "{why}");

        let guard = health.reconcile_started("rule \"db\" ns/a".to_owned());
        let much_later = Instant::now() + RECONCILE_STUCK + Duration::from_secs(1);
        health.beat_at(much_later);
        let why = health.liveness_at(much_later).expect_err("stuck reconcile");
        assert!(why.contains("the reconcile of rule \"db\" ns/a has run for"), "{why}");
        drop(guard);
        assert_eq!(health.liveness_at(Instant::now()), Ok(()));
    }

    #[test]
    fn liveness_fails_while_a_rules_controller_is_down_and_recovers_when_it_runs_again() {
        let health = Health::default();
        health.beat();
        health.set_controller_down(
            "db",
            "the controller of rule \"db\" ended (panicked: boom); restarting in 1s".to_owned(),
        );
        let why = health.liveness().expect_err("a controller is down");
        assert!(why.contains("panicked: boom"), "{why}");
        health.set_controller_up("db");
        assert_eq!(health.liveness(), Ok(()));
    }
}
