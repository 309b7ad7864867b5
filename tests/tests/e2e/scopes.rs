//! Scoped tokens and how tokens are stored: a token limited to some actions
//! or queues is refused the rest on every route and every gateway; the admin
//! Redis holds digests, never a secret; tokens an earlier version stored in
//! plaintext keep working and migrate.

use std::time::Duration;

use redis::Commands;
use reqwest::Method;
use serde_json::{Value, json};
use sundial_tests::{
    Api, RedisServer, Resp, Sundial, SundialConfig, create_token, token_id, wait_until_async,
};

async fn scoped(admin: &Api, ns: &str, query: &str) -> (String, Resp) {
    let r = admin
        .post(&format!("/token/{ns}?description=scoped&{query}"))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    (r.json["token"].as_str().expect("token").to_owned(), r)
}

async fn put_json(admin: &Api, path: &str, body: &str) -> Resp {
    admin
        .call(
            Method::PUT,
            path,
            Some(body.as_bytes().to_vec()),
            &[("Content-Type", "application/json")],
        )
        .await
}

fn refused(r: &Resp, why: &str) {
    assert_eq!(r.status, 403, "{r:?}");
    let msg = r.json["error"].as_str().expect("error");
    assert!(msg.contains(why), "{msg} should say {why}");
}

#[tokio::test]
async fn a_scoped_token_does_only_what_its_scope_names_on_every_route() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let full = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));

    let (producer, made) = scoped(&admin, "ns", "scope=publish&queues=emails,reports-*").await;
    assert_eq!(made.json["scopes"], json!(["publish"]));
    assert_eq!(made.json["queues"], json!(["emails", "reports-*"]));
    assert_eq!(made.json["id"], token_id(&producer));
    let producer = Api::new(gw.api(), Some(&producer));
    let (reader, _) = scoped(&admin, "ns", "scope=read").await;
    let reader = Api::new(gw.api(), Some(&reader));
    let (worker, _) = scoped(&admin, "ns", "scope=consume&queues=emails").await;
    let worker = Api::new(gw.api(), Some(&worker));

    // Publish: on its queues and prefixes only.
    assert_eq!(producer.put("/api/ns/emails", b"a").await.status, 201);
    assert_eq!(
        producer.put("/api/ns/reports-daily", b"b").await.status,
        201
    );
    refused(&producer.put("/api/ns/other", b"c").await, "\"other\"");
    refused(
        &producer.put("/api/ns/emails-2", b"c").await,
        "\"emails-2\"",
    );
    let bulk = producer
        .call(
            Method::PUT,
            "/api/ns/emails/bulk",
            Some(br#"["x","y"]"#.to_vec()),
            &[],
        )
        .await;
    assert_eq!(bulk.status, 201, "{bulk:?}");
    for path in [
        "/api/ns/emails?timeout=0",
        "/api/ns/emails/peek",
        "/api/ns/emails/size",
        "/api/ns/emails/stats",
        "/api/ns/emails/deadletter",
        "/api/ns/emails/deadletter/size",
    ] {
        refused(&producer.get(path).await, "");
    }
    refused(&producer.delete("/api/ns/emails").await, "manage");
    refused(
        &producer.put("/api/ns/emails/deadletter", b"").await,
        "manage",
    );
    refused(
        &producer.delete("/api/ns/emails/deadletter").await,
        "manage",
    );

    // Read: peek, size, stats, dead letter; nothing that changes a queue.
    for path in [
        "/api/ns/emails/peek",
        "/api/ns/emails/size",
        "/api/ns/emails/stats",
        "/api/ns/other/size",
        "/api/ns/emails/deadletter/size",
    ] {
        let r = reader.get(path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
    }
    refused(&reader.put("/api/ns/emails", b"x").await, "publish");
    refused(&reader.get("/api/ns/emails?timeout=0").await, "consume");
    assert_eq!(full.get("/api/ns/emails/size").await.json["size"], 3);

    // Consume on `emails`: take and acknowledge; not another queue, not
    // even among several; not republish, which also publishes.
    let r = worker.get("/api/ns/emails?timeout=0&ttr=30").await;
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.json["job_id"].as_str().expect("job_id").to_owned();
    refused(
        &worker.get("/api/ns/emails,reports-daily?timeout=0").await,
        "\"reports-daily\"",
    );
    refused(
        &worker.put(&format!("/api/ns/emails/job/{id}"), b"").await,
        "publish",
    );
    refused(
        &worker.get(&format!("/api/ns/emails/job/{id}")).await,
        "read",
    );
    assert_eq!(
        worker
            .delete(&format!("/api/ns/emails/job/{id}"))
            .await
            .status,
        204
    );
    assert_eq!(full.get("/api/ns/emails/size").await.json["size"], 2);

    // A token of another namespace is still invalid, whatever its scope.
    let (elsewhere, _) = scoped(&admin, "other", "scope=publish").await;
    let r = Api::new(gw.api(), Some(&elsewhere))
        .put("/api/ns/emails", b"x")
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    // Nothing refused was stored.
    assert_eq!(full.get("/api/ns/other/size").await.json["size"], 0);
}

#[tokio::test]
async fn the_admin_redis_holds_digests_and_the_api_shows_a_token_only_once() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let token = create_token(&gw.admin(), "ns").await;
    let custom = "a-custom-secret-of-30-characters";
    let r = admin
        .post(&format!(
            "/token/ns?description=mine&token={custom}&scope=read"
        ))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let limit = br#"{"read":5,"write":5,"interval":10}"#.to_vec();
    let r = admin
        .call(
            Method::POST,
            &format!("/token/ns/{token}/limit"),
            Some(limit),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");

    let mut c = redis.client();
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    let limits: Vec<(String, String)> = c.hgetall("sd:limits").expect("HGETALL");
    let keys: Vec<String> = c.keys("*").expect("KEYS");
    let everything = format!("{tokens:?}{limits:?}{keys:?}");
    for secret in [token.as_str(), custom] {
        assert!(
            !everything.contains(secret),
            "{secret} stored: {everything}"
        );
    }
    let field = {
        use sha2::{Digest, Sha256};
        format!("default/ns/sha256:{:x}", Sha256::digest(token.as_bytes()))
    };
    assert!(tokens.iter().any(|(f, _)| *f == field), "{tokens:?}");
    assert_eq!(limits.len(), 1);
    assert_eq!(
        limits[0].0, field,
        "a limit is kept under its token's field"
    );
    let id = token_id(&token);

    // Listed with ids, scopes and when each was made; never the secret.
    let list = admin.get("/token/ns").await;
    let text = list.json.to_string();
    assert!(!text.contains(&token) && !text.contains(custom), "{text}");
    let details = list.json["details"].as_array().expect("details");
    let mine = details
        .iter()
        .find(|d| d["id"] == token_id(custom))
        .expect("listed");
    assert_eq!(mine["scopes"], json!(["read"]));
    assert_eq!(mine["stored"], "hashed");
    assert!(mine["created_at_ms"].as_u64().is_some(), "{mine}");

    // An id names the token in admin paths: its limit, its scope, deleting it.
    let r = admin.get(&format!("/token/ns/{id}/limit")).await;
    assert_eq!(r.json["read"], 5, "{r:?}");
    let r = admin.get(&format!("/token/ns/{id}/scope")).await;
    assert_eq!(
        r.json["scopes"],
        json!(["publish", "consume", "read", "manage"]),
        "{r:?}"
    );
    assert_eq!(admin.delete(&format!("/token/ns/{id}")).await.status, 204);
    let api = Api::new(gw.api(), Some(&token));
    assert_eq!(api.get("/api/ns/q/size").await.status, 401);
    // Its limit went with it.
    let limits: Vec<(String, String)> = c.hgetall("sd:limits").expect("HGETALL");
    assert!(limits.is_empty(), "{limits:?}");
}

#[tokio::test]
async fn a_narrowed_token_is_refused_on_every_gateway_even_in_a_waiting_long_poll() {
    let redis = RedisServer::start();
    let a = Sundial::start(&SundialConfig::new(redis.url()));
    let b = Sundial::start(&SundialConfig::new(redis.url()));
    let admin_a = Api::new(a.admin(), None);
    let token = create_token(&a.admin(), "ns").await;
    let full = Api::new(b.api(), Some(&create_token(&a.admin(), "ns").await));
    let on_b = Api::new(b.api(), Some(&token));
    wait_until_async(Duration::from_secs(3), "b to know the token", || async {
        on_b.get("/api/ns/q/size").await.status == 200
    })
    .await;

    let waiter = {
        let api = on_b.clone();
        tokio::spawn(async move { api.get("/api/ns/q?timeout=20").await })
    };
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(redis.subscribers("sd:ready:ns/q") > 0)
    })
    .await;
    let path = format!("/token/ns/{}/scope", token_id(&token));
    let r = put_json(
        &admin_a,
        &path,
        r#"{"scopes":["consume"],"queues":["other"]}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["queues"], json!(["other"]));
    wait_until_async(Duration::from_secs(3), "b to apply the scope", || async {
        on_b.get("/api/ns/q/size").await.status == 403
    })
    .await;
    // The job that wakes the waiter is refused to it and stays ready.
    full.publish("ns", "q", "", b"not for the narrowed").await;
    let r = waiter.await.expect("waiter");
    refused(&r, "\"q\"");
    assert_eq!(full.get("/api/ns/q/size").await.json["size"], 1);
    // Widened again, it works again.
    let r = put_json(&admin_a, &path, r#"{"scopes":["consume","read"]}"#).await;
    assert_eq!(
        (r.status, r.json["queues"].clone()),
        (200, Value::Null),
        "{r:?}"
    );
    wait_until_async(Duration::from_secs(3), "b to widen it", || async {
        on_b.get("/api/ns/q?timeout=0").await.status == 200
    })
    .await;
}

#[tokio::test]
async fn bad_scopes_are_refused_and_change_nothing() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let token = create_token(&gw.admin(), "ns").await;
    let version = || -> Option<i64> { redis.client().get("sd:tokens:version").expect("GET") };
    let before = version();
    for query in [
        "scope=write",
        "scope=",
        "queues=a",
        "scope=read&queues=*",
        "scope=read&queues=_x",
        "scope=read&queues=,",
        "scope=read&queues=a,,b",
    ] {
        let r = admin
            .post(&format!("/token/ns?description=d&{query}"))
            .await;
        // An empty scope is no scope: a full token, made.
        if query == "scope=" {
            assert_eq!(r.status, 201, "{query}: {r:?}");
            continue;
        }
        assert_eq!(r.status, 400, "{query}: {r:?}");
        assert!(r.json["error"].is_string(), "{r:?}");
    }
    let made = version();
    let path = format!("/token/ns/{token}/scope");
    for body in [
        "",
        "{}",
        r#"{"scopes":[]}"#,
        r#"{"scopes":["read"],"queues":[]}"#,
        r#"{"scopes":["read"],"queues":[" "]}"#,
        r#"{"scopes":["read"],"queues":["a,b"]}"#,
        r#"{"scopes":["read"],"extra":1}"#,
        r#"{"scopes":["admin"]}"#,
    ] {
        let r = put_json(&admin, &path, body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
    }
    let r = put_json(
        &admin,
        "/token/ns/0123456789abcdef/scope",
        r#"{"scopes":["read"]}"#,
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(version(), made);
    assert_ne!(made, before);
    let api = Api::new(gw.api(), Some(&token));
    assert_eq!(api.put("/api/ns/q", b"still full").await.status, 201);
}

#[tokio::test]
async fn tokens_stored_in_plaintext_by_an_earlier_version_work_and_migrate() {
    let redis = RedisServer::start();
    let secret = "01JPLAINTEXTTOKEN000000000";
    {
        // What the version before hashing wrote: the secret in the field,
        // the description as the value, a limit under the same field.
        let mut c = redis.client();
        let _: () = c
            .hset("sd:tokens", format!("default/ns/{secret}"), "old one")
            .expect("HSET");
        let _: () = c
            .hset(
                "sd:limits",
                format!("default/ns/{secret}"),
                r#"{"read":0,"write":2,"interval":60}"#,
            )
            .expect("HSET");
        let _: () = c.set("sd:tokens:version", 7).expect("SET");
    }
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let api = Api::new(gw.api(), Some(secret));
    assert!(
        gw.log().contains("tokens stored in plaintext"),
        "a warning at start"
    );

    // It works, with every scope and its limit.
    assert_eq!(api.put("/api/ns/q", b"1").await.status, 201);
    assert_eq!(api.put("/api/ns/q", b"2").await.status, 201);
    assert_eq!(api.put("/api/ns/q", b"3").await.status, 429);
    let list = admin.get("/token/ns").await;
    assert_eq!(list.json["details"][0]["stored"], "plaintext", "{list:?}");
    assert!(!list.json.to_string().contains(secret), "{list:?}");

    let r = admin.post("/tokens/migrate").await;
    assert_eq!(r.json, json!({ "migrated": 1 }), "{r:?}");
    let mut c = redis.client();
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    let limits: Vec<(String, String)> = c.hgetall("sd:limits").expect("HGETALL");
    assert!(
        !format!("{tokens:?}{limits:?}").contains(secret),
        "{tokens:?} {limits:?}"
    );
    assert_eq!((tokens.len(), limits.len()), (1, 1));
    assert_eq!(limits[0].0, tokens[0].0);
    let list = admin.get("/token/ns").await;
    assert_eq!(list.json["details"][0]["stored"], "hashed");
    assert_eq!(list.json["tokens"][token_id(secret)], "old one");
    // Still the same token, still limited: its counter is keyed by its id,
    // which did not change.
    wait_until_async(
        Duration::from_secs(3),
        "the migrated token to be served",
        || async { api.get("/api/ns/q/size").await.status == 200 },
    )
    .await;
    assert_eq!(
        admin.get(&format!("/token/ns/{secret}/limit")).await.json["write"],
        2
    );
    assert_eq!(api.put("/api/ns/q", b"4").await.status, 429);
    assert_eq!(
        admin.post("/tokens/migrate").await.json,
        json!({ "migrated": 0 })
    );
}
