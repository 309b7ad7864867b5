//! Retry policies in the record: backoff after a TTR runs out or a release
//! without a delay, and the retry bound.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, NewJob, PackedPolicy, Release, Released, Schedule, Shard,
    keys::SlotKeys,
    state::{DEAD, DELAYED},
};
use sundial_tests::RedisServer;

use crate::helpers::{consume, publish, qn, sched, shard, slot};
use crate::usage::assert_usage_true;

/// A packed policy (`policy_of` in `lua/lib/record.lua`).
fn policy(
    kind: u8,
    initial_ms: u32,
    multiplier_milli: u16,
    max_ms: u32,
    bound_ms: u32,
) -> PackedPolicy {
    let mut p = [0u8; 16];
    p[0] = kind;
    p[1..5].copy_from_slice(&initial_ms.to_be_bytes());
    p[5..7].copy_from_slice(&multiplier_milli.to_be_bytes());
    p[7..11].copy_from_slice(&max_ms.to_be_bytes());
    p[12..16].copy_from_slice(&bound_ms.to_be_bytes());
    p
}

async fn publish_with(s: &Shard, tries: u16, p: PackedPolicy) -> JobId {
    let job = NewJob {
        id: JobId::mint(false),
        attrs: String::new(),
        body: Bytes::from_static(b"retried"),
    };
    let sched = Schedule {
        delay_ms: 0,
        ttl_ms: 0,
        tries,
        priority: 0,
        policy: Some(p),
    };
    s.jobs()
        .publish(
            slot("q", &job.id),
            &qn("q"),
            &sched,
            std::slice::from_ref(&job),
        )
        .await
        .expect("publish");
    job.id
}

fn redis_now_ms(c: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).expect("time");
    s * 1000 + us / 1000
}

/// The due field of the job's record (ms, shard clock).
fn due_of(c: &mut redis::Connection, id: &JobId) -> u64 {
    let k = SlotKeys::new(slot("q", id));
    let raw: Vec<u8> = c.hget(k.jobs(), id.as_str()).expect("record");
    raw[15..21].iter().fold(0, |n, &b| (n << 8) | u64::from(b))
}

#[tokio::test]
async fn a_ttr_that_runs_out_waits_out_the_exponential_backoff() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut c = redis.client();
    let id = publish_with(&s, 4, policy(2, 100, 2000, 300, 0)).await;
    let sl = slot("q", &id);
    let raw: Vec<u8> = c
        .hget(SlotKeys::new(sl).jobs(), id.as_str())
        .expect("record");
    assert_eq!(
        raw[0],
        2 + 64,
        "a job with a policy is extended from its publish"
    );
    assert_usage_true(&s, &redis, "after a publish with a policy").await;
    // Deliveries 1, 2, 3 fail: 100, 200, then 400 capped at 300 ms.
    for (n, want) in [(1, 100), (2, 200), (3, 300)] {
        let got = consume(&s, &["q"], 1, 1).await.expect("consume");
        assert_eq!(got[0].number(), n);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let before = redis_now_ms(&mut c);
        s.timers().pump(sl, 100, None).await.expect("pump");
        let after = redis_now_ms(&mut c);
        let j = s
            .jobs()
            .peek(sl, &qn("q"), &id)
            .await
            .expect("peek")
            .expect("job");
        assert_eq!(
            (j.state, j.reason.as_str()),
            (DELAYED, "ttr expired"),
            "delivery {n}"
        );
        let due = due_of(&mut c, &id);
        assert!(
            due >= before + want && due <= after + want,
            "delivery {n}: {due} vs {before}..{after} + {want}"
        );
        assert!(
            consume(&s, &["q"], 1, 1).await.expect("consume").is_empty(),
            "not before its delay"
        );
        tokio::time::sleep(Duration::from_millis(want + 10)).await;
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    assert_usage_true(&s, &redis, "after retries with reasons").await;
}

#[tokio::test]
async fn a_release_without_a_delay_takes_its_policy_s() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish_with(&s, 3, policy(1, 5_000, 1000, 5_000, 0)).await;
    let sl = slot("q", &id);
    consume(&s, &["q"], 1, 30_000).await.expect("consume");
    let r = Release {
        id: id.as_str().to_owned(),
        delivery: Some(1),
        delay_ms: None,
        default_delay_ms: 7_000,
        spend_try: true,
        reason: Some("later".to_owned()),
    };
    let how = s.jobs().release(sl, &qn("q"), &r).await.expect("release");
    assert_eq!(
        how,
        Released::Delayed(5_000),
        "the fixed backoff, not the default"
    );
}

#[tokio::test]
async fn a_release_without_a_delay_or_a_policy_waits_the_default_it_names() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let release = |id: &JobId, delivery: u32, default_delay_ms: u64| Release {
        id: id.as_str().to_owned(),
        delivery: Some(delivery),
        delay_ms: None,
        default_delay_ms,
        spend_try: true,
        reason: Some("push failed: 503".to_owned()),
    };
    let id = publish(&s, "q", sched(0, 0, 3), "x").await;
    let sl = slot("q", &id);
    consume(&s, &["q"], 1, 30_000).await.expect("consume");
    let how = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 1, 0))
        .await
        .expect("release");
    assert_eq!(how, Released::Ready, "no default: ready at once, as lmstfy");
    consume(&s, &["q"], 1, 30_000).await.expect("consume");
    let how = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 2, 300))
        .await
        .expect("release");
    assert_eq!(how, Released::Delayed(300));
    assert!(
        consume(&s, &["q"], 1, 1).await.expect("consume").is_empty(),
        "not before its default delay"
    );
    tokio::time::sleep(Duration::from_millis(320)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].job.id, id.as_str());
    assert_eq!(
        (got[0].job.tries_left, got[0].job.reason.as_str()),
        (0, "push failed: 503"),
        "each release spent a try and kept its reason"
    );
}

#[tokio::test]
async fn a_job_past_its_retry_bound_dies_with_tries_left() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish_with(&s, 5, policy(0, 0, 1000, 0, 50)).await;
    let sl = slot("q", &id);
    consume(&s, &["q"], 1, 1).await.expect("consume");
    tokio::time::sleep(Duration::from_millis(60)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let j = s
        .jobs()
        .peek(sl, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("job");
    assert_eq!(
        (j.state, j.tries_left, j.reason.as_str()),
        (DEAD, 4, "ttr expired")
    );
}

#[tokio::test]
async fn jitter_spreads_the_delays_within_its_share() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut p = policy(1, 1_000, 1000, 1_000, 0);
    p[11] = 50;
    let mut delays = Vec::new();
    for _ in 0..12 {
        let id = publish_with(&s, 2, p).await;
        let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
        assert_eq!(got[0].job.id, id.as_str());
        let r = Release {
            id: id.as_str().to_owned(),
            delivery: Some(1),
            delay_ms: None,
            default_delay_ms: 0,
            spend_try: true,
            reason: None,
        };
        match s
            .jobs()
            .release(slot("q", &id), &qn("q"), &r)
            .await
            .expect("release")
        {
            Released::Delayed(d) => delays.push(d),
            other => panic!("{other:?}"),
        }
    }
    assert!(
        delays.iter().all(|d| (500..=1_500).contains(d)),
        "{delays:?}"
    );
    delays.sort_unstable();
    delays.dedup();
    assert!(delays.len() > 3, "spread, not one value: {delays:?}");
}
