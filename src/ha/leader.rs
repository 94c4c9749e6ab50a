//! Leader election on a `coordination.k8s.io/v1` Lease (client-go's algorithm and defaults), and
//! the write fence that keeps a replica whose lease ran out from writing.
//!
//! Why not the kube-lease-manager crate (0.13 tracks kube 5): it counts durations in whole
//! seconds, keeps reporting "leader" while renewals fail (its loop logs the error and retries,
//! so nothing tells the holder its lease expired), and manages one lease per manager with no way
//! to hold a bounded number of them, which sharding needs. The state machine is small: the
//! decision is a pure function ([`decide`]) tested below, and writes are fenced by time
//! ([`Fence`]) rather than by a task remembering to stop.
//!
//! Timing (client-go's): a standby takes a lease whose record has not changed for
//! `lease_duration`, measured on its own clock from when it saw the record change; the holder
//! renews every `retry_period` and may write until `renew_deadline` after the start of its last
//! successful renewal. Since `renew_deadline < lease_duration`, the old holder's fence closes
//! before any standby can take the lease, whatever the clocks say.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::client::ClientBuilder;

use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use crate::apply::backpressure::{self, Backpressure, BackpressureLayer};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tower::{BoxError, Layer, Service};
use tracing::{info, warn};

/// Defaults of Kubernetes' own controllers (kube-controller-manager, client-go).
pub(crate) const DEFAULT_LEASE_DURATION: &str = "15s";
/// How long the holder keeps writing without a successful renewal.
pub(crate) const DEFAULT_RENEW_DEADLINE: &str = "10s";
/// Time between attempts to acquire or renew.
pub(crate) const DEFAULT_RETRY_PERIOD: &str = "2s";

/// The most shards `--shards` accepts (a Lease each, renewed every retry period by its holder).
pub(crate) const MAX_SHARDS: u32 = 256;

/// Leader election of `ruleop run`: which lease, who we are, and its timing.
#[derive(Debug, Clone)]
pub(crate) struct Election {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Our holder identity.
    pub identity: String,
    /// Lease timing.
    pub timing: Timing,
    /// Shards (`--shards`): 1 is one lease named `name`; more are a lease per shard, named
    /// `<name>-shard-<i>`, and a member lease per replica.
    pub shards: u32,
}

/// Lease timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A record unchanged for this long is free to take.
    pub lease_duration: Duration,
    /// The holder writes until this long after the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

impl Timing {
    /// The defaults of Kubernetes' own controllers, as the `DEFAULT_*` flag values say.
    pub const CLIENT_GO: Timing = Timing {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
}

/// Who we are to other replicas: the pod name (downward API), else hostname and pid.
pub(crate) fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() { "ruleop".to_owned() } else { host };
    format!("{host}-{}", std::process::id())
}

// === impl Fence ===

/// Whether this process may write now. Closed by time: it needs no task to close it, so a
/// starved or stuck renewal cannot leave it open.
#[derive(Debug)]
pub(crate) struct Fence {
    origin: Instant,
    /// Milliseconds after `origin` until which writes pass; 0 is closed, `u64::MAX` always open.
    until_ms: AtomicU64,
}

impl Fence {
    /// A fence that never closes (no leader election).
    pub(crate) fn open() -> Arc<Self> {
        Arc::new(Fence {
            origin: Instant::now(),
            until_ms: AtomicU64::new(u64::MAX),
        })
    }

    /// A fence that lets nothing through until [`Fence::extend`].
    pub(crate) fn closed() -> Arc<Self> {
        Arc::new(Fence {
            origin: Instant::now(),
            until_ms: AtomicU64::new(0),
        })
    }

    /// Whether a write may start now.
    pub(crate) fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        let until = self.until_ms.load(Ordering::Acquire);
        until == u64::MAX || (now.saturating_duration_since(self.origin).as_millis() as u64) < until
    }

    /// Lets writes through until `until`.
    pub(crate) fn extend(&self, until: Instant) {
        let ms = (until.saturating_duration_since(self.origin).as_millis() as u64).clamp(1, u64::MAX - 1);
        self.until_ms.store(ms, Ordering::Release);
    }

    /// Stops every write from now on.
    pub(crate) fn close(&self) {
        self.until_ms.store(0, Ordering::Release);
    }
}

/// The error of a write refused by the fence.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica does not hold the lease (fenced)")]
pub(crate) struct Fenced;

/// Whether `error`, or any error in its source chain, is a write refused by the fence.
pub(crate) fn is_fenced(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| e.is::<Fenced>())
}

/// A tower layer over the API client that refuses every write request (anything but GET, HEAD,
/// OPTIONS, or a dry run) while the fence is closed: children, status, actions, Events and `ruleop-status`
/// all go through it, so nothing is forgotten.
#[derive(Debug, Clone)]
pub(crate) struct FenceLayer(pub Arc<Fence>);

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// The service of [`FenceLayer`].
#[derive(Debug, Clone)]
pub(crate) struct FencedService<S> {
    inner: S,
    fence: Arc<Fence>,
}

impl<S, B> Service<http::Request<B>> for FencedService<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let read = matches!(
            *request.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        // A dry run writes nothing (the start-up check that ruleop-status is writable).
        let dry_run = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "dryRun=All"));
        if !read && !dry_run && !self.fence.holds() {
            return Box::pin(std::future::ready(Err(Box::new(Fenced) as BoxError)));
        }
        let future = self.inner.call(request);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

/// Requests that may wait in front of the shared connection stack (the backpressure and retry
/// layers need a service they can clone).
const REQUESTS_QUEUED: usize = 1024;

/// Two clients of one configuration: one whose writes pass `fence` (for everything the
/// operator does) and one without (for the leases themselves), built on `leases_on` so that its
/// requests and connections are served by the lease runtime.
pub(crate) async fn clients(
    fence: Arc<Fence>,
    leases_on: &Handle,
    backpressure: &Arc<Backpressure>,
) -> Result<(Client, Client), kube::Error> {
    let config = crate::apply::client::cluster_config()
        .await
        .map_err(kube::Error::InferConfig)?;
    let leases = {
        let _inside = leases_on.enter();
        Client::try_from(config.clone())?
    };
    // The leases' client has no backpressure: a renewal must not queue behind the operator's
    // own writes, nor wait out a 429 meant for them.
    // Retries are ours, outside the backpressure layer, so each attempt is throttled and
    // counted (kube's default retry sits inside the stack, out of its sight).
    let mut config = config;
    config.default_retry = false;
    let fenced = ClientBuilder::try_from(config)?
        .with_layer(&BufferLayer::new(REQUESTS_QUEUED))
        .with_layer(&BackpressureLayer(backpressure.clone()))
        .with_layer(&RetryLayer::new(backpressure::retry_policy()))
        .with_layer(&FenceLayer(fence))
        .build();
    Ok((fenced, leases))
}

// === the decision ===

/// What to do with a lease, given its record and what we saw of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It does not exist: create it, held by us.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free (released, or unchanged for its duration): take it.
    Take,
    /// Someone else holds it and it has not expired.
    Wait {
        /// The holder.
        holder: String,
    },
}

/// Decides on a lease: `spec` is its record (`None`: no lease), `unchanged_since` when we first
/// saw this record (our clock), `default_duration` for a record without one.
pub(crate) fn decide(
    spec: Option<&LeaseSpec>,
    me: &str,
    unchanged_since: Instant,
    now: Instant,
    default_duration: Duration,
) -> Decision {
    let Some(spec) = spec else { return Decision::Create };
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::Take,
        Some(holder) if holder == me => Decision::Renew,
        Some(holder) => {
            let duration = spec.lease_duration_seconds.map_or(default_duration, |s| {
                Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
            });
            if now.saturating_duration_since(unchanged_since) >= duration {
                Decision::Take
            } else {
                Decision::Wait {
                    holder: holder.to_owned(),
                }
            }
        }
    }
}

/// The record after we create, renew or take a lease.
pub(crate) fn next_record(current: Option<&LeaseSpec>, me: &str, timing: &Timing, now: MicroTime) -> LeaseSpec {
    let ours = current.is_some_and(|s| s.holder_identity.as_deref() == Some(me));
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(i32::try_from(timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)),
        acquire_time: if ours {
            current.and_then(|s| s.acquire_time.clone())
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(if ours || current.is_none() {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..LeaseSpec::default()
    }
}

fn micro_now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

// === impl Elector ===

/// One replica's view of one lease: the leader lease, a shard lease, or a member lease.
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// Labels set on a lease this elector creates (sharding lists its leases by them).
    labels: BTreeMap<String, String>,
    /// The last record seen and when we first saw it.
    observed: Option<(Option<LeaseSpec>, Instant)>,
}

impl Elector {
    /// An elector for the lease `namespace/name`.
    pub(crate) fn new(client: Client, namespace: &str, name: &str, identity: &str, timing: Timing) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            labels: BTreeMap::new(),
            observed: None,
        }
    }

    /// The same elector, creating its lease with these labels.
    pub(crate) fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// The lease's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Records the lease as read (by a GET or a LIST that began at `read_at`; `None`: it does
    /// not exist) and decides what to do with it. A record seen for the first time, or changed,
    /// starts its expiry clock at `read_at`.
    pub(crate) fn observe(&mut self, lease: Option<&Lease>, read_at: Instant) -> Decision {
        let spec = lease.map(|l| l.spec.clone().unwrap_or_default());
        let unchanged_since = match &self.observed {
            Some((seen, since)) if *seen == spec => *since,
            _ => read_at,
        };
        let decision = decide(
            spec.as_ref(),
            &self.identity,
            unchanged_since,
            Instant::now(),
            self.timing.lease_duration,
        );
        self.observed = Some((spec, unchanged_since));
        decision
    }

    /// Writes `lease` (as last read; `None`: create it) as held by us: renewed, taken or
    /// created. `Ok(Some(start))`: we hold it, and may write until `start + renew_deadline`.
    /// `Ok(None)`: another replica wrote it first (a conflict).
    pub(crate) async fn claim(&mut self, lease: Option<Lease>) -> Result<Option<Instant>, kube::Error> {
        let started = Instant::now();
        let current = lease.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let record = next_record(current.as_ref(), &self.identity, &self.timing, micro_now());
        let result = match lease {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(record.clone()),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // resourceVersion stays set: of two replicas taking it at once, one gets a 409.
                lease.spec = Some(record.clone());
                lease.metadata.managed_fields = None;
                self.api.replace(&self.name, &PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(_) => {
                self.observed = Some((Some(record), started));
                Ok(Some(started))
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One attempt to acquire or renew. `Ok(Some(start))`: we hold the lease, and may write
    /// until `start + renew_deadline`. `Ok(None)`: someone else holds it (or won a race).
    pub(crate) async fn try_acquire_or_renew(&mut self) -> Result<Option<Instant>, kube::Error> {
        let started = Instant::now();
        let lease = self.api.get_opt(&self.name).await?;
        match self.observe(lease.as_ref(), started) {
            Decision::Wait { .. } => Ok(None),
            Decision::Create | Decision::Renew | Decision::Take => {
                let claimed = self.claim(lease).await?;
                // The fence counts from the start of the whole attempt, as before the split.
                Ok(claimed.map(|_| started))
            }
        }
    }

    /// Gives the lease up if we hold it: an empty holder, which a standby takes at its next
    /// attempt instead of waiting for the lease to expire.
    pub(crate) async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else { return Ok(()) };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_now());
        lease.metadata.managed_fields = None;
        self.api.replace(&self.name, &PostParams::default(), &lease).await?;
        Ok(())
    }
}

// === impl Leadership ===

/// A held lease, renewed in the background until it is lost or released.
pub(crate) struct Leadership {
    lost: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// Waits until `elector` holds its lease (retrying every `retry_period`), then keeps renewing
/// it in the background on `renew_on` (the lease runtime); `fence` is open while it is held,
/// `on_change` hears true/false.
pub(crate) async fn acquire(
    renew_on: &Handle,
    mut elector: Elector,
    fence: Arc<Fence>,
    on_change: impl Fn(bool) + Send + Sync + 'static,
) -> Leadership {
    let timing = elector.timing;
    let mut waiting_for = None;
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(Some(started)) => {
                fence.extend(started + timing.renew_deadline);
                break;
            }
            Ok(None) => {
                if let Some((Some(spec), _)) = &elector.observed
                    && spec.holder_identity != waiting_for
                {
                    waiting_for = spec.holder_identity.clone();
                    info!(lease = %elector.name, holder = ?waiting_for, "standing by: the lease is held by another replica");
                }
            }
            Err(e) => warn!(lease = %elector.name, error = %e, "reading the lease failed; retrying"),
        }
        tokio::time::sleep(timing.retry_period).await;
    }
    info!(lease = %elector.name, identity = %elector.identity, "acquired the lease: leading");
    on_change(true);
    let (lost_tx, lost) = watch::channel(false);
    let (stop, mut stop_rx) = oneshot::channel::<()>();
    let task = renew_on.spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => {
                    fence.close();
                    on_change(false);
                    match elector.release().await {
                        Ok(()) => info!(lease = %elector.name, "released the lease"),
                        Err(e) => warn!(lease = %elector.name, error = %e, "releasing the lease failed; it expires by itself"),
                    }
                    return;
                }
                () = tokio::time::sleep(timing.retry_period) => {}
            }
            match elector.try_acquire_or_renew().await {
                Ok(Some(started)) => fence.extend(started + timing.renew_deadline),
                Ok(None) => {
                    fence.close();
                    warn!(lease = %elector.name, "another replica holds the lease now: stepping down");
                }
                Err(e) => warn!(lease = %elector.name, error = %e, "renewing the lease failed; retrying"),
            }
            if !fence.holds() {
                fence.close();
                on_change(false);
                warn!(lease = %elector.name, "lost the lease: no more writes");
                let _ = lost_tx.send(true);
                return;
            }
        }
    });
    Leadership {
        lost,
        stop: Some(stop),
        task,
    }
}

impl Leadership {
    /// Resolves when the lease is lost (never, once it is released).
    pub(crate) async fn lost(&mut self) {
        if self.lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops renewing and releases the lease, so a standby takes over at once.
    pub(crate) async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests;
