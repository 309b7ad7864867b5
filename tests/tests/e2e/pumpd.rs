//! Deployment modes: a gateway without pumps, and `sundial pumpd` alone.

use std::time::Duration;

use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, create_token, started, wait_until, wait_until_async,
};

#[tokio::test]
async fn a_gateway_without_pumps_needs_pumpd_for_delayed_jobs() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pump = false;
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "delay=1", b"x").await;

    // Nothing moves the job while no process pumps.
    let r = api.get("/api/ns/q?timeout=2").await;
    assert_eq!(r.status, 404, "no pump, no delivery: {r:?}");

    // `sundial pumpd` alone takes over the timers.
    let mut pcfg = SundialConfig::new(redis.url());
    pcfg.command = "pumpd";
    let pumpd = Sundial::spawn(&pcfg);
    let r = api.get("/api/ns/q?timeout=15").await;
    assert_eq!(r.status, 200, "pumpd delivered it: {r:?}\n{}", pumpd.log());
    assert!(pumpd.log().contains("sundial pumpd running"));
}

#[tokio::test]
async fn startup_warns_when_aof_is_off() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    wait_until(Duration::from_secs(5), "the startup log", || {
        gw.log().contains("listening")
    });
    assert!(gw.log().contains("AOF is off"), "{}", gw.log());

    let durable = RedisServer::start_with(&["--appendonly", "yes"]);
    let gw = Sundial::start(&SundialConfig::new(durable.url()));
    wait_until(Duration::from_secs(5), "the startup log", || {
        gw.log().contains("listening")
    });
    assert!(!gw.log().contains("AOF is off"), "{}", gw.log());
}

#[tokio::test]
async fn pumpd_follows_a_config_change_by_itself() {
    let (main, eu) = (RedisServer::start(), RedisServer::start());
    let both = format!(
        "[pools.default]\nshards = [{{ url = \"{}\" }}]\n[pools.eu]\nshards = [{{ url = \"{}\" }}]\n",
        main.url(),
        eu.url()
    );
    let mut gcfg = SundialConfig::new(main.url());
    gcfg.pump = false;
    gcfg.pools = Some(both.clone());
    let gw = Sundial::start(&gcfg);
    // pumpd starts knowing only the default pool.
    let mut pcfg = SundialConfig::new(main.url());
    pcfg.command = "pumpd";
    let mut pumpd = Sundial::spawn(&pcfg);
    wait_until(Duration::from_secs(10), "pumpd to run", || {
        pumpd.log().contains("sundial pumpd running")
    });

    let r = Api::new(gw.admin(), None)
        .post("/token/ns?description=eu&pool=eu")
        .await;
    let token = r.json["token"].as_str().expect("token").to_owned();
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "delay=1", b"in eu").await;
    assert_eq!(
        api.get("/api/ns/q?timeout=2").await.status,
        404,
        "nobody pumps eu yet"
    );

    pcfg.pools = Some(both);
    pumpd.rewrite(&pcfg);
    let r = api.get("/api/ns/q?timeout=15").await;
    assert_eq!(
        r.status,
        200,
        "pumpd reloaded and pumped eu: {r:?}\n{}",
        pumpd.log()
    );
}

#[tokio::test]
async fn pumpd_readiness_follows_its_lease_loop_and_shards() {
    let mut redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pump = false;
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "delay_ms=100", b"x").await;
    let pumpd = Sundial::start_pumpd(&cfg, "lease_ttl_ms = 1000");
    let ready = Api::pumpd(pumpd.admin());
    sundial_tests::wait_until_async(Duration::from_secs(10), "pumpd ready", || async {
        let r = ready.get("/ready").await;
        r.status == 200 && r.json["shards"]["default/main"]["leases_held"].as_u64() > Some(0)
    })
    .await;

    redis.kill();
    sundial_tests::wait_until_async(Duration::from_secs(10), "pumpd unready", || async {
        let r = ready.get("/ready").await;
        r.status == 503 && r.json["shards"]["default/main"]["up"] == false
    })
    .await;
    let r = ready.get("/ready").await;
    assert!(
        r.json["shards"]["default/main"]["error"].is_string(),
        "{r:?}"
    );

    redis.restart();
    sundial_tests::wait_until_async(Duration::from_secs(15), "pumpd ready again", || async {
        let r = ready.get("/ready").await;
        r.status == 200 && r.json["shards"]["default/main"]["up"] == true
    })
    .await;
}

/// Connections to `redis` in pub/sub mode, from `CLIENT LIST`.
fn subscriber_connections(redis: &RedisServer) -> usize {
    let mut c = redis.client();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut c)
        .expect("client list");
    list.lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.starts_with("flags=") && f.contains('P'))
        })
        .count()
}

#[tokio::test]
async fn pumps_and_waiting_consumers_share_one_subscriber_per_shard() {
    let (redis, _gw, _token, api) = started("ns").await;
    // The pumps' timer subscription exists once the gateway is up.
    wait_until(Duration::from_secs(10), "the timer subscription", || {
        redis.subscribers(sundial_core::keys::TIMER_CHANNEL) == 1
    });
    // Consumers wait on three queues; a delayed job wakes one of them.
    let waits: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|q| {
            let api = api.clone();
            tokio::spawn(async move { api.get(&format!("/api/ns/{q}?timeout=3")).await })
        })
        .collect();
    // (Async: the waiters run on this test's runtime.)
    let channel = sundial_core::keys::ready_channel("ns", "c");
    wait_until_async(
        Duration::from_secs(10),
        "the waiters' subscriptions",
        || async { redis.subscribers(&channel) == 1 },
    )
    .await;
    assert_eq!(
        subscriber_connections(&redis),
        1,
        "pumps and wake-ups share the shard's one subscriber connection"
    );
    api.publish("ns", "b", "delay_ms=200", b"x").await;
    let mut delivered = 0;
    for w in waits {
        delivered += u32::from(w.await.expect("waiter").status == 200);
    }
    assert_eq!(
        delivered, 1,
        "the delayed job reached a waiter of its queue"
    );
    // The waiters are gone; their subscriptions stay a while for the next
    // long polls, on the same one connection.
    assert_eq!(redis.subscribers(&channel), 1);
    assert_eq!(subscriber_connections(&redis), 1);
}
