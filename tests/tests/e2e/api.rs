//! The public API end to end: the real binary, a real Redis, HTTP requests.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use sundial_tests::{
    Api, ShardKind, Store, Sundial, SundialConfig, create_token, started_on, wait_until_async,
};

// Every scenario runs twice: on a standalone shard and on a Redis Cluster
// shard (`api::standalone::…`, `api::cluster::…`).
on_every_shard_kind!(
    publish_consume_ack_in_lmstfy_shapes,
    versioned_jobs_carry_attributes,
    bulk_publish_and_batch_consume,
    bulk_errors_store_nothing,
    bad_input_is_a_clear_4xx_and_stores_nothing,
    tokens_are_checked_on_every_route,
    delayed_jobs_arrive_through_a_long_poll,
    a_long_poll_wakes_when_a_job_is_published,
    queues_are_consumed_in_priority_order,
    peek_size_destroy,
    republish_replaces_the_job,
    a_job_whose_worker_dies_is_retried_then_dead_lettered_then_respawned,
    dead_letter_delete,
    a_long_poll_on_one_gateway_wakes_for_a_publish_on_another,
    idle_waiters_send_redis_no_commands,
    millisecond_delays_and_ttrs,
    ready_and_dead_jobs_go_at_the_end_of_their_ttl,
    stats_show_the_backlog_and_rates,
);

struct Env {
    store: Store,
    gw: Sundial,
    api: Api,
}

async fn env(kind: ShardKind) -> Env {
    let (store, gw, _token, api) = started_on(kind, "ns").await;
    Env { store, gw, api }
}

fn b64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("base64 string"))
        .expect("valid base64")
}

/// The slot keys that hold jobs or their traces (`sd:{<slot>}:…`), to show
/// nothing was stored. Every slot also has its pump lease, which is not
/// about any job, and on a cluster the admin tables share the `sd:{`
/// prefix (`sd:{admin}:…`).
fn job_keys(store: &Store) -> Vec<String> {
    store
        .keys("sd:{*")
        .into_iter()
        .filter(|k| !k.ends_with(":lease") && !k.starts_with("sd:{admin}:"))
        .collect()
}

async fn publish_consume_ack_in_lmstfy_shapes(kind: ShardKind) {
    let e = env(kind).await;
    let r = e.api.put("/api/ns/q?tries=3&ttl=60", b"hello").await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json["msg"], "published");
    let id = r.json["job_id"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 26);
    assert_eq!(
        r.headers["x-request-id"].len(),
        26,
        "every response carries a request id"
    );

    let size = e.api.get("/api/ns/q/size").await;
    assert_eq!(
        size.json,
        serde_json::json!({"namespace": "ns", "queue": "q", "size": 1})
    );

    let c = e.api.get("/api/ns/q?ttr=30").await;
    assert_eq!(c.status, 200, "{c:?}");
    assert_eq!(c.json["msg"], "new job");
    assert_eq!(c.json["namespace"], "ns");
    assert_eq!(c.json["queue"], "q");
    assert_eq!(c.json["job_id"], id.as_str());
    assert_eq!(b64(&c.json["data"]), b"hello");
    assert_eq!(c.json["remain_tries"], 2);
    let ttl = c.json["ttl"].as_u64().expect("ttl");
    assert!((59..=60).contains(&ttl), "ttl {ttl}");
    assert!(c.json["elapsed_ms"].as_u64().is_some());
    assert_eq!(c.json["attributes"], Value::Null);

    let none = e.api.get("/api/ns/q").await;
    assert_eq!(
        (none.status, none.json.clone()),
        (404, serde_json::json!({"msg": "no job available"}))
    );

    let ack = e.api.delete(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(ack.status, 204);
    let gone = e.api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(
        (gone.status, gone.json["error"].as_str()),
        (404, Some("job not found"))
    );
    assert_eq!(
        e.api.delete(&format!("/api/ns/q/job/{id}")).await.status,
        204,
        "ack is idempotent"
    );
    drop(e.gw);
}

async fn versioned_jobs_carry_attributes(kind: ShardKind) {
    let e = env(kind).await;
    let r = e
        .api
        .call(
            reqwest::Method::PUT,
            "/api/ns/q",
            Some(b"x".to_vec()),
            &[("Enable-Job-Version", "YES"), ("Job-Attr-Color", "red")],
        )
        .await;
    assert_eq!(r.status, 201);
    let id = r.json["job_id"].as_str().expect("id");
    assert!(id.starts_with('1') && id.len() == 27, "{id}");
    let c = e.api.get("/api/ns/q").await;
    assert_eq!(c.json["attributes"], serde_json::json!({"color": "red"}));
}

async fn bulk_publish_and_batch_consume(kind: ShardKind) {
    let e = env(kind).await;
    let r = e.api.put("/api/ns/q/bulk", br#"[{"a":1}, "s", 3]"#).await;
    assert_eq!(r.status, 201, "{r:?}");
    let ids = r.json["job_ids"].as_array().expect("ids").clone();
    assert_eq!(ids.len(), 3);
    let c = e.api.get("/api/ns/q?count=10").await;
    let jobs = c.json.as_array().expect("count > 1 answers an array");
    let mut bodies: Vec<Vec<u8>> = jobs.iter().map(|j| b64(&j["data"])).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        vec![b"\"s\"".to_vec(), b"3".to_vec(), br#"{"a":1}"#.to_vec()]
    );
}

async fn bulk_errors_store_nothing(kind: ShardKind) {
    let e = env(kind).await;
    let cases: [(&[u8], u16, &str); 4] = [
        (b"{}", 400, "request body should be an array of objects"),
        (b"[]", 400, "no jobs"),
        (
            b"not json",
            400,
            "request body should be an array of objects",
        ),
        (
            &[b'['; 1][..],
            400,
            "request body should be an array of objects",
        ),
    ];
    for (body, status, msg) in cases {
        let r = e.api.put("/api/ns/q/bulk", body).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (status, Some(msg)),
            "{body:?}"
        );
    }
    let many = format!("[{}]", vec!["1"; 65].join(","));
    let r = e.api.put("/api/ns/q/bulk", many.as_bytes()).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("too many jobs"))
    );
    let big = format!("[\"{}\"]", "x".repeat(1024 * 1024));
    let r = e.api.put("/api/ns/q/bulk", big.as_bytes()).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (413, Some("job too large"))
    );
    assert!(job_keys(&e.store).is_empty(), "no job was stored");
}

async fn bad_input_is_a_clear_4xx_and_stores_nothing(kind: ShardKind) {
    let e = env(kind).await;
    let cases: Vec<(&str, u16, &str)> = vec![
        ("/api/ns/q?delay=-1", 400, "invalid delay"),
        ("/api/ns/q?ttl=abc", 400, "invalid ttl"),
        ("/api/ns/q?tries=0", 400, "tries shouldn't be zero"),
        ("/api/ns/q?tries=70000", 400, "invalid tries"),
        ("/api/ns/q?delay=10&ttl=5", 400, "ttl is shorter than delay"),
        (
            "/api/ns/_q",
            400,
            "queue name contains forbidden characters",
        ),
        (
            "/api/ns/q%2Cr",
            400,
            "queue name contains forbidden characters",
        ),
        (
            "/api/n.s/q",
            400,
            "namespace name contains forbidden characters",
        ),
    ];
    for (path, status, msg) in cases {
        let r = e.api.put(path, b"x").await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (status, Some(msg)),
            "{path}"
        );
    }
    let long = format!("/api/ns/{}", "q".repeat(256));
    let r = e.api.put(&long, b"x").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("namespace or queue name too long"))
    );

    let big = vec![b'x'; 1024 * 1024 + 1];
    let r = e.api.put("/api/ns/q", &big).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (413, Some("body too large"))
    );
    let exact = vec![b'x'; 1024 * 1024];
    assert_eq!(
        e.api.put("/api/ns/exact", &exact).await.status,
        201,
        "1 MiB exactly is fine"
    );
    // Only the 1 MiB job was stored: its slot's hash, counters, queue
    // table, ready list, usage, and for its expiry (a day away) the
    // wheel's index and the hash of its second.
    assert_eq!(job_keys(&e.store).len(), 7, "{:?}", job_keys(&e.store));

    for (path, msg) in [
        ("/api/ns/q?count=0", "invalid count"),
        ("/api/ns/q?count=101", "invalid count"),
        ("/api/ns/q?ttr=x", "invalid ttr"),
        ("/api/ns/q?timeout=-1", "invalid timeout"),
        ("/api/ns/q,_r", "invalid queue name(s)"),
    ] {
        let r = e.api.get(path).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(msg)),
            "{path}"
        );
    }
    let r = e.api.get("/api/ns/q/job/not-an-id").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("invalid job id"))
    );
    let r = e.api.get("/nowhere").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("api not found"))
    );
    let r = e
        .api
        .call(reqwest::Method::PATCH, "/api/ns/q", None, &[])
        .await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (405, Some("method not allowed"))
    );
}

async fn tokens_are_checked_on_every_route(kind: ShardKind) {
    let e = env(kind).await;
    let anon = Api::new(e.gw.api(), None);
    let wrong = Api::new(e.gw.api(), Some("01ARZ3NDEKTSV4RRFFQ69G5FAV"));
    let other_pool = Api::new(e.gw.api(), Some("nopool:01ARZ3NDEKTSV4RRFFQ69G5FAV"));
    for path in [
        "/api/ns/q",
        "/api/ns/q/size",
        "/api/ns/q/deadletter/size",
        "/api/ns/q/peek",
    ] {
        let r = anon.get(path).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (401, Some("token not found")),
            "{path}"
        );
        let r = wrong.get(path).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (401, Some("invalid token")),
            "{path}"
        );
        let r = other_pool.get(path).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (404, Some("pool not found")),
            "{path}"
        );
    }
    // A token is bound to its namespace.
    let r = e.api.get("/api/other/q").await;
    assert_eq!(r.status, 401);
    // The token may also come in the query string.
    let token = e.api.token.clone().expect("token");
    let r = anon.get(&format!("/api/ns/q/size?token={token}")).await;
    assert_eq!(r.status, 200);
}

async fn delayed_jobs_arrive_through_a_long_poll(kind: ShardKind) {
    let e = env(kind).await;
    let start = Instant::now();
    e.api.publish("ns", "q", "delay=1", b"later").await;
    assert_eq!(
        e.api.get("/api/ns/q").await.status,
        404,
        "not before its delay"
    );
    let c = e.api.get("/api/ns/q?timeout=10").await;
    assert_eq!(c.status, 200, "{c:?}");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(1), "never early: {waited:?}");
    assert!(
        waited < Duration::from_secs(5),
        "woken by the pump, not the timeout: {waited:?}"
    );
}

async fn a_long_poll_wakes_when_a_job_is_published(kind: ShardKind) {
    let e = env(kind).await;
    let waiter = {
        let api = e.api.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            (api.get("/api/ns/a,b?timeout=30").await, t.elapsed())
        })
    };
    // The waiter is registered once Redis shows a subscriber on the channel.
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(e.store.ready_listeners("ns", "b") > 0)
    })
    .await;
    let id = e.api.publish("ns", "b", "", b"now").await;
    let (r, waited) = waiter.await.expect("waiter");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["job_id"], id.as_str());
    assert!(
        waited < Duration::from_secs(10),
        "woken by the publish: {waited:?}"
    );
}

async fn queues_are_consumed_in_priority_order(kind: ShardKind) {
    let e = env(kind).await;
    e.api.publish("ns", "low", "", b"l").await;
    e.api.publish("ns", "high", "", b"h").await;
    let first = e.api.get("/api/ns/high,low").await;
    assert_eq!(first.json["queue"], "high");
    let second = e.api.get("/api/ns/high,low").await;
    assert_eq!(second.json["queue"], "low");
}

async fn peek_size_destroy(kind: ShardKind) {
    let e = env(kind).await;
    let r = e.api.get("/api/ns/q/peek").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("the queue is empty"))
    );
    let id = e.api.publish("ns", "q", "", b"one").await;
    let id2 = e.api.publish("ns", "q", "", b"two").await;
    // The head is the job published first, unless both were published in
    // the same millisecond (then either may be); it is shown, not taken.
    let r = e.api.get("/api/ns/q/peek").await;
    assert_eq!(r.status, 200);
    let head = r.json["job_id"].as_str().expect("id").to_owned();
    let want: &[u8] = if head == id { b"one" } else { b"two" };
    assert!(head == id || head == id2, "{head}");
    assert_eq!(b64(&r.json["data"]), want);
    let by_id = e.api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(by_id.json["job_id"], id.as_str());
    assert_eq!(e.api.get("/api/ns/q/size").await.json["size"], 2);
    assert_eq!(e.api.delete("/api/ns/q").await.status, 204);
    assert_eq!(e.api.get("/api/ns/q/size").await.json["size"], 0);
    assert_eq!(e.api.get("/api/ns/q").await.status, 404);
}

async fn republish_replaces_the_job(kind: ShardKind) {
    let e = env(kind).await;
    let old = e.api.publish("ns", "q", "", b"v1").await;
    let r = e
        .api
        .put(&format!("/api/ns/q/job/{old}?tries=2"), b"v2")
        .await;
    assert_eq!(r.status, 201);
    let new = r.json["job_id"].as_str().expect("new id").to_owned();
    assert_ne!(new, old);
    assert_eq!(e.api.get(&format!("/api/ns/q/job/{old}")).await.status, 404);
    let c = e.api.get("/api/ns/q").await;
    assert_eq!(c.json["job_id"], new.as_str());
    assert_eq!(b64(&c.json["data"]), b"v2");
    assert_eq!(
        e.api.get("/api/ns/q").await.status,
        404,
        "the old job is gone"
    );
}

async fn a_job_whose_worker_dies_is_retried_then_dead_lettered_then_respawned(kind: ShardKind) {
    let e = env(kind).await;
    let id = e.api.publish("ns", "q", "tries=2", b"job").await;
    let first = e.api.get("/api/ns/q?ttr=1").await;
    assert_eq!(first.json["remain_tries"], 1);
    // No ack: after the TTR it comes back.
    let second = e.api.get("/api/ns/q?ttr=1&timeout=10").await;
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.json["job_id"], id.as_str());
    assert_eq!(second.json["remain_tries"], 0);
    // No ack again: after the TTR it is dead.
    sundial_tests::wait_until_async(
        Duration::from_secs(10),
        "the job to reach the dead letter",
        || async { e.api.get("/api/ns/q/deadletter/size").await.json["size"] == 1 },
    )
    .await;
    let dl = e.api.get("/api/ns/q/deadletter").await;
    assert_eq!(
        dl.json,
        serde_json::json!({"namespace": "ns", "queue": "q", "deadletter_size": 1, "deadletter_head": id})
    );
    let r = e.api.put("/api/ns/q/deadletter?limit=0", b"").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("invalid limit"))
    );
    let r = e
        .api
        .put("/api/ns/q/deadletter?limit=10&ttl=100", b"")
        .await;
    assert_eq!(r.json, serde_json::json!({"msg": "respawned", "count": 1}));
    let again = e.api.get("/api/ns/q").await;
    assert_eq!(again.json["job_id"], id.as_str());
    assert_eq!(again.json["remain_tries"], 0);
    assert!(again.json["ttl"].as_u64().expect("ttl") <= 100);
}

async fn dead_letter_delete(kind: ShardKind) {
    let e = env(kind).await;
    for _ in 0..3 {
        e.api.publish("ns", "q", "", b"x").await;
    }
    assert_eq!(
        e.api
            .get("/api/ns/q?ttr=0&count=3")
            .await
            .json
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    sundial_tests::wait_until_async(Duration::from_secs(10), "three dead jobs", || async {
        e.api.get("/api/ns/q/deadletter/size").await.json["size"] == 3
    })
    .await;
    assert_eq!(
        e.api.delete("/api/ns/q/deadletter?limit=2").await.status,
        204
    );
    assert_eq!(e.api.get("/api/ns/q/deadletter/size").await.json["size"], 1);
    assert_eq!(
        e.api.delete("/api/ns/q/deadletter?limit=5").await.status,
        204
    );
    let dl = e.api.get("/api/ns/q/deadletter").await;
    assert_eq!(
        (
            dl.json["deadletter_size"].clone(),
            dl.json["deadletter_head"].clone()
        ),
        (0.into(), "".into())
    );
}

async fn a_long_poll_on_one_gateway_wakes_for_a_publish_on_another(kind: ShardKind) {
    let store = Store::start(kind);
    let a = Sundial::start(&SundialConfig::new(store.url()));
    let b = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&a.admin(), "ns").await;
    let on_a = Api::new(a.api(), Some(&token));
    let on_b = Api::new(b.api(), Some(&token));
    wait_until_async(Duration::from_secs(5), "the token to reach B", || async {
        on_b.get("/api/ns/q/size").await.status == 200
    })
    .await;
    let waiter = tokio::spawn(async move { on_a.get("/api/ns/q?timeout=30").await });
    wait_until_async(
        Duration::from_secs(10),
        "the waiter on A to subscribe",
        || std::future::ready(store.ready_listeners("ns", "q") > 0),
    )
    .await;
    let start = Instant::now();
    let id = on_b.publish("ns", "q", "", b"from B").await;
    let r = waiter.await.expect("waiter");
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str()))
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "woken, not timed out"
    );
}

/// Waiting consumers cost Redis nothing: over a quiet period, the commands
/// Redis runs do not grow with the number of waiters. (A cluster shard's
/// gateway also reads the slot map once a second, `CLUSTER SLOTS`, to
/// follow moved slots; that is left out of the count.)
async fn idle_waiters_send_redis_no_commands(kind: ShardKind) {
    let store = Store::start(kind);
    let mut cfg = SundialConfig::new(store.url());
    cfg.pump = false; // only the waiters and the token poll talk to Redis
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let mut waiters = Vec::new();
    for i in 0..50 {
        let api = Api::new(gw.api(), Some(&token));
        waiters.push(tokio::spawn(async move {
            api.get(&format!("/api/ns/q{i}?timeout=20")).await
        }));
    }
    wait_until_async(
        Duration::from_secs(10),
        "all 50 waiters to subscribe",
        || std::future::ready((0..50).all(|i| store.ready_listeners("ns", &format!("q{i}")) > 0)),
    )
    .await;
    let commands = || store.commands_run(&["info", "cluster|slots", "pubsub|numsub"]);
    // Each waiter subscribes, then takes its first look (a script call):
    // the last looks may still run. Wait for a quiet half second (the
    // background's few commands; waiters polling once a second would add
    // 25).
    let mut last = commands();
    let settled = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = commands();
        if now - last <= 12 {
            break;
        }
        assert!(
            std::time::Instant::now() < settled,
            "{} commands in the last 500 ms with 50 idle waiters",
            now - last
        );
        last = now;
    }
    let before = commands();
    tokio::time::sleep(Duration::from_secs(2)).await; // the quiet period is what is measured
    let during = commands() - before;
    // The background: the token poll (a GET every 200 ms, 10 or 11), and on
    // a cluster the health probes of each primary and, now and then, a
    // layout check (27 in all seen once on a busy machine). Waiters that
    // polled even once a second would add 100: the bound sits between.
    assert!(during < 50, "{during} commands in 2 s with 50 idle waiters");
    for w in waiters {
        w.abort();
    }
}

async fn millisecond_delays_and_ttrs(kind: ShardKind) {
    let e = env(kind).await;
    let start = Instant::now();
    e.api.publish("ns", "q", "delay_ms=150", b"soon").await;
    let r = e.api.get("/api/ns/q?timeout=5").await;
    assert_eq!(r.status, 200, "{r:?}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "never early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(1),
        "well under lmstfy's one-second step: {waited:?}"
    );

    let id = e.api.publish("ns", "t", "tries=2", b"again").await;
    let first = e.api.get("/api/ns/t?ttr_ms=100").await;
    assert_eq!(first.json["job_id"], id.as_str());
    let start = Instant::now();
    let again = e.api.get("/api/ns/t?timeout=5").await;
    assert_eq!(
        again.json["job_id"],
        id.as_str(),
        "back after its 100 ms TTR"
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );

    let r = e.api.put("/api/ns/q?delay_ms=2000&ttl=1", b"x").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("ttl is shorter than delay"))
    );
}

async fn ready_and_dead_jobs_go_at_the_end_of_their_ttl(kind: ShardKind) {
    // A TTL of 5 s is far enough for the expiries to wait in the timer
    // wheel, not on the timer: the pumps still drop the jobs on time.
    let e = env(kind).await;
    let start = Instant::now();
    let ready = e.api.publish("ns", "q", "ttl=5", b"ready").await;
    let dead = e.api.publish("ns", "d", "ttl=5&tries=1", b"dead").await;
    let peek = e.api.get(&format!("/api/ns/q/job/{ready}")).await;
    assert_eq!(peek.status, 200, "{peek:?}");
    let got = e.api.get("/api/ns/d?ttr_ms=100").await;
    assert_eq!(got.json["job_id"], dead.as_str());
    wait_until_async(
        Duration::from_secs(5),
        "the job to reach the dead letter",
        || async { e.api.get("/api/ns/d/deadletter/size").await.json["size"] == 1 },
    )
    .await;
    // The counts fall when a pump drops the jobs (a peek answers 404 from
    // the expiry on, dropped or not).
    wait_until_async(
        Duration::from_secs(10),
        "both jobs to be dropped",
        || async {
            e.api.get("/api/ns/q/stats").await.json["ready"] == 0
                && e.api.get("/api/ns/d/stats").await.json["dead"] == 0
        },
    )
    .await;
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "never early: {:?}",
        start.elapsed()
    );
    let gone = e.api.get(&format!("/api/ns/q/job/{ready}")).await;
    assert_eq!(gone.status, 404, "{gone:?}");
}

async fn stats_show_the_backlog_and_rates(kind: ShardKind) {
    let e = env(kind).await;
    for i in 0..5 {
        e.api
            .publish("ns", "q", "", format!("{i}").as_bytes())
            .await;
    }
    e.api.publish("ns", "q", "delay=3600", b"later").await;
    let s = e.api.get("/api/ns/q/stats").await;
    assert_eq!(s.status, 200, "{s:?}");
    assert_eq!(
        (
            s.json["ready"].clone(),
            s.json["delayed"].clone(),
            s.json["reserved"].clone(),
            s.json["dead"].clone()
        ),
        (5.into(), 1.into(), 0.into(), 0.into())
    );
    assert_eq!(s.json["published_total"], 6);
    assert_eq!(
        s.json["publish_rate"],
        Value::Null,
        "no rate before a second sample"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await; // rates need time between samples
    for i in 0..10 {
        e.api
            .publish("ns", "q", "", format!("n{i}").as_bytes())
            .await;
    }
    assert_eq!(e.api.get("/api/ns/q?count=4&ttr=600").await.status, 200);
    let s = e.api.get("/api/ns/q/stats").await;
    assert_eq!(
        (s.json["ready"].clone(), s.json["reserved"].clone()),
        (11.into(), 4.into())
    );
    assert_eq!(
        (
            s.json["published_total"].clone(),
            s.json["consumed_total"].clone()
        ),
        (16.into(), 4.into())
    );
    let publish_rate = s.json["publish_rate"].as_f64().expect("a rate");
    let consume_rate = s.json["consume_rate"].as_f64().expect("a rate");
    assert!(publish_rate > 0.0 && publish_rate <= 10.0, "{publish_rate}");
    assert!(consume_rate > 0.0 && consume_rate <= 4.0, "{consume_rate}");
    assert_eq!(
        Api::new(e.gw.api(), None)
            .get("/api/ns/q/stats")
            .await
            .status,
        401
    );
}
