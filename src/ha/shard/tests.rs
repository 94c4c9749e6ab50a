//! Tests of sharding: the stable hash, member slots, fair shares and per-shard fences.

use super::*;

/// A client whose every request answers 200 `{}` and is counted.
fn counting_client() -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async {
            Ok::<_, BoxError>(
                http::Response::builder()
                    .status(200)
                    .body(kube::client::Body::from(b"{}".to_vec()))
                    .expect("response"),
            )
        }
    });
    (Client::new(service, "default"), sent)
}

fn post() -> http::Request<kube::client::Body> {
    http::Request::builder()
        .method(http::Method::POST)
        .uri("/api/v1/namespaces/default/configmaps")
        .body(kube::client::Body::from(b"{}".to_vec()))
        .expect("request")
}

#[tokio::test]
async fn a_shard_writes_only_while_its_lease_is_held() {
    let (base, sent) = counting_client();
    let writers = Writers::sharded(&base, 4, &Reporter::from("ruleop"));
    let (mine, other) = (writers.of("uid-a").index(), (writers.of("uid-a").index() + 1) % 4);
    let mut taken = writers.subscribe();
    writers.acquire(mine, Instant::now() + std::time::Duration::from_secs(10));
    assert_eq!(
        futures::StreamExt::next(&mut taken).await,
        Some(mine),
        "the controllers hear of it"
    );
    assert!(writers.of("uid-a").held());
    writers
        .of("uid-a")
        .client
        .send(post())
        .await
        .expect("the holder writes");
    let refused = writers.shards[other as usize].client.send(post()).await;
    assert!(
        refused
            .expect_err("another shard is fenced")
            .to_string()
            .contains("does not hold the lease"),
        "a write for a shard not held is refused"
    );
    let read = http::Request::builder()
        .uri("/api/v1/namespaces/default/configmaps")
        .body(kube::client::Body::empty())
        .expect("request");
    writers.shards[other as usize]
        .client
        .send(read)
        .await
        .expect("reads pass");
    writers.drop_shard(mine);
    assert!(!writers.of("uid-a").held());
    assert!(
        writers.of("uid-a").client.send(post()).await.is_err(),
        "no write once given up"
    );
    assert_eq!(
        sent.load(Ordering::SeqCst),
        2,
        "one write and one read reached the API server"
    );
    assert_eq!(writers.held(), BTreeSet::new());
}

#[test]
fn fnv1a_matches_the_specification_vectors() {
    // From the FNV specification's test suite (draft-eastlake-fnv, FNV-1a 64-bit).
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    assert_eq!(fnv1a64_of(&[b"foo", b"", b"bar"]), 0x8594_4171_f739_67e8, "in parts");
}

#[test]
fn a_uid_always_lands_in_the_same_shard() {
    let uid = "6f1c1d8e-2b1a-4c53-9a53-4f6d0c0b7e21";
    // Pinned: a change of hash would move every parent at an upgrade.
    assert_eq!(
        shard_of(uid, 12),
        u32::try_from(fnv1a64(uid.as_bytes()) % 12).expect("small")
    );
    assert_eq!(shard_of(uid, 12), shard_of(uid, 12));
    assert_eq!(shard_of(uid, 1), 0);
}

#[test]
fn uids_spread_evenly_over_the_shards() {
    let mut counts = [0u32; 12];
    for i in 0..12_000 {
        let uid = format!("{:08x}-0000-4000-8000-{:012x}", i * 7919, i);
        counts[shard_of(&uid, 12) as usize] += 1;
    }
    for count in counts {
        assert!((800..1200).contains(&count), "{counts:?}");
    }
}

#[test]
fn the_fair_share_is_the_shards_over_the_live_members_rounded_up() {
    assert_eq!(fair_share(12, 3), 4);
    assert_eq!(fair_share(12, 5), 3);
    assert_eq!(fair_share(12, 1), 12);
    assert_eq!(fair_share(12, 0), 12);
    assert_eq!(fair_share(2, 3), 1);
}

fn set(items: &[u32]) -> BTreeSet<u32> {
    items.iter().copied().collect()
}

#[test]
fn a_replica_above_its_share_gives_up_the_last_shards_in_its_order() {
    let all: Vec<u32> = (0..12).collect();
    let round = rebalance(12, 2, &set(&all), &set(&[]), 0);
    assert_eq!(round.share, 6);
    assert_eq!(round.release, vec![6, 7, 8, 9, 10, 11]);
    assert!(round.take.is_empty());
    let round = rebalance(12, 3, &set(&[0, 1, 2, 3, 4, 5]), &set(&[]), 4);
    assert_eq!(round.release, vec![2, 3], "kept from its start, 4, onwards: 4, 5, 0, 1");
}

#[test]
fn a_replica_below_its_share_takes_free_shards_from_its_start() {
    let round = rebalance(12, 3, &set(&[]), &set(&[1, 5, 9, 10]), 6);
    assert_eq!(round.share, 4);
    assert_eq!(round.take, vec![9, 10, 1, 5]);
    let round = rebalance(12, 3, &set(&[0, 1, 2, 3]), &set(&[9]), 0);
    assert!(round.take.is_empty() && round.release.is_empty(), "at its share");
}

#[test]
fn three_replicas_end_with_four_shards_each() {
    // Rounds of three replicas joining one after another, each seeing the others' moves.
    let mut holders: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); 3];
    for joined in 1..=3usize {
        for _ in 0..4 {
            for r in 0..joined {
                let taken: BTreeSet<u32> = holders.iter().flatten().copied().collect();
                let free: BTreeSet<u32> = (0..12).filter(|s| !taken.contains(s)).collect();
                let round = rebalance(12, joined, &holders[r], &free, u32::try_from(r * 5).expect("small"));
                for s in &round.release {
                    holders[r].remove(s);
                }
                for s in round
                    .take
                    .into_iter()
                    .take(round.share.saturating_sub(holders[r].len()))
                {
                    holders[r].insert(s);
                }
            }
        }
    }
    let sizes: Vec<usize> = holders.iter().map(BTreeSet::len).collect();
    assert_eq!(sizes, vec![4, 4, 4]);
    let all: BTreeSet<u32> = holders.iter().flatten().copied().collect();
    assert_eq!(all.len(), 12, "every shard held once");
}
