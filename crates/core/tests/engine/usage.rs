//! Usage per namespace (`sd:T:u`): after every kind of change, the slots'
//! usage hashes equal a count made here, independently, from the records
//! and transit entries Redis holds.

use std::collections::BTreeMap;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, NewJob, Shard, Usage,
    keys::{self, SlotKeys},
};
use sundial_tests::RedisServer;

use crate::helpers::{
    L, S, consume, dead_delete, destroy, now_sched, publish, qn, respawn, sched, shard, slot,
};

/// Per namespace, the jobs and bytes (id + record) that the shard's
/// records and transit entries hold, read with an independent client.
pub(crate) fn true_usage(redis: &RedisServer) -> BTreeMap<String, Usage> {
    let mut r = redis.client();
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    for s in 0..S {
        let k = SlotKeys::new(s);
        let names: BTreeMap<String, String> = r.hgetall(k.queues()).expect("queues");
        let records: BTreeMap<String, Vec<u8>> = r.hgetall(k.jobs()).expect("jobs");
        for (id, raw) in &records {
            // The queue number: bytes 21..24 of the record's header.
            let qn = u32::from_be_bytes([0, raw[21], raw[22], raw[23]]);
            let queue = &names[&format!("#{qn}")];
            let ns = queue.split('/').next().expect("ns").to_owned();
            let u = out.entry(ns).or_default();
            u.jobs += 1;
            u.bytes += (id.len() + raw.len()) as u64;
        }
        let transit: BTreeMap<String, Vec<u8>> = r.hgetall(k.transit()).expect("transit");
        for (id, e) in &transit {
            if e[0] == b'x' {
                continue;
            }
            // deadline I6, tag I7, queue (H + text), destination (H + text), record.
            let qlen = usize::from(u16::from_be_bytes([e[13], e[14]]));
            let queue = std::str::from_utf8(&e[15..15 + qlen]).expect("queue");
            let at = 15 + qlen;
            let dlen = usize::from(u16::from_be_bytes([e[at], e[at + 1]]));
            let raw = &e[at + 2 + dlen..];
            let ns = queue.split('/').next().expect("ns").to_owned();
            let u = out.entry(ns).or_default();
            u.jobs += 1;
            u.bytes += (id.len() + raw.len()) as u64;
        }
    }
    out
}

/// Checks that the shard's usage hashes say what it holds.
pub(crate) async fn assert_usage_true(s: &Shard, redis: &RedisServer, when: &str) {
    let all: Vec<u32> = (0..S).collect();
    let kept = s.slots().usage(&all).await.expect("usage");
    assert_eq!(kept, true_usage(redis), "usage {when}");
}

fn job_with(attrs: &str, body: &str) -> NewJob {
    NewJob {
        id: JobId::mint(false),
        attrs: attrs.to_owned(),
        body: Bytes::from(body.to_owned()),
    }
}

#[tokio::test]
async fn a_job_counts_its_id_and_record_and_leaves_no_field_once_gone() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let job = job_with(r#"{"a":"1"}"#, "hello");
    let sl = slot("q", &job.id);
    s.jobs()
        .publish(sl, &qn("q"), &now_sched(1), std::slice::from_ref(&job))
        .await
        .expect("publish");
    let all: Vec<u32> = (0..S).collect();
    let id_len = job.id.as_str().len() as u64;
    let want = Usage {
        jobs: 1,
        bytes: id_len + 26 + 9 + 5,
    };
    assert_eq!(s.slots().usage(&all).await.expect("usage")["ns"], want);
    assert_eq!(
        s.slots().namespace_usage(&all, "ns").await.expect("ns"),
        want
    );
    assert_eq!(
        s.slots()
            .namespace_usage(&all, "other")
            .await
            .expect("other"),
        Usage::default()
    );
    assert!(
        s.jobs()
            .delete(sl, &qn("q"), &job.id)
            .await
            .expect("delete")
    );
    let fields: Vec<String> = redis
        .client()
        .hkeys(SlotKeys::new(sl).usage())
        .expect("hkeys");
    assert!(fields.is_empty(), "no field is left: {fields:?}");
}

#[tokio::test]
async fn every_change_of_a_job_keeps_the_usage_true() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    // Publish: single, delayed, expiring, a bulk with attributes, another namespace.
    for i in 0..6 {
        publish(&s, "a", now_sched(1), &format!("a{i}")).await;
    }
    publish(&s, "a", sched(60_000, 0, 1), "later").await;
    publish(&s, "a", sched(0, 1, 1), "expiring").await;
    publish(&s, "b", sched(10, 0, 2), "soon").await;
    let bulk: Vec<NewJob> = (0..5)
        .map(|i| job_with(r#"{"k":"v"}"#, &"x".repeat(i * 100)))
        .collect();
    let sl = keys::slot_of("ns", "bulk", 0, S);
    let ids: Vec<NewJob> = bulk
        .into_iter()
        .map(|mut j| {
            j.id = JobId::mint_in_lane(false, 0, L);
            j
        })
        .collect();
    s.jobs()
        .publish(sl, &qn("bulk"), &now_sched(3), &ids)
        .await
        .expect("bulk");
    let other = JobId::mint_in_lane(false, 0, L);
    let other_slot = keys::slot_of("other", "q", 0, S);
    s.jobs()
        .publish(
            other_slot,
            "other/q",
            &now_sched(1),
            &[NewJob {
                id: other,
                attrs: String::new(),
                body: Bytes::from_static(b"other"),
            }],
        )
        .await
        .expect("other");
    assert_usage_true(&s, &redis, "after publishes").await;

    // Consume and ack, let a TTR run out to the dead letter, expire, pump.
    let got = consume(&s, &["a"], 4, 1).await.expect("consume");
    assert_eq!(got.len(), 4);
    s.jobs()
        .delete(
            got[0].slot,
            &qn("a"),
            &JobId::parse(&got[0].job.id).expect("id"),
        )
        .await
        .expect("ack");
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    for sl in 0..S {
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    assert_usage_true(&s, &redis, "after consume, ack, expiry and dead letters").await;

    // Respawn some, delete the rest of the dead letter, republish, destroy.
    assert!(respawn(&s, "a", 1, 0).await.expect("respawn") >= 1);
    dead_delete(&s, "a", 100).await.expect("dead delete");
    let old = JobId::parse(&got[3].job.id).expect("id");
    let new = NewJob {
        id: JobId::mint_in_lane(false, old.lane(L), L),
        ..job_with("", "replaced")
    };
    s.jobs()
        .republish(got[3].slot, &qn("a"), &old, &now_sched(1), &new)
        .await
        .expect("republish");
    assert_usage_true(&s, &redis, "after respawn, dead delete and republish").await;
    destroy(&s, "a").await.expect("destroy");
    destroy(&s, "bulk").await.expect("destroy");
    assert_usage_true(&s, &redis, "after destroy").await;
}

#[tokio::test]
async fn a_shard_written_before_usage_counts_is_counted_at_its_check() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    s.check(S, L).await.expect("check");
    for i in 0..20 {
        publish(&s, &format!("q{}", i % 3), now_sched(1), &"b".repeat(i)).await;
    }
    let want = true_usage(&redis);
    // As a build before usage counts left it: no usage hash, no mark.
    let mut r = redis.client();
    for sl in 0..S {
        let _: () = r.del(SlotKeys::new(sl).usage()).expect("del");
    }
    let _: () = r.hdel(keys::META, keys::META_USAGE).expect("hdel");
    let all: Vec<u32> = (0..S).collect();
    assert!(s.slots().usage(&all).await.expect("usage").is_empty());
    s.check(S, L).await.expect("check again");
    assert_eq!(s.slots().usage(&all).await.expect("usage"), want);
    assert_usage_true(&s, &redis, "after the count").await;
}
