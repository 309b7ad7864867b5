//! What jobs leave behind once they expire or are deleted: no entry, and no
//! cost that grows.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, NewJob, Schedule, Shard,
    keys::{self, SlotKeys},
};
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{L, S, consume, counts, dead_head, qn, sched, shard, slot};

/// The cost of a command so far: (calls, µs) from `INFO commandstats`.
fn command_stats(redis: &RedisServer, cmd: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.client())
        .expect("INFO commandstats");
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))
        .unwrap_or_default()
        .to_owned();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

#[tokio::test]
async fn jobs_that_expire_or_are_deleted_leave_no_entry_behind() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    // In bulk, so that all of it is stored well within the TTL.
    let ttl = sched(0, 4_000, 1);
    let ready = publish_in_lane_0(&s, "q", ttl, 5_000).await;
    publish_in_lane_0(&s, "q", ttl, 2_500).await;
    // Half of the queue goes to the dead letter: taken, never acked, no try left.
    let mut taken = 0;
    while taken < 2_500 {
        taken += consume(&s, &["q"], 100.min(2_500 - taken), 1)
            .await
            .expect("consume")
            .len() as u32;
    }
    wait_until_async(Duration::from_secs(60), "2,500 dead jobs", || async {
        for b in 0..S {
            s.timers().pump(b, 1_000, None).await.expect("pump");
        }
        counts(&s, "q").await.expect("counts").dead == 2_500
    })
    .await;
    // A few are deleted before they expire: one ready, one dead.
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.dead), (5_000, 2_500));
    let dead_id = dead_head(&s, "q").await.expect("head").expect("one");
    let dead_id = JobId::parse(&dead_id).expect("id");
    let still_ready = ready
        .iter()
        .rev()
        .find(|id| {
            let mut r = redis.client();
            let n: i64 = redis::cmd("LPOS")
                .arg(SlotKeys::new(slot("q", id)).ready(&qn("q")))
                .arg(id.as_str())
                .query::<Option<i64>>(&mut r)
                .expect("LPOS")
                .map_or(-1, |p| p);
            n >= 0
        })
        .expect("a ready job");
    // And one from the middle of its list, too far in to be looked for: its
    // id stays until the list goes with the queue's last ready job.
    let middle = &ready[2_500];
    for id in [still_ready, &dead_id, middle] {
        assert!(
            s.jobs()
                .delete(slot("q", id), &qn("q"), id)
                .await
                .expect("delete")
        );
    }
    let (calls_before, usec_before) = command_stats(&redis, "lrem");
    let (lpos_calls_before, lpos_usec_before) = command_stats(&redis, "lpos");
    let (lindex_calls_before, lindex_usec_before) = command_stats(&redis, "lindex");
    let start = std::time::Instant::now();
    wait_until_async(Duration::from_secs(15), "every job to expire", || async {
        for b in 0..S {
            s.timers().pump(b, 1_000, None).await.expect("pump");
        }
        counts(&s, "q").await.expect("counts").live() == 0
    })
    .await;
    let (calls, usec) = command_stats(&redis, "lrem");
    let (lpos_calls, lpos_usec) = command_stats(&redis, "lpos");
    let (lindex_calls, lindex_usec) = command_stats(&redis, "lindex");
    eprintln!(
        "7,497 jobs expired in {:?}: LREM {} calls, {} µs; LPOS {} calls, {} µs; \
         LINDEX {} calls, {} µs of Redis time",
        start.elapsed(),
        calls - calls_before,
        usec - usec_before,
        lpos_calls - lpos_calls_before,
        lpos_usec - lpos_usec_before,
        lindex_calls - lindex_calls_before,
        lindex_usec - lindex_usec_before,
    );
    // No per-job entry of the queue is left anywhere.
    let mut r = redis.client();
    for b in 0..S {
        let k = SlotKeys::new(b);
        let jobs: u64 = r.hlen(k.jobs()).expect("hlen");
        let timer: u64 = r.zcard(k.timer()).expect("zcard");
        let ready: u64 = r.llen(k.ready(&qn("q"))).expect("llen");
        let dead: u64 = r.llen(k.dead(&qn("q"))).expect("llen");
        assert_eq!((jobs, timer, ready, dead), (0, 0, 0, 0), "slot {b}");
    }
}

/// Publishes `n` jobs into lane 0 of `queue` in batches; returns their ids.
async fn publish_in_lane_0(s: &Shard, queue: &str, sched: Schedule, n: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    let mut left = n;
    while left > 0 {
        let batch: Vec<NewJob> = (0..left.min(50))
            .map(|_| NewJob {
                id: JobId::mint_in_lane(false, 0, L),
                attrs: String::new(),
                body: Bytes::from_static(b"x"),
            })
            .collect();
        s.jobs()
            .publish(keys::slot_of("ns", queue, 0, S), &qn(queue), &sched, &batch)
            .await
            .expect("publish");
        left -= batch.len();
        ids.extend(batch.into_iter().map(|j| j.id));
    }
    ids
}

#[tokio::test]
async fn ids_that_expire_deep_in_a_list_leave_once_older_jobs_have_left() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    // Oldest at the tail: 300 jobs that live 2 s; then 1,000 that live 1 s,
    // too deep in the list (from either end) to be looked for; then 300
    // that live 4 s.
    publish_in_lane_0(&s, "q", sched(0, 2_000, 1), 300).await;
    publish_in_lane_0(&s, "q", sched(0, 1_000, 1), 1_000).await;
    publish_in_lane_0(&s, "q", sched(0, 4_000, 1), 300).await;
    let slot0 = keys::slot_of("ns", "q", 0, S);
    let list = SlotKeys::new(slot0).ready(&qn("q"));
    let llen = |redis: &RedisServer| -> u64 { redis.client().llen(&list).expect("llen") };
    let ready = || async {
        s.queues()
            .counts(slot0, &qn("q"))
            .await
            .expect("counts")
            .ready
    };
    wait_until_async(
        Duration::from_secs(10),
        "the 1 s jobs to expire",
        || async {
            s.timers().pump(slot0, 1_000, None).await.expect("pump");
            ready().await == 600
        },
    )
    .await;
    assert_eq!(llen(&redis), 1_600, "their ids wait deep in the list");
    wait_until_async(
        Duration::from_secs(10),
        "the 2 s jobs to expire",
        || async {
            s.timers().pump(slot0, 1_000, None).await.expect("pump");
            ready().await == 300
        },
    )
    .await;
    assert_eq!(
        llen(&redis),
        300,
        "once the older jobs left the tail, the stale ids went with them"
    );
    wait_until_async(
        Duration::from_secs(10),
        "the last jobs to expire",
        || async {
            s.timers().pump(slot0, 1_000, None).await.expect("pump");
            ready().await == 0
        },
    )
    .await;
    assert_eq!(llen(&redis), 0);
}
