//! Namespace quotas: set through the admin API, held on every gateway,
//! each bound refusing what goes over it with an answer that names it, and
//! storing nothing of what it refuses.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sundial_tests::{Api, RedisServer, ShardKind, Store, Sundial, SundialConfig, create_token};

on_every_shard_kind!(
    a_job_over_a_size_or_time_bound_is_refused_whole_and_names_it,
    a_publish_rate_counts_each_job_of_a_bulk_and_says_when_to_retry,
    a_consume_rate_hands_out_what_it_holds_and_then_refuses,
);

/// A gateway on a fresh store, a token for `ns`, and both APIs.
async fn env(kind: ShardKind) -> (Store, Sundial, Api, Api) {
    let store = Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    (store, gw, api, admin)
}

/// Sets the namespace's quota, and checks the answer.
async fn set_quota(admin: &Api, quota: Value) {
    let r = admin
        .put("/namespaces/ns/quota", quota.to_string().as_bytes())
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["set"], quota, "{r:?}");
}

/// A refusal's status and quota fields.
fn refusal(r: &sundial_tests::Resp) -> (u16, &str, u64, u64) {
    (
        r.status,
        r.json["quota"].as_str().unwrap_or_default(),
        r.json["limit"].as_u64().unwrap_or_default(),
        r.json["usage"].as_u64().unwrap_or_default(),
    )
}

async fn ready(api: &Api, queue: &str) -> Value {
    api.get(&format!("/api/ns/{queue}/stats")).await.json["ready"].clone()
}

async fn a_job_over_a_size_or_time_bound_is_refused_whole_and_names_it(kind: ShardKind) {
    let (_store, _gw, api, admin) = env(kind).await;
    set_quota(
        &admin,
        json!({"max_body": 10, "max_delay": 60, "max_ttl": 3600, "max_tries": 3}),
    )
    .await;

    let r = api.put("/api/ns/q", b"eleven byte").await;
    assert_eq!(refusal(&r), (413, "max_body", 10, 11), "{r:?}");
    assert_eq!(
        r.json["error"],
        "a body of 11 bytes is over the namespace's quota max_body of 10 bytes"
    );
    let bulk = api
        .put("/api/ns/q/bulk", br#"["ok", "far too long"]"#)
        .await;
    assert_eq!(refusal(&bulk), (413, "max_body", 10, 14), "{bulk:?}");
    for (query, want) in [
        ("delay=61", (400, "max_delay", 60, 61)),
        ("delay_ms=60001", (400, "max_delay", 60, 61)),
        ("ttl=3601", (400, "max_ttl", 3600, 3601)),
        ("tries=4", (400, "max_tries", 3, 4)),
    ] {
        let r = api.put(&format!("/api/ns/q?{query}"), b"x").await;
        assert_eq!(refusal(&r), want, "{query}: {r:?}");
        let r = api.put(&format!("/api/ns/q/bulk?{query}"), b"[1, 2]").await;
        assert_eq!(refusal(&r), want, "bulk {query}: {r:?}");
    }
    // What the client leaves to the defaults (a TTL of a day here) is held
    // to the quota.
    let id = api.publish("ns", "q", "", b"x").await;
    let job = api.get(&format!("/api/ns/q/job/{id}")).await;
    assert!(
        (3590..=3600).contains(&job.json["ttl"].as_u64().unwrap_or(0)),
        "{job:?}"
    );
    let r = api.put("/api/ns/q?delay=30&ttl=20", b"x").await;
    assert_eq!(
        r.json["error"], "ttl is shorter than delay",
        "as lmstfy: {r:?}"
    );
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    let never = api.put("/api/ns/q?ttl=0", b"x").await;
    assert_eq!(never.status, 400, "{never:?}");
    assert_eq!(
        never.json["error"],
        "a ttl of 0 (never expires) is over the namespace's quota max_ttl of 3600 s"
    );
    assert_eq!(
        ready(&api, "q").await,
        0,
        "nothing of the refused was stored"
    );

    // At the bounds, jobs go through; another namespace is not held.
    api.publish("ns", "q", "delay=60&ttl=3600&tries=3", b"ten bytes!")
        .await;
    let r = api
        .put("/api/ns/q/bulk?tries=3", br#"["ok", 12345678]"#)
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let other_token = create_token(&admin.base, "other").await;
    let other = Api::new(api.base.clone(), Some(&other_token));
    other
        .publish("other", "q", "tries=9", b"a body longer than ten")
        .await;

    // A dead job respawned by the tenant is held to max_ttl too.
    let dying = api.publish("ns", "d", "tries=1", b"dies").await;
    assert_eq!(api.get("/api/ns/d?ttr_ms=100").await.status, 200);
    sundial_tests::wait_until_async(Duration::from_secs(10), "the job to die", || async {
        api.get("/api/ns/d/deadletter/size").await.json["size"] == 1
    })
    .await;
    let r = api.put("/api/ns/d/deadletter?ttl=0", b"").await;
    assert_eq!(
        refusal(&r),
        (400, "max_ttl", 3600, u64::from(u32::MAX)),
        "{r:?}"
    );
    let r = api.put("/api/ns/d/deadletter", b"").await;
    assert_eq!((r.status, &r.json["count"]), (200, &json!(1)), "{r:?}");
    let job = api.get(&format!("/api/ns/d/job/{dying}")).await;
    assert!(
        (3590..=3600).contains(&job.json["ttl"].as_u64().unwrap_or(0)),
        "{job:?}"
    );

    // Cleared: the pool's (none) hold again.
    let r = admin.delete("/namespaces/ns/quota").await;
    assert_eq!((r.status, &r.json["set"]), (200, &json!({})), "{r:?}");
    api.publish("ns", "q", "tries=9", b"a body longer than ten")
        .await;
}

async fn a_publish_rate_counts_each_job_of_a_bulk_and_says_when_to_retry(kind: ShardKind) {
    let (_store, _gw, api, admin) = env(kind).await;
    // 2 jobs a second: a bulk of 2 empties the bucket, and another bulk of
    // 2 needs a whole second more (the steps below take far less).
    set_quota(&admin, json!({"publish_rate": 2})).await;
    assert_eq!(api.put("/api/ns/q/bulk", b"[1, 2]").await.status, 201);
    let r = api.put("/api/ns/q/bulk", b"[3, 4]").await;
    assert_eq!(refusal(&r), (429, "publish_rate", 2, 2), "{r:?}");
    let retry: u64 = r.headers["retry-after"]
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert_eq!(retry, 1, "{r:?}");
    assert_eq!(ready(&api, "q").await, 2, "the refused bulk stored nothing");
    tokio::time::sleep(Duration::from_millis(1_100)).await; // the bucket refills with time
    assert_eq!(api.put("/api/ns/q/bulk", b"[3, 4]").await.status, 201);
    assert_eq!(ready(&api, "q").await, 4);
}

async fn a_consume_rate_hands_out_what_it_holds_and_then_refuses(kind: ShardKind) {
    let (_store, _gw, api, admin) = env(kind).await;
    for i in 0..20 {
        api.publish("ns", "q", "", format!("{i}").as_bytes()).await;
    }
    set_quota(&admin, json!({"consume_rate": 5})).await;
    let r = api.get("/api/ns/q?count=8").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json.as_array().map(Vec::len),
        Some(5),
        "what the bucket held"
    );
    let r = api.get("/api/ns/q?count=2").await;
    assert_eq!(refusal(&r), (429, "consume_rate", 5, 5), "{r:?}");
    assert!(r.headers.contains_key("retry-after"), "{r:?}");
    // A long poll waits for the rate instead.
    let r = api.get("/api/ns/q?timeout=5").await;
    assert_eq!(r.status, 200, "{r:?}");
    // A consume of an empty queue gives back what it took.
    let r = admin
        .put("/namespaces/ns/quota", br#"{"consume_rate": 1}"#)
        .await;
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await; // a second's worth again
    assert_eq!(api.get("/api/ns/empty").await.status, 404);
    assert_eq!(
        api.get("/api/ns/q").await.status,
        200,
        "the empty consume took nothing"
    );
}

#[tokio::test]
async fn a_quota_is_read_and_changed_only_through_valid_requests() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    create_token(&gw.admin(), "ns").await;
    let admin = Api::new(gw.admin(), None);
    let r = admin.get("/namespaces/ns/quota").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["pool"], "default");
    assert_eq!(r.json["set"], json!({}));
    assert_eq!(r.json["quota"]["publish_rate"], Value::Null, "no bound");
    set_quota(&admin, json!({"publish_rate": 100, "max_tries": 5})).await;

    for (path, body, want) in [
        (
            "/namespaces/ns/quota",
            r#"{"publish_rate": -1}"#,
            "invalid quota: publish_rate must be a whole number from 0 up, not -1",
        ),
        (
            "/namespaces/ns/quota",
            r#"{"publish_rate": "9"}"#,
            "invalid quota: publish_rate must be a whole number from 0 up, not \"9\"",
        ),
        (
            "/namespaces/ns/quota",
            r#"{"max_jobz": 1}"#,
            "invalid quota: unknown field `max_jobz`",
        ),
        (
            "/namespaces/ns/quota",
            r#"{"max_tries": 65536}"#,
            "invalid quota: max_tries must be at most 65535, not 65536",
        ),
        (
            "/namespaces/ns/quota",
            r#"{"weight": 1001}"#,
            "invalid quota: weight must be at most 1000, not 1001",
        ),
        (
            "/namespaces/ns/quota",
            "[]",
            "invalid quota: a quota is a JSON object",
        ),
        (
            "/namespaces/ns/quota",
            "{",
            "invalid quota: invalid JSON: EOF while parsing an object at line 1 column 1",
        ),
        (
            "/namespaces/nobody/quota",
            "{}",
            "namespace nobody has no token in pool default",
        ),
        ("/namespaces/ns/quota?pool=nowhere", "{}", "pool not found"),
        (
            "/namespaces/bad%20name/quota",
            "{}",
            "namespace name contains forbidden characters",
        ),
    ] {
        for r in [
            admin.put(path, body.as_bytes()).await,
            admin.patch(path, body.as_bytes()).await,
        ] {
            assert_eq!(
                (r.status, r.json["error"].as_str()),
                (400, Some(want)),
                "{path} {body}"
            );
        }
    }
    for path in [
        "/namespaces/nobody/quota",
        "/namespaces/ns/quota?pool=nowhere",
    ] {
        assert_eq!(admin.delete(path).await.status, 400, "{path}");
        assert_eq!(admin.get(path).await.status, 404, "{path}");
    }
    let r = admin.get("/namespaces/ns/quota").await;
    assert_eq!(
        r.json["set"],
        json!({"publish_rate": 100, "max_tries": 5}),
        "unchanged"
    );
    assert_eq!(r.json["quota"]["max_tries"], 5);
    // A weight is a field like the bounds: set, shown, and unset (null, 1).
    assert_eq!(r.json["quota"]["weight"], json!(null));
    let r = admin
        .put(
            "/namespaces/ns/quota",
            br#"{"publish_rate": 100, "max_tries": 5, "weight": 4}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = admin.get("/namespaces/ns/quota").await;
    assert_eq!(r.json["quota"]["weight"], 4, "{r:?}");
    // A patch changes the fields it names (null: no longer set) and keeps
    // the others.
    let r = admin
        .patch(
            "/namespaces/ns/quota",
            br#"{"max_tries": 7, "publish_rate": null}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["set"], json!({"max_tries": 7, "weight": 4}), "{r:?}");
    let r = admin
        .patch(
            "/namespaces/ns/quota",
            br#"{"max_tries": null, "weight": null}"#,
        )
        .await;
    assert_eq!(r.json["set"], json!({}), "nothing left: {r:?}");
}

#[tokio::test]
async fn a_quota_set_on_one_gateway_holds_on_another_within_half_a_second() {
    let redis = RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let (one, two) = (Sundial::start(&cfg), Sundial::start(&cfg));
    let token = create_token(&one.admin(), "ns").await;
    let api_two = Api::new(two.api(), Some(&token));
    sundial_tests::wait_until_async(
        Duration::from_secs(5),
        "the token on the other gateway",
        || async { api_two.put("/api/ns/q", b"twelve bytes").await.status == 201 },
    )
    .await;
    let admin_one = Api::new(one.admin(), None);
    set_quota(&admin_one, json!({"max_body": 4})).await;
    let start = Instant::now();
    loop {
        let r = api_two.put("/api/ns/q", b"twelve bytes").await;
        if r.status == 413 {
            break;
        }
        assert_eq!(r.status, 201, "{r:?}");
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "not held within 0.5 s"
        );
    }
}

#[tokio::test]
async fn a_publish_rate_holds_within_one_percent_for_64_publishers_on_4_gateways() {
    const RATE: u64 = 200;
    let redis = RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let gws: Vec<Sundial> = (0..4).map(|_| Sundial::start(&cfg)).collect();
    let token = create_token(&gws[0].admin(), "ns").await;
    set_quota(
        &Api::new(gws[0].admin(), None),
        json!({"publish_rate": RATE}),
    )
    .await;
    for gw in &gws {
        let admin = Api::new(gw.admin(), None);
        sundial_tests::wait_until_async(
            Duration::from_secs(5),
            "every gateway to hold the quota",
            || async {
                admin.get("/namespaces/ns/quota").await.json["quota"]["publish_rate"] == RATE
            },
        )
        .await;
    }
    // Half the publishers send single jobs, half bulks of 8.
    let start = Instant::now();
    let deadline = start + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let api = Api::new(gws[i % 4].api(), Some(&token));
        tasks.push(tokio::spawn(async move {
            let (path, body, jobs): (&str, &[u8], u64) = if i % 2 == 0 {
                ("/api/ns/q", b"x", 1)
            } else {
                ("/api/ns/q/bulk", b"[1,2,3,4,5,6,7,8]", 8)
            };
            let mut accepted = 0;
            while Instant::now() < deadline {
                let r = api.put(path, body).await;
                match r.status {
                    201 => accepted += jobs,
                    429 => assert_eq!(r.json["quota"], "publish_rate", "{r:?}"),
                    _ => panic!("{r:?}"),
                }
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.expect("publisher");
    }
    // The bucket's clock ran for at most as long as the clients did: a
    // second's worth at once, then RATE a second.
    let span = start.elapsed().as_secs_f64();
    let allowed = RATE as f64 * (1.0 + span);
    assert!(
        accepted as f64 <= allowed * 1.01,
        "{accepted} jobs accepted in {span:.2} s at {RATE}/s (at most {allowed:.0})"
    );
    assert!(
        accepted as f64 >= RATE as f64 * span / 2.0,
        "{accepted} jobs accepted in {span:.2} s: the quota held back too much"
    );
    let api = Api::new(gws[0].api(), Some(&token));
    assert_eq!(
        ready(&api, "q").await,
        accepted,
        "stored what was accepted, no more"
    );
}

#[tokio::test]
async fn the_cli_sets_some_bounds_keeps_the_others_and_clears_them() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    create_token(&gw.admin(), "ns").await;
    let r = gw.cli(
        &[
            "quota",
            "set",
            "ns",
            "--publish-rate",
            "5",
            "--max-body",
            "100",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("publish_rate"))
        .expect("a row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["publish_rate", "5", "5", "-"]
    );
    let r = gw.cli(&["quota", "set", "ns", "--max-tries", "3", "--json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.json()["set"],
        json!({"publish_rate": 5, "max_body": 100, "max_tries": 3}),
        "the bounds not given stay"
    );
    let r = gw.cli(&["quota", "get", "ns", "--json"], &[]);
    assert_eq!(r.json()["quota"]["max_tries"], 3, "{r:?}");
    let r = gw.cli(
        &["quota", "set", "ns", "--unset", "max_body", "--json"],
        &[],
    );
    assert_eq!(
        r.json()["set"],
        json!({"publish_rate": 5, "max_tries": 3}),
        "{r:?}"
    );
    // A bound's name is checked before any request, and the right one named.
    let r = gw.cli(&["quota", "set", "ns", "--unset", "max_bodies"], &[]);
    assert!(
        r.stderr.contains("invalid value 'max_bodies'") && r.stderr.contains("'max_body'"),
        "{r:?}"
    );
    assert_eq!(r.code, 2, "{r:?}");
    let r = gw.cli(&["quota", "set", "ns", "--max-tries", "-1"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = gw.cli(&["quota", "set", "ns"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = gw.cli(&["quota", "get", "nobody"], &[]);
    assert_eq!(r.code, 3, "{r:?}");
    let r = gw.cli(&["quota", "clear", "ns", "--json"], &[]);
    assert_eq!((r.code, r.json()["set"].clone()), (0, json!({})), "{r:?}");
}

#[tokio::test]
async fn the_configs_quotas_hold_under_a_namespaces_and_reload_with_the_pools() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = "[quotas]\nmax_tries = 2\nmax_body = 100\n".to_owned();
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    let r = api.put("/api/ns/q?tries=3", b"x").await;
    assert_eq!(refusal(&r), (400, "max_tries", 2, 3), "{r:?}");
    // The namespace lifts one bound (0) and tightens the other.
    set_quota(&admin, json!({"max_tries": 0, "max_body": 5})).await;
    api.publish("ns", "q", "tries=3", b"x").await;
    let r = api.put("/api/ns/q", b"sixsix").await;
    assert_eq!(refusal(&r), (413, "max_body", 5, 6), "{r:?}");
    let r = admin.get("/namespaces/ns/quota").await;
    assert_eq!(
        r.json["pool_quota"],
        json!({"max_tries": 2, "max_body": 100}),
        "{r:?}"
    );
    assert_eq!(
        (
            r.json["quota"]["max_tries"].clone(),
            r.json["quota"]["max_body"].clone()
        ),
        (Value::Null, 5.into())
    );

    // The pool's own quota, over [quotas], applied by a reload.
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\" }}]\nquotas = {{ max_delay = 10 }}\n",
        redis.url()
    ));
    gw.rewrite(&cfg);
    assert_eq!(admin.post("/reload").await.status, 200);
    let r = api.put("/api/ns/q?delay=11", b"x").await;
    assert_eq!(refusal(&r), (400, "max_delay", 10, 11), "{r:?}");
    let metrics = reqwest::get(format!("{}/metrics", gw.admin()))
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(
            r#"sundial_quota_refusals_total{pool="default",namespace="ns",quota="max_delay"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_gateway_takes_a_rate_in_leases_not_one_admin_call_per_publish() {
    let (jobs, admin_redis) = (
        Store::start(ShardKind::Standalone),
        Store::start(ShardKind::Standalone),
    );
    let mut cfg = SundialConfig::new(jobs.url());
    cfg.extra = format!("admin_redis = \"{}\"", admin_redis.url());
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let (api, admin) = (Api::new(gw.api(), Some(&token)), Api::new(gw.admin(), None));
    // 10,000 jobs/s: a lease is 200 jobs.
    set_quota(&admin, json!({"publish_rate": 10_000})).await;
    let before = admin_redis.calls_of("evalsha");
    let start = Instant::now();
    for _ in 0..100 {
        assert_eq!(api.put("/api/ns/q", b"x").await.status, 201);
    }
    // The admin Redis runs no other script here: a lease, and per 100 ms a
    // lease given back and another taken, where a call per publish made 100.
    let (calls, took) = (admin_redis.calls_of("evalsha") - before, start.elapsed());
    let most = 2 * (took.as_millis() as u64 / 100 + 1);
    assert!(
        (1..=most.min(24)).contains(&calls),
        "{calls} rate calls for 100 publishes in {took:?}"
    );
    assert_eq!(ready(&api, "q").await, 100);
}
