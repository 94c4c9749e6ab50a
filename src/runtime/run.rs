//! `ruleop run`: load the rules, resolve kinds, start one controller per rule, serve the admin
//! endpoints, and on SIGTERM/SIGINT stop gracefully (in-flight reconciles finish).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::runtime::events::{Recorder, Reporter};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::apply::backpressure::Backpressure;
use crate::cache::discovery::Kinds;
use crate::cache::watch::InitialList;
use crate::engine::rules::load::load;
use crate::ha::leader::{self, Election, Elector, Fence, Leadership};
use crate::ha::lease_runtime::LeaseRuntime;
use crate::ha::shard::{self, Writers};
use crate::ops::Observability;
use crate::ops::admin;
use crate::ops::health::Health;
use crate::records::revisions::{RevisionStore, stamped};
use crate::records::rollouts::RolloutReport;
use crate::records::status::StatusReport;
use crate::runtime::admit;
use crate::runtime::controller::Shared;
use crate::runtime::reload::reloader::{Reloader, Sources, Started};
use crate::runtime::reload::rollouts::{self, Driver};
use crate::runtime::reload::watch::{DirWatcher, fingerprint};
use crate::runtime::rollout::staging::Rollouts;
use crate::runtime::shutdown;
use crate::runtime::supervisor::Supervisor;

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
    // Before connecting: invalid files fail at once.
    let loaded =
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
    let admitted = admit::admit(&client, loaded, Kinds::default(), &BTreeSet::new(), &settings.templates)
        .await
        .map_err(admit::Refused::at_start_up)?;
    let status = StatusReport::new(client.clone(), &settings.status_namespace);
    status.ensure_writable(&settings.status_namespace).await?;
    let observability = serve_observability(settings.admin_addr, &admitted.waiting, &backpressure).await?;
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
    let in_force = revisions.record(&admitted.set).await;
    let admit::Admitted {
        set,
        kinds,
        waiting,
        schemas,
    } = admitted;
    let set = stamped(set, &in_force.numbers);
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
    crate::runtime::rollout::resume::resume(&shared.rollouts, &set, &kinds, &revisions, &mut rollout_report).await;
    let mut supervisor = Supervisor::new(shared.clone());
    supervisor.sync(&set, &kinds).await?;
    observability.health.set_started(true);
    info!(rules = set.rules.len(), "ruleop running");
    let sources = Sources {
        rules: settings.rules.clone(),
        templates: settings.templates.clone(),
    };
    let started = Started {
        fingerprint: loaded_fingerprint,
        schemas,
        revision_lines: in_force.lines,
    };
    let rollouts = Driver::new(shared.clone(), &settings.status_namespace, rollout_report);
    let mut reloader = Reloader::new(
        sources,
        (shared.clone(), supervisor),
        (status, started),
        revisions,
        rollouts,
    );
    reloader.report_started(&set, &waiting).await;
    let (mut watcher, watch_error) = DirWatcher::new(&[settings.rules.clone(), settings.templates.clone()]);
    if let Some(e) = watch_error {
        warn!(error = %e, "cannot watch the rule directories; re-reading every --reload-interval only");
    }
    // A standby may have waited long: pick up what changed on disk meanwhile.
    reloader.reload().await;
    // After the reload: a request is about the revision in force.
    reloader.rollouts.check(&reloader.supervisor, &reloader.revisions).await;
    let mut rollout_check = tokio::time::interval(Duration::from_secs(1));
    rollout_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lost = loop {
        let retry_at = reloader.retry_at();
        let restart_at = reloader.supervisor.next_restart();
        let step_at = reloader.rollouts.next_step();
        tokio::select! {
            () = &mut shutdown => break false,
            () = lease_lost(&mut leadership) => break true,
            () = watcher.changed(settings.reload_debounce, settings.reload_interval) => reloader.reload().await,
            () = sleep_until(retry_at) => reloader.reload().await,
            ended = reloader.supervisor.next_ended() => reloader.report_ended(&ended, &settings.status_namespace),
            () = sleep_until(step_at) => reloader.rollouts.advance(&reloader.supervisor).await,
            Some(rule) = halts.recv() => reloader.rollouts.halted(&rule, &reloader.supervisor).await,
            Some(request) = rollouts::next_request(&mut reloader.rollouts.requests) => {
                reloader.rollouts.request(&request, &reloader.supervisor, &reloader.revisions).await;
                reloader.rollouts.request_done(&request).await;
            }
            Some(states) = rollouts::next_records(&mut reloader.rollouts.records) => {
                reloader.rollouts.follow_records(states, &reloader.supervisor, &reloader.revisions).await;
            }
            _ = rollout_check.tick() => reloader.rollouts.check(&reloader.supervisor, &reloader.revisions).await,
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

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
