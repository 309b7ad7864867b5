//! Drains that the mover carries out: jobs nobody consumes move, each once
//! and as they were, through a killed mover and both Redis restarted; a
//! slot whose move another gateway holds is asked for once a check.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use redis::Commands;
use sundial_tests::{Api, RedisServer, wait_until_async};

use super::common::{
    SLOTS, as_before, bulk, draining, each_once, held, jobs_on, mixed_jobs, on_a, peek, pool,
    reload,
};

/// Each queue of `jobs` with its running totals (published, consumed), as
/// its stats show them.
async fn totals(api: &Api, jobs: &[(String, String)]) -> Vec<(String, u64, u64)> {
    let queues: std::collections::BTreeSet<&String> = jobs.iter().map(|(q, _)| q).collect();
    let mut out = Vec::new();
    for q in queues {
        let s = api.get(&format!("/api/ns/{q}/stats")).await.json;
        let n = |k: &str| s[k].as_u64().expect("a total");
        out.push((q.clone(), n("published_total"), n("consumed_total")));
    }
    out
}

#[tokio::test]
async fn a_drain_moves_the_jobs_nobody_consumes_each_once_and_as_it_was() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    // What made a drain wait forever: jobs due in an hour, ready jobs with
    // no worker, a worker that went away with its jobs, dead jobs.
    let mut jobs: Vec<(String, String)> = Vec::new();
    for i in 0..20 {
        let q = format!("later{i}");
        for id in bulk(&api, &q, "delay=3600&ttl=7200&tries=3", 10).await {
            jobs.push((q.clone(), id));
        }
    }
    for i in 0..5 {
        let q = format!("idle{i}");
        for id in bulk(&api, &q, "tries=2", 10).await {
            jobs.push((q.clone(), id));
        }
    }
    for id in bulk(&api, "dead", "tries=1", 20).await {
        jobs.push(("dead".to_owned(), id));
    }
    let r = api.get("/api/ns/dead?count=20&ttr=1").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(20), "{r:?}");
    for id in bulk(&api, "gone", "tries=3&ttl=7200", 10).await {
        jobs.push(("gone".to_owned(), id));
    }
    let r = api.get("/api/ns/gone?count=10&ttr=600").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(10), "{r:?}");
    wait_until_async(Duration::from_secs(10), "20 dead jobs", || async {
        api.get("/api/ns/dead/deadletter/size").await.json["size"] == 20
    })
    .await;
    let mut before = Vec::new();
    for (q, id) in &jobs {
        before.push(peek(&api, q, id).await);
    }
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let totals_before = totals(&api, &jobs).await;

    // A shard is added: its slots' jobs move to it, though nobody consumes.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    let admin = Api::new(gw.admin(), None);
    let started = std::time::Instant::now();
    reload(&mut gw, &cfg).await;
    wait_until_async(Duration::from_secs(60), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    let took = started.elapsed();
    assert!(jobs_on(&b) > 0, "b took its slots' jobs");
    each_once(&[&a, &b], &ids);
    as_before(&api, &jobs, &before, 90).await;
    assert_eq!(totals(&api, &jobs).await, totals_before, "running totals");
    assert_eq!(
        api.get("/api/ns/dead/deadletter/size").await.json["size"],
        20
    );
    let mover = &admin.get("/drains").await.json["pools"][0]["mover"];
    eprintln!("{} jobs moved in {took:?}: {mover}", mover["jobs_moved"]);

    // The first shard then leaves at once: every job moves to b.
    cfg.pools = Some(pool(&[("a", &a, 0), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    wait_until_async(Duration::from_secs(60), "a's drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    assert_eq!(jobs_on(&a), 0);
    each_once(&[&a, &b], &ids);
    assert_eq!(totals(&api, &jobs).await, totals_before, "running totals");
    let slot_keys: Vec<String> = a
        .client()
        .keys::<_, Vec<String>>("sd:{*")
        .expect("keys")
        .into_iter()
        .filter(|k| !k.ends_with(":lease"))
        .collect();
    assert!(
        slot_keys.is_empty(),
        "a keeps only pump leases: {slot_keys:?}"
    );
    // The moved jobs still work: a ready job is consumed and acknowledged.
    let r = api.get("/api/ns/idle0?ttr=30").await;
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.json["job_id"].as_str().expect("id");
    assert_eq!(
        api.delete(&format!("/api/ns/idle0/job/{id}")).await.status,
        204
    );
    assert!(!held(&[&a, &b]).contains_key(id));
}

/// Waits until `redis` has loaded its data (a Redis loading its AOF
/// answers `LOADING` to every command).
async fn loaded(redis: &RedisServer) {
    wait_until_async(Duration::from_secs(30), "Redis to load its data", || {
        std::future::ready(
            redis::cmd("PING")
                .query::<String>(&mut redis.client())
                .is_ok(),
        )
    })
    .await;
}

/// Waits until `n` more jobs than now are at `to`.
async fn more_moved_to(to: &RedisServer, n: u64, what: &str) {
    let cut = jobs_on(to);
    wait_until_async(Duration::from_secs(30), what, || {
        std::future::ready(jobs_on(to) >= cut + n)
    })
    .await;
}

#[tokio::test]
async fn a_mover_killed_and_both_redis_restarted_mid_move_lose_and_double_no_job() {
    // Both shards write to disk each second, as is usual.
    let aof = ["--appendonly", "yes", "--appendfsync", "everysec"];
    let (mut a, mut b) = (RedisServer::start_with(&aof), RedisServer::start_with(&aof));
    // Small batches, one slot at a time: slow enough to cut mid-move.
    let mover = "[mover]\nbatch = 50\nslots_at_once = 1\nlease_ms = 2000\nsettle_ms = 1000";
    let (mut cfg, mut gw, api) = on_a(&a, mover).await;
    // Delayed, ready, reserved and dead jobs: 4,096.
    let jobs = mixed_jobs(&api, 500).await;
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let mut before = Vec::new();
    for (q, id) in &jobs {
        before.push(peek(&api, q, id).await);
    }

    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    more_moved_to(&b, 300, "the move to start").await;
    // The mover dies mid-move, and starts again.
    gw.kill();
    gw.restart();
    more_moved_to(&b, 300, "the move to go on after the mover's restart").await;
    // The new shard's Redis dies mid-move and comes back from its disk.
    b.restart();
    loaded(&b).await;
    more_moved_to(&b, 300, "the move to go on after b's restart").await;
    // Then the old shard's.
    let admin = Api::new(gw.admin(), None);
    let drains = admin.get("/drains").await.json;
    let left = drains["pools"][0]["draining"][0]["jobs_left"].as_u64();
    assert!(
        left.is_some_and(|n| n > 0),
        "a is restarted mid-move: {drains}"
    );
    a.restart();
    wait_until_async(Duration::from_secs(120), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    assert!(jobs_on(&b) > 0);
    each_once(&[&a, &b], &ids);
    // Each job as it was: state, tries, attributes, body, TTL.
    as_before(&api, &jobs, &before, 240).await;
}

/// Script calls `redis` has run (`INFO commandstats`).
fn script_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.client())
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn a_slot_another_gateway_moves_is_asked_for_once_a_check() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    for i in 0..8 {
        bulk(&api, &format!("q{i}"), "delay=3600", 20).await;
    }
    // Another gateway holds the mover lease of every slot at a.
    let mut c = a.client();
    for slot in 0..SLOTS {
        let key = sundial_core::keys::SlotKeys::new(slot).mover();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("another gateway")
            .arg("PX")
            .arg(120_000)
            .query(&mut c)
            .expect("set lease");
    }
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(30), "the mover to try", || async {
        admin.get("/drains").await.json["pools"][0]["mover"]["state"] == "moving"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = script_calls(&a);
    tokio::time::sleep(Duration::from_secs(2)).await; // the window measured
    let calls = script_calls(&a) - before;
    // A try per slot (at most `slots_at_once`, 8) per 300 ms check: about
    // 55 in 2 s. Asking again as each try ends would be thousands.
    assert!(calls < 200, "{calls} script calls in 2 s at a");
    assert_eq!(jobs_on(&b), 0, "nothing moved under another's lease");
    eprintln!("{calls} script calls in 2 s while another gateway holds every slot's lease");
}
