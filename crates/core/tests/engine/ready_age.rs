//! The age of a queue's next ready job (`Slots::ready_ages`, the gauge
//! `sundial_queue_oldest_ready_seconds`): counted from when the job became
//! ready (its publication, its due time, its retry or its respawn), not
//! from its publication alone, so that a delayed or retried job does not
//! look as if it had waited all along.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use sundial_core::Shard;
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{consume, now_sched, publish, qn, respawn, sched, shard, slot, slots_of};

/// The age, ms, of each of `queues`' next ready job; absent when none is
/// ready.
async fn ages(s: &Shard, queues: &[&str]) -> BTreeMap<String, u64> {
    let mut lists: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for q in queues {
        for b in slots_of(q) {
            lists.entry(b).or_default().push(qn(q));
        }
    }
    let lists: Vec<(u32, Vec<String>)> = lists.into_iter().collect();
    s.slots().ready_ages(&lists).await.expect("ready ages")
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

#[tokio::test]
async fn a_job_published_ready_ages_from_its_publication() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(ages(&s, &["q"]).await.is_empty(), "no ready job, no age");
    let published = Instant::now();
    publish(&s, "q", now_sched(1), "a").await;
    tokio::time::sleep(Duration::from_millis(300)).await; // the age is the thing under test
    publish(&s, "q", now_sched(1), "b").await;
    let age = ages(&s, &["q"]).await[&qn("q")];
    assert!((300..=ms(published) + 5).contains(&age), "{age}");
    // Taken jobs do not count: with both reserved, a new job is the oldest.
    assert_eq!(
        consume(&s, &["q"], 2, 60_000).await.expect("consume").len(),
        2
    );
    assert!(ages(&s, &["q"]).await.is_empty(), "reserved is not ready");
    let third = Instant::now();
    publish(&s, "q", now_sched(1), "c").await;
    let age = ages(&s, &["q"]).await[&qn("q")];
    assert!(age <= ms(third) + 5, "{age}");
}

#[tokio::test]
async fn a_delayed_job_ages_from_its_due_time() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let published = Instant::now();
    let id = publish(&s, "q", sched(600, 0, 1), "later").await;
    assert!(ages(&s, &["q"]).await.is_empty(), "delayed is not ready");
    let b = slot("q", &id);
    wait_until_async(Duration::from_secs(10), "the job to fall due", || async {
        s.timers().pump(b, 100, None).await.expect("pump").to_ready == 1
    })
    .await;
    let age = ages(&s, &["q"]).await[&qn("q")];
    let since_publish = ms(published);
    assert!(since_publish >= 600, "never early");
    assert!(age + 300 <= since_publish, "{age} of {since_publish}");
}

#[tokio::test]
async fn a_retried_or_respawned_job_ages_from_its_return() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let published = Instant::now();
    let id = publish(&s, "q", now_sched(2), "work").await;
    let b = slot("q", &id);
    // Delivered, and its worker dies: back after the TTR.
    consume(&s, &["q"], 1, 400).await.expect("consume");
    wait_until_async(Duration::from_secs(10), "the TTR to run out", || async {
        s.timers().pump(b, 100, None).await.expect("pump").retried == 1
    })
    .await;
    let age = ages(&s, &["q"]).await[&qn("q")];
    let since_publish = ms(published);
    assert!(age + 300 <= since_publish, "{age} of {since_publish}");
    // Its last try dies too; respawned from the dead letter later.
    consume(&s, &["q"], 1, 50).await.expect("consume");
    wait_until_async(Duration::from_secs(10), "the job to die", || async {
        s.timers().pump(b, 100, None).await.expect("pump").dead == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // time spent dead is not ready time
    assert!(ages(&s, &["q"]).await.is_empty(), "dead is not ready");
    let respawned = Instant::now();
    assert_eq!(respawn(&s, "q", 1, 0).await.expect("respawn"), 1);
    let age = ages(&s, &["q"]).await[&qn("q")];
    assert!(age <= ms(respawned) + 5, "{age}");
}
