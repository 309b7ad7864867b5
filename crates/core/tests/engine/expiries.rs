//! The expiry wheel: a ready or dead job's expiry that is not near waits in
//! the hash of its wheel second, not on the timer; it still goes on time,
//! never early, and leaves the wheel with the job.

use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, NewJob, Release, Released, Shard,
    keys::{self, SlotKeys},
};
use sundial_tests::RedisServer;

use crate::helpers::{
    L, S, consume, counts, destroy, expiry_wheel, publish, qn, respawn, sched, shard, slot,
};

/// `n` jobs of body "x" in lane `lane`, for one bulk publish.
fn bulk(n: usize, lane: u32) -> Vec<NewJob> {
    (0..n)
        .map(|_| NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from_static(b"x"),
        })
        .collect()
}

/// Pumps slot `b` in batches of `limit` until `n` jobs expired in all;
/// each call opens or handles at most `limit` entries.
async fn pump_until_expired(s: &Shard, b: u32, limit: u32, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut expired = 0;
    while expired < n {
        assert!(Instant::now() < deadline, "only {expired} of {n} expired");
        let o = s.timers().pump(b, limit, None).await.expect("pump");
        assert!(
            o.processed <= u64::from(limit),
            "a batch never exceeds its limit"
        );
        expired += o.expired;
        if o.processed == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(expired, n, "no more than {n} expired");
}

/// Releases reserved job `id` of `queue` in slot `b` with no delay,
/// spending its try.
async fn release_now(s: &Shard, b: u32, queue: &str, id: &str) -> Released {
    let release = Release {
        id: id.to_owned(),
        delivery: None,
        delay_ms: Some(0),
        default_delay_ms: 0,
        spend_try: true,
        reason: None,
    };
    s.jobs()
        .release(b, &qn(queue), &release)
        .await
        .expect("release")
}

/// Asserts that slot `b` keeps no timer entry, wheel second or expiry.
fn assert_no_timers(redis: &RedisServer, b: u32) {
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    let timed: u64 = r.zcard(k.timer()).expect("zcard");
    let seconds: u64 = r.zcard(k.wheel_index()).expect("zcard");
    assert_eq!((timed, seconds), (0, 0), "timer entries, wheel seconds");
    assert_eq!(expiry_wheel(redis, b), vec![]);
}

#[tokio::test]
async fn a_far_expiry_waits_in_the_wheel_then_goes_on_time_never_early() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let published = Instant::now();
    let id = publish(&s, "q", sched(0, 4_000, 1), "x").await;
    let b = slot("q", &id);
    let timed: u64 = redis
        .client()
        .zcard(SlotKeys::new(b).timer())
        .expect("zcard");
    assert_eq!(timed, 0, "a far expiry is not on the timer");
    let entries = expiry_wheel(&redis, b);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, id.as_str());

    // The pump wakes 1 s ahead of the wheel second the expiry falls in.
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    let wake = o.next_due_ms.expect("a wake-up");
    assert!(
        wake > o.now_ms && wake + 1_000 <= entries[0].1,
        "wake {wake} now {} expiry {}",
        o.now_ms,
        entries[0].1
    );

    pump_until_expired(&s, b, 100, 1).await;
    assert!(
        published.elapsed() >= Duration::from_millis(4_000),
        "never early"
    );
    assert_eq!(counts(&s, "q").await.expect("counts").live(), 0);
    let held: u64 = redis.client().hlen(SlotKeys::new(b).jobs()).expect("hlen");
    assert_eq!(held, 0);
    assert_no_timers(&redis, b);
}

#[tokio::test]
async fn a_job_that_leaves_ready_or_dead_leaves_the_expiry_wheel() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let q = "q";
    let lane = 0;
    let b = keys::slot_of("ns", q, lane, S);
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from(format!("job {i}")),
        })
        .collect();
    s.jobs()
        .publish(b, &qn(q), &sched(0, 60_000, 1), &jobs)
        .await
        .expect("publish");
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let waiting = |redis: &RedisServer| -> Vec<String> {
        expiry_wheel(redis, b).into_iter().map(|e| e.0).collect()
    };
    assert_eq!(waiting(&redis).len(), 3);

    // Consumed: reserved jobs keep their deadline on the timer only.
    let got = consume(&s, &[q], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].job.id, ids[0]);
    assert!(!waiting(&redis).contains(&ids[0].to_owned()));
    // Deleted while ready.
    assert!(
        s.jobs()
            .delete(b, &qn(q), &jobs[1].id)
            .await
            .expect("delete")
    );
    assert_eq!(waiting(&redis), vec![ids[2].to_owned()]);

    // Released with no try left: dead, its expiry back in the wheel.
    let how = release_now(&s, b, q, ids[0]).await;
    assert_eq!(how, Released::Dead);
    let before = expiry_wheel(&redis, b);
    assert_eq!(before.len(), 2);
    // Respawned with a TTL of 30 s: its old expiry goes, its new one waits.
    assert_eq!(respawn(&s, q, 10, 30_000).await.expect("respawn"), 1);
    let after = expiry_wheel(&redis, b);
    assert_eq!(after.len(), 2, "{after:?}");
    let of = |all: &[(String, u64)], id: &str| all.iter().find(|e| e.0 == id).expect("waiting").1;
    assert!(of(&after, ids[0]) + 20_000 < of(&before, ids[0]));
    assert_eq!(of(&after, ids[2]), of(&before, ids[2]));

    // Destroyed: the queue's ready jobs, and their expiries, go; so do
    // their seconds, and nothing is left for the pump to wake for.
    assert_eq!(destroy(&s, q).await.expect("destroy"), 2);
    assert_eq!(counts(&s, q).await.expect("counts").live(), 0);
    assert_no_timers(&redis, b);
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!((o.processed, o.next_due_ms), (0, None));
}

#[tokio::test]
async fn a_second_whose_expiries_were_all_consumed_leaves_the_wheel() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(0, 60_000, 1), "x").await;
    let b = slot("q", &id);
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].job.id, id.as_str());
    // Only the reservation's deadline is left: the pump wakes for it, not
    // for the second its expiry was in.
    let seconds: u64 = redis
        .client()
        .zcard(SlotKeys::new(b).wheel_index())
        .expect("zcard");
    assert_eq!(seconds, 0);
    let o = s.timers().pump(b, 100, None).await.expect("pump");
    assert_eq!(o.next_due_ms, Some(got[0].deadline_ms));
    assert!(s.jobs().delete(b, &qn("q"), &id).await.expect("ack"));
    assert_no_timers(&redis, b);
}

#[tokio::test]
async fn a_release_that_needs_the_pump_sooner_wakes_it() {
    // Reserved with a TTR of a minute, the job's timer entry is its
    // expiry (10 s: sooner). Released, its expiry goes to the wheel, where
    // the pump must open its second a second or more before the expiry:
    // the release says so on the slot's timer channel.
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(0, 10_000, 2), "x").await;
    let b = slot("q", &id);
    consume(&s, &["q"], 1, 60_000).await.expect("consume");
    let mut sub = redis.client();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(s.timer_channel(b)).expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let how = release_now(&s, b, "q", id.as_str()).await;
    assert_eq!(how, Released::Ready);
    let told: String = pubsub
        .get_message()
        .expect("an announcement")
        .get_payload()
        .expect("payload");
    assert_eq!(told, b.to_string());
}

#[tokio::test]
async fn an_expiry_hash_larger_than_a_batch_opens_over_several_calls() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let lane = 3;
    let b = keys::slot_of("ns", "q", lane, S);
    let jobs = bulk(64, lane);
    let published = Instant::now();
    s.jobs()
        .publish(b, &qn("q"), &sched(0, 2_200, 1), &jobs)
        .await
        .expect("bulk");
    assert_eq!(expiry_wheel(&redis, b).len(), 64);
    pump_until_expired(&s, b, 10, 64).await;
    assert!(
        published.elapsed() >= Duration::from_millis(2_200),
        "never early"
    );
    assert_eq!(counts(&s, "q").await.expect("counts").live(), 0);
    assert_no_timers(&redis, b);
}

#[tokio::test]
async fn expiries_on_the_timer_as_format_5_kept_them_still_go() {
    // Format 5 kept every expiry on the timer: such an entry is read as
    // it is, by a consume and by the pump.
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let published = Instant::now();
    let gone = publish(&s, "q", sched(0, 2_500, 1), "expires").await;
    let kept = publish(&s, "c", sched(0, 60_000, 1), "consumed").await;
    let mut r = redis.client();
    for (queue, id) in [("q", &gone), ("c", &kept)] {
        let k = SlotKeys::new(slot(queue, id));
        let (_, at) = expiry_wheel(&redis, slot(queue, id))
            .into_iter()
            .find(|e| e.0 == id.as_str())
            .expect("waiting");
        let _: () = r
            .hdel(k.expiry_wheel(at / 1000), id.as_str())
            .expect("hdel");
        let _: () = r.zadd(k.timer(), id.as_str(), at).expect("zadd");
    }
    // Consumed: its entry becomes its TTR deadline.
    let got = consume(&s, &["c"], 1, 30_000).await.expect("consume");
    let deadline: u64 = r
        .zscore(SlotKeys::new(slot("c", &kept)).timer(), kept.as_str())
        .expect("zscore");
    assert_eq!(deadline, got[0].deadline_ms);
    // Left ready: it goes at its expiry, never early.
    pump_until_expired(&s, slot("q", &gone), 100, 1).await;
    assert!(
        published.elapsed() >= Duration::from_millis(2_500),
        "never early"
    );
    assert_eq!(counts(&s, "q").await.expect("counts").live(), 0);
}

#[tokio::test]
async fn a_huge_second_being_opened_leaves_room_for_due_reservations() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let lane = 2;
    let b = keys::slot_of("ns", "q", lane, S);
    let mint = |body: &'static str| NewJob {
        id: JobId::mint_in_lane(false, lane, L),
        attrs: String::new(),
        body: Bytes::from_static(body.as_bytes()),
    };
    // A job reserved for 50 ms, then 64 jobs whose expiries share a second.
    let held = mint("held");
    s.jobs()
        .publish(b, &qn("q"), &sched(0, 0, 2), std::slice::from_ref(&held))
        .await
        .expect("publish");
    let got = s.jobs().consume(b, &qn("q"), 1, 50).await.expect("consume");
    assert_eq!(got[0].job.id, held.id.as_str());
    let bulk: Vec<NewJob> = (0..64).map(|_| mint("x")).collect();
    s.jobs()
        .publish(b, &qn("q"), &sched(0, 3_500, 1), &bulk)
        .await
        .expect("bulk");
    // Once the second may open, a call of 8 opens 6 expiries and still
    // gives the reservation, due since, its retry.
    let second = expiry_wheel(&redis, b)[0].1 / 1000;
    let deadline = Instant::now() + Duration::from_secs(10);
    let o = loop {
        assert!(Instant::now() < deadline, "the second never opened");
        let mut r = redis.client();
        let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query(&mut r).expect("time");
        if now_s * 1000 + now_us / 1000 >= second * 1000 - 1000 {
            break s.timers().pump(b, 8, None).await.expect("pump");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((o.processed, o.retried), (7, 1));
    assert!(
        o.next_due_ms.is_some_and(|at| at <= o.now_ms),
        "more to open"
    );
    pump_until_expired(&s, b, 8, 64).await;
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.live(), c.ready), (1, 1));
}

/// A batch of expiries that takes a compact hash past 512 fields is
/// written into a hash table from its start (Redis before 7.2 fills a
/// compact one a field at a time, in quadratic time, and makes it a table
/// only past its `hash-max-listpack-entries`), and the field that made it
/// one is gone; a smaller batch leaves the hash compact.
#[tokio::test]
async fn a_second_of_many_expiries_is_written_as_a_hash_table_and_a_few_stay_compact() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let lane = 3;
    let b = keys::slot_of("ns", "q", lane, S);
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    // Compact up to 2,000 fields: only the conversion makes a table of 600.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-entries")
        .arg(2_000)
        .query(&mut r)
        .expect("config");
    for (n, ttl_ms, encoding) in [(300, 600_000, "listpack"), (600, 1_200_000, "hashtable")] {
        let jobs = bulk(n, lane);
        s.jobs()
            .publish(b, &qn("q"), &sched(0, ttl_ms, 1), &jobs)
            .await
            .expect("bulk");
        let seconds: Vec<u64> = r.zrange(k.wheel_index(), 0, -1).expect("zrange");
        let last = k.expiry_wheel(*seconds.last().expect("a wheel second"));
        let found: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&last)
            .query(&mut r)
            .expect("encoding");
        let fields: u64 = r.hlen(&last).expect("hlen");
        assert_eq!(
            (found.as_str(), fields),
            (encoding, n as u64),
            "{n} expiries"
        );
    }
    assert_eq!(
        expiry_wheel(&redis, b).len(),
        900,
        "only the jobs' expiries"
    );
}
