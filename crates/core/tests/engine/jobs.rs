//! Single jobs: publish (one, a bulk, several publications in one call),
//! consume, ack, republish, release.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{EngineError, JobId, NewJob, keys::SlotKeys};
use sundial_tests::RedisServer;

use crate::helpers::{
    L, consume, counts, expiry_wheel, job, now_sched, publish, qn, sched, shard, slot,
};

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
    // Given back (as for a consumer that left), then taken again: still
    // its first delivery, and the try it did not use is back.
    assert!(s.jobs().give_back(&got[0]).await.expect("release"));
    let again = s
        .jobs()
        .consume(b, &qn("q"), 1, 30_000)
        .await
        .expect("consume");
    assert_eq!(again.len(), 1);
    assert!(again[0].first, "a delivery that never reached its client");
    assert_eq!(again[0].job.tries_left, 2, "a released try is given back");
    assert_eq!(
        (got[0].number(), again[0].number()),
        (1, 1),
        "a delivery that never reached its client is not counted"
    );
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
    // A minute away: every expiry waits in the wheel, none on the timer.
    assert_eq!(expiry_wheel(&redis, b).len(), 2_500);
    let timed: u64 = r.zcard(k.timer()).expect("zcard");
    assert_eq!(timed, 0);
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
        keys: None,
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
    assert_eq!(stored, vec![sundial_core::Outcome::Stored(Vec::new()); 4]);
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
    // In the wheel: the expiring job's expiry (a minute is not near) and
    // the delayed job (5 s is not near either); nothing for the plain ones.
    let mut r = redis.client();
    let timer: u64 = r.zcard(SlotKeys::new(b).timer()).expect("zcard");
    assert_eq!(timer, 0);
    let expiries = expiry_wheel(&redis, b);
    assert_eq!(expiries.len(), 1, "{expiries:?}");
    assert_eq!(expiries[0].0, expiring.id.as_str());
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
async fn release_gives_the_job_and_its_try_back() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(1), "x").await;
    let d = consume(&s, &["q"], 1, 60_000).await.expect("consume");
    assert!(s.jobs().give_back(&d[0]).await.expect("release"));
    assert!(
        !s.jobs().give_back(&d[0]).await.expect("release twice"),
        "fenced"
    );
    let again = consume(&s, &["q"], 1, 60_000).await.expect("consume");
    assert_eq!(again[0].job.id, id.as_str());
    assert_eq!(again[0].job.tries_left, 0);
}
