//! The admin API end to end.

use std::time::{Duration, Instant};

use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, create_token, started, token_id, wait_until_async,
};

#[tokio::test]
async fn a_deleted_token_stops_working_on_every_gateway_within_a_second_or_two() {
    let redis = RedisServer::start();
    let a = Sundial::start(&SundialConfig::new(redis.url()));
    let b = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&a.admin(), "ns").await;
    let on_b = Api::new(b.api(), Some(&token));
    // Created on A, usable on B shortly after.
    let start = Instant::now();
    wait_until_async(
        Duration::from_secs(3),
        "the token to reach gateway B",
        || async { on_b.get("/api/ns/q/size").await.status == 200 },
    )
    .await;
    let reached = start.elapsed();

    let admin_a = Api::new(a.admin(), None);
    assert_eq!(
        admin_a.delete(&format!("/token/ns/{token}")).await.status,
        204
    );
    let start = Instant::now();
    wait_until_async(
        Duration::from_secs(3),
        "the deletion to reach gateway B",
        || async { on_b.get("/api/ns/q/size").await.status == 401 },
    )
    .await;
    let revoked = start.elapsed();
    assert!(
        revoked < Duration::from_secs(2),
        "revoked after {revoked:?}"
    );
    eprintln!("token reached B after {reached:?}, revoked on B after {revoked:?}");
    // And on A at once.
    assert_eq!(
        Api::new(a.api(), Some(&token))
            .get("/api/ns/q/size")
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn token_admin_follows_lmstfy() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let r = admin.post("/token/ns").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("invalid description"))
    );
    let r = admin.post("/token/ns?description=d&token=short").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("the user token was too short"))
    );
    let r = admin.post("/token/ns?description=d&pool=nope").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("the pool was not exists"))
    );
    let r = admin.post("/token/n.s?description=d").await;
    assert_eq!(r.status, 400);

    let custom = "my-own-token-of-24-chars";
    let r = admin
        .post(&format!("/token/ns?description=mine&token={custom}"))
        .await;
    assert_eq!((r.status, r.json["token"].as_str()), (201, Some(custom)));
    let r = admin
        .post(&format!("/token/ns?description=again&token={custom}"))
        .await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("the token has already existed"))
    );
    let minted = create_token(&gw.admin(), "ns").await;
    assert_eq!(minted.len(), 26);

    let list = admin.get("/token/ns").await;
    // Listed by id: the admin API shows a token only when it makes it.
    assert_eq!(list.json["tokens"][token_id(custom)], "mine");
    assert_eq!(list.json["tokens"][token_id(&minted)], "test");
    let text = list.json.to_string();
    assert!(!text.contains(custom) && !text.contains(&minted));
    assert_eq!(
        admin.get("/token/other").await.json["tokens"],
        serde_json::json!({})
    );

    // A form body works too.
    let r = admin
        .call(
            reqwest::Method::POST,
            "/token/ns",
            Some(b"description=form".to_vec()),
            &[("Content-Type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn token_routes_need_basic_auth_when_accounts_are_configured() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), "ops-pass-9Xq2vT".to_owned())];
    let gw = Sundial::start(&cfg);
    let anon = Api::new(gw.admin(), None);
    let r = anon.post("/token/ns?description=d").await;
    assert_eq!(r.status, 401);
    assert!(r.headers.contains_key("www-authenticate"));
    let r = anon
        .call(
            reqwest::Method::POST,
            "/token/ns?description=d",
            None,
            &[("Authorization", "Basic b3BzOndyb25n")],
        )
        .await;
    assert_eq!(r.status, 401, "wrong password");
    // ops:ops-pass-9Xq2vT
    let r = anon
        .call(
            reqwest::Method::POST,
            "/token/ns?description=d",
            None,
            &[("Authorization", "Basic b3BzOm9wcy1wYXNzLTlYcTJ2VA==")],
        )
        .await;
    assert_eq!(r.status, 201);
    // The scheme is case-insensitive.
    let r = anon
        .call(
            reqwest::Method::POST,
            "/token/ns?description=d",
            None,
            &[("Authorization", "basic b3BzOm9wcy1wYXNzLTlYcTJ2VA==")],
        )
        .await;
    assert_eq!(r.status, 201, "lower-case scheme: {r:?}");
    // With accounts, only the probes, the version and the route document
    // answer without them: nothing names a tenant or reads a slot.
    for path in ["/live", "/ready", "/version", "/openapi.json"] {
        assert_eq!(anon.get(path).await.status, 200, "{path}");
    }
    for path in ["/pools", "/drains", "/info", "/metrics", "/usage"] {
        let r = anon.get(path).await;
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert!(r.headers.contains_key("www-authenticate"), "{path}");
    }
    let ops = anon.clone().with_basic_auth("ops", "ops-pass-9Xq2vT");
    for path in ["/pools", "/drains", "/info", "/metrics"] {
        assert_eq!(ops.get(path).await.status, 200, "{path}");
    }
}

#[tokio::test]
async fn pools_info_version_metrics_health() {
    let (_redis, gw, token, api) = started("ns").await;
    api.publish("ns", "q1", "", b"x").await;
    api.publish("ns", "q2", "delay=60", b"x").await;
    let admin = Api::new(gw.admin(), None);
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default"])
    );
    assert_eq!(
        admin.get("/info").await.json,
        serde_json::json!({"ns": ["q1", "q2"]})
    );
    assert_eq!(admin.get("/info?pool=nope").await.status, 404);
    let v = admin.get("/version").await;
    assert_eq!(v.json["version"], env!("CARGO_PKG_VERSION"));
    // The commit the binary was built from: HEAD's, when built in a git
    // checkout (as the tests are, with no SUNDIAL_BUILD_COMMIT set).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = v.json["build_commit"]
        .as_str()
        .expect("build_commit")
        .to_owned();
    if std::env::var_os("SUNDIAL_BUILD_COMMIT").is_none() {
        assert_eq!(
            Some(commit.as_str()),
            head.as_deref().or(Some("unknown")),
            "{v:?}"
        );
    }
    assert_eq!(admin.get("/live").await.status, 200);
    assert_eq!(admin.get("/ready").await.status, 200);
    let m = admin.get("/metrics").await;
    let text = m.json.as_str().expect("text");
    assert!(
        text.contains(&format!(
            "sundial_build_info{{version=\"{}\",commit=\"{commit}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(text.contains("sundial_jobs_published_total"), "{text}");
    assert!(
        text.contains(r#"route="/api/{ns}/{queue}""#),
        "requests are labelled by matched route: {text}"
    );
    assert!(!text.contains(&token), "no token in metrics");
    for needle in [
        r#"sundial_jobs_published_total{pool="default",namespace="ns",queue="q1"} 1"#,
        r#"sundial_redis_script_seconds_bucket{shard="default/main",script="publish",result="ok""#,
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    let job = api.get("/api/ns/q1").await;
    let id = job.json["job_id"].as_str().expect("id").to_owned();
    assert_eq!(
        api.delete(&format!("/api/ns/q1/job/{id}")).await.status,
        204
    );
    let text = admin
        .get("/metrics")
        .await
        .json
        .as_str()
        .expect("text")
        .to_owned();
    assert!(
        text.contains(r#"sundial_job_first_delivery_seconds_count{pool="default",namespace="ns",queue="q1"} 1"#)
            && text.contains(r#"sundial_jobs_acked_total{pool="default",namespace="ns",queue="q1"} 1"#),
        "{text}"
    );
    // Every metric family exported carries its HELP text, and is one that
    // docs/METRICS.md describes.
    let docs = include_str!("../../../docs/METRICS.md");
    let mut families = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("sundial_")) {
        let name = line.split(['{', ' ']).next().expect("name");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| text.contains(&format!("# TYPE {f} histogram")))
            .unwrap_or(name);
        families.insert(family.to_owned());
    }
    assert!(families.len() >= 12, "{families:?}");
    for f in &families {
        assert!(text.contains(&format!("# HELP {f} ")), "no HELP for {f}");
        assert!(
            docs.contains(&format!("`{f}`")),
            "{f} is not in docs/METRICS.md"
        );
    }
}

#[tokio::test]
async fn request_logs_carry_ids_and_never_the_token() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.log_extra = "format = \"json\"\naccess = true".to_owned();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "shop").await;
    let anon = Api::new(gw.api(), None);
    // The token in the query string, where a careless log would pick it up.
    let r = anon
        .put(&format!("/api/shop/emails?token={token}"), b"x")
        .await;
    assert_eq!(r.status, 201);
    let id = r.headers["x-request-id"].to_str().expect("id").to_owned();
    sundial_tests::wait_until(Duration::from_secs(5), "the request's log line", || {
        gw.log().contains(&id)
    });
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains(&id) && l.contains("\"request\""))
        .expect("the request line");
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    let span = &v["span"];
    assert_eq!(
        (span["namespace"].as_str(), span["queue"].as_str()),
        (Some("shop"), Some("emails")),
        "{line}"
    );
    assert_eq!(v["fields"]["status"], 201, "{line}");
    assert!(!log.contains(&token), "no token in any log line");
}

#[tokio::test]
async fn a_revoked_token_ends_its_long_poll_and_no_op_changes_reload_nothing() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let revoked = create_token(&gw.admin(), "ns").await;
    let other = create_token(&gw.admin(), "ns").await;
    let version = || -> i64 {
        redis::cmd("GET")
            .arg("sd:tokens:version")
            .query::<Option<i64>>(&mut redis.client())
            .expect("GET")
            .unwrap_or(0)
    };

    let waiter = {
        let api = Api::new(gw.api(), Some(&revoked));
        tokio::spawn(async move { api.get("/api/ns/q?timeout=20").await })
    };
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(redis.subscribers("sd:ready:ns/q") > 0)
    })
    .await;
    let before = version();
    let r = admin.delete(&format!("/token/ns/{revoked}")).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(version(), before + 1, "a real change bumps the version");
    let id = Api::new(gw.api(), Some(&other))
        .publish("ns", "q", "", b"not for the revoked")
        .await;
    let r = waiter.await.expect("waiter");
    assert_eq!(r.status, 401, "the revoked waiter gets no job: {r:?}");
    assert_eq!(r.json["error"], "invalid token");
    let r = Api::new(gw.api(), Some(&other)).get("/api/ns/q").await;
    assert_eq!(r.json["job_id"], id.as_str(), "the job is still there");

    // Changes that change nothing leave the version alone.
    let v = version();
    let r = admin.delete(&format!("/token/ns/{revoked}")).await;
    assert_eq!(r.status, 204, "as lmstfy: {r:?}");
    assert_eq!(version(), v, "deleting a missing token bumps nothing");
}

#[tokio::test]
async fn tokens_created_at_once_all_work_at_once() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    // Each creation reloads the gateway's copy of the table; concurrent
    // reloads must not put an older copy back over a newer one.
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (admin, api) = (gw.admin(), gw.api());
            tokio::spawn(async move {
                let ns = format!("ns{i}");
                let token = create_token(&admin, &ns).await;
                Api::new(api, Some(&token))
                    .put(&format!("/api/{ns}/q"), b"x")
                    .await
                    .status
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.expect("task"), 201, "a new token is refused");
    }
}
