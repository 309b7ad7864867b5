//! Priorities: a queue's ready jobs in a slot are consumed highest
//! priority first, first in first out within one; delayed, retried,
//! released and imported jobs keep theirs; and the lists of the levels go
//! with their last job.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, ListAsk, ListState, NewJob, Release, Released, Schedule, Shard,
    keys::{self, SlotKeys},
};
use sundial_tests::RedisServer;

use crate::helpers::{L, S, counts, qn, sched, shard};
use crate::usage::assert_usage_true;

/// Every job of these tests is in lane 0 of queue `q`: one slot, where the
/// order is strict.
fn slot0() -> u32 {
    keys::slot_of("ns", "q", 0, S)
}

fn with_priority(delay_ms: u64, priority: u8) -> Schedule {
    Schedule {
        priority,
        ..sched(delay_ms, 0, 3)
    }
}

/// Publishes one job of `body` at `priority` (after `delay_ms`) into lane 0.
async fn put(s: &Shard, body: &str, priority: u8, delay_ms: u64) -> JobId {
    let j = NewJob {
        id: JobId::mint_in_lane(false, 0, L),
        attrs: String::new(),
        body: Bytes::from(body.to_owned()),
    };
    s.jobs()
        .publish(
            slot0(),
            &qn("q"),
            &with_priority(delay_ms, priority),
            std::slice::from_ref(&j),
        )
        .await
        .expect("publish");
    j.id
}

/// The bodies and priorities of the next `n` jobs a consume hands out.
async fn take(s: &Shard, n: u32, ttr_ms: u64) -> Vec<(String, u8)> {
    s.jobs()
        .consume(slot0(), &qn("q"), n, ttr_ms)
        .await
        .expect("consume")
        .into_iter()
        .map(|d| {
            (
                String::from_utf8_lossy(&d.job.body).into_owned(),
                d.job.priority,
            )
        })
        .collect()
}

fn bodies(taken: &[(String, u8)]) -> Vec<&str> {
    taken.iter().map(|(b, _)| b.as_str()).collect()
}

/// The keys of the queue's ready lists in Redis (its priority levels and
/// their zset included).
fn ready_keys(redis: &RedisServer) -> Vec<String> {
    let k = SlotKeys::new(slot0());
    let mut keys: Vec<String> = redis
        .client()
        .keys(format!("{}*", k.ready(&qn("q"))))
        .expect("keys");
    keys.sort();
    keys
}

#[tokio::test]
async fn the_highest_priority_goes_first_and_each_level_in_order() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    for (body, p) in [
        ("a", 0),
        ("b", 5),
        ("c", 0),
        ("d", 200),
        ("e", 5),
        ("f", 255),
    ] {
        put(&s, body, p, 0).await;
    }
    let top = s
        .queues()
        .peek(slot0(), &qn("q"))
        .await
        .expect("peek")
        .expect("a job");
    assert_eq!((top.body.as_ref(), top.priority), (&b"f"[..], 255));
    let first = take(&s, 2, 30_000).await;
    assert_eq!(first, vec![("f".to_owned(), 255), ("d".to_owned(), 200)]);
    assert_eq!(bodies(&take(&s, 10, 30_000).await), ["b", "e", "a", "c"]);
    // The levels went with their last jobs; the counts never split them.
    assert_eq!(ready_keys(&redis), Vec::<String>::new());
    assert_eq!(counts(&s, "q").await.expect("counts").reserved, 6);
}

#[tokio::test]
async fn delayed_retried_and_released_jobs_keep_their_priority() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    // Due in 50 ms (the timer), and in about 2.5 s (a wheel second).
    put(&s, "soon", 7, 50).await;
    put(&s, "later", 9, 2_500).await;
    put(&s, "plain", 0, 0).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    s.timers().pump(slot0(), 100, None).await.expect("pump");
    put(&s, "newer", 0, 0).await;
    assert_eq!(take(&s, 1, 30_000).await, vec![("soon".to_owned(), 7)]);

    // Its TTR runs out: back as a retry, still ahead of priority 0.
    let got = s
        .jobs()
        .consume(slot0(), &qn("q"), 1, 1)
        .await
        .expect("consume");
    assert_eq!(got[0].job.body.as_ref(), b"plain");
    put(&s, "p3", 3, 0).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.timers().pump(slot0(), 100, None).await.expect("pump");
    // "plain" came back at priority 0, behind "newer" (a retry goes to
    // the back of its level, as in lmstfy).
    assert_eq!(bodies(&take(&s, 3, 30_000).await), ["p3", "newer", "plain"]);

    // A released job goes back to its own level.
    put(&s, "low", 0, 0).await;
    put(&s, "high", 4, 0).await;
    let got = s
        .jobs()
        .consume(slot0(), &qn("q"), 1, 30_000)
        .await
        .expect("consume");
    assert_eq!(got[0].job.body.as_ref(), b"high");
    let r = Release {
        id: got[0].job.id.clone(),
        delivery: Some(1),
        delay_ms: Some(0),
        default_delay_ms: 0,
        spend_try: true,
        reason: Some("busy".to_owned()),
    };
    let how = s
        .jobs()
        .release(slot0(), &qn("q"), &r)
        .await
        .expect("release");
    assert_eq!(how, Released::Ready);
    assert_eq!(take(&s, 1, 30_000).await, vec![("high".to_owned(), 4)]);

    // The wheel's job keeps its priority too.
    put(&s, "last", 0, 0).await;
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    s.timers().pump(slot0(), 100, None).await.expect("pump");
    assert_eq!(bodies(&take(&s, 3, 30_000).await), ["later", "low", "last"]);
}

#[tokio::test]
async fn deletes_destroy_and_export_see_every_level() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let gone = put(&s, "gone", 3, 0).await;
    for (body, p) in [("x", 3), ("y", 0), ("z", 1)] {
        put(&s, body, p, 0).await;
    }
    assert!(
        s.jobs()
            .delete(slot0(), &qn("q"), &gone)
            .await
            .expect("delete")
    );
    assert_usage_true(&s, &redis, "after a delete").await;
    let page = s
        .portable()
        .export_list(slot0(), &qn("q"), false, 0, 100)
        .await
        .expect("export");
    let mut exported: Vec<(String, u8)> = page
        .jobs
        .iter()
        .map(|j| (String::from_utf8_lossy(&j.body).into_owned(), j.priority))
        .collect();
    exported.sort();
    assert_eq!(
        exported,
        vec![
            ("x".to_owned(), 3),
            ("y".to_owned(), 0),
            ("z".to_owned(), 1)
        ]
    );
    assert!(page.next.is_none(), "one page holds them all");

    // An import into another shard lists each job at its level.
    let other = RedisServer::start();
    let t = shard(&other).await;
    t.portable()
        .import(slot0(), &page.jobs)
        .await
        .expect("import");
    assert_eq!(bodies(&take(&t, 3, 30_000).await), ["x", "z", "y"]);

    assert_eq!(
        s.queues()
            .destroy(slot0(), &qn("q"))
            .await
            .expect("destroy"),
        3
    );
    assert_usage_true(&s, &redis, "after a destroy").await;
    assert_eq!(ready_keys(&redis), Vec::<String>::new());
}

#[tokio::test]
async fn a_moved_slot_keeps_every_level_in_order() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let a = crate::moves::named_shard(&ra, "p/a").await;
    let b = crate::moves::named_shard(&rb, "p/b").await;
    for (body, p) in [("a", 0), ("b", 3), ("c", 0), ("d", 3), ("e", 8), ("f", 3)] {
        put(&a, body, p, 0).await;
    }
    // Batches of 2: each level's list moves over several calls.
    assert_eq!(crate::moves::move_all(&a, &b, slot0(), "mover", 2).await, 6);
    assert_eq!(
        bodies(&take(&b, 10, 30_000).await),
        ["e", "b", "d", "f", "a", "c"]
    );
    assert_eq!(ready_keys(&ra), Vec::<String>::new(), "nothing left behind");
}

#[tokio::test]
async fn a_respawned_job_keeps_its_priority() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let j = NewJob {
        id: JobId::mint_in_lane(false, 0, L),
        attrs: String::new(),
        body: Bytes::from_static(b"dies"),
    };
    let once = Schedule {
        priority: 6,
        ..sched(0, 0, 1)
    };
    s.jobs()
        .publish(slot0(), &qn("q"), &once, std::slice::from_ref(&j))
        .await
        .expect("publish");
    s.jobs()
        .consume(slot0(), &qn("q"), 1, 1)
        .await
        .expect("consume");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        s.timers()
            .pump(slot0(), 100, None)
            .await
            .expect("pump")
            .dead,
        1
    );
    put(&s, "waiting", 0, 0).await;
    let dead = s
        .dead_letter()
        .list(slot0(), &qn("q"), 0, 10)
        .await
        .expect("dead");
    assert_eq!(dead.jobs[0].priority, 6);
    assert_eq!(
        s.dead_letter()
            .respawn(slot0(), &qn("q"), 10, 0)
            .await
            .expect("respawn"),
        1
    );
    assert_eq!(
        take(&s, 2, 30_000).await,
        vec![("dies".to_owned(), 6), ("waiting".to_owned(), 0)]
    );
}

/// x and y at priority 3, z at 1, w at 0: a listing paged one job at a
/// time, whose top level goes between its pages.
async fn four_over_three_levels(s: &Shard) {
    for (body, p) in [("x", 3), ("y", 3), ("z", 1), ("w", 0)] {
        put(s, body, p, 0).await;
    }
}

#[tokio::test]
async fn an_export_paged_across_a_level_that_goes_misses_no_job_left() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    four_over_three_levels(&s).await;
    let (mut seen, mut at) = (Vec::new(), Some(0u64));
    let mut pages = 0;
    while let Some(passed) = at {
        let page = s
            .portable()
            .export_list(slot0(), &qn("q"), false, passed, 1)
            .await
            .expect("export");
        seen.extend(
            page.jobs
                .iter()
                .map(|j| String::from_utf8_lossy(&j.body).into_owned()),
        );
        at = page.next.map(|n| n.parse().expect("a cursor"));
        pages += 1;
        if pages == 1 {
            // Priority 3 empties: its level goes.
            assert_eq!(bodies(&take(&s, 2, 30_000).await), ["x", "y"]);
        }
    }
    // Newest first within a level: y was read before the consume.
    assert_eq!(seen, ["y", "z", "w"]);
}

#[tokio::test]
async fn a_listing_paged_across_a_level_that_goes_misses_no_job_left() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    four_over_three_levels(&s).await;
    let (mut seen, mut at) = (Vec::new(), Some((0u64, 0u64)));
    let mut pages = 0;
    while let Some(from) = at {
        let ask = ListAsk {
            state: ListState::Ready,
            at: from,
            want: 1,
            budget: 100,
            preview: 10,
        };
        let page = s
            .queues()
            .list_jobs(slot0(), &qn("q"), ask)
            .await
            .expect("list");
        seen.extend(
            page.jobs
                .iter()
                .map(|j| String::from_utf8_lossy(&j.body_preview).into_owned()),
        );
        at = page.next;
        pages += 1;
        if pages == 1 {
            assert_eq!(bodies(&take(&s, 2, 30_000).await), ["x", "y"]);
        }
    }
    // Oldest first within a level: x was listed before the consume.
    assert_eq!(seen, ["x", "z", "w"]);
}
