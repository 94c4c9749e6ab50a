//! The periodic resync of one rule's parents as one timer: each parent has a fixed phase in the
//! period (a hash of its UID, the same in every process), and each tick queues the parents whose
//! phase came round since the last tick. Why not a requeue per parent after each reconcile:
//! kube-runtime's scheduler then holds an entry per parent for the whole period (an `ObjectRef`
//! with the kind's five strings, twice: about 3 KB per parent), which is most of the operator's
//! memory per parent at scale; here a parent costs nothing between its resyncs.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::MissedTickBehavior;

use crate::ha::shard::{Writers, fnv1a64_of};

/// Ticks per period: a parent's resync comes at most a hundredth of the period late.
const TICKS_PER_PERIOD: u32 = 100;
/// Shortest tick, for short periods.
const MIN_TICK: Duration = Duration::from_millis(100);
/// Longest tick, for long periods: each tick reads every cached parent's UID.
const MAX_TICK: Duration = Duration::from_secs(5);

/// How often the wheel of a `period` looks for parents that came due.
fn tick(period: Duration) -> Duration {
    (period / TICKS_PER_PERIOD).clamp(MIN_TICK, MAX_TICK)
}

/// A parent's phase in `period`, in milliseconds: where in each period its resync comes.
fn phase(uid: &str, period_ms: u64) -> u64 {
    // Salted, so that the phase does not follow the shard (FNV of the bare UID); hashed in two
    // parts, so a tick allocates nothing per parent.
    fnv1a64_of(&[b"resync/", uid.as_bytes()]) % period_ms.max(1)
}

/// Whether a parent of phase `phase` came due after `from` and up to `to` (milliseconds since
/// the epoch): a multiple of `period` plus its phase lies in `(from, to]`.
fn came_due(from: u64, to: u64, phase: u64, period: u64) -> bool {
    let period = period.max(1);
    let round = |t: u64| t.saturating_sub(phase) / period;
    to > from && to >= phase && (from < phase || round(to) > round(from))
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The parents in `store` each time their resync comes due, every `period` (those of shards
/// another replica holds are left to it).
pub(super) fn resync_wheel(
    store: Store<DynamicObject>,
    resource: ApiResource,
    period: Duration,
    writers: Arc<Writers>,
) -> impl Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let mut interval = tokio::time::interval(tick(period));
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    futures::stream::unfold((interval, epoch_ms()), move |(mut interval, from)| {
        let (store, resource, writers) = (store.clone(), resource.clone(), writers.clone());
        async move {
            interval.tick().await;
            let to = epoch_ms();
            let due: Vec<_> = store
                .state()
                .iter()
                .filter(|parent| {
                    let uid = parent.metadata.uid.as_deref().unwrap_or_default();
                    came_due(from, to, phase(uid, period_ms), period_ms)
                        && (!writers.is_sharded() || writers.of(uid).held())
                })
                .map(|parent| ObjectRef::from_obj_with(parent.as_ref(), resource.clone()))
                .collect();
            Some((futures::stream::iter(due), (interval, to)))
        }
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_comes_due_once_per_period_at_its_phase() {
        let period = 10_000;
        let phase = 2_500;
        // Ticks of one second over three periods: due at 2.5 s, 12.5 s and 22.5 s only.
        let due: Vec<u64> = (0..30)
            .map(|s| s * 1000)
            .filter(|&from| came_due(from, from + 1000, phase, period))
            .collect();
        assert_eq!(due, vec![2_000, 12_000, 22_000]);
    }

    #[test]
    fn a_phase_on_a_tick_boundary_counts_in_one_tick_only() {
        assert!(came_due(1_000, 2_000, 2_000, 10_000));
        assert!(!came_due(2_000, 3_000, 2_000, 10_000));
        assert!(came_due(11_000, 12_000, 2_000, 10_000));
        assert!(!came_due(1_000, 1_000, 1_000, 10_000), "an empty interval");
    }

    #[test]
    fn a_late_tick_spanning_more_than_a_period_still_queues_once() {
        assert!(came_due(0, 35_000, 2_000, 10_000));
    }

    #[test]
    fn phases_spread_over_the_period_and_stay_put() {
        let period = 60_000;
        let phases: Vec<u64> = (0..1000).map(|i| phase(&format!("uid-{i}"), period)).collect();
        assert!(phases.iter().all(|p| *p < period));
        assert_eq!(phase("uid-7", period), phases[7], "the same in every call and process");
        // Ten buckets of 6 s each get a tenth, give or take.
        let mut buckets = [0u32; 10];
        for p in &phases {
            buckets[(p / 6_000) as usize] += 1;
        }
        assert!(buckets.iter().all(|b| (60..=140).contains(b)), "{buckets:?}");
    }

    #[test]
    fn the_tick_is_a_hundredth_of_the_period_within_bounds() {
        assert_eq!(tick(Duration::from_secs(2)), MIN_TICK);
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_millis(600));
        assert_eq!(tick(Duration::from_secs(3600)), MAX_TICK);
    }
}
