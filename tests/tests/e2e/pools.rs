//! Named pools and sharded pools, each shard a real redis-server.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use redis::Commands;
use sundial_core::keys;
use sundial_router::ring::Ring;
use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, create_token, token_id, wait_until_async,
};

const SLOTS: u32 = 64;
/// Lanes per queue in these pools: enough that one queue spreads over every
/// shard.
const LANES: u32 = 16;

fn sharded_pool(shards: &[(&str, &RedisServer)], slots: u32) -> String {
    let list: Vec<String> = shards
        .iter()
        .map(|(name, r)| format!("{{ name = \"{name}\", url = \"{}\" }}", r.url()))
        .collect();
    format!(
        "[pools.default]\nslots = {slots}\nlanes = {LANES}\nshards = [{}]\n",
        list.join(", ")
    )
}

/// Jobs stored on one Redis over a pool of `slots`, read with the
/// independent client.
fn jobs_on(redis: &RedisServer, slots: u32) -> u64 {
    let mut c = redis.client();
    (0..slots)
        .map(|s| {
            c.hlen::<_, u64>(keys::SlotKeys::new(s).jobs())
                .expect("hlen")
        })
        .sum()
}

/// A gateway over a pool of two shards (16 slots), and a client of
/// namespace `ns`.
async fn two_shards() -> (RedisServer, RedisServer, Sundial, Api) {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b)], 16));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    (a, b, gw, api)
}

#[tokio::test]
async fn a_queue_spreads_over_the_shards_of_a_pool_by_its_lanes() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b), ("c", &c)], SLOTS));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    const JOBS: usize = 3_000;
    let mut published = HashSet::new();
    for chunk in 0..(JOBS / 50) {
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let api = api.clone();
                tokio::spawn(async move {
                    api.publish("ns", "q", "", format!("{chunk}-{i}").as_bytes())
                        .await
                })
            })
            .collect();
        for t in tasks {
            published.insert(t.await.expect("publish"));
        }
    }
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], JOBS);

    // Each shard holds the jobs of the lanes whose slots the ring gives it.
    let ring = Ring::new([("a", 1), ("b", 1), ("c", 1)]);
    let mut lanes_on = [0u32; 3];
    for lane in 0..LANES {
        let slot = keys::slot_of("ns", "q", lane, SLOTS);
        lanes_on[ring.shard_of(slot).expect("shard")] += 1;
    }
    let held = [jobs_on(&a, SLOTS), jobs_on(&b, SLOTS), jobs_on(&c, SLOTS)];
    assert_eq!(
        held.iter().sum::<u64>(),
        JOBS as u64,
        "every job is on exactly one shard"
    );
    for (i, (jobs, lanes)) in held.iter().zip(lanes_on).enumerate() {
        let expected = JOBS as f64 * f64::from(lanes) / f64::from(LANES);
        let off = (*jobs as f64 - expected).abs() / expected;
        assert!(
            off < 0.2,
            "shard {i}: {jobs} jobs, expected {expected:.0} from its {lanes} lanes"
        );
        assert!(*jobs > 0);
    }
    eprintln!("lanes per shard {lanes_on:?}, jobs per shard {held:?} of {JOBS}");

    // Consume everything: each job exactly once, from every shard.
    let mut seen = HashSet::new();
    loop {
        let r = api.get("/api/ns/q?count=100&ttr=600").await;
        if r.status == 404 {
            break;
        }
        for j in r.json.as_array().expect("array") {
            let id = j["job_id"].as_str().expect("id").to_owned();
            assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
            assert!(seen.insert(id), "delivered twice");
        }
    }
    assert_eq!(seen, published);
    assert_eq!(
        (jobs_on(&a, SLOTS), jobs_on(&b, SLOTS), jobs_on(&c, SLOTS)),
        (0, 0, 0),
        "acked jobs leave nothing on any shard"
    );
}

#[tokio::test]
async fn every_operation_finds_jobs_on_any_shard() {
    let (a, b, _gw, api) = two_shards().await;
    let ids: Vec<String> = futures::future::join_all((0..40).map(|i| {
        let api = api.clone();
        async move {
            api.publish("ns", "q", "tries=1", format!("{i}").as_bytes())
                .await
        }
    }))
    .await;
    assert!(
        jobs_on(&a, 16) > 0 && jobs_on(&b, 16) > 0,
        "both shards hold jobs"
    );
    for id in &ids {
        assert_eq!(
            api.get(&format!("/api/ns/q/job/{id}")).await.status,
            200,
            "peek {id}"
        );
    }
    assert_eq!(api.get("/api/ns/q/peek").await.status, 200);
    // Republish every job; then take them all with a TTR of 0 and let them die.
    let mut new_ids = Vec::new();
    for id in &ids {
        let r = api
            .put(&format!("/api/ns/q/job/{id}?tries=1"), b"again")
            .await;
        assert_eq!(r.status, 201);
        new_ids.push(r.json["job_id"].as_str().expect("id").to_owned());
    }
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 40);
    let mut taken = 0;
    while taken < 40 {
        let r = api.get("/api/ns/q?count=100&ttr=0").await;
        assert_eq!(r.status, 200);
        taken += r.json.as_array().expect("array").len();
    }
    wait_until_async(
        Duration::from_secs(10),
        "40 dead jobs over both shards",
        || async { api.get("/api/ns/q/deadletter/size").await.json["size"] == 40 },
    )
    .await;
    let r = api.put("/api/ns/q/deadletter?limit=25", b"").await;
    assert_eq!(r.json["count"], 25, "respawn spans shards");
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 25);
    assert_eq!(
        api.delete("/api/ns/q/deadletter?limit=100").await.status,
        204
    );
    assert_eq!(api.get("/api/ns/q/deadletter/size").await.json["size"], 0);
    assert_eq!(api.delete("/api/ns/q").await.status, 204);
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 0);
}

#[tokio::test]
async fn a_long_poll_wakes_for_a_job_on_any_shard() {
    let (a, b, _gw, api) = two_shards().await;
    for _ in 0..6 {
        let waiter = {
            let api = api.clone();
            tokio::spawn(async move { api.get("/api/ns/q?timeout=20").await })
        };
        wait_until_async(
            Duration::from_secs(10),
            "the waiter to subscribe on both shards",
            || {
                std::future::ready(
                    a.subscribers("sd:ready:ns/q") > 0 && b.subscribers("sd:ready:ns/q") > 0,
                )
            },
        )
        .await;
        let id = api.publish("ns", "q", "", b"x").await;
        let r = waiter.await.expect("waiter");
        assert_eq!(
            (r.status, r.json["job_id"].as_str()),
            (200, Some(id.as_str()))
        );
    }
}

#[tokio::test]
async fn tokens_route_tenants_to_their_pools() {
    let (main, eu) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(main.url());
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\" }}]\n[pools.eu]\nslots = 8\nshards = [{{ url = \"{}\" }}]\n",
        main.url(),
        eu.url()
    ));
    let gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default", "eu"])
    );
    let r = admin.post("/token/ns?description=eu&pool=eu").await;
    let eu_token = r.json["token"].as_str().expect("token").to_owned();
    assert!(eu_token.starts_with("eu:"), "{eu_token}");
    let main_token = create_token(&gw.admin(), "ns").await;

    let on_eu = Api::new(gw.api(), Some(&eu_token));
    let on_main = Api::new(gw.api(), Some(&main_token));
    on_eu.publish("ns", "q", "", b"eu job").await;
    on_main.publish("ns", "q", "", b"main job").await;
    assert_eq!(jobs_on(&eu, 8), 1);
    assert_eq!(jobs_on(&main, sundial_router::config::DEFAULT_SLOTS), 1);
    assert_eq!(on_eu.get("/api/ns/q/size").await.json["size"], 1);
    let got = on_eu.get("/api/ns/q").await;
    assert_eq!(
        got.json["data"], "ZXUgam9i",
        "the eu pool's own job (\"eu job\")"
    );

    // The secret alone (no prefix) is a default-pool token, and not one that exists.
    let secret = eu_token.trim_start_matches("eu:");
    assert_eq!(
        Api::new(gw.api(), Some(secret))
            .get("/api/ns/q/size")
            .await
            .status,
        401
    );
    let nowhere = Api::new(gw.api(), Some(&format!("nowhere:{secret}")));
    let r = nowhere.get("/api/ns/q/size").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("pool not found"))
    );

    let info = admin.get("/info?pool=eu").await;
    assert_eq!(info.json, serde_json::json!({"ns": ["q"]}));
    let tokens = admin.get("/token/ns?pool=eu").await;
    assert_eq!(tokens.json["tokens"][&token_id(&eu_token)], "eu");
    assert_eq!(
        admin.delete(&format!("/token/ns/{eu_token}")).await.status,
        204
    );
    wait_until_async(Duration::from_secs(3), "the eu token to go", || async {
        on_eu.get("/api/ns/q/size").await.status == 401
    })
    .await;
}

#[tokio::test]
async fn a_shard_with_slots_of_a_pool_that_holds_jobs_cannot_leave_the_config() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b)], 16));
    {
        let gw = Sundial::start(&cfg);
        let token = create_token(&gw.admin(), "ns").await;
        Api::new(gw.api(), Some(&token))
            .publish("ns", "q", "", b"x")
            .await;
    }
    let mut shrunk = cfg.clone();
    shrunk.pools = Some(sharded_pool(&[("a", &a)], 16));
    let mut refused = Sundial::spawn(&shrunk);
    let status = refused
        .wait_exit(Duration::from_secs(20))
        .expect("refuses to start");
    assert!(!status.success());
    assert!(
        refused.log().contains("keep it in the config"),
        "{}",
        refused.log()
    );

    // The same shards listed in another order are fine: only names place slots.
    let mut reordered = cfg.clone();
    reordered.pools = Some(sharded_pool(&[("b", &b), ("a", &a)], 16));
    let gw = Sundial::start(&reordered);
    let token = create_token(&gw.admin(), "ns").await;
    assert_eq!(
        Api::new(gw.api(), Some(&token))
            .get("/api/ns/q/size")
            .await
            .json["size"],
        1
    );
}

#[tokio::test]
async fn a_pool_that_holds_jobs_grows_and_every_job_stays_reachable() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false".to_owned();
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b)], 16));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let mut ready = HashSet::new();
    for i in 0..100 {
        ready.insert(api.publish("ns", "q", "", format!("r{i}").as_bytes()).await);
    }
    let mut delayed = HashSet::new();
    for i in 0..20 {
        delayed.insert(
            api.publish("ns", "q", "delay=2", format!("d{i}").as_bytes())
                .await,
        );
    }
    for i in 0..10 {
        api.publish("ns", "dl", "tries=1", format!("x{i}").as_bytes())
            .await;
    }
    assert_eq!(
        api.get("/api/ns/dl?count=10&ttr=0")
            .await
            .json
            .as_array()
            .map(Vec::len),
        Some(10)
    );
    wait_until_async(Duration::from_secs(10), "ten dead jobs", || async {
        api.get("/api/ns/dl/deadletter/size").await.json["size"] == 10
    })
    .await;

    // Grow the pool: a third shard takes over part of the slots.
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b), ("c", &c)], 16));
    gw.rewrite(&cfg);
    let r = Api::new(gw.admin(), None).post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");

    // Everything published before is still seen: sizes, peeks, reads by id.
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 100);
    assert_eq!(api.get("/api/ns/dl/deadletter/size").await.json["size"], 10);
    for id in ready.iter().chain(&delayed) {
        let r = api.get(&format!("/api/ns/q/job/{id}")).await;
        if r.status != 200 {
            let mut where_ = Vec::new();
            for (name, srv) in [("a", &a), ("b", &b), ("c", &c)] {
                let mut conn = srv.client();
                for slot in 0..16 {
                    let has: bool =
                        redis::Commands::hexists(&mut conn, keys::SlotKeys::new(slot).jobs(), id)
                            .expect("hexists");
                    if has {
                        where_.push(format!("{name}/{slot}"));
                    }
                }
            }
            panic!("{id}: {r:?}; stored at {where_:?}");
        }
    }
    // New jobs go to the new layout, the new shard included.
    let mut after = HashSet::new();
    for i in 0..100 {
        after.insert(api.publish("ns", "q", "", format!("n{i}").as_bytes()).await);
    }
    assert!(jobs_on(&c, 16) > 0, "the new shard takes new jobs");
    // Delayed jobs left at their old shard are still pumped there.
    let mut seen = HashSet::new();
    let expected: HashSet<String> = ready
        .iter()
        .chain(&delayed)
        .chain(&after)
        .cloned()
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while seen.len() < expected.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "consumed {} of {}",
            seen.len(),
            expected.len()
        );
        let r = api.get("/api/ns/q?count=100&ttr=600&timeout=1").await;
        if r.status == 200 {
            for j in r.json.as_array().expect("array") {
                let id = j["job_id"].as_str().expect("id").to_owned();
                assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
                seen.insert(id);
            }
        }
    }
    assert_eq!(seen, expected);
    let r = api.put("/api/ns/dl/deadletter?limit=100", b"").await;
    assert_eq!(r.json["count"], 10, "dead jobs at their old shard respawn");
    assert_eq!(
        (jobs_on(&a, 16) + jobs_on(&b, 16) + jobs_on(&c, 16)),
        10,
        "only the respawned jobs remain"
    );

    // A restart reads the layouts back from the shards and sees the same.
    drop(gw);
    let again = Sundial::start(&cfg);
    let api = Api::new(again.api(), Some(&token));
    assert_eq!(api.get("/api/ns/dl/size").await.json["size"], 10);
    assert!(
        again.log().contains("earlier shard layouts drain"),
        "{}",
        again.log()
    );
}

#[tokio::test]
async fn an_empty_pool_may_change_its_shards() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(sharded_pool(&[("a", &a)], 16));
    drop(Sundial::start(&cfg));
    cfg.pools = Some(sharded_pool(&[("a", &a), ("b", &b)], 16));
    let gw = Sundial::start(&cfg);
    assert_eq!(Api::new(gw.admin(), None).get("/ready").await.status, 200);
}

#[tokio::test]
async fn a_dead_shard_fails_only_what_needs_it() {
    let (a, mut b, other) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(format!(
        "{}[pools.other]\nshards = [{{ url = \"{}\" }}]\n",
        sharded_pool(&[("a", &a), ("b", &b)], 16),
        other.url()
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let r = Api::new(gw.admin(), None)
        .post("/token/ns?description=o&pool=other")
        .await;
    let other_token = r.json["token"].as_str().expect("token").to_owned();
    let api = Api::new(gw.api(), Some(&token));
    let on_other = Api::new(gw.api(), Some(&other_token));

    b.kill();
    let mut statuses = HashMap::new();
    for i in 0..40 {
        let r = api.put("/api/ns/q", format!("{i}").as_bytes()).await;
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    assert!(
        statuses.get(&201).is_some_and(|n| *n > 0),
        "jobs for shard a are accepted: {statuses:?}"
    );
    assert!(
        statuses.get(&503).is_some_and(|n| *n > 0),
        "jobs for shard b get 503: {statuses:?}"
    );
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    let accepted = statuses[&201];

    // Consume serves what shard a has, then says 503 rather than "no job".
    for _ in 0..accepted {
        let r = api.get("/api/ns/q").await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert_eq!(api.get("/api/ns/q").await.status, 503);
    assert_eq!(
        api.get("/api/ns/q/size").await.status,
        503,
        "a size needs every shard"
    );
    // Another pool goes on.
    assert_eq!(on_other.put("/api/ns/q", b"x").await.status, 201);
    // The gateway stays ready (a dead shard fails only what needs it); it
    // says which shard is down.
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(10),
        "/ready to report b down",
        || async {
            let r = admin.get("/ready").await;
            r.status == 200 && r.json["status"] == "degraded"
        },
    )
    .await;
    assert_eq!(admin.get("/ready?strict=true").await.status, 503);

    b.restart();
    wait_until_async(Duration::from_secs(15), "shard b to be back", || async {
        api.get("/api/ns/q/size").await.status == 200
    })
    .await;
    for i in 0..20 {
        assert_eq!(
            api.put("/api/ns/q", format!("{i}").as_bytes()).await.status,
            201
        );
    }

    // Shard b came back empty (no persistence here); a gateway still starts,
    // since the pool's shards did not change.
    drop(gw);
    let again = Sundial::start(&cfg);
    assert_eq!(
        Api::new(again.admin(), None).get("/ready").await.status,
        200
    );
}
