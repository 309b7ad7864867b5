//! The Lua engine against a real Redis: every state change, checked both
//! through the engine and, with an independent client, in what Redis holds.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.
//! The file is one test binary on purpose: every integration test file is
//! linked on its own, and CI's time goes mostly to linking.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    Counts, Delivery, EngineError, JobId, JobView, MoveMode, NewJob, Schedule, Shard, ShardOptions,
    keys::{self, SlotKeys},
};
use sundial_tests::{RedisServer, wait_until_async};

/// Slots and lanes of the pool these tests play: every slot on this one
/// shard, and queues over several lanes, as the gateway drives them.
const S: u32 = 8;
const L: u32 = 4;

/// The slot of a job of `queue` in namespace `ns`.
fn slot(queue: &str, id: &JobId) -> u32 {
    keys::slot_of("ns", queue, id.lane(L), S)
}

/// `ns/<queue>`.
fn qn(queue: &str) -> String {
    keys::qualified("ns", queue)
}

/// The distinct slots of a queue's lanes.
fn slots_of(queue: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for lane in 0..L {
        let s = keys::slot_of("ns", queue, lane, S);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

async fn counts(s: &Shard, queue: &str) -> Result<Counts, EngineError> {
    let mut total = Counts::default();
    for slot in slots_of(queue) {
        total.add(&s.queues().counts(slot, &qn(queue)).await?);
    }
    Ok(total)
}

/// Queues in priority order, each over its lanes, as the gateway takes.
async fn consume(
    s: &Shard,
    queues: &[&str],
    count: u32,
    ttr_ms: u64,
) -> Result<Vec<Delivery>, EngineError> {
    let mut out = Vec::new();
    for q in queues {
        for slot in slots_of(q) {
            let want = count - out.len() as u32;
            if want == 0 {
                return Ok(out);
            }
            out.extend(s.jobs().consume(slot, &qn(q), want, ttr_ms).await?);
        }
    }
    Ok(out)
}

async fn dead_head(s: &Shard, queue: &str) -> Result<Option<String>, EngineError> {
    let mut best: Option<(String, u64)> = None;
    for slot in slots_of(queue) {
        if let Some(h) = s.dead_letter().head(slot, &qn(queue)).await?
            && best.as_ref().is_none_or(|b| h.1 < b.1)
        {
            best = Some(h);
        }
    }
    Ok(best.map(|b| b.0))
}

async fn respawn(s: &Shard, queue: &str, limit: u64, ttl_ms: u64) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s
            .dead_letter()
            .respawn(slot, &qn(queue), limit - n, ttl_ms)
            .await?;
    }
    Ok(n)
}

async fn dead_delete(s: &Shard, queue: &str, limit: u64) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s.dead_letter().delete(slot, &qn(queue), limit - n).await?;
    }
    Ok(n)
}

async fn destroy(s: &Shard, queue: &str) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s.queues().destroy(slot, &qn(queue)).await?;
    }
    Ok(n)
}

async fn peek_queue(s: &Shard, queue: &str) -> Result<Option<JobView>, EngineError> {
    let mut best: Option<JobView> = None;
    for slot in slots_of(queue) {
        if let Some(j) = s.queues().peek(slot, &qn(queue)).await?
            && best.as_ref().is_none_or(|b| j.elapsed_ms > b.elapsed_ms)
        {
            best = Some(j);
        }
    }
    Ok(best)
}

async fn shard(redis: &RedisServer) -> Shard {
    let s = Shard::connect("test", &ShardOptions::new(redis.url())).expect("connect");
    s.wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    s
}

fn job(body: &str) -> NewJob {
    NewJob {
        id: JobId::mint(false),
        attrs: String::new(),
        body: Bytes::from(body.to_owned()),
    }
}

fn sched(delay_ms: u64, ttl_ms: u64, tries: u16) -> Schedule {
    Schedule {
        delay_ms,
        ttl_ms,
        tries,
    }
}

fn now_sched(tries: u16) -> Schedule {
    Schedule {
        delay_ms: 0,
        ttl_ms: 0,
        tries,
    }
}

async fn publish(s: &Shard, queue: &str, sched: Schedule, body: &str) -> JobId {
    let j = job(body);
    s.jobs()
        .publish(
            slot(queue, &j.id),
            &qn(queue),
            &sched,
            std::slice::from_ref(&j),
        )
        .await
        .expect("publish");
    j.id
}

#[tokio::test]
async fn publish_consume_ack_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(3), "hello").await;

    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.delayed, c.reserved, c.dead), (1, 0, 0, 0));

    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got.len(), 1);
    let d = &got[0];
    assert_eq!(d.job.id, id.as_str());
    assert_eq!(d.job.body, Bytes::from_static(b"hello"));
    assert_eq!(d.job.tries_left, 2);
    assert_eq!(d.job.queue, "ns/q");
    assert_eq!(d.job.queue_name(), "q");
    assert_eq!(d.slot, slot("q", &id));
    assert_eq!(counts(&s, "q").await.expect("counts").reserved, 1);
    // Nothing else to take.
    assert!(
        consume(&s, &["q"], 1, 30_000)
            .await
            .expect("consume")
            .is_empty()
    );

    assert!(
        s.jobs()
            .delete(slot("q", &id), &qn("q"), &id)
            .await
            .expect("ack")
    );
    assert!(
        !s.jobs()
            .delete(slot("q", &id), &qn("q"), &id)
            .await
            .expect("ack twice")
    );

    let k = SlotKeys::new(slot("q", &id));
    let mut r = redis.client();
    let jobs: u64 = r.hlen(k.jobs()).expect("hlen");
    let timer: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(
        (jobs, timer),
        (0, 0),
        "an acked job leaves no record and no timer entry"
    );
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!(c.live(), 0);
    assert_eq!((c.published, c.delivered), (1, 1), "running totals stay");
}

#[tokio::test]
async fn delete_needs_the_right_queue() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(1), "x").await;
    assert!(
        !s.jobs()
            .delete(slot("other", &id), &qn("other"), &id)
            .await
            .expect("delete")
    );
    assert!(
        s.jobs()
            .peek(slot("q", &id), &qn("q"), &id)
            .await
            .expect("peek")
            .is_some()
    );
    assert!(
        s.jobs()
            .peek(slot("other", &id), &qn("other"), &id)
            .await
            .expect("peek")
            .is_none()
    );
}

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
    // Only the job with a TTL keeps a timer entry: its expiry.
    let timer: Vec<(String, f64)> = r.zrange_withscores(k.timer(), 0, -1).expect("zrange");
    assert_eq!(timer.len(), 1, "{timer:?}");
    assert_eq!(timer[0].0, b_ids[1]);
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

#[tokio::test]
async fn expired_jobs_are_skipped_within_the_same_consume() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let short = sched(0, 30, 1);
    let mut expiring = Vec::new();
    for _ in 0..3 {
        expiring.push(publish(&s, "q", short, "old").await);
    }
    let keeper = publish(&s, "q", now_sched(1), "new").await;
    // Deleted before anyone consumed it: a stale list entry.
    let recalled = publish(&s, "q", now_sched(1), "recalled").await;
    assert!(
        s.jobs()
            .delete(slot("q", &recalled), &qn("q"), &recalled)
            .await
            .expect("delete")
    );
    tokio::time::sleep(Duration::from_millis(60)).await; // let the TTL pass (the thing under test is time)
    let got = consume(&s, &["q"], 10, 1000).await.expect("consume");
    assert_eq!(got.len(), 1, "only the live job is delivered: {got:?}");
    assert_eq!(got[0].job.id, keeper.as_str());
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!(
        (c.ready, c.reserved),
        (0, 1),
        "size counts only jobs that still exist"
    );
    let mut r = redis.client();
    let held: u64 = r
        .hlen(SlotKeys::new(slot("q", &keeper)).jobs())
        .expect("hlen");
    assert_eq!(held, 1, "the expired records went with their consume");
}

#[tokio::test]
async fn a_consumed_job_carries_its_record_and_an_id_listed_twice_is_taken_once() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let j = NewJob {
        id: JobId::mint(false),
        attrs: r#"{"k":"v"}"#.to_owned(),
        body: Bytes::from_static(b"with attributes"),
    };
    let b = slot("q", &j.id);
    s.jobs()
        .publish(b, &qn("q"), &sched(0, 60_000, 3), std::slice::from_ref(&j))
        .await
        .expect("publish");
    // The same id listed again (as a ready list may hold a stale entry).
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    let _: () = r.lpush(k.ready(&qn("q")), j.id.as_str()).expect("lpush");
    tokio::time::sleep(Duration::from_millis(20)).await; // some time since publish (the thing under test)
    let got = s
        .jobs()
        .consume(b, &qn("q"), 5, 30_000)
        .await
        .expect("consume");
    assert_eq!(got.len(), 1, "taken once: {got:?}");
    let v = &got[0].job;
    assert_eq!(
        (
            v.id.as_str(),
            v.queue.as_str(),
            v.attrs.as_str(),
            &v.body[..]
        ),
        (
            j.id.as_str(),
            "ns/q",
            r#"{"k":"v"}"#,
            &b"with attributes"[..]
        )
    );
    assert_eq!((v.tries_left, v.state), (2, 3));
    assert!(got[0].first);
    assert!((20..5_000).contains(&v.elapsed_ms), "{}", v.elapsed_ms);
    assert!((55_000..=60_000).contains(&v.ttl_ms), "{}", v.ttl_ms);
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.reserved, c.delivered), (0, 1, 1));
    // Given back (as for a consumer that left), then taken again: not its
    // first delivery, and the try it did not use is back.
    assert!(s.jobs().release(&got[0]).await.expect("release"));
    let again = s
        .jobs()
        .consume(b, &qn("q"), 1, 30_000)
        .await
        .expect("consume");
    assert_eq!(again.len(), 1);
    assert!(!again[0].first, "not its first delivery");
    assert_eq!(again[0].job.tries_left, 2, "a released try is given back");
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
async fn bulk_publish_is_all_or_nothing() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let taken = publish(&s, "q", now_sched(1), "first").await;
    let b = slot("q", &taken);
    let lane = taken.lane(L);
    let mut jobs: Vec<NewJob> = (0..3)
        .map(|_| NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from_static(b"bulk"),
        })
        .collect();
    jobs.push(NewJob {
        id: taken.clone(),
        attrs: String::new(),
        body: Bytes::from_static(b"clash"),
    });
    let err = s
        .jobs()
        .publish(b, &qn("q"), &now_sched(1), &jobs)
        .await
        .expect_err("an id clash fails the whole batch");
    assert!(matches!(err, EngineError::Exists { .. }), "{err:?}");
    let mut r = redis.client();
    let n: u64 = r.hlen(SlotKeys::new(b).jobs()).expect("hlen");
    assert_eq!(n, 1, "nothing of the failed batch was stored");
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 1);

    jobs.pop();
    s.jobs()
        .publish(b, &qn("q"), &now_sched(1), &jobs)
        .await
        .expect("bulk");
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 4);
}

#[tokio::test]
async fn a_bulk_larger_than_one_write_is_stored_whole_and_in_order() {
    // 2,500 jobs: more than one HMGET, HSET, LPUSH and ZADD of `publish.lua`
    // carries (1,000 entries each), so the writes go in pieces.
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let lane = 0;
    let jobs: Vec<NewJob> = (0..2_500)
        .map(|i| NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from(format!("b{i}")),
        })
        .collect();
    let b = slot("q", &jobs[0].id);
    s.jobs()
        .publish(b, &qn("q"), &sched(0, 60_000, 1), &jobs)
        .await
        .expect("bulk");
    let mut r = redis.client();
    let k = SlotKeys::new(b);
    let n: u64 = r.hlen(k.jobs()).expect("hlen");
    assert_eq!(n, 2_500);
    let expiries: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(expiries, 2_500, "every job's expiry is on the timer");
    // The list is consumed from the right: its reverse is publish order.
    let mut listed: Vec<String> = r.lrange(k.ready(&qn("q")), 0, -1).expect("lrange");
    listed.reverse();
    let ids: Vec<String> = jobs.iter().map(|j| j.id.as_str().to_owned()).collect();
    assert_eq!(listed, ids);
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 2_500);
    let got = consume(&s, &["q"], 3, 1000).await.expect("consume");
    let bodies: Vec<&[u8]> = got.iter().map(|d| d.job.body.as_ref()).collect();
    assert_eq!(bodies, [b"b0".as_ref(), b"b1", b"b2"]);
}

#[tokio::test]
async fn one_call_of_publications_with_different_schedules_keeps_each_schedule() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let b = 0;
    let plain = job("plain");
    let expiring = job("expiring");
    let delayed = job("delayed");
    let also_plain = job("also plain");
    let one = |schedule, j: &NewJob| sundial_core::Publication {
        schedule,
        jobs: vec![j.clone()],
    };
    let stored = s
        .jobs()
        .publish_many(
            b,
            &qn("q"),
            &[
                one(sched(0, 0, 1), &plain),
                one(sched(0, 60_000, 2), &expiring),
                one(sched(5_000, 0, 3), &delayed),
                one(sched(0, 0, 1), &also_plain),
            ],
        )
        .await
        .expect("publish");
    assert_eq!(stored, vec![true; 4]);
    let c = s.queues().counts(b, &qn("q")).await.expect("counts");
    assert_eq!((c.ready, c.delayed, c.published), (3, 1, 4));
    let q = qn("q");
    let peek = |j: &NewJob| {
        let id = j.id.clone();
        let (s, q) = (&s, &q);
        async move { s.jobs().peek(b, q, &id).await }
    };
    let v = peek(&plain).await.expect("peek").expect("plain");
    assert_eq!((v.ttl_ms, v.tries_left, v.state), (0, 1, 2));
    let v = peek(&expiring).await.expect("peek").expect("expiring");
    assert!((55_000..=60_000).contains(&v.ttl_ms), "{}", v.ttl_ms);
    assert_eq!((v.tries_left, v.state), (2, 2));
    let v = peek(&delayed).await.expect("peek").expect("delayed");
    assert_eq!((v.ttl_ms, v.tries_left, v.state), (0, 3, 1));
    // On the timer: the expiring job's expiry, and nothing for the plain
    // ones (the delayed one waits in the wheel: 5 s is not near).
    let mut r = redis.client();
    let timer: Vec<(String, f64)> = r
        .zrange_withscores(SlotKeys::new(b).timer(), 0, -1)
        .expect("zrange");
    assert_eq!(timer.len(), 1, "{timer:?}");
    assert_eq!(timer[0].0, expiring.id.as_str());
    let got = s
        .jobs()
        .consume(b, &qn("q"), 3, 30_000)
        .await
        .expect("consume");
    let bodies: Vec<&[u8]> = got.iter().map(|d| &d.job.body[..]).collect();
    assert_eq!(bodies, [&b"plain"[..], b"expiring", b"also plain"]);
}

#[tokio::test]
async fn republish_replaces_atomically() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let old = publish(&s, "q", now_sched(1), "v1").await;
    let b = slot("q", &old);
    let new = NewJob {
        id: JobId::mint_in_lane(false, old.lane(L), L),
        attrs: String::new(),
        body: Bytes::from_static(b"v2"),
    };
    let sched = sched(0, 0, 2);
    assert!(
        s.jobs()
            .republish(b, &qn("q"), &old, &sched, &new)
            .await
            .expect("republish")
    );
    assert!(
        s.jobs()
            .peek(slot("q", &old), &qn("q"), &old)
            .await
            .expect("peek")
            .is_none()
    );
    let got = consume(&s, &["q"], 10, 1000).await.expect("consume");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].job.body, Bytes::from_static(b"v2"));
    assert_eq!(got[0].job.tries_left, 1);
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

#[tokio::test]
async fn release_gives_the_job_and_its_try_back() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(1), "x").await;
    let d = consume(&s, &["q"], 1, 60_000).await.expect("consume");
    assert!(s.jobs().release(&d[0]).await.expect("release"));
    assert!(
        !s.jobs().release(&d[0]).await.expect("release twice"),
        "fenced"
    );
    let again = consume(&s, &["q"], 1, 60_000).await.expect("consume");
    assert_eq!(again[0].job.id, id.as_str());
    assert_eq!(again[0].job.tries_left, 0);
}

#[tokio::test]
async fn startup_check_refuses_evicting_redis_and_layout_changes() {
    let evicting = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let s = shard(&evicting).await;
    let err = s.check(S, L).await.expect_err("allkeys-lru loses jobs");
    assert!(err.to_string().contains("noeviction"), "{err}");
    let volatile = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let s = shard(&volatile).await;
    let err = s.check(S, L).await.expect_err("volatile-lru loses views");
    assert!(err.to_string().contains("volatile-lru"), "{err}");

    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let ok = s.check(S, L).await.expect("a safe shard");
    assert_eq!(ok.maxmemory_policy, "noeviction");
    assert!(!ok.aof_enabled);
    let err = s
        .check(S * 2, L)
        .await
        .expect_err("the slot count is pinned");
    assert!(err.to_string().contains("cannot change"), "{err}");
    let err = s
        .check(S, L + 1)
        .await
        .expect_err("the lane count is pinned");
    assert!(err.to_string().contains("lanes"), "{err}");
    let format: u32 = redis
        .client()
        .hget(keys::META, keys::META_FORMAT)
        .expect("hget");
    assert_eq!(format, keys::FORMAT, "the data format is recorded");

    // A shard written by format 1 (per-namespace buckets) is refused with
    // what to do, and nothing is written to it.
    let old = RedisServer::start();
    let _: () = old
        .client()
        .hset(keys::META, keys::META_BUCKETS_V1, 16)
        .expect("hset");
    let s = shard(&old).await;
    let err = s.check(S, L).await.expect_err("format 1");
    assert!(err.to_string().contains("format 1"), "{err}");
    assert!(err.to_string().contains("OPERATIONS"), "{err}");
    let fields: Vec<String> = old.client().hkeys(keys::META).expect("hkeys");
    assert_eq!(fields, [keys::META_BUCKETS_V1]);
    let _: () = old
        .client()
        .hset(keys::META, keys::META_FORMAT, 3)
        .expect("hset");
    let err = s.check(S, L).await.expect_err("a later format");
    assert!(err.to_string().contains("format 3"), "{err}");
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    s.load_scripts().await.expect("load");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut redis.client())
        .expect("flush");
    publish(&s, "q", now_sched(1), "x").await;
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 1);
}

#[tokio::test]
async fn a_dead_shard_is_unavailable_not_a_panic() {
    let mut redis = RedisServer::start();
    let s = shard(&redis).await;
    redis.kill();
    let err = counts(&s, "q").await.expect_err("redis is gone");
    assert!(err.is_unavailable(), "{err:?}");
    redis.restart();
    s.wait_connected(Duration::from_secs(10))
        .await
        .expect("reconnects by itself");
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 0);
}

/// The wheel seconds of a slot and the ids they hold, read with the
/// independent client.
fn wheel(redis: &RedisServer, b: u32) -> (Vec<String>, u64) {
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    let seconds: Vec<String> = r.zrange(k.wheel_index(), 0, -1).expect("zrange");
    let queued: u64 = seconds
        .iter()
        .map(|s| {
            r.llen::<_, u64>(k.wheel(s.parse().expect("second")))
                .expect("llen")
        })
        .sum();
    (seconds, queued)
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

#[tokio::test]
async fn holds_jobs_sees_live_jobs_only() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(!s.slots().hold_jobs(S).await.expect("empty shard"));
    let id = publish(&s, "q", now_sched(1), "x").await;
    assert!(s.slots().hold_jobs(S).await.expect("one job"));
    assert!(
        s.jobs()
            .delete(slot("q", &id), &qn("q"), &id)
            .await
            .expect("delete")
    );
    assert!(
        !s.slots().hold_jobs(S).await.expect("acked"),
        "a queue that had jobs but has none"
    );
}

#[tokio::test]
async fn a_lease_has_one_owner_and_passes_to_the_process_that_ranks_first() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let (live, rejoined) = s.leases().heartbeat("p1", 5_000).await.expect("p1");
    assert_eq!(live, ["p1"]);
    assert!(rejoined, "a first heartbeat joins");
    assert!(
        !s.leases().heartbeat("p1", 5_000).await.expect("p1").1,
        "then renews"
    );
    assert!(
        s.leases()
            .claim(0, "p1")
            .await
            .expect("p1 takes a free lease")
    );
    assert!(!s.leases().claim(0, "p1").await.expect("already p1's"));
    let (live, _) = s.leases().heartbeat("p2", 5_000).await.expect("p2");
    assert_eq!(live.len(), 2);
    // p2 ranks first for slot 0 in its view: it takes the lease, whoever
    // holds it; p1 then moves nothing there (fencing).
    assert!(s.leases().claim(0, "p2").await.expect("p2 takes it"));
    let mut r = redis.client();
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder.as_deref(), Some("p2"));
    assert!(
        s.timers()
            .pump(0, 100, Some("p1"))
            .await
            .expect("pump")
            .fenced
    );
    assert!(
        !s.timers()
            .pump(0, 100, Some("p2"))
            .await
            .expect("pump")
            .fenced
    );
    // Giving up is compare-and-delete: only the holder's does anything.
    s.leases().give(0, "p1", None).await.expect("give");
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder.as_deref(), Some("p2"));
    s.leases().give(0, "p2", None).await.expect("give");
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder, None, "given up");
    assert!(s.leases().claim(1, "p2").await.expect("p2"));
    // Leaving the live set.
    s.leases().leave("p1").await.expect("leave");
    assert_eq!(
        s.leases().heartbeat("p2", 5_000).await.expect("p2").0,
        ["p2"]
    );
    let keys: Vec<String> = r.keys("sd:*").expect("keys");
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["sd:pumps", "sd:{1}:lease"],
        "one key per leased slot and one per shard, and no expiring key to renew"
    );
}

#[tokio::test]
async fn a_lease_whose_holder_paused_passes_and_its_old_owner_is_fenced() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(50, 0, 1), "x").await;
    let b = slot("q", &id);
    s.leases().heartbeat("old", 100).await.expect("old");
    assert!(s.leases().claim(b, "old").await.expect("old"));
    // The old owner pauses past its heartbeat; the new one, now first among
    // the live, takes over.
    wait_until_async(
        Duration::from_secs(5),
        "the old heartbeat to lapse",
        || async { s.leases().heartbeat("new", 5_000).await.expect("new").0 == ["new"] },
    )
    .await;
    assert!(s.leases().claim(b, "new").await.expect("new"));
    tokio::time::sleep(Duration::from_millis(60)).await; // let the job fall due
    let (_, rejoined) = s.leases().heartbeat("old", 100).await.expect("old");
    assert!(rejoined, "the old owner learns that it had lapsed");
    let o = s.timers().pump(b, 100, Some("old")).await.expect("pump");
    assert!(o.fenced, "the old owner moves nothing");
    assert_eq!(counts(&s, "q").await.expect("counts").delayed, 1);
    let o = s.timers().pump(b, 100, Some("new")).await.expect("pump");
    assert!(!o.fenced);
    assert_eq!(o.to_ready, 1);
}

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

#[tokio::test]
async fn a_token_is_rehashed_with_its_limit_and_never_brought_back_once_revoked() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut c = redis.client();
    let _: () = c.hset("sd:tokens", "p/ns/plain", "old").expect("HSET");
    let _: () = c.hset("sd:limits", "p/ns/plain", "{}").expect("HSET");
    let (plain, hashed) = ("p/ns/plain", "p/ns/sha256:abc");
    assert!(
        s.admin()
            .token_rehash(plain, hashed, "{\"description\":\"old\"}")
            .await
            .expect("rehash")
    );
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    let limits: Vec<(String, String)> = c.hgetall("sd:limits").expect("HGETALL");
    assert_eq!(
        tokens,
        [(hashed.to_owned(), "{\"description\":\"old\"}".to_owned())]
    );
    assert_eq!(limits, [(hashed.to_owned(), "{}".to_owned())]);
    let version: i64 = c.get("sd:tokens:version").expect("GET");
    assert_eq!(version, 1);
    // Revoked before the rewrite reaches it: nothing is written.
    let _: () = c.hdel("sd:tokens", hashed).expect("HDEL");
    assert!(
        !s.admin()
            .token_rehash(plain, hashed, "{}")
            .await
            .expect("rehash")
    );
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    assert!(tokens.is_empty(), "{tokens:?}");
    let version: i64 = c.get("sd:tokens:version").expect("GET");
    assert_eq!(version, 1, "no change, no new version");
}

/// A shard named `name` (the mover records its destination by name).
async fn named_shard(redis: &RedisServer, name: &str) -> Shard {
    let s = Shard::connect(name, &ShardOptions::new(redis.url())).expect("connect");
    s.wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    s
}

/// Publishes one job into lane 0 of `queue` (so that all share one slot).
async fn publish_one(s: &Shard, queue: &str, sched: Schedule, attrs: &str, body: &str) -> JobId {
    let job = NewJob {
        id: JobId::mint_in_lane(false, 0, L),
        attrs: attrs.to_owned(),
        body: Bytes::from(body.to_owned()),
    };
    s.jobs()
        .publish(
            keys::slot_of("ns", queue, 0, S),
            &qn(queue),
            &sched,
            std::slice::from_ref(&job),
        )
        .await
        .expect("publish");
    job.id
}

/// Moves everything of `slot` from `a` to `b` as the mover does, in
/// batches of `batch`, letting each batch go at once, and the running
/// totals once the slot is clear at `a`; returns the jobs copied.
async fn move_all(a: &Shard, b: &Shard, slot: u32, owner: &str, batch: u32) -> u64 {
    let (mut cursor, mut copied) = ("0".to_owned(), 0);
    for _ in 0..1000 {
        let t = a
            .mover()
            .take(
                slot,
                owner,
                Duration::from_secs(30),
                MoveMode::Take,
                batch,
                b.name(),
                &cursor,
                "",
            )
            .await
            .expect("move out")
            .expect("lease");
        if t.cleared {
            b.mover().add_totals(slot, &t.totals).await.expect("totals");
            return copied;
        }
        copied += b
            .mover()
            .store(slot, t.now_ms, &t.jobs, true)
            .await
            .expect("move in")
            .copied;
        let ids: Vec<String> = t.jobs.iter().map(|j| j.id.clone()).collect();
        assert_eq!(
            a.mover().done(slot, &ids).await.expect("done"),
            (ids.len() as u64, Vec::new())
        );
        let marks: Vec<_> = t.jobs.iter().map(|j| j.mark()).collect();
        b.mover().unmark(slot, &marks).await.expect("unmark");
        cursor = t.cursor;
    }
    panic!("the slot never cleared");
}

/// The shard's clock, ms.
fn redis_now_ms(r: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(r).expect("time");
    s * 1000 + us / 1000
}

#[tokio::test]
async fn a_moved_slot_arrives_whole_with_every_job_as_it_was() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (named_shard(&ra, "p/a").await, named_shard(&rb, "p/b").await);
    let q = "mv";
    let sl = keys::slot_of("ns", q, 0, S);
    // Two dead jobs (one try, TTR run out, pumped).
    let mut dead = Vec::new();
    for i in 0..2 {
        dead.push(publish_one(&a, q, now_sched(1), "", &format!("dead-{i}")).await);
    }
    assert_eq!(
        a.jobs()
            .consume(sl, &qn(q), 2, 1)
            .await
            .expect("consume")
            .len(),
        2
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(a.timers().pump(sl, 100, None).await.expect("pump").dead, 2);
    // Three reserved for a minute, with tries left.
    let mut reserved = Vec::new();
    for i in 0..3 {
        reserved.push(publish_one(&a, q, sched(0, 3_600_000, 3), "", &format!("res-{i}")).await);
    }
    assert_eq!(
        a.jobs()
            .consume(sl, &qn(q), 3, 60_000)
            .await
            .expect("consume")
            .len(),
        3
    );
    // Six ready, in publish order; some with attributes and a TTL.
    let mut ready = Vec::new();
    for i in 0..6 {
        let (attrs, ttl) = if i % 2 == 0 {
            (r#"{"k":"v"}"#, 3_600_000)
        } else {
            ("", 0)
        };
        ready.push(publish_one(&a, q, sched(0, ttl, 2), attrs, &format!("ready-{i}")).await);
    }
    // Four delayed by an hour (in the timer wheel).
    let mut delayed = Vec::new();
    for i in 0..4 {
        delayed.push(
            publish_one(
                &a,
                q,
                sched(3_600_000, 0, 4),
                r#"{"d":1}"#,
                &format!("del-{i}"),
            )
            .await,
        );
    }
    let all: Vec<&JobId> = dead
        .iter()
        .chain(&reserved)
        .chain(&ready)
        .chain(&delayed)
        .collect();
    let mut before = Vec::new();
    for id in &all {
        before.push(
            a.jobs()
                .peek(sl, &qn(q), id)
                .await
                .expect("peek")
                .expect("there"),
        );
    }
    let mut ra_c = ra.client();
    let deadline_a: u64 = ra_c
        .zscore(SlotKeys::new(sl).timer(), reserved[0].as_str())
        .expect("zscore");
    let left_a = deadline_a - redis_now_ms(&mut ra_c);

    // Batches of 4: the lists move over several calls.
    assert_eq!(move_all(&a, &b, sl, "mover", 4).await, 15);

    for (id, was) in all.iter().zip(&before) {
        let now = b
            .jobs()
            .peek(sl, &qn(q), id)
            .await
            .expect("peek")
            .expect("moved");
        assert_eq!(
            (&now.state, &now.tries_left, &now.attrs, &now.body),
            (&was.state, &was.tries_left, &was.attrs, &was.body),
            "{id}"
        );
        assert!(
            now.ttl_ms <= was.ttl_ms && was.ttl_ms - now.ttl_ms < 2_000,
            "{id}: ttl kept"
        );
        assert!(
            now.elapsed_ms >= was.elapsed_ms && now.elapsed_ms - was.elapsed_ms < 2_000,
            "{id}: age kept"
        );
    }
    let c = counts(&b, q).await.expect("counts");
    assert_eq!((c.delayed, c.ready, c.reserved, c.dead), (4, 6, 3, 2));
    // The running totals came along: 15 published, 5 delivered.
    assert_eq!((c.published, c.delivered), (15, 5));
    assert_eq!(counts(&a, q).await.expect("counts").live(), 0);
    // The reservation's deadline, moved onto the new shard's clock.
    let mut rb_c = rb.client();
    let deadline_b: u64 = rb_c
        .zscore(SlotKeys::new(sl).timer(), reserved[0].as_str())
        .expect("zscore");
    let left_b = deadline_b - redis_now_ms(&mut rb_c);
    assert!(
        left_b <= left_a && left_a - left_b < 2_000,
        "TTR kept: {left_a} then {left_b}"
    );
    // The delayed jobs wait in the new shard's wheel.
    assert_eq!(wheel(&rb, sl).1, 4);
    // Ready jobs come out in publish order.
    let got: Vec<String> = b
        .jobs()
        .consume(sl, &qn(q), 10, 1_000)
        .await
        .expect("consume")
        .into_iter()
        .map(|d| d.job.id)
        .collect();
    let want: Vec<String> = ready.iter().map(|id| id.as_str().to_owned()).collect();
    assert_eq!(got, want);
    // The old shard keeps nothing of the slot.
    let left: Vec<String> = ra_c.keys(format!("sd:{{{sl}}}:*")).expect("keys");
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_take_of_large_jobs_stops_at_its_byte_budget_and_the_slot_still_moves_whole() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (named_shard(&ra, "p/a").await, named_shard(&rb, "p/b").await);
    let q = "big";
    let sl = keys::slot_of("ns", q, 0, S);
    // Twelve jobs of 1 MiB: six ready, six delayed by an hour.
    let body = |i: usize| format!("{i:02}{}", "x".repeat((1 << 20) - 2));
    let mut ids = Vec::new();
    for i in 0..12 {
        let at = if i < 6 { 0 } else { 3_600_000 };
        ids.push(publish_one(&a, q, sched(at, 0, 2), "", &body(i)).await);
    }
    let t = a
        .mover()
        .take(
            sl,
            "m",
            Duration::from_secs(30),
            MoveMode::Take,
            500,
            b.name(),
            "0",
            "",
        )
        .await
        .expect("move out")
        .expect("lease");
    let bytes: usize = t.jobs.iter().map(|j| j.size()).sum();
    assert!(
        (1..12).contains(&t.jobs.len()) && bytes < sundial_core::PAGE_BYTES + (2 << 20),
        "{} jobs, {bytes} bytes in one take",
        t.jobs.len()
    );
    // The rest follows in later takes; each job arrives once, whole.
    let copied = b
        .mover()
        .store(sl, t.now_ms, &t.jobs, true)
        .await
        .expect("copy")
        .copied;
    let went: Vec<String> = t.jobs.iter().map(|j| j.id.clone()).collect();
    a.mover().done(sl, &went).await.expect("done");
    assert_eq!(copied + move_all(&a, &b, sl, "m", 500).await, 12);
    for (i, id) in ids.iter().enumerate() {
        let j = b
            .jobs()
            .peek(sl, &qn(q), id)
            .await
            .expect("peek")
            .expect("moved");
        assert_eq!(j.body, Bytes::from(body(i)), "job {i}");
    }
    let left: u64 = ra.client().hlen(SlotKeys::new(sl).jobs()).expect("hlen");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_move_cut_at_any_step_ends_with_every_job_once() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (named_shard(&ra, "p/a").await, named_shard(&rb, "p/b").await);
    let q = "cut";
    let sl = keys::slot_of("ns", q, 0, S);
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(publish_one(&a, q, now_sched(2), "", &format!("j{i}")).await);
    }
    let lease = Duration::from_millis(300);
    let out = |owner: &'static str, mode, limit| {
        let (a, name) = (&a, b.name().to_owned());
        async move {
            a.mover()
                .take(sl, owner, lease, mode, limit, &name, "0", "")
                .await
                .expect("move out")
        }
    };
    // Mover 1 takes four jobs out, then dies before it copies them.
    let t1 = out("m1", MoveMode::Take, 4).await.expect("lease");
    assert_eq!(t1.jobs.len(), 4);
    // While its lease lives, nobody else moves the slot.
    assert_eq!(out("m2", MoveMode::Take, 4).await, Err("m1".to_owned()));
    // A job in transit is still found by id, and its ack counts.
    let in_transit = JobId::parse(&t1.jobs[0].id).expect("id");
    assert!(
        a.jobs()
            .peek(sl, &qn(q), &in_transit)
            .await
            .expect("peek")
            .is_some()
    );
    assert!(a.jobs().delete(sl, &qn(q), &in_transit).await.expect("ack"));
    assert!(
        a.jobs()
            .peek(sl, &qn(q), &in_transit)
            .await
            .expect("peek")
            .is_none()
    );
    assert!(
        !a.jobs()
            .delete(sl, &qn(q), &in_transit)
            .await
            .expect("ack twice")
    );
    // The lease lapses; mover 2 reads back what is in transit and copies it.
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    let p = out("m2", MoveMode::Pending, 100).await.expect("lease");
    assert_eq!(p.jobs.len(), 4);
    let keep = true;
    let c = b
        .mover()
        .store(sl, p.now_ms, &p.jobs, keep)
        .await
        .expect("copy");
    assert_eq!((c.copied, c.skipped), (3, 1), "the acked job is not copied");
    // The new shard restarts without its last writes: copied again, once.
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut rb.client())
        .expect("flush");
    let c = b
        .mover()
        .store(sl, p.now_ms, &p.jobs, keep)
        .await
        .expect("copy");
    assert_eq!(c.copied, 3);
    // The mover dies after copying; the next copies nothing twice.
    let c = b
        .mover()
        .store(sl, p.now_ms, &p.jobs, keep)
        .await
        .expect("copy");
    assert_eq!(c.copied, 0);
    // A copy acked at the new shard is not brought back by a late copy.
    let copied_id = p
        .jobs
        .iter()
        .map(|j| JobId::parse(&j.id).expect("id"))
        .find(|id| *id != in_transit)
        .expect("a copied job");
    assert!(
        b.jobs()
            .delete(sl, &qn(q), &copied_id)
            .await
            .expect("ack copy")
    );
    assert_eq!(
        b.mover()
            .store(sl, p.now_ms, &p.jobs, keep)
            .await
            .expect("copy")
            .copied,
        0
    );
    // The entries go; the job acked in transit comes back for its copy to
    // be deleted (it has none), then its mark goes.
    let ids_p: Vec<String> = p.jobs.iter().map(|j| j.id.clone()).collect();
    let (went, deleted) = a.mover().done(sl, &ids_p).await.expect("done");
    assert_eq!(went, 3, "the three copied");
    let deleted: Vec<_> = deleted
        .into_iter()
        .map(|(id, m)| (id, m.queue, m.dest, m.acked))
        .collect();
    assert_eq!(
        deleted,
        vec![(in_transit.clone(), qn(q), b.name().to_owned(), true)],
        "the mark tells where the copy went"
    );
    assert!(
        !b.jobs()
            .delete(sl, &qn(q), &in_transit)
            .await
            .expect("no copy")
    );
    a.mover()
        .forget(sl, &[in_transit.as_str().to_owned()])
        .await
        .expect("forget");
    // The rest moves; every job but the two acked is at the new shard once.
    assert_eq!(move_all(&a, &b, sl, "m2", 3).await, 6);
    let mut rb_c = rb.client();
    let there: std::collections::BTreeSet<String> =
        rb_c.hkeys(SlotKeys::new(sl).jobs()).expect("hkeys");
    let want: std::collections::BTreeSet<String> = ids
        .iter()
        .filter(|id| **id != in_transit && **id != copied_id)
        .map(|id| id.as_str().to_owned())
        .collect();
    assert_eq!(there, want);
    assert_eq!(counts(&b, q).await.expect("counts").ready, 8);
    let left: Vec<String> = ra.client().keys(format!("sd:{{{sl}}}:*")).expect("keys");
    assert!(left.is_empty(), "{left:?}");
}

/// The copy mark of `id` in `slot` (its take's tag), as Redis holds it.
fn copy_mark(r: &RedisServer, slot: u32, id: &str) -> Option<u64> {
    let score: Option<f64> = r
        .client()
        .zscore(SlotKeys::new(slot).copies(), id)
        .expect("zscore");
    score.map(|s| s as u64)
}

#[tokio::test]
async fn a_mark_left_by_a_dead_mover_never_hides_a_later_move_of_the_same_job() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (named_shard(&ra, "p/a").await, named_shard(&rb, "p/b").await);
    let q = "back";
    let sl = keys::slot_of("ns", q, 0, S);
    let id = publish_one(&a, q, now_sched(0), "", "away and back").await;
    let lease = Duration::from_secs(30);
    let take = |from: &Shard, to: &Shard| {
        let (from, to) = (from.clone(), to.name().to_owned());
        async move {
            from.mover()
                .take(sl, "m", lease, MoveMode::Take, 10, &to, "0", "")
                .await
                .expect("move out")
                .expect("lease")
        }
    };
    // Steps 2 and 3 of a take, a to b.
    let copy = |t: &sundial_core::Taken| {
        let (b, now, jobs) = (&b, t.now_ms, t.jobs.clone());
        async move {
            b.mover()
                .store(sl, now, &jobs, true)
                .await
                .expect("copy")
                .copied
        }
    };
    let done = || async {
        let (went, acked) = a
            .mover()
            .done(sl, &[id.as_str().to_owned()])
            .await
            .expect("done");
        assert!(acked.is_empty());
        went
    };
    // a → b: copied and let go, but the mover dies before step 4: its
    // mark stays at b.
    let t1 = take(&a, &b).await;
    assert_eq!(t1.jobs.len(), 1);
    assert_eq!(copy(&t1).await, 1);
    assert_eq!(done().await, 1);
    assert_eq!(copy_mark(&rb, sl, id.as_str()), Some(t1.jobs[0].tag));
    // b → a (the slot moved back), all four steps.
    assert_eq!(move_all(&b, &a, sl, "m", 10).await, 1);
    // a → b again: the stale mark is of another take, and the job arrives.
    let t3 = take(&a, &b).await;
    assert_eq!(t3.jobs.len(), 1);
    assert_ne!(t3.jobs[0].tag, t1.jobs[0].tag);
    assert_eq!(copy(&t3).await, 1);
    assert_eq!(copy_mark(&rb, sl, id.as_str()), Some(t3.jobs[0].tag));
    // A late step 4 of the first take leaves the new mark alone, so the
    // new copy, once acked, is not brought back by a copy sent again.
    b.mover()
        .unmark(sl, &[t1.jobs[0].mark()])
        .await
        .expect("late unmark");
    assert_eq!(copy_mark(&rb, sl, id.as_str()), Some(t3.jobs[0].tag));
    assert!(
        b.jobs()
            .delete(sl, &qn(q), &id)
            .await
            .expect("ack the copy")
    );
    assert_eq!(copy(&t3).await, 0, "sent again, skipped");
    assert_eq!(done().await, 1);
    b.mover()
        .unmark(sl, &[t3.jobs[0].mark()])
        .await
        .expect("unmark");
    assert_eq!(copy_mark(&rb, sl, id.as_str()), None);
    assert_eq!(counts(&b, q).await.expect("counts").ready, 0);
}
