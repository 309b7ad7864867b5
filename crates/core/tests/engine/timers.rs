//! The pump and the timer wheel: delayed jobs made ready on time, expired jobs
//! dropped, wheel seconds opened in batches.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, NewJob,
    keys::{self, SlotKeys},
};
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{
    L, S, consume, counts, expiry_wheel, job, publish, qn, sched, shard, slot, wheel,
};

#[tokio::test]
async fn delayed_jobs_wait_for_the_pump() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let sched = sched(150, 0, 1);
    let id = publish(&s, "q", sched, "later").await;
    let b = slot("q", &id);
    assert_eq!(counts(&s, "q").await.expect("counts").delayed, 1);
    assert!(
        consume(&s, &["q"], 1, 1000)
            .await
            .expect("consume")
            .is_empty()
    );

    let early = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!(early.processed, 0, "nothing is due before its time");
    let due = early.next_due_ms.expect("the slot has a deadline");

    wait_until_async(Duration::from_secs(5), "the job to become due", || async {
        s.timers().pump(b, 100, None).await.expect("pump").to_ready == 1
    })
    .await;
    let got = consume(&s, &["q"], 1, 1000).await.expect("consume");
    assert_eq!(got.len(), 1);
    assert!(
        got[0].job.elapsed_ms >= 150,
        "delivered after its delay: {:?}",
        got[0].job
    );
    assert!(due > 0);
}

#[tokio::test]
async fn one_pump_call_moves_due_jobs_of_several_queues_each_in_due_order() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let b = 0;
    // Two queues that share a slot, their delayed jobs due one after the
    // other (publish order), one of them with a TTL that outlives its delay.
    let mut a_ids = Vec::new();
    let mut b_ids = Vec::new();
    for i in 0..6u64 {
        let j = job(&format!("job {i}"));
        let (queue, ids) = if i % 2 == 0 {
            ("ns/a", &mut a_ids)
        } else {
            ("ns/b", &mut b_ids)
        };
        let ttl = if i == 3 { 60_000 } else { 0 };
        s.jobs()
            .publish(b, queue, &sched(50 + i, ttl, 1), std::slice::from_ref(&j))
            .await
            .expect("publish");
        ids.push(j.id.as_str().to_owned());
    }
    tokio::time::sleep(Duration::from_millis(120)).await; // all six due (the thing under test is time)
    let moved = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!((moved.processed, moved.to_ready), (6, 6));
    let mut r = redis.client();
    let k = SlotKeys::new(b);
    for (queue, ids) in [("ns/a", &a_ids), ("ns/b", &b_ids)] {
        // Consumed from the right: the first due is the first out.
        let mut listed: Vec<String> = r.lrange(k.ready(queue), 0, -1).expect("lrange");
        listed.reverse();
        assert_eq!(&listed, ids, "{queue}");
        let c = s.queues().counts(b, queue).await.expect("counts");
        assert_eq!((c.ready, c.delayed), (3, 0), "{queue}");
    }
    // Only the job with a TTL keeps an entry: its expiry, a minute away,
    // in the wheel.
    let timer: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(timer, 0);
    let expiries = expiry_wheel(&redis, b);
    assert_eq!(expiries.len(), 1, "{expiries:?}");
    assert_eq!(expiries[0].0, b_ids[1]);
    let v = s
        .jobs()
        .peek(b, "ns/b", &JobId::parse(&b_ids[1]).expect("id"))
        .await
        .expect("peek")
        .expect("job");
    assert_eq!(v.state, 2);
    assert!((55_000..=60_000).contains(&v.ttl_ms), "{}", v.ttl_ms);
}

#[tokio::test]
async fn the_pump_drops_expired_jobs_and_fixes_counts() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(0, 20, 1), "x").await;
    wait_until_async(
        Duration::from_secs(5),
        "the pump to drop the job",
        || async {
            s.timers()
                .pump(slot("q", &id), 100, None)
                .await
                .expect("pump")
                .expired
                == 1
        },
    )
    .await;
    assert_eq!(counts(&s, "q").await.expect("counts").live(), 0);
    let mut r = redis.client();
    let n: u64 = r.hlen(SlotKeys::new(slot("q", &id)).jobs()).expect("hlen");
    assert_eq!(n, 0);
}

#[tokio::test]
async fn far_delayed_jobs_wait_in_the_wheel_then_fire_on_time() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let sched = sched(2_300, 0, 1);
    let published = std::time::Instant::now();
    let id = publish(&s, "q", sched, "far").await;
    let b = slot("q", &id);
    let (seconds, queued) = wheel(&redis, b);
    assert_eq!(
        (seconds.len(), queued),
        (1, 1),
        "a far job is in a wheel second"
    );
    let mut r = redis.client();
    let in_timer: Option<f64> = r
        .zscore(SlotKeys::new(b).timer(), id.as_str())
        .expect("zscore");
    assert_eq!(in_timer, None, "and not in the timer zset");
    assert_eq!(counts(&s, "q").await.expect("counts").delayed, 1);

    // The pump wakes 1 s ahead of the wheel second the job is due in, so
    // at least 1 s before the job is due.
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    let wake = o.next_due_ms.expect("a wake-up");
    assert!(wake <= o.now_ms + 1_300, "wake {wake} now {}", o.now_ms);

    wait_until_async(
        Duration::from_secs(10),
        "the job to be moved on time",
        || async { s.timers().pump(b, 100, None).await.expect("pump").to_ready == 1 },
    )
    .await;
    assert!(
        published.elapsed() >= Duration::from_millis(2_300),
        "never early"
    );
    assert_eq!(
        wheel(&redis, b),
        (vec![], 0),
        "the second is gone once opened"
    );
    let got = consume(&s, &["q"], 1, 1000).await.expect("consume");
    assert_eq!(got[0].job.id, id.as_str());
}

#[tokio::test]
async fn a_wheel_second_opened_late_sends_its_due_jobs_straight_to_ready() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let b = 0;
    let q = qn("q");
    // Three far jobs in the wheel; the second's TTL runs out 100 ms after
    // it is due.
    let jobs: Vec<NewJob> = (0..3).map(|i| job(&format!("far {i}"))).collect();
    for (i, j) in jobs.iter().enumerate() {
        let ttl = if i == 1 { 2_300 } else { 0 };
        s.jobs()
            .publish(b, &q, &sched(2_200, ttl, 1), std::slice::from_ref(j))
            .await
            .expect("publish");
    }
    assert_eq!(wheel(&redis, b).1, 3, "in the wheel");
    // No pump ran while they came due (a backlog, or a pump that was down):
    // the first call after opens their second and moves them at once.
    tokio::time::sleep(Duration::from_millis(2_600)).await; // past due and past the TTL (the thing under test is time)
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!((o.to_ready, o.expired), (2, 1), "{o:?}");
    let late = o.now_ms - o.oldest_due_ms.expect("the lateness is known");
    assert!((300..5_000).contains(&late), "{late}");
    assert_eq!(wheel(&redis, b), (vec![], 0), "the second is gone");
    let mut r = redis.client();
    let k = SlotKeys::new(b);
    let timer: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(timer, 0, "no timer entry is left behind");
    let held: u64 = r.hlen(k.jobs()).expect("hlen");
    assert_eq!(held, 2, "the expired record is gone");
    let c = s.queues().counts(b, &q).await.expect("counts");
    assert_eq!((c.ready, c.delayed), (2, 0));
    let got = s.jobs().consume(b, &q, 3, 1_000).await.expect("consume");
    let ids: Vec<&str> = got.iter().map(|d| d.job.id.as_str()).collect();
    assert_eq!(
        ids,
        [jobs[0].id.as_str(), jobs[2].id.as_str()],
        "in due order"
    );
}

#[tokio::test]
async fn a_pump_call_over_large_bodies_writes_in_parts_and_loses_nothing() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let b = 0;
    let q = qn("q");
    // 40 jobs of 256 KiB, due in publish order: 10 MiB of records, so the
    // call writes several times (every 4 MiB) instead of once at the end.
    let body = "x".repeat(256 * 1024);
    let jobs: Vec<NewJob> = (0..40).map(|_| job(&body)).collect();
    for (i, j) in jobs.iter().enumerate() {
        let delay = 50 + i as u64;
        s.jobs()
            .publish(b, &q, &sched(delay, 0, 1), std::slice::from_ref(j))
            .await
            .expect("publish");
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // past every due time
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!((o.processed, o.to_ready), (40, 40), "{o:?}");
    let c = s.queues().counts(b, &q).await.expect("counts");
    assert_eq!((c.delayed, c.ready), (0, 40));
    let mut r = redis.client();
    let k = SlotKeys::new(b);
    let timer: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(timer, 0, "every timer entry is gone");
    let listed: u64 = r.llen(k.ready(&q)).expect("llen");
    assert_eq!(
        listed, 40,
        "each listed once, whatever the number of writes"
    );
    let got = s.jobs().consume(b, &q, 40, 1_000).await.expect("consume");
    let ids: Vec<&str> = got.iter().map(|d| d.job.id.as_str()).collect();
    let want: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, want, "all of them, in due order");
    assert!(got.iter().all(|d| d.job.body.len() == body.len()));
}

#[tokio::test]
async fn a_cancelled_wheel_job_is_skipped_when_its_slot_opens() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let sched = sched(2_100, 0, 1);
    let id = publish(&s, "q", sched, "cancel me").await;
    let b = slot("q", &id);
    assert!(
        s.jobs()
            .delete(slot("q", &id), &qn("q"), &id)
            .await
            .expect("delete")
    );
    assert_eq!(counts(&s, "q").await.expect("counts").live(), 0);
    assert_eq!(
        wheel(&redis, b).1,
        1,
        "a stale entry stays until its second opens"
    );
    wait_until_async(Duration::from_secs(10), "the second to open", || async {
        s.timers().pump(b, 100, None).await.expect("pump");
        wheel(&redis, b) == (vec![], 0)
    })
    .await;
    let mut r = redis.client();
    let timer: u64 = r.zcard(SlotKeys::new(b).timer()).expect("zcard");
    assert_eq!(timer, 0, "the stale entry did not reach the timer");
    assert!(
        consume(&s, &["q"], 1, 1000)
            .await
            .expect("consume")
            .is_empty()
    );
}

#[tokio::test]
async fn a_slot_larger_than_a_batch_opens_over_several_calls() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let b = keys::slot_of("ns", "q", 3, S);
    let jobs: Vec<NewJob> = (0..64)
        .map(|_| NewJob {
            id: JobId::mint_in_lane(false, 3, L),
            attrs: String::new(),
            body: Bytes::from_static(b"x"),
        })
        .collect();
    let sched = sched(2_200, 0, 1);
    s.jobs()
        .publish(b, &qn("q"), &sched, &jobs)
        .await
        .expect("bulk");
    assert_eq!(wheel(&redis, b).1, 64);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut moved = 0;
    while moved < 64 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {moved} of 64 became ready"
        );
        let o = s.timers().pump(b, 10, None).await.expect("pump");
        assert!(o.processed <= 10, "a batch never exceeds its limit");
        moved += o.to_ready;
        if o.processed == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 64);
}
