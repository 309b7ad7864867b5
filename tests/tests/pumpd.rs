//! Deployment modes: a gateway without pumps, and `sundial pumpd` alone.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until};

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
