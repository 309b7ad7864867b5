//! Hot reload of the pools: admin call, SIGHUP, file change; what may
//! change and what is refused.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

fn pools(default_url: &str, extra: &[(&str, &RedisServer)]) -> String {
    let mut s = format!("[pools.default]\nshards = [{{ url = \"{default_url}\" }}]\n");
    for (name, r) in extra {
        s += &format!("[pools.{name}]\nshards = [{{ url = \"{}\" }}]\n", r.url());
    }
    s
}

/// A gateway config that reloads only when told (no file watching), so a
/// test's `POST /reload` is the only reload.
fn explicit(url: impl Into<String>) -> SundialConfig {
    let mut cfg = SundialConfig::new(url);
    cfg.extra = "watch_config = false".to_owned();
    cfg
}

fn reload_failures(gw: &Sundial) -> String {
    gw.log()
        .lines()
        .filter(|l| l.contains("config reload failed"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn pools_are_added_and_removed_at_runtime() {
    let (main, eu) = (RedisServer::start(), RedisServer::start());
    let mut cfg = explicit(main.url());
    let mut gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default"])
    );

    cfg.pools = Some(pools(&main.url(), &[("eu", &eu)]));
    gw.rewrite(&cfg);
    let r = admin.post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default", "eu"])
    );
    let t = admin.post("/token/ns?description=eu&pool=eu").await.json["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let on_eu = Api::new(gw.api(), Some(&t));
    let id = on_eu.publish("ns", "q", "", b"in eu").await;

    // A pool that tokens name is not dropped: their requests would fail.
    cfg.pools = Some(pools(&main.url(), &[]));
    gw.rewrite(&cfg);
    let refused = |r: &sundial_tests::Resp, why: &str| {
        assert_eq!(r.status, 400, "{r:?}");
        assert!(
            r.json["error"].as_str().is_some_and(|e| e.contains(why)),
            "{why}: {r:?}"
        );
    };
    refused(
        &admin.post("/reload").await,
        "tokens need pools that the config does not list: eu (1 token(s))",
    );
    // Nor is a pool that holds jobs, once no token names it.
    assert_eq!(admin.delete(&format!("/token/ns/{t}")).await.status, 204);
    refused(&admin.post("/reload").await, "still holds jobs");
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default", "eu"])
    );
    let t = admin.post("/token/ns?description=eu&pool=eu").await.json["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let on_eu = Api::new(gw.api(), Some(&t));
    assert_eq!(
        on_eu.get("/api/ns/q/size").await.json["size"],
        1,
        "the old pools keep serving"
    );

    // Once empty and without tokens, it goes.
    assert_eq!(
        on_eu.delete(&format!("/api/ns/q/job/{id}")).await.status,
        204
    );
    assert_eq!(admin.delete(&format!("/token/ns/{t}")).await.status, 204);
    let r = admin.post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default"])
    );
    let r = on_eu.get("/api/ns/q/size").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("pool not found"))
    );
    let m = admin.get("/metrics").await;
    let text = m.json.as_str().expect("metrics");
    assert!(
        text.contains(r#"sundial_reloads_total{result="success"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"sundial_reloads_total{result="failure"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn an_invalid_config_keeps_the_current_pools() {
    let main = RedisServer::start();
    let mut cfg = explicit(main.url());
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    // The failures' series is there from start, so that an alert on its
    // increase sees the first failure.
    let m = admin.get("/metrics").await;
    assert!(
        m.json
            .as_str()
            .is_some_and(|t| t.contains(r#"sundial_reloads_total{result="failure"} 0"#)),
        "{m:?}"
    );

    for bad in [
        "[pools.default]\nslots = 0\nshards = [{ url = \"redis://127.0.0.1:1\" }]\n".to_owned(),
        "[pools.default]\nshards = [ this is not toml".to_owned(),
        // A slot count the shard does not hold.
        format!(
            "[pools.default]\nslots = 32\nshards = [{{ url = \"{}\" }}]\n",
            main.url()
        ),
    ] {
        cfg.pools = Some(bad.clone());
        gw.rewrite(&cfg);
        let r = admin.post("/reload").await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert_eq!(
            api.put("/api/ns/q", b"still fine").await.status,
            201,
            "{bad}"
        );
    }
    assert!(!reload_failures(&gw).is_empty(), "failures are logged");
}

#[tokio::test]
async fn a_config_file_change_and_sighup_reload_by_themselves() {
    let (main, eu, us) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(main.url());
    let mut gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);

    cfg.pools = Some(pools(&main.url(), &[("eu", &eu)]));
    gw.rewrite(&cfg);
    wait_until_async(
        Duration::from_secs(10),
        "the file change to be picked up",
        || async { admin.get("/pools").await.json == serde_json::json!(["default", "eu"]) },
    )
    .await;

    cfg.pools = Some(pools(&main.url(), &[("eu", &eu), ("us", &us)]));
    gw.rewrite(&cfg);
    gw.signal("HUP");
    wait_until_async(
        Duration::from_secs(10),
        "the reload after SIGHUP",
        || async { admin.get("/pools").await.json == serde_json::json!(["default", "eu", "us"]) },
    )
    .await;
    wait_until_async(
        Duration::from_secs(5),
        "the SIGHUP reload to be logged",
        || std::future::ready(gw.log().contains("SIGHUP")),
    )
    .await;
    assert!(
        gw.wait_exit(Duration::from_millis(100)).is_none(),
        "SIGHUP does not stop the gateway"
    );
}

/// The shard's Redis listens on 127.0.0.1 and 127.0.0.2; the config moves
/// the shard from one address to the other while clients publish and
/// consume without pause.
#[tokio::test]
async fn changing_a_shard_address_fails_no_request() {
    let redis = RedisServer::start_with(&["--bind", "127.0.0.1", "127.0.0.2"]);
    let port = redis.port();
    let mut cfg = explicit(format!("redis://127.0.0.1:{port}"));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (api, stop, ok, failed) = (api.clone(), stop.clone(), ok.clone(), failed.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let p = api.put("/api/ns/q", b"x").await.status;
                let c = api.get("/api/ns/q?timeout=1").await.status;
                if p == 201 && (c == 200 || c == 404) {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    wait_until_async(Duration::from_secs(10), "load to run", || {
        std::future::ready(ok.load(Ordering::Relaxed) > 50)
    })
    .await;
    cfg.redis_url = format!("redis://127.0.0.2:{port}");
    gw.rewrite(&cfg);
    let r = Api::new(gw.admin(), None).post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.json["changes"]
            .as_str()
            .is_some_and(|c| c.contains("1 shard connection(s) new")),
        "{r:?}"
    );
    let before = ok.load(Ordering::Relaxed);
    wait_until_async(
        Duration::from_secs(10),
        "load to go on after the reload",
        || std::future::ready(ok.load(Ordering::Relaxed) > before + 50),
    )
    .await;
    // The gateway now talks to the new address.
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut redis.client())
        .expect("CLIENT LIST");
    assert!(
        clients.contains(&format!("laddr=127.0.0.2:{port}")),
        "{clients}"
    );
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no request failed across the reload"
    );
}

#[tokio::test]
async fn changing_a_shard_password_fails_no_request() {
    let redis = RedisServer::start_with(&["--requirepass", "old-secret"]);
    let port = redis.port();
    let mut cfg = explicit(format!("redis://:old-secret@127.0.0.1:{port}"));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    assert_eq!(api.put("/api/ns/q", b"x").await.status, 201);

    // Rotate: Redis takes the new password (open connections stay logged
    // in), then the config follows.
    let mut admin_conn = redis::Client::open(format!("redis://:old-secret@127.0.0.1:{port}"))
        .expect("url")
        .get_connection()
        .expect("connect");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("new-secret")
        .query(&mut admin_conn)
        .expect("CONFIG SET");
    cfg.redis_url = format!("redis://:new-secret@127.0.0.1:{port}");
    gw.rewrite(&cfg);
    let r = Api::new(gw.admin(), None).post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");
    // Drop every connection: only the new password can reconnect.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin_conn)
        .unwrap_or(());
    wait_until_async(Duration::from_secs(10), "requests to go on", || async {
        api.put("/api/ns/q", b"y").await.status == 201
    })
    .await;
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 2);
}
