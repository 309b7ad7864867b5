//! A worker's hold on a job: delivery numbers, fenced acks, touches,
//! releases, and all of them on a job the mover carries.

use std::time::Duration;

use redis::Commands;
use sundial_core::{
    Ack, Acked, JobId, MoveMode, Release, Released, Touch, Touched,
    keys::SlotKeys,
    state::{DEAD, DELAYED, READY, RESERVED},
};
use sundial_tests::RedisServer;

use crate::helpers::{consume, counts, now_sched, publish, qn, sched, shard, slot};
use crate::{moves::named_shard, usage::assert_usage_true};

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
        let reason = if n == 1 { "" } else { "ttr expired" };
        assert_eq!(seen.reason, reason, "the TTR of delivery {} ran out", n - 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    let dead = s
        .jobs()
        .peek(sl, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("the job");
    assert_eq!((dead.state, dead.reason.as_str()), (DEAD, "ttr expired"));
    assert_usage_true(&s, &redis, "after records grew and took reasons").await;
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
    let id = publish(&s, "q", sched(0, 300, 1), "short-lived").await;
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
    assert!(left_ms <= 300, "capped by the expiry: {left_ms}");
    // Past its expiry, before the pump drops it: gone for a worker.
    tokio::time::sleep(Duration::from_millis(320)).await;
    let touch = Touch {
        id: id.clone(),
        delivery: Some(1),
        ttr_ms: 1_000,
    };
    let t = s.jobs().touch(sl, &qn("q"), touch).await.expect("touch");
    assert_eq!(t, Touched::Missing);
    let r = release(&id, 1, 0, true, "x");
    let r = s.jobs().release(sl, &qn("q"), &r).await.expect("release");
    assert_eq!(r, Released::Missing);
}

fn release(id: &JobId, delivery: u32, delay_ms: u64, spend_try: bool, reason: &str) -> Release {
    Release {
        id: id.as_str().to_owned(),
        delivery: Some(delivery),
        delay_ms: Some(delay_ms),
        default_delay_ms: 0,
        spend_try,
        reason: Some(reason.to_owned()),
    }
}

#[tokio::test]
async fn a_release_delays_or_readies_the_job_and_keeps_its_reason() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(3), "flaky").await;
    let sl = slot("q", &id);
    let peek = || async {
        s.jobs()
            .peek(sl, &qn("q"), &id)
            .await
            .expect("peek")
            .expect("job")
    };
    let r = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 1, 0, true, ""))
        .await;
    assert_eq!(r.expect("release"), Released::Fenced, "not delivered yet");

    // Delivery 1 gives it back for 200 ms, its try spent.
    consume(&s, &["q"], 1, 30_000).await.expect("consume");
    let r = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 1, 200, true, "db down"))
        .await;
    assert_eq!(r.expect("release"), Released::Delayed(200));
    let j = peek().await;
    assert_eq!((j.state, j.tries_left, j.delivery), (DELAYED, 2, 1));
    assert_eq!(j.reason, "db down");
    assert_usage_true(&s, &redis, "after a reason was written").await;
    assert!(
        consume(&s, &["q"], 1, 30_000)
            .await
            .expect("consume")
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(
        (got[0].number(), got[0].job.reason.as_str()),
        (2, "db down")
    );

    // Delivery 2 postpones it without spending the try, at once: ready,
    // its tries as they were before delivery 2, the reason replaced.
    let r = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 2, 0, false, ""))
        .await;
    assert_eq!(r.expect("release"), Released::Ready);
    let j = peek().await;
    assert_eq!((j.state, j.tries_left, j.reason.as_str()), (READY, 2, ""));
    assert_usage_true(&s, &redis, "after the reason was cleared").await;
}

#[tokio::test]
async fn a_release_on_the_last_try_sends_the_job_to_the_dead_letter() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(1), "doomed").await;
    let sl = slot("q", &id);
    consume(&s, &["q"], 1, 30_000).await.expect("consume");
    let again = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 1, 5_000, true, "bad input"))
        .await;
    assert_eq!(again.expect("release"), Released::Dead);
    let j = s
        .jobs()
        .peek(sl, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("job");
    assert_eq!((j.state, j.reason.as_str()), (DEAD, "bad input"));
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.dead, c.reserved, c.delayed), (1, 0, 0));
    let r = s
        .jobs()
        .release(sl, &qn("q"), &release(&id, 1, 0, true, ""))
        .await;
    assert_eq!(
        r.expect("release"),
        Released::Fenced,
        "dead: no delivery holds it"
    );
    let mut unfenced = release(&id, 1, 0, true, "");
    unfenced.delivery = None;
    let r = s.jobs().release(sl, &qn("q"), &unfenced).await;
    assert_eq!(r.expect("release"), Released::NotReserved);
    unfenced.id = JobId::mint(false).as_str().to_owned();
    let r = s.jobs().release(sl, &qn("q"), &unfenced).await;
    assert_eq!(r.expect("release"), Released::Missing);
    assert_usage_true(&s, &redis, "after the job died").await;
}

#[tokio::test]
async fn a_moved_job_keeps_its_delivery_and_reason_and_is_fenced_in_transit() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (named_shard(&ra, "a").await, named_shard(&rb, "b").await);
    let id = publish(&a, "q", now_sched(3), "moving").await;
    let sl = slot("q", &id);
    consume(&a, &["q"], 1, 1).await.expect("consume");
    tokio::time::sleep(Duration::from_millis(5)).await;
    a.timers().pump(sl, 100, None).await.expect("pump");
    let got = consume(&a, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].number(), 2);

    // Taken out of `a`: in transit, where nothing but an ack may change it.
    let t = a
        .mover()
        .take(
            sl,
            "m",
            Duration::from_secs(30),
            MoveMode::Take,
            100,
            b.name(),
            "0",
            "",
        )
        .await
        .expect("take")
        .expect("lease");
    assert_eq!(t.jobs.len(), 1);
    let touch = Touch {
        id: id.clone(),
        delivery: Some(2),
        ttr_ms: 60_000,
    };
    assert_eq!(
        a.jobs().touch(sl, &qn("q"), touch).await.expect("touch"),
        Touched::Moving
    );
    let r = a
        .jobs()
        .release(sl, &qn("q"), &release(&id, 2, 0, true, ""))
        .await;
    assert_eq!(r.expect("release"), Released::Moving);
    let stale = Ack {
        id: id.clone(),
        delivery: Some(1),
    };
    assert_eq!(
        a.jobs().ack(sl, &qn("q"), stale).await.expect("ack"),
        Acked::Fenced
    );
    let seen = a
        .jobs()
        .peek(sl, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("in transit");
    assert_eq!((seen.delivery, seen.reason.as_str()), (2, "ttr expired"));

    // Stored at `b`: the same delivery and reason, and delivery 2 acks it.
    b.mover()
        .store(sl, t.now_ms, &t.jobs, true)
        .await
        .expect("store");
    a.mover()
        .done(sl, &[id.as_str().to_owned()])
        .await
        .expect("done");
    let seen = b
        .jobs()
        .peek(sl, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("moved");
    assert_eq!(
        (seen.state, seen.delivery, seen.reason.as_str()),
        (RESERVED, 2, "ttr expired")
    );
    let stale = Ack {
        id: id.clone(),
        delivery: Some(1),
    };
    assert_eq!(
        b.jobs().ack(sl, &qn("q"), stale).await.expect("ack"),
        Acked::Fenced
    );
    let ack = Ack {
        id: id.clone(),
        delivery: Some(2),
    };
    assert_eq!(
        b.jobs().ack(sl, &qn("q"), ack).await.expect("ack"),
        Acked::Deleted
    );
}
