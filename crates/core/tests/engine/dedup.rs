//! Idempotency keys: a key names its job until the job is done, for a
//! window, or while it waits (debounce); what Redis holds for a key, and
//! that nothing of it is left once the job and its window are gone.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    JobId, KeyHit, KeyMode, Keys, NewJob, Outcome, Publication, Schedule, Shard, key_lane,
    keys::{self, SlotKeys},
    state::{DEAD, DELAYED},
};
use sundial_tests::RedisServer;

use crate::helpers::{L, S, consume, counts, dead_delete, now_sched, qn, sched, shard};
use crate::usage::assert_usage_true;

/// The slot of `key` in queue `q`.
fn key_slot(q: &str, key: &str) -> u32 {
    keys::slot_of("ns", q, key_lane(key, L), S)
}

/// Publishes one job per key (all of one lane) in one publication, and
/// answers the outcome and the ids it minted.
async fn publish_keyed(
    s: &Shard,
    q: &str,
    schedule: Schedule,
    mode: KeyMode,
    keyed: &[(&str, &str)],
) -> (Vec<KeyHit>, Vec<JobId>) {
    let lane = key_lane(keyed[0].0, L);
    let jobs: Vec<NewJob> = keyed
        .iter()
        .map(|(_, body)| NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from(body.to_string()),
        })
        .collect();
    let ids = jobs.iter().map(|j| j.id.clone()).collect();
    let p = Publication {
        schedule,
        jobs,
        keys: Some(Keys {
            mode,
            keys: keyed.iter().map(|(k, _)| k.to_string()).collect(),
        }),
    };
    let out = s
        .jobs()
        .publish_many(key_slot(q, keyed[0].0), &qn(q), &[p])
        .await
        .expect("publish");
    match out.into_iter().next() {
        Some(Outcome::Stored(hits)) => (hits, ids),
        other => panic!("not stored: {other:?}"),
    }
}

/// One keyed job; answers the id the publish names and whether it was a
/// duplicate (`Some(false)`), replaced one (`Some(true)`), or stored
/// (`None`).
async fn one(
    s: &Shard,
    q: &str,
    sched: Schedule,
    mode: KeyMode,
    key: &str,
    body: &str,
) -> (JobId, Option<bool>) {
    let (hits, ids) = publish_keyed(s, q, sched, mode, &[(key, body)]).await;
    match hits.first() {
        Some(h) => (h.id.clone(), Some(h.replaced)),
        None => (ids[0].clone(), None),
    }
}

/// The key index of `key`'s slot (its keys' fields, without the marker of
/// open windows), and its tombstones, as Redis holds them.
fn index(redis: &RedisServer, q: &str, key: &str) -> (usize, Vec<String>) {
    let k = SlotKeys::new(key_slot(q, key));
    let mut c = redis.client();
    let fields: Vec<String> = c.hkeys(format!("{}k", k.prefix())).expect("hkeys");
    let fields = fields.iter().filter(|f| *f != "~w").count();
    let tombs: Vec<String> = c.keys(format!("{}k:*", k.prefix())).expect("keys");
    (fields, tombs)
}

#[tokio::test]
async fn a_key_names_its_job_until_the_job_is_done() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let until = KeyMode::UntilDone;
    let (first, how) = one(&s, "q", now_sched(1), until, "order-1", "a").await;
    assert_eq!(how, None, "stored");
    let (again, how) = one(&s, "q", now_sched(1), until, "order-1", "b").await;
    assert_eq!(
        (again.clone(), how),
        (first.clone(), Some(false)),
        "a duplicate"
    );
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.published), (1, 1), "nothing stored twice");
    // Another queue, or another key, is another job.
    assert_eq!(
        one(&s, "r", now_sched(1), until, "order-1", "c").await.1,
        None
    );
    assert_eq!(
        one(&s, "q", now_sched(1), until, "order-2", "d").await.1,
        None
    );

    // In the dead letter, the job still exists: still a duplicate.
    let got = consume(&s, &["q"], 2, 1).await.expect("consume");
    assert_eq!(got.len(), 2);
    tokio::time::sleep(Duration::from_millis(5)).await;
    for sl in crate::helpers::slots_of("q") {
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    assert_eq!(counts(&s, "q").await.expect("counts").dead, 2);
    let (again, how) = one(&s, "q", now_sched(1), until, "order-1", "e").await;
    assert_eq!((again, how), (first.clone(), Some(false)), "dead, not done");
    assert_usage_true(&s, &redis, "with keyed jobs in the dead letter").await;

    // Dropped from the dead letter: done. The key is free, and Redis holds
    // nothing of it.
    dead_delete(&s, "q", 10).await.expect("drop");
    assert_eq!(index(&redis, "q", "order-1"), (0, vec![]), "no key left");
    let (next, how) = one(&s, "q", now_sched(1), until, "order-1", "f").await;
    assert_eq!(how, None);
    assert_ne!(next, first, "a new job");
    // Acked: done too.
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(got[0].job.id, next.as_str());
    assert!(
        s.jobs()
            .delete(got[0].slot, &qn("q"), &next)
            .await
            .expect("ack")
    );
    assert_eq!(index(&redis, "q", "order-1"), (0, vec![]), "no key left");
    assert_eq!(
        one(&s, "q", now_sched(1), until, "order-1", "g").await.1,
        None
    );
    assert_usage_true(&s, &redis, "after keyed jobs were acked and dropped").await;
}

#[tokio::test]
async fn a_key_goes_with_a_job_that_expires() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let until = KeyMode::UntilDone;
    let (first, _) = one(&s, "q", sched(0, 50, 1), until, "k", "a").await;
    let (delayed, _) = one(&s, "q", sched(30, 60, 1), until, "k2", "b").await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    // Past its TTL, a job is done even before the pump drops it.
    let (next, how) = one(&s, "q", now_sched(1), until, "k", "c").await;
    assert_eq!(how, None);
    assert_ne!(next, first);
    for sl in crate::helpers::slots_of("q") {
        s.timers().pump(sl, 100, None).await.expect("pump");
    }
    assert_eq!(
        index(&redis, "q", "k2"),
        (
            usize::from(key_slot("q", "k2") == key_slot("q", "k")),
            vec![]
        )
    );
    let (again, how) = one(&s, "q", now_sched(1), until, "k2", "d").await;
    assert_eq!(how, None);
    assert_ne!(again, delayed);
    assert_usage_true(&s, &redis, "after keyed jobs expired").await;
}

/// The `MGET` calls Redis has served.
fn mgets(redis: &RedisServer) -> u64 {
    redis.command_calls("mget")
}

#[tokio::test]
async fn publishes_look_for_tombstones_only_while_a_window_is_open() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let before = mgets(&redis);
    for n in 0..3 {
        one(
            &s,
            "q",
            now_sched(1),
            KeyMode::UntilDone,
            &format!("u{n}"),
            "a",
        )
        .await;
    }
    assert_eq!(mgets(&redis), before, "no window, no tombstone to look for");
    let (first, _) = one(&s, "q", now_sched(1), KeyMode::Window(60_000), "w", "a").await;
    let got = consume(&s, &["q"], 4, 30_000).await.expect("consume");
    let w = got
        .iter()
        .find(|d| d.job.id == first.as_str())
        .expect("the windowed job");
    assert!(
        s.jobs()
            .delete(w.slot, &qn("q"), &first)
            .await
            .expect("ack")
    );
    let (again, how) = one(&s, "q", now_sched(1), KeyMode::UntilDone, "w", "b").await;
    assert_eq!((again, how), (first, Some(false)), "found by its tombstone");
    assert!(
        mgets(&redis) > before,
        "a window is open: tombstones are looked for"
    );
}

#[tokio::test]
async fn a_window_outlives_its_job_and_ends_on_time() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let window = KeyMode::Window(300);
    let (first, _) = one(&s, "q", now_sched(1), window, "w", "a").await;
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert!(
        s.jobs()
            .delete(got[0].slot, &qn("q"), &first)
            .await
            .expect("ack")
    );
    // Acked, but its window is open: a tombstone holds the key.
    let (fields, tombs) = index(&redis, "q", "w");
    assert_eq!((fields, tombs.len()), (0, 1));
    let (again, how) = one(&s, "q", now_sched(1), KeyMode::UntilDone, "w", "b").await;
    assert_eq!(
        (again, how),
        (first.clone(), Some(false)),
        "a duplicate within the window"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        index(&redis, "q", "w"),
        (0, vec![]),
        "Redis expired the tombstone"
    );
    let (next, how) = one(&s, "q", now_sched(1), window, "w", "c").await;
    assert_eq!(how, None, "the window is over");
    let k = SlotKeys::new(key_slot("q", "w"));
    let marker: Option<String> = redis
        .client()
        .hget(format!("{}k", k.prefix()), "~w")
        .expect("hget");
    assert_eq!(
        marker, None,
        "the first publish after the window drops its marker"
    );
    // A job that outlives its window no longer holds its key.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let (later, how) = one(&s, "q", now_sched(1), window, "w", "d").await;
    assert_eq!(how, None);
    assert_ne!(later, next);
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 2);
    assert_usage_true(&s, &redis, "with windows").await;
}

#[tokio::test]
async fn debounce_replaces_a_waiting_job_and_keeps_its_id() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let d = KeyMode::Debounce;
    let (first, _) = one(&s, "q", sched(5_000, 0, 1), d, "d", "v1").await;
    let (again, how) = one(&s, "q", sched(60_000, 0, 3), d, "d", "v2").await;
    assert_eq!(
        (again.clone(), how),
        (first.clone(), Some(true)),
        "replaced"
    );
    let sl = key_slot("q", "d");
    let seen = s
        .jobs()
        .peek(sl, &qn("q"), &first)
        .await
        .expect("peek")
        .expect("job");
    assert_eq!(
        (seen.state, seen.body.as_ref(), seen.tries_left),
        (DELAYED, &b"v2"[..], 3)
    );
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.delayed, c.published), (1, 1), "one job, published once");
    // The job is due 60 s on now, not 5 s: the pump does not make it ready.
    let k = SlotKeys::new(sl);
    let due: Option<f64> = redis
        .client()
        .zscore(k.timer(), first.as_str())
        .expect("zscore");
    assert_eq!(due, None, "no timer entry of the first delay");
    // Replaced with no delay: ready now, under the same id.
    let (again, how) = one(&s, "q", now_sched(1), d, "d", "v3").await;
    assert_eq!((again, how), (first.clone(), Some(true)));
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert_eq!(
        (got[0].job.id.as_str(), got[0].job.body.as_ref()),
        (first.as_str(), &b"v3"[..])
    );
    // Delivered, it waits no more: a later publish with the key is a
    // duplicate until it is done, then a new job.
    let (again, how) = one(&s, "q", sched(1_000, 0, 1), d, "d", "v4").await;
    assert_eq!((again, how), (first.clone(), Some(false)));
    assert!(s.jobs().delete(sl, &qn("q"), &first).await.expect("ack"));
    let (next, how) = one(&s, "q", sched(1_000, 0, 1), d, "d", "v5").await;
    assert_eq!(how, None);
    assert_ne!(next, first);
    assert_usage_true(&s, &redis, "after debounce").await;
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.delayed, c.ready, c.reserved), (1, 0, 0));
}

#[tokio::test]
async fn a_key_given_twice_in_one_publication_names_the_first_job() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let (hits, ids) = publish_keyed(
        &s,
        "q",
        now_sched(1),
        KeyMode::UntilDone,
        &[("x", "1"), ("x", "2"), ("x", "3")],
    )
    .await;
    let places: Vec<(usize, &str, bool)> = hits
        .iter()
        .map(|h| (h.place, h.id.as_str(), h.replaced))
        .collect();
    assert_eq!(
        places,
        vec![(1, ids[0].as_str(), false), (2, ids[0].as_str(), false)]
    );
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 1);
    // A record with a key is flagged 128 and keeps the flag when delivered.
    let mut c = redis.client();
    let k = SlotKeys::new(key_slot("q", "x"));
    let raw: Vec<u8> = c.hget(k.jobs(), ids[0].as_str()).expect("record");
    assert_eq!(raw[0], 2 + 64 + 128, "ready, extended, keyed");
    consume(&s, &["q"], 1, 1).await.expect("consume");
    let raw: Vec<u8> = c.hget(k.jobs(), ids[0].as_str()).expect("record");
    assert_eq!(
        raw[0],
        3 + 16 + 64 + 128,
        "reserved, delivered, extended, keyed"
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.timers()
        .pump(key_slot("q", "x"), 100, None)
        .await
        .expect("pump");
    let raw: Vec<u8> = c.hget(k.jobs(), ids[0].as_str()).expect("record");
    assert_eq!(raw[0] % 16, DEAD);
    assert!(raw[0] >= 128, "still keyed in the dead letter");
    assert_usage_true(&s, &redis, "after a keyed job died").await;
}

#[tokio::test]
async fn keys_move_with_their_jobs() {
    let (ra, rb) = (RedisServer::start(), RedisServer::start());
    let a = crate::moves::named_shard(&ra, "a").await;
    let b = crate::moves::named_shard(&rb, "b").await;
    // Three keys of one lane, so of one slot.
    let lane = key_lane("m-0", L);
    let keys: Vec<String> = (0..100)
        .map(|i| format!("m-{i}"))
        .filter(|k| key_lane(k, L) == lane)
        .take(3)
        .collect();
    let (until, _) = one(&a, "q", now_sched(1), KeyMode::UntilDone, &keys[0], "u").await;
    let (window, _) = one(
        &a,
        "q",
        now_sched(1),
        KeyMode::Window(60_000),
        &keys[1],
        "w",
    )
    .await;
    let (waiting, _) = one(
        &a,
        "q",
        sched(60_000, 0, 1),
        KeyMode::Debounce,
        &keys[2],
        "d",
    )
    .await;
    let sl = key_slot("q", &keys[0]);
    assert_eq!(crate::moves::move_all(&a, &b, sl, "mover", 2).await, 3);
    assert_eq!(
        index(&ra, "q", &keys[0]),
        (0, vec![]),
        "nothing left behind"
    );
    assert_eq!(index(&rb, "q", &keys[0]).0, 3, "every key arrived");
    for (key, id, mode, replaced) in [
        (&keys[0], &until, KeyMode::UntilDone, false),
        (&keys[1], &window, KeyMode::UntilDone, false),
        (&keys[2], &waiting, KeyMode::Debounce, true),
    ] {
        let (named, how) = one(&b, "q", sched(1_000, 0, 1), mode, key, "again").await;
        assert_eq!(
            (&named, how),
            (id, Some(replaced)),
            "{key} names its job at the new shard"
        );
    }
    // The window came along: acked at the new shard, its key stays taken.
    let got = consume(&b, &["q"], 2, 30_000).await.expect("consume");
    for d in &got {
        let id = JobId::parse(&d.job.id).expect("id");
        assert!(b.jobs().delete(d.slot, &qn("q"), &id).await.expect("ack"));
    }
    let (named, how) = one(&b, "q", now_sched(1), KeyMode::UntilDone, &keys[1], "w2").await;
    assert_eq!((&named, how), (&window, Some(false)));
    assert_eq!(
        one(&b, "q", now_sched(1), KeyMode::UntilDone, &keys[0], "u2")
            .await
            .1,
        None
    );
    assert_usage_true(&b, &rb, "after keyed jobs moved").await;
}

#[tokio::test]
async fn debounce_leaves_one_wheel_entry_and_the_pump_makes_the_job_ready_once() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let d = KeyMode::Debounce;
    // Due in the wheel (over 2 s away), debounced three times within its second.
    let (id, _) = one(&s, "q", sched(2_300, 0, 1), d, "w", "v1").await;
    for v in ["v2", "v3", "v4"] {
        assert_eq!(
            one(&s, "q", sched(2_300, 0, 1), d, "w", v).await,
            (id.clone(), Some(true))
        );
    }
    let sl = key_slot("q", "w");
    let (seconds, listed) = crate::helpers::wheel(&redis, sl);
    assert_eq!(
        listed, 1,
        "one wheel entry for the job, not one per publish"
    );
    // An entry listed twice anyway (as the first builds left) is made ready once.
    let k = SlotKeys::new(sl);
    let second = seconds[0].parse::<u64>().expect("second");
    let _: () = redis
        .client()
        .rpush(k.wheel(second), id.as_str())
        .expect("rpush");
    tokio::time::sleep(Duration::from_millis(2_400)).await;
    s.timers().pump(sl, 100, None).await.expect("pump");
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.ready, c.delayed), (1, 0), "ready once");
    let got = consume(&s, &["q"], 5, 30_000).await.expect("consume");
    assert_eq!(got.len(), 1, "one delivery");
    assert_eq!(got[0].job.body.as_ref(), b"v4");
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 0);
    assert_usage_true(&s, &redis, "after debounces through the wheel").await;
}

#[tokio::test]
async fn a_debounce_that_moves_a_job_to_another_second_takes_the_old_one_off_the_wheel() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let d = KeyMode::Debounce;
    let (id, _) = one(&s, "q", sched(60_000, 0, 1), d, "m", "v1").await;
    let again = one(&s, "q", sched(120_000, 0, 1), d, "m", "v2").await;
    assert_eq!(again, (id, Some(true)));
    // The first second held only this job: it leaves the wheel index, and
    // the pump has nothing to wake for until the new second.
    let (seconds, listed) = crate::helpers::wheel(&redis, key_slot("q", "m"));
    assert_eq!((seconds.len(), listed), (1, 1), "{seconds:?}");
}

#[tokio::test]
async fn debounces_in_one_call_replace_each_other_in_order() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let lane = key_lane("k", L);
    let publication = |body: &str| Publication {
        schedule: sched(60_000, 0, 1),
        jobs: vec![NewJob {
            id: JobId::mint_in_lane(false, lane, L),
            attrs: String::new(),
            body: Bytes::from(body.to_owned()),
        }],
        keys: Some(Keys {
            mode: KeyMode::Debounce,
            keys: vec!["k".to_owned()],
        }),
    };
    let calls = [publication("a"), publication("b"), publication("c")];
    let first = calls[0].jobs[0].id.clone();
    let out = s
        .jobs()
        .publish_many(key_slot("q", "k"), &qn("q"), &calls)
        .await
        .expect("publish");
    let replaced = |o: &Outcome| match o {
        Outcome::Stored(h) => h.first().map(|h| (h.id.clone(), h.replaced)),
        Outcome::Exists => panic!("exists"),
    };
    assert_eq!(replaced(&out[0]), None, "stored");
    assert_eq!(replaced(&out[1]), Some((first.clone(), true)));
    assert_eq!(replaced(&out[2]), Some((first.clone(), true)));
    let seen = s
        .jobs()
        .peek(key_slot("q", "k"), &qn("q"), &first)
        .await
        .expect("peek")
        .expect("job");
    assert_eq!(seen.body.as_ref(), b"c", "the last publish's body");
    let c = counts(&s, "q").await.expect("counts");
    assert_eq!((c.delayed, c.published), (1, 1));
    assert_usage_true(&s, &redis, "after debounces in one call").await;
}

#[tokio::test]
async fn a_tombstone_is_named_by_its_queue_not_its_number() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let (id, _) = one(&s, "q", now_sched(1), KeyMode::Window(60_000), "t", "a").await;
    let got = consume(&s, &["q"], 1, 30_000).await.expect("consume");
    assert!(
        s.jobs()
            .delete(got[0].slot, &qn("q"), &id)
            .await
            .expect("ack")
    );
    let (_, tombs) = index(&redis, "q", "t");
    let k = SlotKeys::new(key_slot("q", "t"));
    assert_eq!(tombs, vec![format!("{}k:ns/q:t", k.prefix())]);
}

/// A keyed job's record as a publish packs it for speed (`key_packer`),
/// beside the one `encode` makes for a debounce's new job: the same bytes
/// but for the times, with a priority, a policy and attributes.
#[tokio::test]
async fn a_keyed_record_is_packed_as_encode_packs_it() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut policy = [0u8; 16];
    policy[0] = 1;
    policy[1..5].copy_from_slice(&1000u32.to_be_bytes());
    let schedule = Schedule {
        delay_ms: 0,
        ttl_ms: 60_000,
        tries: 3,
        priority: 7,
        policy: Some(policy),
    };
    let mut records = Vec::new();
    for (key, mode) in [
        ("packed", KeyMode::UntilDone),
        ("encoded", KeyMode::Debounce),
    ] {
        let lane = key_lane(key, L);
        let id = JobId::mint_in_lane(false, lane, L);
        let p = Publication {
            schedule,
            jobs: vec![NewJob {
                id: id.clone(),
                attrs: r#"{"a":"b"}"#.to_owned(),
                body: Bytes::from_static(b"body"),
            }],
            keys: Some(Keys {
                mode,
                keys: vec![key.to_owned()],
            }),
        };
        let slot = key_slot("q", key);
        s.jobs()
            .publish_many(slot, &qn("q"), &[p])
            .await
            .expect("publish");
        let raw: Vec<u8> = redis
            .client()
            .hget(format!("{}j", SlotKeys::new(slot).prefix()), id.as_str())
            .expect("hget");
        records.push(raw);
    }
    // The key differs in length and bytes: compare around it, times masked.
    let masked = |r: &[u8], key: &str| {
        let mut r = r.to_vec();
        r[3..15].fill(0);
        let at = r
            .windows(key.len())
            .position(|w| w == key.as_bytes())
            .expect("key");
        let mut out = r[..at - 2].to_vec();
        out.extend_from_slice(&r[at + key.len()..]);
        out
    };
    assert_eq!(
        masked(&records[0], "packed"),
        masked(&records[1], "encoded")
    );
    assert_eq!(
        records[0][0],
        2 + 8 + 64 + 128,
        "ready, prioritized, extended, keyed"
    );
}
