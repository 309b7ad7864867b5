//! Retries after a TTR, the dead letter, respawn and delete.

use std::time::Duration;

use redis::Commands;
use sundial_core::keys::SlotKeys;
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{
    S, consume, counts, dead_delete, dead_head, now_sched, publish, respawn, shard, slot,
};

#[tokio::test]
async fn ttr_retries_then_dead_letters_then_respawns() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(2), "work").await;
    let b = slot("q", &id);

    // First delivery; the worker "dies".
    let d1 = consume(&s, &["q"], 1, 50).await.expect("consume");
    assert_eq!(d1[0].job.tries_left, 1);
    assert!(d1[0].first, "the first delivery is marked");
    wait_until_async(Duration::from_secs(5), "the TTR to run out", || async {
        s.timers().pump(b, 100, None).await.expect("pump").retried == 1
    })
    .await;
    // Second and last delivery; the worker dies again.
    let d2 = consume(&s, &["q"], 1, 50).await.expect("consume");
    assert_eq!(d2.len(), 1);
    assert_eq!(d2[0].job.tries_left, 0);
    assert!(!d2[0].first, "a redelivery is not");
    wait_until_async(Duration::from_secs(5), "the job to go dead", || async {
        s.timers().pump(b, 100, None).await.expect("pump").dead == 1
    })
    .await;
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.reserved, c.dead), (0, 0, 1));
    assert_eq!(
        dead_head(&s, "q").await.expect("head"),
        Some(id.to_string())
    );

    assert_eq!(respawn(&s, "q", 10, 60_000).await.expect("respawn"), 1);
    let d3 = consume(&s, &["q"], 1, 1000).await.expect("consume");
    assert_eq!(d3[0].job.id, id.as_str());
    assert_eq!(d3[0].job.tries_left, 0, "a respawned job has one try");
    assert!(d3[0].job.ttl_ms > 0 && d3[0].job.ttl_ms <= 60_000);
}

#[tokio::test]
async fn dead_letter_delete_respects_limit() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    for i in 0..5 {
        publish(&s, "q", now_sched(1), &format!("j{i}")).await;
    }
    let got = consume(&s, &["q"], 5, 1).await.expect("consume");
    assert_eq!(got.len(), 5);
    wait_until_async(Duration::from_secs(5), "all five to go dead", || async {
        for b in 0..S {
            s.timers().pump(b, 100, None).await.expect("pump");
        }
        counts(&s, "q").await.expect("counts").dead == 5
    })
    .await;
    assert_eq!(dead_delete(&s, "q", 2).await.expect("delete"), 2);
    assert_eq!(counts(&s, "q").await.expect("counts").dead, 3);
    assert_eq!(dead_delete(&s, "q", 100).await.expect("delete"), 3);
    assert_eq!(dead_head(&s, "q").await.expect("head"), None);
    let mut r = redis.client();
    for b in 0..S {
        let n: u64 = r.hlen(SlotKeys::new(b).jobs()).expect("hlen");
        assert_eq!(n, 0);
    }
}
