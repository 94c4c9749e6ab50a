//! `ruleop run`: load the rules, resolve kinds, start one controller per rule, serve the admin
//! endpoints, and on SIGTERM/SIGINT stop gracefully (in-flight reconciles finish).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tracing::{error, info};

use crate::admin::{self, AdminState};
use crate::cli::Sources;
use crate::controller::{self, RunningController, Shared, child_kinds};
use crate::kinds::Kinds;
use crate::rules::RuleSet;
use crate::rules::load::load;

/// Settings of the operator.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Where the rules and templates are.
    pub sources: Sources,
    /// Only watch this namespace.
    pub namespace: Option<String>,
    /// Resync for rules without `resync`.
    pub default_resync: Duration,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub admin_addr: SocketAddr,
}

/// The running controllers, kept in step with the current rule set.
pub struct Supervisor {
    shared: Arc<Shared>,
    running: BTreeMap<String, RunningController>,
}

impl Supervisor {
    /// A supervisor with no controllers yet.
    pub fn new(shared: Arc<Shared>) -> Self {
        Supervisor {
            shared,
            running: BTreeMap::new(),
        }
    }

    /// Makes the running controllers match `set`: start new rules, restart rules whose kinds
    /// changed, stop removed rules (their children stay in place), and re-reconcile every
    /// parent of a rule whose content changed.
    pub async fn sync(&mut self, set: &RuleSet, kinds: &Kinds) -> anyhow::Result<()> {
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|name| set.rule(name).is_none())
            .cloned()
            .collect();
        for name in gone {
            if let Some(running) = self.running.remove(&name) {
                info!(rule = %name, "rule removed; stopping its controller (children are left in place)");
                running.stop().await;
            }
        }
        for rule in &set.rules {
            let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
            let same_kinds = self
                .running
                .get(&rule.name)
                .is_some_and(|r| r.watched == watched && r.owned == child_kinds(rule));
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
                old.stop().await;
            }
            let started = controller::start(self.shared.clone(), rule, kinds)
                .with_context(|| format!("starting the controller of rule {:?}", rule.name))?;
            self.running.insert(rule.name.clone(), started);
        }
        Ok(())
    }

    /// Stops every controller, letting in-flight reconciles finish.
    pub async fn shutdown(self) {
        for (_, running) in self.running {
            running.stop().await;
        }
    }
}

/// Runs the operator until SIGTERM or SIGINT.
pub async fn run(settings: RunSettings) -> anyhow::Result<()> {
    let set = load(&settings.sources.rules, &settings.sources.templates)
        .map_err(|d| anyhow::anyhow!("the rules are invalid:\n{d}"))?;
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let mut kinds = Kinds::default();
    kinds.resolve(&client, &set).await?;
    check_scopes(&set, &kinds)?;
    let admin = Arc::new(AdminState::default());
    let bound = admin::serve(settings.admin_addr, admin.clone())
        .await
        .context("binding the admin address")?;
    info!(%bound, "admin endpoints listening (/metrics, /healthz, /readyz)");
    let reporter = Reporter {
        controller: "ruleop".to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let shared = Arc::new(Shared {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        current: std::sync::RwLock::new((Arc::new(set), Arc::new(kinds))),
        admin: admin.clone(),
        default_resync: settings.default_resync,
        namespace: settings.namespace.clone(),
    });
    let mut supervisor = Supervisor::new(shared.clone());
    let (set, kinds) = shared.snapshot();
    supervisor.sync(&set, &kinds).await?;
    admin.ready.store(true, Ordering::Relaxed);
    info!(rules = set.rules.len(), "ruleop running");
    shutdown_signal().await;
    info!("shutting down: letting in-flight reconciles finish");
    admin.ready.store(false, Ordering::Relaxed);
    supervisor.shutdown().await;
    Ok(())
}

/// Children must be namespaced (they live beside their parent); parents too.
pub fn check_scopes(set: &RuleSet, kinds: &Kinds) -> anyhow::Result<()> {
    for rule in &set.rules {
        let watch = &rule.spec.watch;
        if kinds
            .get(&watch.api_version, &watch.kind)
            .is_some_and(|k| !k.namespaced)
        {
            anyhow::bail!(
                "rule {:?}: watched kind {} is cluster-scoped; only namespaced parents are supported",
                rule.name,
                watch.kind
            );
        }
        for (api_version, kind) in rule.owned_kinds() {
            if kinds.get(&api_version, &kind).is_some_and(|k| !k.namespaced) {
                anyhow::bail!(
                    "rule {:?}: {api_version} {kind} is cluster-scoped; children must be namespaced",
                    rule.name
                );
            }
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}
