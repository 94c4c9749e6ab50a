//! `ruleop run`: load the rules, resolve kinds, start one controller per rule, serve the admin
//! endpoints, and on SIGTERM/SIGINT stop gracefully (in-flight reconciles finish).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::apply::backpressure::Backpressure;
use crate::cache::discovery::{Kinds, UnknownKind};
use crate::cache::watch::InitialList;
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::load;
use crate::ha::leader::{self, Election, Elector, Fence, Leadership};
use crate::ha::lease_runtime::LeaseRuntime;
use crate::ha::shard::{self, Writers};
use crate::ops::Observability;
use crate::ops::admin;
use crate::ops::health::Health;
use crate::runtime::controller::Shared;
use crate::runtime::reload::{DirWatcher, fingerprint};
use crate::runtime::revisions::RevisionStore;
use crate::runtime::rollout::{self, Rollouts};
use crate::runtime::rollout_driver::{self, Driving};
use crate::runtime::rollout_report::RolloutReport;
use crate::runtime::shutdown;
use crate::runtime::supervisor::{Ended, Supervisor};

/// Settings of the operator.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// Where the rules are.
    pub rules: PathBuf,
    /// Where the templates are.
    pub templates: PathBuf,
    /// Only watch this namespace.
    pub namespace: Option<String>,
    /// Resync for rules without `resync`.
    pub default_resync: Duration,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub admin_addr: SocketAddr,
    /// Quiet time after a file event before reloading.
    pub reload_debounce: Duration,
    /// Re-read period when no file event arrives (the fallback).
    pub reload_interval: Duration,
    /// How long a stop may take before the process exits whatever still runs.
    pub shutdown_timeout: Duration,
    /// Namespace of the `ruleop-status` ConfigMap reporting the rules' state.
    pub status_namespace: String,
    /// How every watch lists its kind first (`--initial-list`).
    pub initial_list: InitialList,
    /// Leader election (`--leader-elect`): only the holder of the lease reconciles and writes.
    pub election: Option<Election>,
    /// `--egress-deny-cidr`: ranges `http` actions never reach through a host name.
    pub egress_deny: Vec<ipnet::IpNet>,
    /// `--max-object-size`: watched objects longer than this are not cached.
    pub max_object_bytes: usize,
    /// `--keep-revisions`: how many revisions of each rule are kept in ConfigMaps.
    pub keep_revisions: usize,
    /// `--kube-qps`, `--kube-burst`: the client-side limit on requests to the API server.
    pub client_limit: crate::apply::backpressure::ClientLimit,
    /// `--circuit-failures`: failed reconciles in a row that open a parent's circuit (0: never).
    pub circuit_failures: u32,
}

/// The ranges `http` actions never reach through a name: the flag's, plus every address of the
/// API server (as the kubeconfig names it, and the in-cluster Service address), so a tenant's
/// URL cannot aim ruleop's own credentials' target.
async fn egress_deny(flag: &[ipnet::IpNet]) -> Vec<ipnet::IpNet> {
    let mut refused = flag.to_vec();
    let mut hosts = Vec::new();
    if let Ok(config) = kube::Config::infer().await
        && let Some(host) = config.cluster_url.host()
    {
        hosts.push((
            host.trim_matches(['[', ']']).to_owned(),
            config.cluster_url.port_u16().unwrap_or(443),
        ));
    }
    if let Ok(host) = std::env::var("KUBERNETES_SERVICE_HOST") {
        hosts.push((host, 443));
    }
    for (host, port) in hosts {
        match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(addrs) => refused.extend(addrs.map(|a| ipnet::IpNet::from(a.ip().to_canonical()))),
            Err(e) => warn!(%host, error = %e, "cannot resolve the API server to refuse it as an http action target"),
        }
    }
    refused.sort();
    refused.dedup();
    info!(ranges = ?refused, "http actions never reach these addresses through a host name");
    refused
}

/// Runs the operator until SIGTERM or SIGINT.
pub(crate) async fn run(settings: RunSettings) -> anyhow::Result<()> {
    // First of all: a SIGTERM during start-up then means a graceful stop once started, and the
    // stop is bounded from the first signal on, wherever the process is.
    let shutdown = shutdown::install(settings.shutdown_timeout);
    // Taken before reading, so an edit racing the first load is reloaded, not missed.
    let loaded_fingerprint = fingerprint(&settings.rules, &settings.templates);
    let mut set =
        load(&settings.rules, &settings.templates).map_err(|d| anyhow::anyhow!("the rules are invalid:\n{d}"))?;
    // With shards, each shard fences its own writes (src/shard.rs); the process-wide client
    // is fenced only by a single leader lease.
    let sharded = settings.election.as_ref().filter(|e| e.shards > 1).cloned();
    let fence = if settings.election.is_some() && sharded.is_none() {
        Fence::closed()
    } else {
        Fence::open()
    };
    // Dropped last, when run returns: the leases are released by then.
    let lease_runtime = LeaseRuntime::start().context("starting the lease runtime thread")?;
    let backpressure = Backpressure::new(settings.client_limit);
    let (client, lease_client) = leader::clients(fence.clone(), lease_runtime.handle(), &backpressure)
        .await
        .context("connecting to the Kubernetes API")?;
    let mut kinds = Kinds::default();
    let waiting = kinds.resolve(&client, &set).await;
    set_aside(&mut set, &waiting);
    check_scopes(&mut set, &kinds)?;
    let (schemas, checked) = check_live_schemas(&client, &set, &kinds, &settings.templates).await;
    checked.map_err(|d| anyhow::anyhow!("the rules do not match the CRDs the API server serves:\n{d}"))?;
    let status = StatusReporter::new(client.clone(), &settings.status_namespace);
    check_status_writable(&status, &settings.status_namespace).await?;
    let observability = serve_observability(settings.admin_addr, &waiting, &backpressure).await?;
    tokio::pin!(shutdown);
    let mut leadership = None;
    // Without leader election this replica is the only writer.
    observability.metrics.set_leader(settings.election.is_none());
    let reporter = Reporter {
        controller: "ruleop".to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter.clone());
    // Sharded: every replica starts its controllers (and caches) at once and reconciles the
    // parents of the shards it holds. Otherwise a standby waits here for the leader lease.
    let (writers, sharding) = match &sharded {
        Some(election) => {
            let writers = Arc::new(Writers::sharded(&client, election.shards, &reporter));
            let sharding = shard::start(
                lease_runtime.handle(),
                lease_client.clone(),
                election,
                writers.clone(),
                observability.clone(),
            );
            (writers, Some(sharding))
        }
        None => (Arc::new(Writers::single(client.clone(), recorder.clone())), None),
    };
    if let Some(election) = settings.election.as_ref().filter(|_| sharded.is_none()) {
        // A standby is ready: it serves nothing, but must not fail its probes while it waits.
        observability.health.set_started(true);
        observability.metrics.set_leader(false);
        let elector = Elector::new(
            lease_client,
            &election.namespace,
            &election.name,
            &election.identity,
            election.timing,
        );
        let gauge = observability.clone();
        let on_change = move |leading: bool| gauge.metrics.set_leader(leading);
        tokio::select! {
            held = leader::acquire(lease_runtime.handle(), elector, fence.clone(), on_change) => leadership = Some(held),
            () = &mut shutdown => {
                info!("shutting down while standing by");
                return Ok(());
            }
        }
    }
    // Recorded once this replica leads (a standby writes nothing), and before the set is
    // shared: each rule carries its revision number into the parents' status.
    let mut revisions = RevisionStore::new(client.clone(), &settings.status_namespace, settings.keep_revisions);
    let revisions_in_force = revisions.record(&mut set).await;
    let (rollouts, mut halts) = Rollouts::new();
    let pins = crate::runtime::pins::Pins::new(client.clone(), &settings.status_namespace);
    pins.set_kept(revisions.kept()).await;
    let shared = Arc::new(Shared {
        rollouts,
        pins,
        recorder,
        writers,
        client,
        current: std::sync::RwLock::new((Arc::new(set), Arc::new(kinds))),
        observability: observability.clone(),
        default_resync: settings.default_resync,
        namespace: settings.namespace.clone(),
        initial_list: settings.initial_list,
        max_object_bytes: settings.max_object_bytes,
        egress_deny: egress_deny(&settings.egress_deny).await,
        circuit: crate::runtime::controller::Threshold(settings.circuit_failures),
    });
    let (set, kinds) = shared.snapshot();
    // Through shard 0's fence with shards: a replica that lost it cannot record.
    let mut rollout_report = RolloutReport::new(shared.writers.rollout_client(), &settings.status_namespace);
    // Before any controller starts: no parent is reconciled under the wrong revision meanwhile.
    crate::runtime::rollout_resume::resume(&shared.rollouts, &set, &kinds, &revisions, &mut rollout_report).await;
    let mut supervisor = Supervisor::new(shared.clone());
    supervisor.sync(&set, &kinds).await?;
    observability.health.set_started(true);
    info!(rules = set.rules.len(), "ruleop running");
    let mut reloader = Reloader {
        revisions,
        rollout_report,
        fingerprint: loaded_fingerprint,
        schemas,
        rejected_by_schemas: None,
        status,
        settings: settings.clone(),
        shared: shared.clone(),
        supervisor,
        retry: None,
        driving: Driving::default(),
    };
    reloader.status.revisions = revisions_in_force;
    if waiting.is_empty() {
        let _ = reloader
            .status
            .report(ReloadState::Loaded, &rule_names(&set), &reloader.fingerprint)
            .await;
    } else {
        // Not recorded as dealt with, so the retry loads the files again.
        let fingerprint = std::mem::take(&mut reloader.fingerprint);
        reloader.wait_for_kinds(&fingerprint, &set, &waiting).await;
    }
    let (mut watcher, watch_error) = DirWatcher::new(&[settings.rules.clone(), settings.templates.clone()]);
    if let Some(e) = watch_error {
        warn!(error = %e, "cannot watch the rule directories; re-reading every --reload-interval only");
    }
    // A standby may have waited long: pick up what changed on disk meanwhile.
    reloader.reload().await;
    // After the reload: a request is about the revision in force.
    reloader.check_rollouts().await;
    let mut rollout_check = tokio::time::interval(Duration::from_secs(1));
    rollout_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lost = loop {
        let retry_at = reloader.retry.map(|(at, _)| at);
        let restart_at = reloader.supervisor.next_restart();
        let step_at = reloader.next_step();
        tokio::select! {
            () = &mut shutdown => break false,
            () = lease_lost(&mut leadership) => break true,
            () = watcher.changed(settings.reload_debounce, settings.reload_interval) => reloader.reload().await,
            () = sleep_until(retry_at) => reloader.reload().await,
            ended = reloader.supervisor.next_ended() => reloader.report_ended(&ended),
            () = sleep_until(step_at) => reloader.advance_rollouts().await,
            Some(rule) = halts.recv() => reloader.rollout_halted(&rule).await,
            Some(request) = rollout_driver::next_request(&mut reloader.driving.requests) => {
                reloader.rollout_request(&request).await;
                reloader.request_done(&request).await;
            }
            Some(states) = rollout_driver::next_records(&mut reloader.driving.records) => reloader.follow_records(states).await,
            _ = rollout_check.tick() => reloader.check_rollouts().await,
            () = sleep_until(restart_at) => reloader.supervisor.restart_due(),
        }
    };
    stop(
        reloader.supervisor,
        &observability,
        settings.shutdown_timeout,
        lost,
        leadership,
        sharding,
    )
    .await
}

/// Fails start-up when ruleop may not write the `ruleop-status` ConfigMap (a server-side dry
/// run answered 403), naming what to grant; any other failure of the check is only logged.
async fn check_status_writable(status: &StatusReporter, namespace: &str) -> anyhow::Result<()> {
    let Err(e) = status.check_writable().await else {
        return Ok(());
    };
    if matches!(&e, kube::Error::Api(status) if status.code == 403) {
        anyhow::bail!(
            "ruleop may not write the ConfigMap {namespace}/{STATUS_CONFIGMAP}, where it reports the state of the rules ({}). \
             Grant its ServiceAccount get/create/patch on ConfigMaps in that namespace, or set \
             --status-namespace (or POD_NAMESPACE) to a namespace where it may",
            crate::engine::diagnostic::bounded(&e.to_string(), 500)
        );
    }
    warn!(error = %e, "cannot check that the {STATUS_CONFIGMAP} ConfigMap is writable");
    Ok(())
}

/// The metrics and health every layer reports to, served on `admin_addr` (/metrics, /healthz,
/// /readyz) from now on; not ready while the kinds in `waiting` are not served.
async fn serve_observability(
    admin_addr: std::net::SocketAddr,
    waiting: &[impl ToString],
    backpressure: &Backpressure,
) -> anyhow::Result<Arc<Observability>> {
    let mut observability = Observability::default();
    observability
        .metrics
        .register_backpressure(backpressure.rejected.clone(), backpressure.waited.clone());
    let observability = Arc::new(observability);
    observability
        .health
        .set_waiting(waiting.iter().map(ToString::to_string).collect());
    Health::spawn_heartbeat(observability.health.clone());
    let bound = admin::serve(admin_addr, observability.clone())
        .await
        .context("binding the admin address")?;
    info!(%bound, "admin endpoints listening (/metrics, /healthz, /readyz)");
    Ok(observability)
}

/// The bounded stop: in-flight reconciles finish (most of `timeout`), then the leases are
/// released (the rest). A lost lease ends in an error instead: the replica restarts as a fresh
/// standby with empty caches.
async fn stop(
    supervisor: Supervisor,
    observability: &Observability,
    timeout: std::time::Duration,
    lost: bool,
    leadership: Option<Leadership>,
    sharding: Option<shard::Sharding>,
) -> anyhow::Result<()> {
    info!(?timeout, "shutting down: letting in-flight reconciles finish");
    let (controllers_by, released_by) = shutdown::deadlines(Instant::now(), timeout);
    observability.health.set_started(false);
    supervisor.shutdown_by(controllers_by).await;
    if lost {
        anyhow::bail!("lost the lease; stopped writing and exiting");
    }
    let release = async {
        if let Some(leadership) = leadership {
            leadership.release().await;
        }
        if let Some(sharding) = sharding {
            sharding.release().await;
        }
    };
    if tokio::time::timeout_at(released_by, release).await.is_err() {
        warn!("the leases were not released in time; other replicas take over when they expire");
    }
    Ok(())
}

/// Resolves when a held lease is lost; never without leader election.
async fn lease_lost(leadership: &mut Option<Leadership>) {
    match leadership {
        Some(leadership) => leadership.lost().await,
        None => std::future::pending().await,
    }
}

fn rule_names(set: &RuleSet) -> String {
    set.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(",")
}

/// The first wait before retrying a rule set that failed for a reason outside its files (a kind
/// not served yet, a controller that did not start); it doubles up to [`RETRY_MAX`].
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between retries: a CRD created after its rule takes effect within this.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(10);

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Serialised reloads: one at a time, each building a complete new rule set.
impl Reloader {
    /// A Warning Event on the `ruleop-status` ConfigMap, where the state of the rules is reported.
    pub(crate) fn publish_warning(&self, reason: &str, action: &str, note: String) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("ConfigMap".to_owned()),
            name: Some(STATUS_CONFIGMAP.to_owned()),
            namespace: Some(self.settings.status_namespace.clone()),
            ..Default::default()
        };
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: reason.to_owned(),
            note: Some(crate::engine::diagnostic::bounded(&note, 1000).into_owned()),
            action: action.to_owned(),
            secondary: None,
        };
        let recorder = self.shared.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                warn!(error = %e, "publishing an Event failed");
            }
        });
    }

    /// A Warning Event `ControllerRestarted` on the `ruleop-status` ConfigMap, where the state
    /// of the rules is reported.
    fn report_ended(&self, ended: &Ended) {
        let note = format!(
            "the controller of rule {:?} ended ({}); it starts again in {:?} (restart {} in a row)",
            ended.rule,
            ended.why,
            ended.restart_at.saturating_duration_since(Instant::now()),
            ended.attempt
        );
        self.publish_warning("ControllerRestarted", "Restart", note);
    }
}

pub(crate) struct Reloader {
    pub(crate) settings: RunSettings,
    pub(crate) shared: Arc<Shared>,
    pub(crate) supervisor: Supervisor,
    /// The files last dealt with for good: put in force, or rejected for their content. A set
    /// that failed for a passing reason (discovery, a controller start) is not recorded, so it
    /// is tried again.
    fingerprint: String,
    /// After such a failure: when to try again and the wait that led there.
    retry: Option<(tokio::time::Instant, Duration)>,
    /// The CRDs (names and resource versions) the rules in force were last checked against.
    schemas: String,
    /// What the last schema check refused: the files (loaded against older CRDs), or the rules
    /// in force (after a CRD changed under them).
    rejected_by_schemas: Option<SchemaRejection>,
    status: StatusReporter,
    /// The kept revisions of each rule.
    pub(crate) revisions: RevisionStore,
    /// The staged rollouts' state in `ruleop-status`.
    pub(crate) rollout_report: RolloutReport,
    /// Whether this replica runs the staged rollouts, and the watches that go with it.
    pub(crate) driving: Driving,
}

/// What a failed check against the live CRDs refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemaRejection {
    /// An edit of the files: it is loaded again when a CRD changes.
    Files,
    /// The rules in force, after a CRD changed: they keep running, reported Rejected.
    InForce,
}

/// The live CRDs of `set`'s watched kinds. CRDs that cannot be read are logged and not held
/// against the rules (the API server still validates every write): an empty catalog.
async fn read_live_schemas(client: &Client, set: &RuleSet, kinds: &Kinds) -> crate::cache::crds::LiveSchemas {
    crate::cache::crds::read(client, set, kinds).await.unwrap_or_else(|e| {
        warn!(error = %e, "cannot read the CRDs of the watched kinds; the rules are not checked against their schemas");
        crate::cache::crds::LiveSchemas::default()
    })
}

/// Checks `set` against the live CRDs of its watched kinds: the CRDs' fingerprint, and every
/// located problem.
async fn check_live_schemas(
    client: &Client,
    set: &RuleSet,
    kinds: &Kinds,
    templates: &std::path::Path,
) -> (String, Result<(), crate::engine::diagnostic::Diagnostics>) {
    let live = read_live_schemas(client, set, kinds).await;
    let checked = check_against(set, &live, templates);
    (live.fingerprint, checked)
}

/// `set` against CRDs already read: every located problem (kinds with no schema are logged).
fn check_against(
    set: &RuleSet,
    live: &crate::cache::crds::LiveSchemas,
    templates: &std::path::Path,
) -> Result<(), crate::engine::diagnostic::Diagnostics> {
    let report = crate::engine::schema_check::rule_check::check(set, &live.catalog, templates);
    for warning in &report.warnings {
        warn!(%warning, "a rule is not checked against a schema");
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(crate::engine::diagnostic::Diagnostics(report.errors))
    }
}

impl Reloader {
    /// Rebuilds the rule set if the files changed (or a retry is due). Valid: swap it in and
    /// re-sync controllers. Invalid: keep the last good set running and report every error with
    /// its location. Not resolvable yet: report it and retry with backoff.
    async fn reload(&mut self) {
        let (rules, templates) = (&self.settings.rules, &self.settings.templates);
        let fingerprint = fingerprint(rules, templates);
        if fingerprint == self.fingerprint {
            self.retry = None;
            // The files are as they were: a CRD may have changed under the rules (checked at
            // every reload tick, --reload-interval).
            let (set, kinds) = self.shared.snapshot();
            let live = read_live_schemas(&self.shared.client, &set, &kinds).await;
            if live.fingerprint == self.schemas {
                return;
            }
            self.schemas = live.fingerprint.clone();
            if self.rejected_by_schemas != Some(SchemaRejection::Files) {
                let checked = check_against(&set, &live, templates);
                self.report_in_force_check(&set, checked).await;
                return;
            }
            // Files refused against the older CRDs are tried again against the new ones.
        }
        let started = std::time::Instant::now();
        let mut set = match load(rules, templates) {
            Ok(set) => set,
            Err(diagnostics) => {
                for diagnostic in &diagnostics.0 {
                    error!(%diagnostic, "rule reload rejected; the last good rules keep running");
                }
                self.reject(&fingerprint, diagnostics.to_string()).await;
                return;
            }
        };
        let (current_set, current_kinds) = self.shared.snapshot();
        let mut kinds = (*current_kinds).clone();
        let waiting = kinds.resolve(&self.shared.client, &set).await;
        // The kind may be served later (its CRD applied after the rule): try again. A rule in
        // force keeps its last good version meanwhile, so the whole set waits; a new rule waits
        // alone.
        if waiting.iter().any(|w| current_set.rule(&w.rule).is_some()) {
            let errors: Vec<String> = waiting.iter().map(ToString::to_string).collect();
            self.retry_later(
                &fingerprint,
                "the rules name a kind the API server does not serve",
                &errors.join("\n"),
                &rule_names(&current_set),
            )
            .await;
            return;
        }
        set_aside(&mut set, &waiting);
        if let Err(e) = check_scopes(&mut set, &kinds) {
            error!(error = %e, "rule reload rejected; the last good rules keep running");
            self.reject(&fingerprint, e.to_string()).await;
            return;
        }
        let (schemas, checked) = check_live_schemas(&self.shared.client, &set, &kinds, templates).await;
        if let Err(diagnostics) = checked {
            for diagnostic in &diagnostics.0 {
                error!(%diagnostic, "rule reload rejected: the rules do not match the CRDs; the last good rules keep running");
            }
            self.schemas = schemas;
            self.rejected_by_schemas = Some(SchemaRejection::Files);
            self.reject(&fingerprint, diagnostics.to_string()).await;
            return;
        }
        self.schemas = schemas;
        self.rejected_by_schemas = None;
        let before: BTreeMap<String, u64> = set
            .rules
            .iter()
            .map(|r| (r.name.clone(), self.revisions.latest(&r.name)))
            .collect();
        self.status.revisions = self.revisions.record(&mut set).await;
        self.shared.pins.set_kept(self.revisions.kept()).await;
        let staged = rollout::stage(&self.shared.rollouts, &current_set, &set, |rule| {
            (before.get(rule).copied().unwrap_or(0), self.revisions.latest(rule))
        });
        let (set, kinds) = (Arc::new(set), Arc::new(kinds));
        match self.shared.current.write() {
            Ok(mut current) => *current = (set.clone(), kinds.clone()),
            Err(poisoned) => *poisoned.into_inner() = (set.clone(), kinds.clone()),
        }
        if let Err(e) = self.supervisor.sync(&set, &kinds).await {
            self.retry_later(
                &fingerprint,
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
        if !waiting.is_empty() {
            self.wait_for_kinds(&fingerprint, &set, &waiting).await;
            return;
        }
        self.fingerprint = fingerprint.clone();
        self.retry = None;
        self.shared.observability.metrics.reloaded("ok");
        info!(rules = %rule_names(&set), elapsed = ?started.elapsed(), "rules reloaded");
        self.staged(staged).await;
        let _ = self
            .status
            .report(ReloadState::Loaded, &rule_names(&set), &fingerprint)
            .await;
    }

    /// Files refused for their content: recorded as dealt with (not retried until they change),
    /// counted, and reported with every error; the last good rules keep running.
    async fn reject(&mut self, fingerprint: &str, errors: String) {
        self.shared.observability.metrics.reloaded("invalid");
        self.fingerprint = fingerprint.to_owned();
        self.retry = None;
        let _ = self.status.report(ReloadState::Rejected(errors), "", fingerprint).await;
    }

    /// After a CRD changed under the rules in force: a failed check reports them Rejected (they
    /// keep running: there is nothing better to run); a passing one after that reports them
    /// Loaded again.
    async fn report_in_force_check(
        &mut self,
        set: &RuleSet,
        checked: Result<(), crate::engine::diagnostic::Diagnostics>,
    ) {
        match checked {
            Err(diagnostics) => {
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
            Ok(()) if self.rejected_by_schemas.is_some() => {
                self.rejected_by_schemas = None;
                info!("the rules in force match the changed CRDs again");
                let _ = self
                    .status
                    .report(ReloadState::Loaded, &rule_names(set), &self.fingerprint)
                    .await;
            }
            Ok(()) => {}
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
        let delay = self.retry.map_or(RETRY_MIN, |(_, last)| (last * 2).min(RETRY_MAX));
        self.retry = Some((tokio::time::Instant::now() + delay, delay));
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
}

/// Takes the rules that wait for a kind out of `set` (they start once a retry finds it served).
fn set_aside(set: &mut RuleSet, waiting: &[UnknownKind]) {
    for unknown in waiting {
        warn!(rule = %unknown.rule, error = %unknown, "the rule waits until its kind is served; the other rules run");
    }
    set.rules.retain(|rule| !waiting.iter().any(|w| w.rule == rule.name));
}

/// A rule's `watch.scope` must be what discovery says of its kind (a rule reacting to
/// cluster-scoped objects says so); records which child and action kinds are cluster-scoped,
/// so planning places them right.
pub(crate) fn check_scopes(set: &mut RuleSet, kinds: &Kinds) -> anyhow::Result<()> {
    for rule in &mut set.rules {
        let watch = &rule.spec.watch;
        if let Some(kind) = kinds.get(&watch.api_version, &watch.kind)
            && kind.namespaced == rule.has_cluster_scoped_parents()
        {
            anyhow::bail!(
                "rule {:?}: watched kind {} {} is {}, but the rule's watch.scope is {}",
                rule.name,
                watch.api_version,
                watch.kind,
                if kind.namespaced {
                    "namespaced"
                } else {
                    "cluster-scoped"
                },
                if kind.namespaced {
                    "Cluster"
                } else {
                    "Namespaced (write `scope: Cluster`)"
                },
            );
        }
        rule.set_scopes(|api_version, kind| kinds.get(api_version, kind).map(|k| !k.namespaced));
    }
    Ok(())
}

/// The outcome of the latest (re)load.
enum ReloadState {
    /// The rules in force were loaded from the current files.
    Loaded,
    /// The current files are invalid (every error with its location); older rules are in force.
    Rejected(String),
}

/// Writes the `ruleop-status` ConfigMap, where users look after editing rules.
struct StatusReporter {
    api: Api<k8s_openapi::api::core::v1::ConfigMap>,
    /// What the ConfigMap says (state, errors, fingerprint, rules, revisions), once known.
    last: Option<[String; 5]>,
    /// The revision in force of each rule, one `rule: n` line each (see [`RevisionStore::record`]).
    revisions: String,
}

impl StatusReporter {
    fn new(client: Client, namespace: &str) -> Self {
        StatusReporter {
            api: Api::namespaced(client, namespace),
            last: None,
            revisions: String::new(),
        }
    }

    /// Whether ruleop may write the ConfigMap: a server-side dry run, which is authorized like
    /// the real write but stores nothing.
    async fn check_writable(&self) -> Result<(), kube::Error> {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP},
        });
        let params = PatchParams::apply(crate::apply::FIELD_MANAGER).force().dry_run();
        self.api
            .patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object))
            .await
            .map(drop)
    }

    /// Writes the state unless the ConfigMap already says it (a restart over unchanged rules
    /// writes nothing). A failure is logged and returned.
    async fn report(&mut self, state: ReloadState, rules: &str, fingerprint: &str) -> Result<(), kube::Error> {
        let (state, errors) = match state {
            ReloadState::Loaded => ("Loaded", String::new()),
            ReloadState::Rejected(errors) => ("Rejected", errors),
        };
        let said = [
            state.to_owned(),
            errors.clone(),
            fingerprint.to_owned(),
            rules.to_owned(),
            self.revisions.clone(),
        ];
        if self.last.is_none() {
            // After a restart: what is there may already say it.
            if let Ok(Some(existing)) = self.api.get_opt(STATUS_CONFIGMAP).await {
                let data = existing.data.unwrap_or_default();
                let field = |key: &str| data.get(key).cloned().unwrap_or_default();
                self.last = Some([
                    field("state"),
                    field("errors"),
                    field("fingerprint"),
                    field("rulesInForce"),
                    field("revisions"),
                ]);
            }
        }
        if self.last.as_ref() == Some(&said) {
            debug!(state, "the {STATUS_CONFIGMAP} ConfigMap already says so; not written");
            return Ok(());
        }
        let mut data = serde_json::json!({
            "state": state,
            "errors": errors,
            "fingerprint": fingerprint,
            "updatedAt": crate::runtime::clock::now_rfc3339(),
        });
        if !rules.is_empty() {
            data["rulesInForce"] = serde_json::json!(rules);
        }
        if !self.revisions.is_empty() {
            data["revisions"] = serde_json::json!(self.revisions);
        }
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "ruleop"}},
            "data": data,
        });
        let params = PatchParams::apply(crate::apply::FIELD_MANAGER).force();
        match self.api.patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object)).await {
            Ok(_) => {
                self.last = Some(said);
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "writing the {STATUS_CONFIGMAP} ConfigMap failed");
                Err(e)
            }
        }
    }
}

/// Name of the ConfigMap reporting the state of the rules.
pub(crate) const STATUS_CONFIGMAP: &str = "ruleop-status";
