//! Per-token rate limits, counted in Redis across gateways.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use reqwest::Method;
use sundial_tests::{
    Api, RedisServer, ShardKind, Store, Sundial, SundialConfig, create_token, token_id,
    wait_until_async,
};

fn limit_body(read: u64, write: u64, interval: u64) -> Vec<u8> {
    format!(r#"{{"read":{read},"write":{write},"interval":{interval}}}"#).into_bytes()
}

#[tokio::test]
async fn limit_admin_follows_lmstfy() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let admin = Api::new(gw.admin(), None);
    let path = format!("/token/ns/{token}/limit");
    assert_eq!(admin.get(&path).await.status, 404);
    let r = admin
        .call(Method::POST, &path, Some(limit_body(0, 0, 10)), &[])
        .await;
    assert_eq!(r.status, 400, "read or write must be set: {r:?}");
    let r = admin
        .call(Method::POST, &path, Some(limit_body(5, 3, 0)), &[])
        .await;
    assert_eq!(r.status, 400, "interval must be set");
    let r = admin
        .call(
            Method::POST,
            "/token/ns/no-such-token-at-all-here/limit",
            Some(limit_body(1, 1, 1)),
            &[],
        )
        .await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("token not found"))
    );
    let r = admin
        .call(Method::POST, &path, Some(limit_body(5, 3, 10)), &[])
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json["limiter"],
        serde_json::json!({"read": 5, "write": 3, "interval": 10})
    );
    let r = admin
        .call(Method::POST, &path, Some(limit_body(5, 3, 10)), &[])
        .await;
    assert_eq!(r.status, 400, "already exists");
    let r = admin
        .call(Method::PUT, &path, Some(limit_body(7, 3, 10)), &[])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        admin.get(&path).await.json,
        serde_json::json!({"read": 7, "write": 3, "interval": 10})
    );
    let all = admin.get("/limits").await;
    assert_eq!(
        all.json,
        serde_json::json!([{"namespace": "ns", "token": token_id(&token), "limiter": {"read": 7, "write": 3, "interval": 10}}])
    );
    assert_eq!(
        admin.delete(&path).await.json,
        serde_json::json!({"msg": "success"})
    );
    assert_eq!(admin.get(&path).await.status, 404);
}

// The limit counters and tables live in the admin Redis: here the pool's
// Redis, a standalone server or a Redis Cluster.
on_every_shard_kind!(
    publishes_over_the_limit_get_429_on_every_gateway_and_each_token_keeps_its_own
);

async fn publishes_over_the_limit_get_429_on_every_gateway_and_each_token_keeps_its_own(
    kind: ShardKind,
) {
    let store = Store::start(kind);
    let a = Sundial::start(&SundialConfig::new(store.url()));
    let b = Sundial::start(&SundialConfig::new(store.url()));
    let limited = create_token(&a.admin(), "ns").await;
    let free = create_token(&a.admin(), "ns").await;
    let other = create_token(&a.admin(), "ns").await;
    let admin = Api::new(a.admin(), None);
    // A long window, so the test does not race its end.
    let r = admin
        .call(
            Method::POST,
            &format!("/token/ns/{limited}/limit"),
            Some(limit_body(0, 4, 60)),
            &[],
        )
        .await;
    assert_eq!(r.status, 201);
    let r = admin
        .call(
            Method::POST,
            &format!("/token/ns/{other}/limit"),
            Some(limit_body(0, 100, 60)),
            &[],
        )
        .await;
    assert_eq!(r.status, 201);
    let on_a = Api::new(a.api(), Some(&limited));
    let on_b = Api::new(b.api(), Some(&limited));
    // B learns the limit within its poll.
    wait_until_async(
        Duration::from_secs(3),
        "gateway B to know the limit",
        || async {
            let r = Api::new(b.admin(), None)
                .get(&format!("/token/ns/{limited}/limit"))
                .await;
            r.status == 200
        },
    )
    .await;

    // Bad requests do not use up the window.
    for _ in 0..3 {
        assert_eq!(on_a.put("/api/ns/q?tries=0", b"x").await.status, 400);
    }
    for api in [&on_a, &on_b, &on_a, &on_b] {
        assert_eq!(api.put("/api/ns/q", b"x").await.status, 201);
    }
    let r = on_b.put("/api/ns/q", b"x").await;
    assert_eq!(
        r.status, 429,
        "the fifth publish in the window, over both gateways"
    );
    // lmstfy's words, naming the token by its id (never the secret, which a
    // proxy's log of the answer would keep), and when to retry: within the
    // 60 s window.
    assert_eq!(
        r.json["msg"],
        format!(
            "token({}) produce reach the limit rate, please retry later",
            token_id(&limited)
        )
    );
    assert!(!r.json.to_string().contains(&limited), "{r:?}");
    let retry: u64 = r.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(on_a.put("/api/ns/q", b"x").await.status, 429);
    // Consumes are not limited (read = 0), and other tokens keep their own limits.
    assert_eq!(on_a.get("/api/ns/q").await.status, 200);
    for _ in 0..10 {
        assert_eq!(
            Api::new(a.api(), Some(&free))
                .put("/api/ns/q", b"x")
                .await
                .status,
            201
        );
        assert_eq!(
            Api::new(b.api(), Some(&other))
                .put("/api/ns/q", b"x")
                .await
                .status,
            201
        );
    }
}

#[tokio::test]
async fn a_consume_that_finds_nothing_costs_nothing_and_windows_reset() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let admin = Api::new(gw.admin(), None);
    let r = admin
        .call(
            Method::POST,
            &format!("/token/ns/{token}/limit"),
            Some(limit_body(2, 0, 1)),
            &[],
        )
        .await;
    assert_eq!(r.status, 201);
    let api = Api::new(gw.api(), Some(&token));
    for _ in 0..5 {
        assert_eq!(
            api.get("/api/ns/q").await.status,
            404,
            "empty consumes are refunded"
        );
    }
    api.publish("ns", "q", "", b"1").await;
    api.publish("ns", "q", "", b"2").await;
    api.publish("ns", "q", "", b"3").await;
    assert_eq!(api.get("/api/ns/q").await.status, 200);
    assert_eq!(api.get("/api/ns/q").await.status, 200);
    assert_eq!(api.get("/api/ns/q").await.status, 429);
    wait_until_async(Duration::from_secs(5), "the window to reset", || async {
        api.get("/api/ns/q").await.status == 200
    })
    .await;
}
