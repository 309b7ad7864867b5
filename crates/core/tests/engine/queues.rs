//! Whole queues: priority order over queues and lanes, peek, destroy.

use std::time::Duration;

use bytes::Bytes;
use sundial_tests::RedisServer;

use crate::helpers::{
    consume, counts, destroy, now_sched, peek_queue, publish, qn, sched, shard, slot,
};

#[tokio::test]
async fn queues_are_served_in_priority_order_and_batches_span_lanes() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    for i in 0..20 {
        publish(&s, "low", now_sched(1), &format!("low{i}")).await;
    }
    for i in 0..3 {
        publish(&s, "high", now_sched(1), &format!("high{i}")).await;
    }
    let got = consume(&s, &["high", "low"], 5, 1000)
        .await
        .expect("consume");
    let queues: Vec<&str> = got.iter().map(|d| d.job.queue_name()).collect();
    assert_eq!(queues, ["high", "high", "high", "low", "low"]);
    let rest = consume(&s, &["low"], 100, 1000).await.expect("consume");
    assert_eq!(rest.len(), 18);
}

#[tokio::test]
async fn peek_shows_the_head_without_taking_it() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(peek_queue(&s, "q").await.expect("peek").is_none());
    let first = publish(&s, "q", now_sched(1), "a").await;
    tokio::time::sleep(Duration::from_millis(3)).await; // distinct publish times
    publish(&s, "q", now_sched(1), "b").await;
    let head = peek_queue(&s, "q").await.expect("peek").expect("a head");
    assert_eq!(head.id, first.as_str());
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 2);
    let by_id = s
        .jobs()
        .peek(slot("q", &first), &qn("q"), &first)
        .await
        .expect("peek")
        .expect("the job");
    assert_eq!(by_id.body, Bytes::from_static(b"a"));
}

#[tokio::test]
async fn destroy_drops_ready_jobs_only() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    for _ in 0..30 {
        publish(&s, "q", now_sched(1), "r").await;
    }
    publish(&s, "q", sched(60_000, 0, 1), "d").await;
    assert_eq!(destroy(&s, "q").await.expect("destroy"), 30);
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.delayed), (0, 1));
}
