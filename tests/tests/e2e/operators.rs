//! What operators see and drive through the admin API: a namespace's
//! queues with their backlog, and its dead letters (browse, respawn and
//! delete chosen jobs or all of them).

use std::{collections::HashSet, time::Duration};

use base64::Engine as _;
use serde_json::{Value, json};
use sundial_tests::{
    Api, RedisServer, ShardKind, Sundial, SundialConfig, create_token, started, started_on,
    wait_until_async,
};

on_every_shard_kind!(
    a_dead_letter_is_browsed_page_by_page_and_chosen_jobs_respawned_or_deleted,
    a_pool_status_shows_its_shards_slots_and_who_pumps_them
);

/// Publishes `n` jobs to `q` with one try, takes each with a 1 s TTR and
/// lets it run out, so that each dies; returns their ids once every one is
/// in the dead letter.
async fn kill_jobs(api: &Api, q: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            api.publish("ns", q, "tries=1", format!("body {i}").as_bytes())
                .await,
        );
    }
    for _ in 0..n {
        let r = api.get(&format!("/api/ns/{q}?ttr=1&timeout=1")).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    wait_until_async(Duration::from_secs(10), "the jobs to die", || async {
        api.get(&format!("/api/ns/{q}/deadletter/size")).await.json["size"] == json!(n)
    })
    .await;
    ids
}

async fn post_json(admin: &Api, path: &str, body: Value) -> sundial_tests::Resp {
    admin
        .call(
            reqwest::Method::POST,
            path,
            Some(body.to_string().into_bytes()),
            &[("Content-Type", "application/json")],
        )
        .await
}

async fn a_dead_letter_is_browsed_page_by_page_and_chosen_jobs_respawned_or_deleted(
    kind: ShardKind,
) {
    let (_store, gw, _token, api) = started_on(kind, "ns").await;
    let admin = Api::new(gw.admin(), None);
    let before = sundial_tests::now_ms();
    let dead = kill_jobs(&api, "q", 5).await;

    // Two at a time: every dead job once, with when it died and its body.
    let mut listed = Vec::new();
    let mut cursor = String::new();
    loop {
        let r = admin
            .get(&format!(
                "/namespaces/ns/queues/q/deadletter?limit=2&preview=4&cursor={cursor}"
            ))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        let jobs = r.json["jobs"].as_array().expect("jobs").clone();
        assert!(jobs.len() <= 2, "{r:?}");
        for j in &jobs {
            let published = j["published_at_ms"].as_u64().expect("published");
            let died = j["died_at_ms"].as_u64().expect("died_at_ms");
            assert!(
                published >= before - 1000 && died >= published + 1000,
                "{j}"
            );
            assert_eq!(j["remain_tries"], 0, "{j}");
            assert_eq!(j["body_size"], 6, "{j}");
            let preview = base64::engine::general_purpose::STANDARD
                .decode(j["body_preview"].as_str().expect("preview"))
                .expect("base64");
            assert_eq!(preview, b"body");
            listed.push(j["job_id"].as_str().expect("id").to_owned());
        }
        match r.json["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    listed.sort();
    let mut want = dead.clone();
    want.sort();
    assert_eq!(listed, want, "every dead job listed once");

    // Bad requests change nothing.
    for (op, body, why) in [
        ("respawn", json!({}), "neither ids nor all"),
        ("respawn", json!({"ids": [dead[0]], "all": true}), "both"),
        ("respawn", json!({"ids": ["not-an-id"]}), "a malformed id"),
        (
            "respawn",
            json!({"ids": [dead[0]], "color": "red"}),
            "an unknown field",
        ),
        (
            "respawn",
            json!({"ids": [dead[0]], "limit": 1}),
            "a limit with ids",
        ),
        (
            "delete",
            json!({"all": true, "ttl": 60}),
            "a ttl on a delete",
        ),
    ] {
        let path = format!("/namespaces/ns/queues/q/deadletter/{op}");
        let r = post_json(&admin, &path, body).await;
        assert_eq!(r.status, 400, "{why}: {r:?}");
        assert!(r.json["error"].is_string(), "{why}: {r:?}");
    }
    let r = admin
        .get("/namespaces/ns/queues/q/deadletter?pool=nope")
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = api.get("/api/ns/q/deadletter/size").await;
    assert_eq!(r.json["size"], 5, "nothing changed: {r:?}");

    // Respawn two chosen jobs; an id that is not dead here is reported.
    let gone = api.publish("ns", "q", "", b"acked").await;
    let r = api.get("/api/ns/q?timeout=1").await;
    assert_eq!(r.json["job_id"], json!(gone));
    api.delete(&format!("/api/ns/q/job/{gone}")).await;
    let r = post_json(
        &admin,
        "/namespaces/ns/queues/q/deadletter/respawn",
        json!({"ids": [dead[0], dead[1], gone], "ttl": 60}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"respawned": 2, "not_found": [gone], "deadletter_size": 3})
    );
    let mut back = HashSet::new();
    for _ in 0..2 {
        let r = api.get("/api/ns/q?timeout=1").await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.json["remain_tries"], 0, "one try, now taken: {r:?}");
        back.insert(r.json["job_id"].as_str().expect("id").to_owned());
        api.delete(&format!(
            "/api/ns/q/job/{}",
            r.json["job_id"].as_str().expect("id")
        ))
        .await;
    }
    assert_eq!(back, HashSet::from([dead[0].clone(), dead[1].clone()]));

    // Delete one chosen job, then respawn the rest with `all`, one at a time.
    let r = post_json(
        &admin,
        "/namespaces/ns/queues/q/deadletter/delete",
        json!({"ids": [dead[2]]}),
    )
    .await;
    assert_eq!(
        r.json,
        json!({"deleted": 1, "not_found": [], "deadletter_size": 2}),
        "{r:?}"
    );
    let r = api.get(&format!("/api/ns/q/job/{}", dead[2])).await;
    assert_eq!(r.status, 404, "a deleted dead job is gone: {r:?}");
    for left in [1, 0] {
        let r = post_json(
            &admin,
            "/namespaces/ns/queues/q/deadletter/respawn",
            json!({"all": true, "limit": 1}),
        )
        .await;
        assert_eq!(
            r.json,
            json!({"respawned": 1, "not_found": [], "deadletter_size": left}),
            "{r:?}"
        );
    }
    let r = api.get("/api/ns/q/size").await;
    assert_eq!(r.json["size"], 2, "{r:?}");
    let r = admin.get("/namespaces/ns/queues/q/deadletter").await;
    assert_eq!(
        (r.json["jobs"].clone(), r.json["next_cursor"].clone()),
        (json!([]), Value::Null),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_namespaces_queues_are_listed_with_their_backlog_page_by_page() {
    let (redis, mut gw, _token, api) = started("ns").await;
    let admin = Api::new(gw.admin(), None);
    for q in ["a", "b", "c", "d", "e"] {
        api.publish("ns", q, "", b"x").await;
    }
    api.publish("ns", "c", "delay=600", b"later").await;
    let other = create_token(&gw.admin(), "other").await;
    Api::new(gw.api(), Some(&other))
        .publish("other", "z", "", b"x")
        .await;
    // The index is written in the background.
    wait_until_async(
        Duration::from_secs(5),
        "the queues to be indexed",
        || async {
            admin.get("/namespaces/ns/queues").await.json["queues"]
                .as_array()
                .is_some_and(|q| q.len() == 5)
        },
    )
    .await;

    let mut names = Vec::new();
    let mut cursor = String::new();
    loop {
        let r = admin
            .get(&format!("/namespaces/ns/queues?limit=2&cursor={cursor}"))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            (r.json["pool"].clone(), r.json["namespace"].clone()),
            (json!("default"), json!("ns"))
        );
        for q in r.json["queues"].as_array().expect("queues") {
            names.push(q["queue"].as_str().expect("name").to_owned());
            if q["queue"] == "c" {
                assert_eq!(
                    (q["ready"].clone(), q["delayed"].clone()),
                    (json!(1), json!(1)),
                    "{q}"
                );
                assert_eq!(q["published_total"], 2, "{q}");
            }
        }
        match r.json["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    assert_eq!(names, ["a", "b", "c", "d", "e"], "in name order, once each");
    // A last page that is exactly full says it is the last.
    let r = admin.get("/namespaces/ns/queues?limit=5").await;
    assert_eq!(
        (
            r.json["queues"].as_array().map(Vec::len),
            r.json["next_cursor"].clone()
        ),
        (Some(5), Value::Null),
        "{r:?}"
    );
    for bad in ["limit=0", "limit=501", "cursor=a/b"] {
        let r = admin.get(&format!("/namespaces/ns/queues?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
    assert_eq!(
        admin.get("/namespaces/ns/queues?pool=nope").await.status,
        404
    );

    // Queues published before the index existed (here: an index lost) are
    // found in the slots when a gateway starts.
    let _: () = redis::cmd("DEL")
        .arg("sd:queues:default/ns")
        .query(&mut redis.client())
        .expect("DEL");
    assert_eq!(
        admin.get("/namespaces/ns/queues").await.json["queues"],
        json!([])
    );
    gw.restart();
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(10),
        "the index to be rebuilt",
        || async {
            admin.get("/namespaces/ns/queues").await.json["queues"]
                .as_array()
                .is_some_and(|q| q.len() == 5)
        },
    )
    .await;
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg("sd:queues:default/other")
        .arg(0)
        .arg(-1)
        .query(&mut redis.client())
        .expect("ZRANGE");
    assert_eq!(indexed, ["z"]);
}

#[tokio::test]
async fn queue_and_dead_letter_routes_need_the_admin_password() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), "ops-pass-9Xq2vT".to_owned())];
    let gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    for path in [
        "/namespaces/ns/queues",
        "/namespaces/ns/queues/q",
        "/namespaces/ns/queues/q/deadletter",
        "/pools/default",
    ] {
        assert_eq!(admin.get(path).await.status, 401, "{path}");
    }
    let r = post_json(
        &admin,
        "/namespaces/ns/queues/q/deadletter/respawn",
        json!({"all": true}),
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = admin
        .call(
            reqwest::Method::GET,
            "/namespaces/ns/queues",
            None,
            &[("Authorization", "Basic b3BzOm9wcy1wYXNzLTlYcTJ2VA==")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}

async fn a_pool_status_shows_its_shards_slots_and_who_pumps_them(kind: ShardKind) {
    let (_store, gw, _token, _api) = started_on(kind, "ns").await;
    let admin = Api::new(gw.admin(), None);
    assert_eq!(admin.get("/pools/nowhere").await.status, 404);
    // The gateway's own pump takes every slot's lease.
    let status = wait_for(&admin, "the pump to lease every slot", |s| {
        s["shards"][0]["pumps"]["unleased"] == 0
    })
    .await;
    assert_eq!(status["pool"], "default");
    assert_eq!(status["slots"], 128);
    assert_eq!(status["draining"], json!([]));
    let shard = &status["shards"][0];
    assert_eq!(shard["slots"], 128, "{shard}");
    assert_eq!(shard["weight"], 1, "{shard}");
    assert_eq!(shard["slots_held"], 128, "{shard}");
    assert_eq!(shard["health"]["up"], true, "{shard}");
    let processes = shard["pumps"]["processes"].as_array().expect("processes");
    assert_eq!(processes.len(), 1, "{shard}");
    assert_eq!(processes[0]["live"], true, "{shard}");
    assert_eq!(processes[0]["leases"], 128, "{shard}");
    match kind {
        ShardKind::Standalone => {
            assert_eq!(shard["kind"], "single");
            assert!(shard.get("cluster_primaries").is_none(), "{shard}");
        }
        ShardKind::Cluster => {
            assert_eq!(shard["kind"], "cluster");
            let primaries = shard["cluster_primaries"].as_array().expect("primaries");
            assert_eq!(primaries.len(), 3, "{shard}");
            let sum = |field: &str| -> u64 {
                primaries
                    .iter()
                    .map(|p| p[field].as_u64().expect("count"))
                    .sum()
            };
            assert_eq!(
                (sum("hash_slots"), sum("pool_slots")),
                (16384, 128),
                "{shard}"
            );
            assert!(primaries.iter().all(|p| p["connected"] == true), "{shard}");
        }
    }
}

/// Polls `GET /pools/default` until `done` holds; returns that answer.
async fn wait_for(admin: &Api, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    wait_until_async(Duration::from_secs(10), what, || async {
        let r = admin.get("/pools/default").await;
        let ok = r.status == 200 && done(&r.json);
        *last.lock().expect("lock") = r.json;
        ok
    })
    .await;
    last.into_inner().expect("lock")
}

#[tokio::test]
async fn a_pool_status_shows_a_drain_and_a_shard_that_is_down() {
    let (a, mut b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false".to_owned();
    cfg.pools = Some(SundialConfig::default_pool(&[("a", &a), ("b", &b)]));
    let mut gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    // Jobs due in an hour, in many queues: they hold their slots while c
    // joins, so the old layout drains for as long as this test runs.
    for i in 0..40 {
        api.publish("ns", &format!("q{i}"), "delay=3600", b"later")
            .await;
    }
    cfg.pools = Some(SundialConfig::default_pool(&[
        ("a", &a),
        ("b", &b),
        ("c", &c),
    ]));
    gw.rewrite(&cfg);
    assert_eq!(admin.post("/reload").await.status, 200);

    let status = wait_for(&admin, "the drain to show", |s| {
        s["draining"].as_array().is_some_and(|d| d.len() == 1)
    })
    .await;
    let drain = &status["draining"][0];
    let (moved, pending) = (
        drain["slots_moved"].as_u64().expect("moved"),
        drain["slots_pending"].as_u64().expect("pending"),
    );
    assert!(moved > 0 && pending > 0 && pending <= moved, "{drain}");
    assert!(
        drain["jobs_left"].as_u64().expect("jobs") >= pending,
        "{drain}"
    );
    let shards = status["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 3);
    let slots: u64 = shards
        .iter()
        .map(|s| s["slots"].as_u64().expect("slots"))
        .sum();
    let held: u64 = shards
        .iter()
        .map(|s| s["slots_held"].as_u64().expect("held"))
        .sum();
    assert_eq!(slots, 128, "every slot has one shard now");
    assert_eq!(
        held,
        128 + moved,
        "a moved slot is held by its old shard too"
    );

    // A shard that is down shows as down, with why its pumps cannot be
    // read; the others still show.
    b.kill();
    let status = wait_for(&admin, "b to show as down", |s| {
        s["shards"][1]["health"]["up"] == false
    })
    .await;
    assert_eq!(status["shards"][1]["name"], "default/b");
    assert!(
        status["shards"][1]["pumps"]["error"].is_string(),
        "{status}"
    );
    assert_eq!(status["shards"][0]["health"]["up"], true, "{status}");
    assert!(
        status["shards"][0]["pumps"]["processes"].is_array(),
        "{status}"
    );
    assert!(status["draining"]["error"].is_string(), "{status}");

    // Back (empty: it lost its jobs), it shows as up again, and the pump
    // leases its slots anew.
    b.restart();
    let status = wait_for(&admin, "b to be up and pumped again", |s| {
        s["shards"][1]["health"]["up"] == true && s["shards"][1]["pumps"]["unleased"] == 0
    })
    .await;
    assert!(status["draining"].is_array(), "{status}");
}
