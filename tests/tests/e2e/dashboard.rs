//! The web dashboard: served by the admin listener behind its password,
//! with what it reads (namespaces, a queue's history); and driven in a
//! real browser (Debian's headless Chromium, by `tests/dashboard/drive.mjs`)
//! to respawn a dead job, checked afterwards in Redis.

use std::{path::PathBuf, time::Duration};

use redis::Commands;
use serde_json::json;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, wait_until_async};

const USER: &str = "ops";
const PASSWORD: &str = "ops-pass-9Xq2vT";

async fn gateway() -> (RedisServer, Sundial, String) {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![(USER.to_owned(), PASSWORD.to_owned())];
    let gw = Sundial::start(&cfg);
    let token = admin(&gw).create_token("shop").await;
    (redis, gw, token)
}

fn admin(gw: &Sundial) -> Api {
    Api::new(gw.admin(), None).with_basic_auth(USER, PASSWORD)
}

/// Publishes `n` jobs of one try and lets them die (consumed, never acked,
/// TTR 1 s); returns their ids.
async fn dead_jobs(api: &Api, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            api.publish(
                "shop",
                "emails",
                "tries=1",
                format!("{{\"n\":{i}}}").as_bytes(),
            )
            .await,
        );
    }
    for _ in 0..n {
        assert_eq!(api.get("/api/shop/emails?ttr=1").await.status, 200);
    }
    wait_until_async(Duration::from_secs(10), "the jobs to die", || async {
        api.get("/api/shop/emails/deadletter/size").await.json["size"] == n
    })
    .await;
    ids
}

/// The job ids in the queue's ready and dead lists, as Redis holds them.
fn lists(redis: &RedisServer) -> (Vec<String>, Vec<String>) {
    let mut c = redis.client();
    let mut read = |kind: &str| -> Vec<String> {
        let keys: Vec<String> = c.keys(format!("sd:*:{kind}:shop/emails")).expect("KEYS");
        let mut ids = Vec::new();
        for k in keys {
            let more: Vec<String> = c.lrange(&k, 0, -1).expect("LRANGE");
            ids.extend(more);
        }
        ids.sort();
        ids
    };
    (read("r"), read("d"))
}

#[tokio::test]
async fn the_dashboard_is_served_behind_the_admin_password_with_nothing_from_elsewhere() {
    let (_redis, gw, token) = gateway().await;
    let open = Api::new(gw.admin(), None);
    for path in [
        "/",
        "/dashboard",
        "/dashboard/",
        "/dashboard/app.js",
        "/namespaces",
        "/namespaces/shop/queues/emails/history",
    ] {
        assert_eq!(open.get(path).await.status, 401, "{path}");
    }
    let client = reqwest::Client::new();
    // The listener's root and /dashboard lead to the page by a relative
    // address (a proxy's path prefix stays).
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for path in ["/", "/dashboard"] {
        let r = no_follow
            .get(format!("{}{path}", gw.admin()))
            .basic_auth(USER, Some(PASSWORD))
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status(), 308, "{path}");
        assert_eq!(r.headers()["location"], "dashboard/", "{path}");
    }
    for (path, kind) in [
        ("/dashboard/", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/jobs.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
    ] {
        let r = client
            .get(format!("{}{path}", gw.admin()))
            .basic_auth(USER, Some(PASSWORD))
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status(), 200, "{path}");
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        assert!(
            header("content-security-policy").starts_with("default-src 'self'"),
            "{path}"
        );
        // Nothing outside the gateway is named: no CDN, no font service
        // (SVG's namespace is a name, not a fetch).
        let body = r
            .text()
            .await
            .expect("body")
            .replace("http://www.w3.org/2000/svg", "");
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path}"
        );
    }
    // The password a browser holds for the dashboard does not let another
    // site's page change anything: a dead-letter delete sent from it (as a
    // browser marks it) is refused, and the job stays.
    let api = Api::new(gw.api(), Some(&token));
    let ids = dead_jobs(&api, 1).await;
    for headers in [
        [("Origin", "http://evil.example"), ("X-Test", "origin")],
        [
            ("Sec-Fetch-Site", "cross-site"),
            ("Origin", "http://evil.example"),
        ],
    ] {
        let r = admin(&gw)
            .call(
                reqwest::Method::POST,
                "/namespaces/shop/queues/emails/deadletter/delete",
                Some(br#"{"all":true}"#.to_vec()),
                &headers,
            )
            .await;
        assert_eq!(
            (r.status, r.json),
            (403, json!({"error": "cross-site request refused"}))
        );
    }
    assert_eq!(
        api.get("/api/shop/emails/deadletter/size").await.json["size"],
        1,
        "{ids:?}"
    );
    let r = admin(&gw).get("/dashboard/other.js").await;
    assert_eq!((r.status, r.json), (404, json!({"error": "api not found"})));
}

#[tokio::test]
async fn namespaces_are_listed_and_a_queue_keeps_the_readings_taken_of_it() {
    let (_redis, gw, token) = gateway().await;
    let admin = admin(&gw);
    admin.create_token("billing").await;
    wait_until_async(Duration::from_secs(5), "both namespaces", || async {
        admin.get("/namespaces").await.json
            == json!({"pool": "default", "namespaces": ["billing", "shop"]})
    })
    .await;
    assert_eq!(admin.get("/namespaces?pool=nope").await.status, 404);

    // No reading taken yet: no history.
    let r = admin.get("/namespaces/shop/queues/emails/history").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.json["interval_s"].clone(), r.json["window_s"].clone()),
        (json!(5), json!(600))
    );
    assert_eq!(r.json["points"], json!([]));

    // A tenant's own `stats` keep nothing (a tenant cannot fill the
    // history with made-up queues); each admin read of the queue is a
    // reading, at most one per 5 s.
    let api = Api::new(gw.api(), Some(&token));
    api.publish("shop", "emails", "", b"x").await;
    api.publish("shop", "emails", "delay=600", b"later").await;
    assert_eq!(api.get("/api/shop/emails/stats").await.status, 200);
    assert_eq!(
        admin
            .get("/namespaces/shop/queues/emails/history")
            .await
            .json["points"],
        json!([])
    );
    assert_eq!(
        admin.get("/namespaces/shop/queues/emails").await.status,
        200
    );
    assert_eq!(admin.get("/namespaces/shop/queues").await.status, 200);
    let points = admin
        .get("/namespaces/shop/queues/emails/history")
        .await
        .json["points"]
        .clone();
    let points = points.as_array().expect("points");
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!(
        (points[0]["ready"].clone(), points[0]["delayed"].clone()),
        (json!(1), json!(1)),
        "{points:?}"
    );
    for bad in [
        "/namespaces/shop/queues/_x/history",
        "/namespaces/s%20p/queues/q/history",
    ] {
        assert_eq!(admin.get(bad).await.status, 400, "{bad}");
    }
}

/// Runs the browser test (`tests/dashboard/drive.mjs`) against `gw` with
/// `env`, to its end (killed after 120 s); returns what it printed. Fails
/// the test if it failed.
async fn drive(gw: &Sundial, env: &[(&str, &str)]) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("dashboard");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "{} has no node_modules: run `npm ci` there (tests/run does)",
        dir.display()
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists()
            || std::env::var_os("CHROMIUM").is_some(),
        "Chromium is missing: apt-get install chromium (tests/run does), or set CHROMIUM"
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join("drive.mjs"))
        .env("SUNDIAL_ADMIN_URL", gw.admin())
        .env("SUNDIAL_ADMIN_USER", USER)
        .env("SUNDIAL_ADMIN_PASSWORD", PASSWORD)
        .envs(env.iter().copied());
    // To renew the pictures in docs/: SUNDIAL_SCREENSHOTS=<folder>.
    match std::env::var_os("SUNDIAL_SCREENSHOTS") {
        Some(dir) => cmd.env("SCREENSHOTS", dir),
        None => cmd.env_remove("SCREENSHOTS"),
    };
    // Killed when the time is up (the future is dropped with it).
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the browser test did not end within 120 s")
        .expect("run node (tests/run installs nodejs)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn an_operator_respawns_a_dead_job_from_the_dashboard_in_a_real_browser() {
    let (redis, gw, token) = gateway().await;
    let api = Api::new(gw.api(), Some(&token));
    let ids = dead_jobs(&api, 3).await;
    let chosen = ids[1].clone();
    assert_eq!(
        lists(&redis),
        (vec![], {
            let mut d = ids.clone();
            d.sort();
            d
        })
    );

    let stdout = drive(
        &gw,
        &[
            ("NAMESPACE", "shop"),
            ("QUEUE", "emails"),
            ("RESPAWN", &chosen),
        ],
    )
    .await;
    assert!(stdout.contains(&format!("respawned {chosen}")), "{stdout}");

    // In Redis: the chosen job is ready again, the other two still dead.
    let (ready, dead) = lists(&redis);
    assert_eq!(ready, std::slice::from_ref(&chosen));
    let mut others: Vec<String> = ids.into_iter().filter(|i| *i != chosen).collect();
    others.sort();
    assert_eq!(dead, others);
    // And a worker gets it.
    let r = api.get("/api/shop/emails").await;
    assert_eq!((r.status, r.json["job_id"].clone()), (200, json!(chosen)));
}

#[tokio::test]
async fn the_pool_page_shows_a_drain_in_progress_in_a_real_browser() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.accounts = vec![(USER.to_owned(), PASSWORD.to_owned())];
    // No mover: the drain stays as it is while the page is read, so that
    // the page and the admin API can be compared.
    cfg.extra = "watch_config = false\n[mover]\nenabled = false".to_owned();
    cfg.pools = Some(SundialConfig::default_pool(&[("a", &a)]));
    let mut gw = Sundial::start(&cfg);
    let api = Api::new(gw.api(), Some(&admin(&gw).create_token("shop").await));
    // Jobs due in an hour, in many queues: the slots that move to b when it
    // joins keep them, so the old layout drains while the page is read.
    for i in 0..40 {
        api.publish("shop", &format!("q{i}"), "delay=3600", b"later")
            .await;
    }
    cfg.pools = Some(SundialConfig::default_pool(&[("a", &a), ("b", &b)]));
    gw.rewrite(&cfg);
    let admin = admin(&gw);
    assert_eq!(admin.post("/reload").await.status, 200);
    wait_until_async(Duration::from_secs(10), "a drain", || async {
        admin.get("/drains").await.json["pools"][0]["draining"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    })
    .await;
    let drains = admin.get("/drains").await.json;
    let drain = &drains["pools"][0]["draining"][0];

    let stdout = drive(&gw, &[("DRAIN", "1")]).await;
    // What the page showed is what the admin API says.
    assert!(
        stdout.contains(&format!(
            "drain pending={} jobs_left={}",
            drain["slots_pending"], drain["jobs_left"]
        )),
        "{stdout}\n{drains}"
    );
}

#[tokio::test]
async fn the_namespace_page_shows_its_move_to_another_pool_in_a_real_browser() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.accounts = vec![(USER.to_owned(), PASSWORD.to_owned())];
    // No mover at first: the movers step a move on, so it stays
    // `announced`, with its jobs in the pool it leaves, while the page is
    // read.
    cfg.extra = "watch_config = false\nlayout_check_ms = 300\n[mover]\nenabled = false".to_owned();
    cfg.pools = Some(format!(
        "{}[pools.big]\nshards = [{{ url = \"{}\" }}]\n",
        SundialConfig::default_pool(&[("a", &a)]),
        b.url()
    ));
    let mut gw = Sundial::start(&cfg);
    let admin = admin(&gw);
    let api = Api::new(gw.api(), Some(&admin.create_token("shop").await));
    for q in ["emails", "emails", "invoices"] {
        api.publish("shop", q, "delay=3600", b"later").await;
    }
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/shop/move",
            Some(br#"{"to":"big"}"#.to_vec()),
            &[],
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    let stdout = drive(&gw, &[("MOVE", "announced"), ("NAMESPACE", "shop")]).await;
    let status = admin.get("/namespaces/shop/move").await.json;
    assert_eq!(
        (status["state"].clone(), status["jobs_left"].clone()),
        (json!("announced"), json!(3)),
        "{status}"
    );
    assert!(
        stdout.contains(
            "moving from pool default to pool big (announced): 3 job(s) left in pool default, 0 moved"
        ),
        "{stdout}"
    );

    // The mover on again: the move goes through, and the page says so.
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    gw.rewrite(&cfg);
    gw.restart();
    let admin = self::admin(&gw);
    wait_until_async(Duration::from_secs(60), "the move to end", || async {
        admin.get("/namespaces/shop/move").await.json["state"] == "moved"
    })
    .await;
    let stdout = drive(&gw, &[("MOVE", "moved"), ("NAMESPACE", "shop")]).await;
    assert!(
        stdout.contains("moved from pool default to pool big"),
        "{stdout}"
    );
    assert_eq!(b.job_records(), 3, "the jobs are in pool big");
}

#[tokio::test]
async fn an_operator_sets_a_namespaces_quota_from_the_dashboard_in_a_real_browser() {
    let (_redis, gw, token) = gateway().await;
    let admin = admin(&gw);
    let api = Api::new(gw.api(), Some(&token));
    for _ in 0..2 {
        api.publish("shop", "emails", "delay=60", b"{}").await;
    }
    let stdout = drive(&gw, &[("QUOTA", "3"), ("NAMESPACE", "shop")]).await;
    assert!(
        stdout.contains("quota publish_rate=3 usage jobs=2"),
        "the page shows the quota held and the 2 jobs: {stdout}"
    );
    let q = admin.get("/namespaces/shop/quota").await.json;
    assert_eq!(q["set"], json!({"publish_rate": 3}), "{q}");
    // In force: a bulk of 3 empties the bucket, and the next 3 would need
    // a whole second more (the two calls are far closer together).
    assert_eq!(
        api.put("/api/shop/emails/bulk", b"[0, 1, 2]").await.status,
        201
    );
    assert_eq!(
        api.put("/api/shop/emails/bulk", b"[3, 4, 5]").await.status,
        429
    );
}

#[tokio::test]
async fn an_operator_sets_a_queues_retry_policy_from_the_dashboard_in_a_real_browser() {
    let (_redis, gw, token) = gateway().await;
    let admin = admin(&gw);
    let api = Api::new(gw.api(), Some(&token));
    api.publish("shop", "emails", "", b"{}").await;
    let env = [
        ("POLICY", "2000"),
        ("NAMESPACE", "shop"),
        ("QUEUE", "emails"),
    ];
    let stdout = drive(&gw, &env).await;
    let want = json!({"backoff": "exponential", "initial_delay_ms": 2000, "tries": 4});
    assert!(
        stdout.contains(&format!("policy {want}")),
        "the page saved the policy, and not the refused one: {stdout}"
    );
    let p = admin
        .get("/namespaces/shop/queues/emails/policy")
        .await
        .json;
    assert_eq!(p["policy"], want, "{p}");
    // In force: a job published without `tries` takes the policy's 4.
    let id = api.publish("shop", "emails", "", b"{}").await;
    let job = api.get(&format!("/api/shop/emails/job/{id}")).await.json;
    assert_eq!(job["remain_tries"], 4, "{job}");
}

#[tokio::test]
async fn an_operator_pauses_and_resumes_a_queue_from_the_dashboard_in_a_real_browser() {
    let (_redis, gw, token) = gateway().await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("shop", "emails", "", b"{}").await;
    let env = [("PAUSE", "1"), ("NAMESPACE", "shop"), ("QUEUE", "emails")];
    let stdout = drive(&gw, &env).await;
    assert!(
        stdout
            .contains("pause paused=true listed=true resumed=true ns_paused=true ns_resumed=true"),
        "{stdout}"
    );
    let got = api.get("/api/shop/emails?timeout=0").await;
    assert_eq!(got.status, 200, "resumed: {got:?}");
}

#[tokio::test]
async fn an_operator_pauses_and_resumes_a_schedule_from_the_dashboard_in_a_real_browser() {
    let (_redis, gw, token) = gateway().await;
    let api = Api::new(gw.api(), Some(&token));
    let spec = br#"{"every": 60, "job": {"data": ""}}"#;
    let r = api.put("/api/shop/emails/schedules/digest", spec).await;
    assert_eq!(r.status, 201, "{r:?}");
    let env = [
        ("SCHEDULE", "digest"),
        ("NAMESPACE", "shop"),
        ("QUEUE", "emails"),
    ];
    let stdout = drive(&gw, &env).await;
    assert!(
        stdout.contains("schedule digest next=true paused=true resumed=true"),
        "{stdout}"
    );
    let got = api.get("/api/shop/emails/schedules/digest").await;
    assert_eq!(got.json["paused"], false, "resumed: {got:?}");
}
