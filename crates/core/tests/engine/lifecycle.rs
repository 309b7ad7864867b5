//! A worker's hold on a job: delivery numbers, fenced acks, touches.

use std::time::Duration;

use redis::Commands;
use sundial_core::{Ack, Acked, JobId, Touch, Touched, keys::SlotKeys};
use sundial_tests::RedisServer;

use crate::helpers::{consume, counts, now_sched, publish, qn, sched, shard, slot};
use crate::usage::assert_usage_true;

#[tokio::test]
async fn each_delivery_of_a_job_has_the_next_number() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(3), "work").await;
    let sl = slot("q", &id);
    for n in 1..=3 {
        let got = consume(&s, &["q"], 1, 1).await.expect("consume");
        assert_eq!(got.len(), 1, "delivery {n}");
        assert_eq!((got[0].number(), got[0].first), (n, n == 1));
        let seen = s
            .jobs()
            .peek(sl, &qn("q"), &id)
            .await
            .expect("peek")
            .expect("the job");
        assert_eq!(seen.delivery, n, "peek counts the deliveries");
        assert_eq!(seen.reason, "");
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    assert_usage_true(&s, &redis, "after records grew at their first delivery").await;
}

#[tokio::test]
async fn a_job_delivered_before_delivery_numbers_counts_as_delivered_once() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(2), "old").await;
    // A format-2 record of a job delivered once and back to ready: the
    // plain record with its delivered flag (16) set.
    let k = SlotKeys::new(slot("q", &id));
    let mut c = redis.client();
    let mut raw: Vec<u8> = c.hget(k.jobs(), id.as_str()).expect("record");
    assert_eq!(raw[0], 2, "a fresh job's record is plain");
    raw[0] += 16;
    let _: () = c.hset(k.jobs(), id.as_str(), raw).expect("hset");
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!((got[0].number(), got[0].first), (2, false));
    let raw: Vec<u8> = c.hget(k.jobs(), id.as_str()).expect("record");
    assert_eq!(raw[0], 3 + 16 + 64, "reserved, delivered, extended");
    assert_usage_true(&s, &redis, "after a plain record was extended").await;
    let gone = JobId::parse(&got[0].job.id).expect("id");
    assert!(
        s.jobs()
            .delete(got[0].slot, &qn("q"), &gone)
            .await
            .expect("ack")
    );
    assert_usage_true(&s, &redis, "after its ack").await;
}

#[tokio::test]
async fn a_fenced_ack_deletes_only_for_the_delivery_that_holds_the_job() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(3), "work").await;
    let sl = slot("q", &id);
    let fenced = |n| Ack {
        id: id.clone(),
        delivery: Some(n),
    };
    // Ready, not yet delivered: no delivery holds it.
    let a = s.jobs().ack(sl, &qn("q"), fenced(1)).await.expect("ack");
    assert_eq!(a, Acked::Fenced);
    consume(&s, &["q"], 1, 1).await.expect("consume");
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].number(), 2);
    // Delivery 1's ack, and a fence from the future: refused, the job kept.
    for n in [1, 3] {
        let a = s.jobs().ack(sl, &qn("q"), fenced(n)).await.expect("ack");
        assert_eq!(a, Acked::Fenced, "delivery {n}");
    }
    assert_eq!(counts(&s, "q").await.expect("counts").reserved, 1);
    // Delivery 2 holds it: deleted; then there is nothing to ack.
    let a = s.jobs().ack(sl, &qn("q"), fenced(2)).await.expect("ack");
    assert_eq!(a, Acked::Deleted);
    let a = s.jobs().ack(sl, &qn("q"), fenced(2)).await.expect("ack");
    assert_eq!(a, Acked::Missing);
    assert_usage_true(&s, &redis, "after the fenced acks").await;
}

#[tokio::test]
async fn a_touch_counts_the_ttr_again_from_now_for_a_reserved_job_only() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(2), "long").await;
    let sl = slot("q", &id);
    let touch = |delivery, ttr_ms| Touch {
        id: id.clone(),
        delivery,
        ttr_ms,
    };
    let ready = s.jobs().touch(sl, &qn("q"), touch(None, 1000)).await;
    assert_eq!(ready.expect("touch"), Touched::NotReserved);
    let fenced = s.jobs().touch(sl, &qn("q"), touch(Some(1), 1000)).await;
    assert_eq!(fenced.expect("touch"), Touched::Fenced);
    let got = consume(&s, &["q"], 1, 50).await.expect("consume");
    assert_eq!(got[0].number(), 1);
    let t = s
        .jobs()
        .touch(sl, &qn("q"), touch(Some(1), 60_000))
        .await
        .expect("touch");
    let Touched::Extended {
        deadline_ms,
        left_ms,
    } = t
    else {
        panic!("not extended: {t:?}");
    };
    assert!(left_ms > 59_000 && left_ms <= 60_000, "{left_ms}");
    assert!(deadline_ms > got[0].deadline_ms + 50_000);
    // Past the first TTR the pump leaves it reserved.
    tokio::time::sleep(Duration::from_millis(80)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.reserved, c.ready), (1, 0), "still held");
    let t = s.jobs().touch(sl, &qn("q"), touch(Some(2), 1000)).await;
    assert_eq!(
        t.expect("touch"),
        Touched::Fenced,
        "another delivery's touch"
    );
    let gone = JobId::mint(false);
    let t = s
        .jobs()
        .touch(
            sl,
            &qn("q"),
            Touch {
                id: gone,
                delivery: None,
                ttr_ms: 1,
            },
        )
        .await;
    assert_eq!(t.expect("touch"), Touched::Missing);
}

#[tokio::test]
async fn a_touch_does_not_hold_a_job_past_its_expiry() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(0, 2_000, 1), "short-lived").await;
    let sl = slot("q", &id);
    consume(&s, &["q"], 1, 100).await.expect("consume");
    let t = s
        .jobs()
        .touch(
            sl,
            &qn("q"),
            Touch {
                id: id.clone(),
                delivery: None,
                ttr_ms: 60_000,
            },
        )
        .await
        .expect("touch");
    let Touched::Extended { left_ms, .. } = t else {
        panic!("not extended: {t:?}");
    };
    assert!(left_ms <= 2_000, "capped by the expiry: {left_ms}");
}
