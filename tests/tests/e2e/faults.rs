//! Faults and lifecycle: Redis outages, signals, crashes, clients that leave.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, create_token, started, wait_until_async,
};

#[tokio::test]
async fn redis_down_is_a_quick_503_and_the_gateway_recovers() {
    let mut redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "", b"before").await;

    redis.kill();
    let start = Instant::now();
    // Right after the kill, whatever state each connection is in, every
    // request is a 503, never a 500.
    for _ in 0..20 {
        let r = api.put("/api/ns/q", b"during").await;
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.json["error"], "storage unavailable, retry later");
    }
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "503s within the command timeout"
    );
    assert_eq!(api.get("/api/ns/q").await.status, 503);
    // Its only shard is down: this gateway can serve nothing, and says why.
    // (With another shard up it stays ready: tests/tests/e2e/pools.rs.)
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(10),
        "/ready to report the shard down",
        || async {
            let r = admin.get("/ready").await;
            r.status == 503
                && r.json["status"] == "unavailable"
                && r.json["pools"]["default"]["default/main"]["up"] == false
        },
    )
    .await;

    // Same port, empty data (no persistence in this test).
    redis.restart();
    wait_until_async(
        Duration::from_secs(15),
        "the gateway to reconnect",
        || async { api.put("/api/ns/q", b"after").await.status == 201 },
    )
    .await;
    assert_eq!(api.get("/api/ns/q").await.status, 200);
    wait_until_async(
        Duration::from_secs(10),
        "/ready to report the shard up",
        || async { admin.get("/ready?strict=true").await.json["status"] == "ready" },
    )
    .await;
    assert!(!gw.log().contains("panicked"), "no panic: {}", gw.log());
}

#[tokio::test]
async fn sigterm_drains_waiting_consumers_and_exits() {
    let redis = RedisServer::start();
    let mut gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let waiter = {
        let api = api.clone();
        tokio::spawn(async move { api.get("/api/ns/q?timeout=60").await })
    };
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(redis.subscribers("sd:ready:ns/q") > 0)
    })
    .await;
    let start = Instant::now();
    gw.signal("TERM");
    let r = waiter.await.expect("waiter");
    assert_eq!(r.status, 404, "a waiting consumer gets no job: {r:?}");
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .expect("exits after SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    assert!(start.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn the_gateway_refuses_a_redis_that_evicts_keys() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let mut gw = Sundial::spawn(&SundialConfig::new(redis.url()));
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("refuses to start");
    assert!(!status.success());
    let log = gw.log();
    assert!(
        log.contains("allkeys-lru") && log.contains("noeviction"),
        "says why and how: {log}"
    );
}

#[tokio::test]
async fn the_gateway_refuses_an_admin_redis_that_evicts_keys() {
    let redis = RedisServer::start();
    let admin = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = format!("admin_redis = \"{}\"\n", admin.url());
    let mut gw = Sundial::spawn(&cfg);
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("refuses to start");
    assert!(!status.success());
    let log = gw.log();
    assert!(
        log.contains("admin_redis refused") && log.contains("volatile-lru"),
        "says why: {log}"
    );
}

/// `sundial_consumers_waiting` as the gateway reports it, once it has one.
async fn waiting(gw: &Sundial) -> Option<f64> {
    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    text.as_str()?
        .lines()
        .find_map(|l| l.strip_prefix("sundial_consumers_waiting "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn a_client_that_leaves_a_long_poll_takes_no_job() {
    let (redis, gw, _token, api) = started("ns").await;
    let leaver = {
        let api = api.clone();
        tokio::spawn(async move { api.get("/api/ns/q?timeout=30&ttr=600").await })
    };
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(redis.subscribers("sd:ready:ns/q") > 0)
    })
    .await;
    leaver.abort(); // the client hangs up
    let _ = leaver.await;
    wait_until_async(
        Duration::from_secs(10),
        "the server to drop the waiter",
        || async { waiting(&gw).await == Some(0.0) },
    )
    .await;
    assert_eq!(
        redis.subscribers("sd:ready:ns/q"),
        1,
        "the subscription stays a while for the next long poll"
    );
    let id = api.publish("ns", "q", "", b"for someone present").await;
    let r = api.get("/api/ns/q").await;
    assert_eq!(r.status, 200, "the job is still there: {r:?}");
    assert_eq!(r.json["job_id"], id.as_str());
}

/// Publishes from several tasks while the gateway is killed with SIGKILL,
/// restarts it, drains the queue, and accounts for every id that was
/// answered 201.
#[tokio::test]
async fn sigkill_under_load_loses_no_acknowledged_job() {
    let redis = RedisServer::start();
    let mut gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut publishers = Vec::new();
    for w in 0..8 {
        let api = api.clone();
        let acked = acked.clone();
        publishers.push(tokio::spawn(async move {
            let mut failures = 0;
            for i in 0..100_000 {
                let body = format!("w{w}-{i}");
                let url = format!("{}/api/ns/q?tries=1", api.base);
                let sent = api
                    .http
                    .put(url)
                    .header("X-Token", api.token.as_deref().unwrap_or_default())
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 201 => {
                        let v: serde_json::Value = r.json().await.expect("json");
                        acked
                            .lock()
                            .expect("lock")
                            .insert(v["job_id"].as_str().expect("id").to_owned());
                    }
                    _ => {
                        failures += 1;
                        if failures > 20 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    wait_until_async(Duration::from_secs(30), "load to build up", || async {
        acked.lock().expect("lock").len() >= 2_000
    })
    .await;
    gw.kill();
    for p in publishers {
        p.await.expect("publisher");
    }
    let acked = acked.lock().expect("lock").clone();
    gw.restart();

    let mut seen = HashSet::new();
    loop {
        let r = api.get("/api/ns/q?count=100&ttr=600").await;
        if r.status == 404 {
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        for j in r.json.as_array().expect("array") {
            seen.insert(j["job_id"].as_str().expect("id").to_owned());
        }
    }
    let lost: Vec<&String> = acked.difference(&seen).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged jobs lost: {lost:?}",
        lost.len(),
        acked.len()
    );
    eprintln!(
        "{} jobs acknowledged before SIGKILL, {} found after restart (the rest were published but not yet answered)",
        acked.len(),
        seen.len()
    );
}

#[tokio::test]
async fn startup_says_which_shard_it_waits_for_and_why() {
    // A port that no Redis can take meanwhile (a free port, left unbound,
    // was once taken by another test's Redis, which the gateway then
    // checked instead): held by a listener that closes every connection
    // at once, so the shard never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let mut gw = Sundial::spawn(&SundialConfig::new(format!("redis://127.0.0.1:{port}")));
    wait_until_async(Duration::from_secs(10), "a report of the wait", || {
        std::future::ready(gw.log().contains("waiting for the shard to answer"))
    })
    .await;
    let log = gw.log();
    assert!(
        log.contains("shard=\"default/main\""),
        "names the shard: {log}"
    );
    // Why: the connection's error (closed by the listener).
    assert!(log.contains("last_error=\""), "says why: {log}");
    gw.kill();
}
