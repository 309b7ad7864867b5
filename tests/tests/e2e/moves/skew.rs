//! Gateways whose configs disagree for a while (each its own file, as on
//! two machines): the one ahead holds its writes to the new shard until
//! every gateway knows it, and the one behind finds every job by id.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

use super::common::{jobs_on, pool, reload, where_is};

/// Gateways that reload only when told (each its own file) and check the
/// pins often, on a pool of shards a and b.
fn skew_config(a: &RedisServer, b: &RedisServer) -> SundialConfig {
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pool(&[("a", a, 1), ("b", b, 1)]));
    cfg
}

/// Job `id` of `queue` is peeked and acknowledged through `api`, and is
/// then gone from every shard.
async fn found_and_acked(api: &Api, queue: &str, id: &str, shards: &[(&str, &RedisServer)]) {
    let r = api.get(&format!("/api/ns/{queue}/job/{id}")).await;
    assert_eq!(r.status, 200, "peek {id}: {r:?}");
    assert_eq!(
        api.delete(&format!("/api/ns/{queue}/job/{id}"))
            .await
            .status,
        204
    );
    assert_eq!(where_is(id, shards), None, "{id} is gone once acknowledged");
}

#[tokio::test]
async fn a_gateway_whose_config_is_behind_finds_every_job_by_id() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let shards = [("a", &a), ("b", &b), ("c", &c)];
    let mut cfg = skew_config(&a, &b);
    let mut behind = Sundial::start(&cfg);
    let mut ahead = Sundial::start(&cfg);
    let token = create_token(&behind.admin(), "ns").await;
    let (old, new) = (
        Api::new(behind.api(), Some(&token)),
        Api::new(ahead.api(), Some(&token)),
    );
    wait_until_async(Duration::from_secs(5), "the token on both", || async {
        new.get("/api/ns/q/size").await.status == 200
    })
    .await;

    // One gateway (its own config file, as on another machine) gets shard
    // c; the other's file does not have it yet, so it cannot follow.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 1)]));
    reload(&mut ahead, &cfg).await;
    let admin = Api::new(ahead.admin(), None);
    let drains = admin.get("/drains").await.json;
    let pool_report = &drains["pools"][0];
    assert_ne!(pool_report["writes"], pool_report["current"], "{drains}");
    // Long enough for several rounds of views: writes must stay held.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Jobs published where the config is ahead, in queues over every slot:
    // each is found, peeked and acknowledged where the config is behind.
    let mut ids = Vec::new();
    for i in 0..60 {
        let queue = format!("q{i}");
        ids.push((queue.clone(), new.publish("ns", &queue, "", b"x").await));
    }
    assert_eq!(
        jobs_on(&c),
        0,
        "no job goes to c while a gateway cannot see it"
    );
    for (queue, id) in &ids {
        let r = old.get(&format!("/api/ns/{queue}/job/{id}")).await;
        assert_eq!(r.status, 200, "peek {id} where the config is behind: {r:?}");
        let r = new.get(&format!("/api/ns/{queue}?ttr=600")).await;
        assert_eq!(r.json["job_id"], id.as_str(), "{r:?}");
        assert_eq!(
            old.delete(&format!("/api/ns/{queue}/job/{id}"))
                .await
                .status,
            204
        );
        assert_eq!(
            where_is(id, &shards),
            None,
            "{id} acknowledged where the config is behind"
        );
    }

    // Once the other gateway has c too, writes follow the current layout.
    reload(&mut behind, &cfg).await;
    wait_until_async(
        Duration::from_secs(10),
        "writes to follow the new layout",
        || async {
            let r = admin.get("/drains").await.json;
            r["pools"][0]["writes"] == r["pools"][0]["current"]
        },
    )
    .await;
    let mut on_c = 0;
    for i in 0..60 {
        let queue = format!("q{i}");
        let id = new.publish("ns", &queue, "", b"y").await;
        if where_is(&id, &shards).is_some_and(|(s, _)| s == "c") {
            on_c += 1;
        }
        found_and_acked(&old, &queue, &id, &shards).await;
    }
    assert!(
        on_c > 0,
        "c takes its slots' jobs once every gateway knows it"
    );
}

#[tokio::test]
async fn a_gateway_that_starts_ahead_holds_its_writes_for_the_one_behind() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let shards = [("a", &a), ("b", &b), ("c", &c)];
    let mut cfg = skew_config(&a, &b);
    let behind = Sundial::start(&cfg);
    let token = create_token(&behind.admin(), "ns").await;
    let old = Api::new(behind.api(), Some(&token));
    old.publish("ns", "q0", "", b"before").await;
    // Let the running gateway announce what it knows and writes.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A new gateway starts with shard c in its config.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 1)]));
    let ahead = Sundial::start(&cfg);
    let new = Api::new(ahead.api(), Some(&token));
    let drains = Api::new(ahead.admin(), None).get("/drains").await.json;
    assert_eq!(drains["pools"][0]["writes"], "a:1,b:1", "{drains}");
    for i in 0..40 {
        let queue = format!("q{i}");
        let id = new.publish("ns", &queue, "", b"x").await;
        assert_ne!(where_is(&id, &shards).map(|(s, _)| s), Some("c".to_owned()));
        found_and_acked(&old, &queue, &id, &shards).await;
    }
}
