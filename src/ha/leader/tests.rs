//! Tests of the Lease state machine and the write fence.

use super::*;

const TIMING: Timing = Timing::CLIENT_GO;

fn held_by(holder: &str) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_owned()),
        lease_duration_seconds: Some(15),
        lease_transitions: Some(3),
        ..LeaseSpec::default()
    }
}

#[test]
fn a_missing_lease_is_created_and_a_released_one_taken_at_once() {
    let now = Instant::now();
    assert_eq!(decide(None, "a", now, now, TIMING.lease_duration), Decision::Create);
    let released = LeaseSpec {
        holder_identity: None,
        ..held_by("b")
    };
    assert_eq!(
        decide(Some(&released), "a", now, now, TIMING.lease_duration),
        Decision::Take
    );
    let empty = held_by("");
    assert_eq!(
        decide(Some(&empty), "a", now, now, TIMING.lease_duration),
        Decision::Take
    );
}

#[test]
fn another_holder_is_waited_for_until_its_record_is_unchanged_for_the_lease_duration() {
    let seen = Instant::now();
    let spec = held_by("b");
    let wait = Decision::Wait { holder: "b".to_owned() };
    assert_eq!(decide(Some(&spec), "a", seen, seen, TIMING.lease_duration), wait);
    let almost = seen + Duration::from_millis(14_999);
    assert_eq!(decide(Some(&spec), "a", seen, almost, TIMING.lease_duration), wait);
    let expired = seen + Duration::from_secs(15);
    assert_eq!(
        decide(Some(&spec), "a", seen, expired, TIMING.lease_duration),
        Decision::Take
    );
    let short = LeaseSpec {
        lease_duration_seconds: Some(1),
        ..spec
    };
    let after_one = seen + Duration::from_secs(1);
    assert_eq!(
        decide(Some(&short), "a", seen, after_one, TIMING.lease_duration),
        Decision::Take,
        "the record's own duration counts"
    );
}

#[test]
fn our_own_lease_is_renewed() {
    let now = Instant::now();
    assert_eq!(
        decide(Some(&held_by("a")), "a", now, now, TIMING.lease_duration),
        Decision::Renew
    );
}

#[test]
fn taking_a_lease_counts_a_transition_and_renewing_keeps_the_acquire_time() {
    let t1 = MicroTime(jiff::Timestamp::from_second(1_000).expect("time"));
    let t2 = MicroTime(jiff::Timestamp::from_second(2_000).expect("time"));
    let taken = next_record(Some(&held_by("b")), "a", &TIMING, t1.clone());
    assert_eq!(taken.holder_identity.as_deref(), Some("a"));
    assert_eq!(taken.lease_transitions, Some(4));
    assert_eq!(taken.acquire_time, Some(t1.clone()));
    assert_eq!(taken.lease_duration_seconds, Some(15));
    let renewed = next_record(Some(&taken), "a", &TIMING, t2.clone());
    assert_eq!(renewed.lease_transitions, Some(4));
    assert_eq!(renewed.acquire_time, Some(t1));
    assert_eq!(renewed.renew_time, Some(t2));
    let created = next_record(
        None,
        "a",
        &TIMING,
        MicroTime(jiff::Timestamp::from_second(5).expect("time")),
    );
    assert_eq!(created.lease_transitions, Some(0));
}

#[test]
fn the_fence_closes_by_time_alone() {
    let fence = Fence::closed();
    assert!(!fence.holds());
    let now = Instant::now();
    fence.extend(now + Duration::from_secs(10));
    assert!(fence.holds_at(now + Duration::from_secs(9)));
    assert!(
        !fence.holds_at(now + Duration::from_secs(10)),
        "no write once the deadline passed"
    );
    fence.close();
    assert!(!fence.holds());
    assert!(Fence::open().holds_at(now + Duration::from_secs(1_000_000)));
}

#[test]
fn the_holder_stops_writing_before_any_standby_may_take_the_lease() {
    // The holder renews at t0 (request start); a standby sees the new record no earlier.
    let t0 = Instant::now();
    let fence = Fence::closed();
    fence.extend(t0 + TIMING.renew_deadline);
    let spec = held_by("b");
    let mut t = t0;
    while decide(Some(&spec), "a", t0, t, TIMING.lease_duration) != Decision::Take {
        t += Duration::from_millis(100);
    }
    assert!(
        !fence.holds_at(t),
        "the old holder could still write when a standby took the lease"
    );
    assert!(t.saturating_duration_since(t0) >= TIMING.lease_duration);
}

#[tokio::test]
async fn a_closed_fence_refuses_writes_and_lets_reads_through() {
    use tower::ServiceExt;
    let fence = Fence::closed();
    let inner = tower::service_fn(|_: http::Request<()>| async { Ok::<_, BoxError>("sent") });
    let service = FenceLayer(fence.clone()).layer(inner);
    let request = |method: http::Method| http::Request::builder().method(method).body(()).expect("request");
    let read = service.clone().oneshot(request(http::Method::GET)).await;
    assert_eq!(read.expect("a read passes"), "sent");
    let dry_run = http::Request::builder()
        .method(http::Method::PATCH)
        .uri("/api/v1/namespaces/x/configmaps/ruleop-status?dryRun=All&force=true")
        .body(())
        .expect("request");
    assert_eq!(
        service.clone().oneshot(dry_run).await.expect("a dry run passes"),
        "sent"
    );
    let write = service.clone().oneshot(request(http::Method::PATCH)).await;
    let error = write.expect_err("a write is refused");
    assert!(error.to_string().contains("does not hold the lease"), "{error}");
    let wrapped = kube::Error::Service(error);
    assert!(is_fenced(&wrapped), "found through the source chain");
    assert!(!is_fenced(&kube::Error::LinesCodecMaxLineLengthExceeded));
    let status_write = crate::apply::ApplyError::Status(Box::new(kube::Error::Service(Box::new(Fenced))));
    assert!(is_fenced(&status_write), "a fenced status write of a reconcile");
    fence.extend(Instant::now() + Duration::from_secs(5));
    let write = service.oneshot(request(http::Method::POST)).await;
    assert_eq!(write.expect("the holder writes"), "sent");
}
