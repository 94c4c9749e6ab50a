//! Sharding (`ruleop run --shards N`): parents split into N buckets by a stable hash of their
//! UID, a Lease per bucket, and every replica holding up to its fair share of them.
//!
//! How a replica knows how many replicas are alive: each holds a *member* lease, one of a set of
//! slots `<prefix>-member-<k>` (a released or expired slot is reused, so restarts leave no
//! garbage and no delete permission is needed). A slot counts as alive while its record keeps
//! changing, judged exactly like a leader lease ([`crate::ha::leader::decide`]): on the observer's
//! own clock, never by comparing clocks. Every retry period a replica lists the leases of its
//! group once, renews its member slot and its shards, then rebalances ([`rebalance`], pure): it
//! gives up shards above `ceil(N / live members)` and takes free or expired ones up to it. So 3
//! replicas of 12 shards hold 4 each; a fourth replica makes the share 3 and each of the others
//! gives one up; a killed replica's shards and slot expire after the lease duration, and the
//! others take its shards.
//!
//! Fencing is per shard: each shard has its own [`Fence`] and its own API client behind a
//! [`FenceLayer`], and a reconcile writes only through its parent's shard client, so a replica
//! that lost a shard's lease (or could not renew it within the renew deadline) sends no more
//! writes for its parents. Which parents a replica reconciles is decided before any write: a
//! reconcile of a parent whose shard is not held here ends at once ([`ShardWriter::held`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::channel::mpsc;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tower::{BoxError, Layer};
use tracing::{debug, info, warn};

use crate::ha::leader::{Decision, Election, Elector, Fence, FenceLayer, Timing};
use crate::ops::Observability;

/// Label on every Lease of a sharded group: the `--lease-name` prefix (a LIST selects them).
pub(crate) const LABEL_GROUP: &str = "ruleop.io/lease-group";
/// Label telling shard leases (`shard`) from member slots (`member`).
pub(crate) const LABEL_ROLE: &str = "ruleop.io/lease-role";

/// FNV-1a, 64 bits, with the offset basis and prime of the FNV specification
/// (draft-eastlake-fnv): the same value in every process, version and platform, unlike std's
/// randomly seeded hasher. Written out rather than taken from a crate, because crates expose it
/// through `std::hash::Hasher`, where hashing a `str` appends a separator byte.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_of(&[bytes])
}

/// [`fnv1a64`] of the concatenation of `parts`, without building it.
pub(crate) fn fnv1a64_of(parts: &[&[u8]]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(OFFSET_BASIS, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(PRIME))
}

/// The shard of a parent: FNV-1a of its UID modulo the shard count.
pub fn shard_of(uid: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    u32::try_from(fnv1a64(uid.as_bytes()) % u64::from(shards)).unwrap_or(0)
}

/// The most shards one of `members` live replicas holds: `ceil(shards / members)`.
pub(crate) fn fair_share(shards: u32, members: usize) -> usize {
    (shards as usize).div_ceil(members.max(1))
}

/// What one round changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rebalance {
    /// The fair share.
    pub share: usize,
    /// Held shards to give up (we hold more than the share).
    pub release: Vec<u32>,
    /// Shards to try to take, in order, until the share is reached (a race lost to another
    /// replica moves on to the next).
    pub take: Vec<u32>,
}

/// Decides a round: `held` are the shards we hold, `takeable` those free or expired, `members`
/// the live replicas (us included), `start` where this replica begins looking (derived from its
/// identity, so replicas prefer different shards and race less). Shards are kept and taken in
/// the order `start, start+1, ...`; those released are the last in it.
pub(crate) fn rebalance(
    shards: u32,
    members: usize,
    held: &BTreeSet<u32>,
    takeable: &BTreeSet<u32>,
    start: u32,
) -> Rebalance {
    let share = fair_share(shards, members);
    let order: Vec<u32> = (0..shards).map(|i| (i + start) % shards.max(1)).collect();
    if held.len() > share {
        let kept_first: Vec<u32> = order.iter().copied().filter(|i| held.contains(i)).collect();
        return Rebalance {
            share,
            release: kept_first[share..].to_vec(),
            take: Vec::new(),
        };
    }
    let take = if held.len() < share {
        order
            .iter()
            .copied()
            .filter(|i| takeable.contains(i) && !held.contains(i))
            .collect()
    } else {
        Vec::new()
    };
    Rebalance {
        share,
        release: Vec::new(),
        take,
    }
}

// === impl Writers ===

/// The write path of one shard: a fence, an API client behind it, and an Event recorder.
pub(crate) struct ShardWriter {
    index: u32,
    /// The API client whose writes pass only while this shard's lease is held (reads always).
    pub client: Client,
    /// Publishes Events through `client`.
    pub recorder: Recorder,
    fence: Arc<Fence>,
    held: AtomicBool,
}

impl ShardWriter {
    /// The shard's number.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Whether this replica holds the shard, so reconciles its parents. Writes are fenced by
    /// time besides: a held shard whose renewals stall refuses writes before it is given up.
    pub(crate) fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }
}

/// Where each parent's writes go: one [`ShardWriter`] per shard (one for everything without
/// sharding), and who wants to hear of a shard taken.
pub(crate) struct Writers {
    shards: Vec<ShardWriter>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<u32>>>,
}

impl Writers {
    /// Without sharding: one writer for every parent, always held (`client`'s own fence, that of
    /// leader election, still applies).
    pub(crate) fn single(client: Client, recorder: Recorder) -> Self {
        Writers {
            shards: vec![ShardWriter {
                index: 0,
                client,
                recorder,
                fence: Fence::open(),
                held: AtomicBool::new(true),
            }],
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// `shards` writers, each with a closed fence and a client of its own layered over `base`
    /// (which keeps the one connection pool).
    pub(crate) fn sharded(base: &Client, shards: u32, reporter: &Reporter) -> Self {
        let shards = (0..shards.max(1))
            .map(|index| {
                let fence = Fence::closed();
                let client = fenced_client(base, fence.clone());
                ShardWriter {
                    index,
                    recorder: Recorder::new(client.clone(), reporter.clone()),
                    client,
                    fence,
                    held: AtomicBool::new(false),
                }
            })
            .collect();
        Writers {
            shards,
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// How many shards.
    pub(crate) fn count(&self) -> u32 {
        u32::try_from(self.shards.len()).unwrap_or(u32::MAX)
    }

    /// Whether parents are split over several shards.
    pub(crate) fn is_sharded(&self) -> bool {
        self.shards.len() > 1
    }

    /// The shard of the parent with this UID.
    pub(crate) fn shard_of(&self, uid: &str) -> u32 {
        shard_of(uid, self.count())
    }

    /// The writer of the parent with this UID.
    pub(crate) fn of(&self, uid: &str) -> &ShardWriter {
        &self.shards[self.shard_of(uid) as usize]
    }

    /// Whether this replica runs the staged rollouts' clock, decides their halts and records
    /// their state (`runtime::rollout`): the holder of shard 0, so exactly one replica at a time
    /// (every replica without sharding).
    pub(crate) fn runs_rollouts(&self) -> bool {
        self.shards[0].held()
    }

    /// The client the rollouts' state is recorded with: shard 0's, so a replica that lost the
    /// shard (its fence closed) can no longer write it.
    pub(crate) fn rollout_client(&self) -> Client {
        self.shards[0].client.clone()
    }

    /// The shards held here.
    pub(crate) fn held(&self) -> BTreeSet<u32> {
        self.shards.iter().filter(|s| s.held()).map(|s| s.index).collect()
    }

    /// A stream of shards as they are taken (each controller re-reconciles their parents).
    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<u32> {
        let (tx, rx) = mpsc::unbounded();
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.push(tx);
        }
        rx
    }

    fn is_held(&self, shard: u32) -> bool {
        self.shards.get(shard as usize).is_some_and(ShardWriter::held)
    }

    /// The shard was taken: open its fence until `until`, mark it held, tell the controllers.
    fn acquire(&self, shard: u32, until: Instant) {
        let Some(writer) = self.shards.get(shard as usize) else {
            return;
        };
        writer.fence.extend(until);
        writer.held.store(true, Ordering::Release);
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.retain(|tx| tx.unbounded_send(shard).is_ok());
        }
    }

    /// A renewal succeeded: writes pass until `until`.
    fn renewed(&self, shard: u32, until: Instant) {
        if let Some(writer) = self.shards.get(shard as usize) {
            writer.fence.extend(until);
        }
    }

    /// Whether the shard's fence still lets writes through.
    fn fence_holds(&self, shard: u32) -> bool {
        self.shards.get(shard as usize).is_some_and(|w| w.fence.holds())
    }

    /// The shard is no longer ours: no write from now on, no reconcile of its parents.
    fn drop_shard(&self, shard: u32) {
        if let Some(writer) = self.shards.get(shard as usize) {
            writer.fence.close();
            writer.held.store(false, Ordering::Release);
        }
    }
}

/// A client over `base` whose writes pass only while `fence` holds. The fence layer sits
/// outside `base` (which a Buffer makes cheap to clone), so all shards share its connections.
fn fenced_client(base: &Client, fence: Arc<Fence>) -> Client {
    let inner = base.clone();
    let send = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        async move { inner.send(request).await.map_err(BoxError::from) }
    });
    Client::new(FenceLayer(fence).layer(send), base.default_namespace().to_owned())
}

// === impl Sharding ===

/// The shard manager running in the background; [`Sharding::release`] stops it.
pub(crate) struct Sharding {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sharding {
    /// Gives up every shard (fences closed first, then the leases released so other replicas
    /// take them at their next round) and the member slot.
    pub(crate) async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

/// Starts taking and renewing shards of `election` (whose `name` prefixes the leases) with the
/// unfenced `client`, on `runtime` (the lease runtime); `writers` are opened and closed as shards
/// come and go.
pub(crate) fn start(
    runtime: &Handle,
    client: Client,
    election: &Election,
    writers: Arc<Writers>,
    observability: Arc<Observability>,
) -> Sharding {
    let shards = writers.count();
    let elector = |name: &str, role: &str| {
        Elector::new(
            client.clone(),
            &election.namespace,
            name,
            &election.identity,
            election.timing,
        )
        .with_labels(group_labels(&election.name, role))
    };
    let shard_electors = (0..shards)
        .map(|i| elector(&shard_lease(&election.name, i), "shard"))
        .collect();
    let mut manager = Manager {
        api: Api::namespaced(client.clone(), &election.namespace),
        prefix: election.name.clone(),
        timing: election.timing,
        start: shard_of(&election.identity, shards),
        writers,
        observability,
        shard_electors,
        membership: Membership {
            client,
            namespace: election.namespace.clone(),
            prefix: election.name.clone(),
            identity: election.identity.clone(),
            timing: election.timing,
            slot: None,
            members: BTreeMap::new(),
        },
        releasing: BTreeSet::new(),
    };
    info!(
        shards,
        identity = %election.identity,
        namespace = %election.namespace,
        "sharding: taking up to a fair share of the shard leases"
    );
    let (stop, mut stop_rx) = oneshot::channel::<()>();
    let task = runtime.spawn(async move {
        // Rounds start every retry period, however long one took (a slow API server makes them
        // late, never more frequent).
        let mut ticks = tokio::time::interval(manager.timing.retry_period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                _ = ticks.tick() => manager.round().await,
            }
        }
        manager.shutdown().await;
    });
    Sharding { stop: Some(stop), task }
}

/// The lease of shard `i`.
pub(crate) fn shard_lease(prefix: &str, i: u32) -> String {
    format!("{prefix}-shard-{i}")
}

/// Member slot `k`.
fn member_lease(prefix: &str, k: usize) -> String {
    format!("{prefix}-member-{k}")
}

fn group_labels(prefix: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_GROUP.to_owned(), prefix.to_owned()),
        (LABEL_ROLE.to_owned(), role.to_owned()),
    ])
}

/// One replica's shard state, driven by [`Manager::round`].
struct Manager {
    api: Api<Lease>,
    prefix: String,
    timing: Timing,
    /// Where this replica begins looking for shards.
    start: u32,
    writers: Arc<Writers>,
    observability: Arc<Observability>,
    shard_electors: Vec<Elector>,
    membership: Membership,
    /// Shards given up last round: fenced at once, their leases released one round later, so
    /// writes already sent land before another replica starts on their parents.
    releasing: BTreeSet<u32>,
}

impl Manager {
    /// One round: list the group's leases, renew the member slot and held shards, rebalance.
    async fn round(&mut self) {
        for shard in std::mem::take(&mut self.releasing) {
            self.release_lease(shard).await;
        }
        let read_at = Instant::now();
        let selector = format!("{LABEL_GROUP}={}", self.prefix);
        let leases: BTreeMap<String, Lease> = match self.api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter_map(|lease| Some((lease.metadata.name.clone()?, lease)))
                .collect(),
            Err(e) => {
                warn!(error = %e, "listing the shard leases failed; held shards stay fenced by time");
                self.drop_expired("its renewals failed past the renew deadline");
                self.publish();
                return;
            }
        };
        let listed = read_at.elapsed();
        // Side by side: a round must stay well inside the renew deadline on a slow API server.
        let (members, (held, takeable)) = tokio::join!(
            self.membership.renew(&leases, read_at),
            renew_shards(
                &mut self.shard_electors,
                &self.writers,
                &self.prefix,
                self.timing,
                &self.releasing,
                &leases,
                read_at
            )
        );
        let elapsed = read_at.elapsed();
        // A round near the renew deadline means renewals are about to fail: say so.
        if elapsed * 2 > self.timing.renew_deadline {
            warn!(
                ?elapsed,
                ?listed,
                "a round of shard renewals took long (a slow API server or a starved process)"
            );
        } else {
            debug!(?elapsed, ?listed, held = held.len(), "shard leases renewed");
        }
        if let Some(members) = members {
            let round = rebalance(self.writers.count(), members, &held, &takeable, self.start);
            for shard in &round.release {
                info!(
                    shard,
                    share = round.share,
                    members,
                    "giving up a shard above the fair share"
                );
                self.writers.drop_shard(*shard);
                self.releasing.insert(*shard);
            }
            // Taken side by side; a race lost to another replica is retried next round.
            let needed = round.share.saturating_sub(held.len());
            let mut takes = Vec::new();
            for (shard, elector) in (0..).zip(self.shard_electors.iter_mut()) {
                if round.take[..needed.min(round.take.len())].contains(&shard) {
                    let lease = leases.get(&shard_lease(&self.prefix, shard)).cloned();
                    takes.push(async move { (shard, elector.claim(lease).await) });
                }
            }
            for (shard, result) in futures::future::join_all(takes).await {
                match result {
                    Ok(Some(started)) => {
                        info!(shard, share = round.share, members, "took a shard");
                        self.writers.acquire(shard, started + self.timing.renew_deadline);
                    }
                    Ok(None) => debug!(shard, "another replica took the shard first"),
                    Err(e) => warn!(shard, error = %e, "taking the shard failed"),
                }
            }
        }
        self.publish();
    }

    /// Gives up held shards whose fence closed by time.
    fn drop_expired(&self, why: &str) {
        for shard in self.writers.held() {
            if !self.writers.fence_holds(shard) {
                warn!(shard, "lost the shard: {why}");
                self.writers.drop_shard(shard);
            }
        }
    }

    async fn release_lease(&mut self, shard: u32) {
        let elector = &mut self.shard_electors[shard as usize];
        match elector.release().await {
            Ok(()) => debug!(shard, "released the shard's lease"),
            Err(e) => warn!(shard, error = %e, "releasing the shard's lease failed; it expires by itself"),
        }
    }

    fn publish(&self) {
        let held = self.writers.held();
        self.observability.metrics.set_shards(self.writers.count(), &held);
        self.observability.metrics.set_leader(!held.is_empty());
    }

    /// Closes every fence, then releases the held shards and the member slot.
    async fn shutdown(&mut self) {
        let held = self.writers.held();
        for shard in &held {
            self.writers.drop_shard(*shard);
        }
        self.publish();
        for shard in held.into_iter().chain(std::mem::take(&mut self.releasing)) {
            self.release_lease(shard).await;
        }
        self.membership.leave().await;
    }
}

/// This replica's member slot and what it sees of the others'.
struct Membership {
    client: Client,
    namespace: String,
    prefix: String,
    identity: String,
    timing: Timing,
    /// Our member slot, once we hold one.
    slot: Option<Elector>,
    /// Observers of the other member slots (an elector never claims through these).
    members: BTreeMap<String, Elector>,
}

impl Membership {
    /// Renews our member slot (taking one when we have none) and counts the live members, us
    /// included; `None` while we hold no slot (then we take no shards: the others would not
    /// count us and their shares would overlap ours).
    async fn renew(&mut self, leases: &BTreeMap<String, Lease>, read_at: Instant) -> Option<usize> {
        let ours = self.slot.as_ref().map(|s| s.name().to_owned());
        let mut live = 0;
        let mut free = Vec::new();
        for (name, lease) in leases {
            if lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ROLE))
                .map(String::as_str)
                != Some("member")
                || ours.as_deref() == Some(name.as_str())
            {
                continue;
            }
            let observer = self.members.entry(name.clone()).or_insert_with(|| {
                Elector::new(self.client.clone(), &self.namespace, name, &self.identity, self.timing)
            });
            match observer.observe(Some(lease), read_at) {
                Decision::Wait { .. } => live += 1,
                // Released, expired, or left by an earlier process of ours: free to reuse.
                Decision::Take | Decision::Renew | Decision::Create => free.push(name.clone()),
            }
        }
        self.members.retain(|name, _| leases.contains_key(name));
        if let Some(slot) = self.slot.as_mut() {
            let lease = leases.get(slot.name()).cloned();
            match slot.observe(lease.as_ref(), read_at) {
                Decision::Wait { holder } => {
                    warn!(slot = %slot.name(), %holder, "another replica took our member slot; joining again");
                    self.slot = None;
                }
                Decision::Create | Decision::Renew | Decision::Take => match slot.claim(lease).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        warn!(slot = %slot.name(), "lost our member slot in a race; joining again");
                        self.slot = None;
                    }
                    // It expires by itself if this goes on; the others then stop counting us.
                    Err(e) => warn!(slot = %slot.name(), error = %e, "renewing the member slot failed"),
                },
            }
        }
        if self.slot.is_none() {
            let name = free.into_iter().next().unwrap_or_else(|| {
                (0..)
                    .map(|k| member_lease(&self.prefix, k))
                    .find(|name| !leases.contains_key(name))
                    .unwrap_or_default()
            });
            let mut slot = Elector::new(self.client.clone(), &self.namespace, &name, &self.identity, self.timing)
                .with_labels(group_labels(&self.prefix, "member"));
            match slot.claim(leases.get(&name).cloned()).await {
                Ok(Some(_)) => {
                    info!(slot = %name, "joined the replicas as a member");
                    self.members.remove(&name);
                    self.slot = Some(slot);
                }
                Ok(None) => debug!(slot = %name, "another replica took the member slot first"),
                Err(e) => warn!(slot = %name, error = %e, "taking a member slot failed"),
            }
        }
        self.slot.as_ref().map(|_| live + 1)
    }

    /// Releases our slot, so the others stop counting us at once.
    async fn leave(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            match slot.release().await {
                Ok(()) => info!(slot = %slot.name(), "released the shards and the member slot"),
                Err(e) => {
                    warn!(slot = %slot.name(), error = %e, "releasing the member slot failed; it expires by itself")
                }
            }
        }
    }
}

/// Renews the shards held here; returns them and the shards free to take.
async fn renew_shards(
    electors: &mut [Elector],
    writers: &Writers,
    prefix: &str,
    timing: Timing,
    releasing: &BTreeSet<u32>,
    leases: &BTreeMap<String, Lease>,
    read_at: Instant,
) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let mut held = BTreeSet::new();
    let mut takeable = BTreeSet::new();
    let mut renewals = Vec::new();
    for (shard, elector) in (0..).zip(electors.iter_mut()) {
        let lease = leases.get(&shard_lease(prefix, shard)).cloned();
        let decision = elector.observe(lease.as_ref(), read_at);
        let held_here = writers.is_held(shard);
        match decision {
            // Renewed side by side below: a round must stay well inside the retry period.
            Decision::Renew if held_here => renewals.push(async move { (shard, elector.claim(lease).await) }),
            Decision::Wait { holder } => {
                if held_here {
                    warn!(shard, %holder, "another replica holds the shard now: no more writes for its parents");
                    writers.drop_shard(shard);
                }
            }
            // Free, expired, missing, or ours by its record but given up here.
            Decision::Renew | Decision::Take | Decision::Create => {
                if held_here {
                    writers.drop_shard(shard);
                }
                if !releasing.contains(&shard) {
                    takeable.insert(shard);
                }
            }
        }
    }
    for (shard, result) in futures::future::join_all(renewals).await {
        match result {
            Ok(Some(started)) => {
                writers.renewed(shard, started + timing.renew_deadline);
                held.insert(shard);
            }
            Ok(None) => {
                warn!(shard, "another replica took the shard: no more writes for its parents");
                writers.drop_shard(shard);
            }
            Err(e) => {
                warn!(shard, error = %e, "renewing the shard failed");
                if writers.fence_holds(shard) {
                    held.insert(shard);
                } else {
                    warn!(shard, "lost the shard: its renewals failed past the renew deadline");
                    writers.drop_shard(shard);
                }
            }
        }
    }
    (held, takeable)
}

#[cfg(test)]
mod tests;
