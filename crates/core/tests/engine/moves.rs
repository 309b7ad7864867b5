//! Moves: a slot's jobs taken out of one shard and stored in another, whole,
//! once, whatever step a move is cut at.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, MoveMode, NewJob, Schedule, Shard, ShardOptions,
    keys::{self, SlotKeys},
};
use sundial_tests::RedisServer;

use crate::{
    helpers::{L, S, counts, expiry_wheel, now_sched, qn, sched, wheel},
    usage::assert_usage_true,
};

/// A shard named `name` (the mover records its destination by name).
pub(crate) async fn named_shard(redis: &RedisServer, name: &str) -> Shard {
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
pub(crate) async fn move_all(a: &Shard, b: &Shard, slot: u32, owner: &str, batch: u32) -> u64 {
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
    // The delayed jobs wait in the new shard's wheel, and so do the
    // expiries of the ready jobs with a TTL.
    assert_eq!(wheel(&rb, sl).1, 4);
    assert_eq!(expiry_wheel(&rb, sl).len(), 3);
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
    assert_usage_true(&b, &rb, "after the move").await;
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
    assert_usage_true(&a, &ra, "with jobs in transit").await;
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
    assert_usage_true(&a, &ra, "after an ack in transit").await;
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
    assert_usage_true(&b, &rb, "after a copy").await;
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
    assert_usage_true(&a, &ra, "once the copied entries went").await;
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
    assert_usage_true(&a, &ra, "once moved").await;
    assert_usage_true(&b, &rb, "once moved").await;
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
