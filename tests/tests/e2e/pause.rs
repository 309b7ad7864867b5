//! Pausing a queue or a namespace end to end: consumers get nothing while
//! publishes, timers and TTRs go on; a long poll waits through a pause and
//! is answered on resume; a pause made on one gateway holds on another.

use std::time::{Duration, Instant};

use serde_json::Value;
use sundial_tests::{
    Api, ShardKind, Sundial, SundialConfig, create_token, started_on, wait_until_async,
};

on_every_shard_kind!(a_paused_queue_keeps_its_timers_and_answers_a_long_poll_on_resume,);

async fn size_of(api: &Api, q: &str) -> u64 {
    api.get(&format!("/api/ns/{q}/size")).await.json["size"]
        .as_u64()
        .unwrap_or(0)
}

async fn a_paused_queue_keeps_its_timers_and_answers_a_long_poll_on_resume(kind: ShardKind) {
    let (_store, gw, _token, api) = started_on(kind, "ns").await;
    let admin = Api::new(gw.admin(), None);
    // A job reserved before the pause, with a TTR of 1 s.
    api.publish("ns", "q", "tries=2", b"held").await;
    let held = api.get("/api/ns/q?ttr=1&timeout=0").await;
    assert_eq!(held.status, 200, "{held:?}");

    let r = admin.put("/namespaces/ns/queues/q/pause", b"").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (
            r.json["paused"].as_bool(),
            r.json["namespace_paused"].as_bool()
        ),
        (Some(true), Some(false))
    );
    assert!(r.json["since_ms"].as_u64().is_some(), "{r:?}");
    // Publishes are taken; consumes get nothing.
    api.publish("ns", "q", "", b"ready").await;
    api.publish("ns", "q", "delay_ms=300", b"later").await;
    let r = api.get("/api/ns/q?timeout=0").await;
    assert_eq!(r.status, 404, "paused: {r:?}");
    // The delayed job falls due and the reservation runs out, paused or not.
    wait_until_async(Duration::from_secs(5), "due and returned jobs", || async {
        size_of(&api, "q").await == 3
    })
    .await;
    let stats = api.get("/api/ns/q/stats").await;
    assert_eq!(
        (stats.json["ready"].as_u64(), stats.json["paused"].as_bool()),
        (Some(3), Some(true)),
        "{stats:?}"
    );
    let listed = admin.get("/namespaces/ns/queues").await;
    let row = listed.json["queues"]
        .as_array()
        .and_then(|a| a.iter().find(|q| q["queue"] == "q").cloned());
    assert_eq!(
        row.map(|q| q["paused"].clone()),
        Some(Value::Bool(true)),
        "{listed:?}"
    );
    let metrics = reqwest::get(format!("{}/metrics", gw.admin()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sundial_queue_paused{")
                && l.contains("queue=\"q\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );

    // A long poll waits through the pause, and is answered on resume.
    let poll = {
        let api = api.clone();
        tokio::spawn(async move {
            let r = api.get("/api/ns/q?timeout=10&ttr=60").await;
            (r, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !poll.is_finished(),
        "a long poll waits while the queue is paused"
    );
    let resumed_at = Instant::now();
    let r = admin.delete("/namespaces/ns/queues/q/pause").await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(false)),
        "{r:?}"
    );
    let (got, at) = poll.await.expect("poll");
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        at.duration_since(resumed_at) < Duration::from_millis(500),
        "answered on resume"
    );
    wait_until_async(Duration::from_secs(1), "the gauge at 0", || async {
        let metrics = reqwest::get(format!("{}/metrics", gw.admin()))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        metrics.lines().any(|l| {
            l.starts_with("sundial_queue_paused{") && l.contains("queue=\"q\"") && l.ends_with(" 0")
        })
    })
    .await;
}

#[tokio::test]
async fn a_pause_made_on_one_gateway_holds_on_another_within_half_a_second() {
    let redis = sundial_tests::RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let (a, b) = (Sundial::start(&cfg), Sundial::start(&cfg));
    let token = create_token(&a.admin(), "ns").await;
    let (on_a, on_b) = (
        Api::new(a.api(), Some(&token)),
        Api::new(b.api(), Some(&token)),
    );
    let (admin_a, admin_b) = (Api::new(a.admin(), None), Api::new(b.admin(), None));
    for _ in 0..3 {
        on_a.publish("ns", "q", "", b"x").await;
    }
    // A long poll on b waits on an empty queue of a paused namespace.
    let r = admin_a.put("/namespaces/ns/pause", b"").await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(true)),
        "{r:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = on_b.get("/api/ns/q?timeout=0").await;
    assert_eq!(r.status, 404, "b holds a's pause within 0.5 s: {r:?}");
    // The queue paused too, then the namespace resumed on b: still held.
    assert_eq!(
        admin_b
            .put("/namespaces/ns/queues/q/pause", b"")
            .await
            .status,
        200
    );
    let r = admin_b.delete("/namespaces/ns/pause").await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(false)),
        "{r:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = admin_a.get("/namespaces/ns/queues/q/pause").await;
    assert_eq!(
        on_a.get("/api/ns/q?timeout=0").await.status,
        404,
        "the queue's own pause holds"
    );
    assert_eq!(r.json["paused"].as_bool(), Some(true), "{r:?}");
    // Resumed on a, answered on b.
    let poll = {
        let on_b = on_b.clone();
        tokio::spawn(async move { on_b.get("/api/ns/q?timeout=10").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed_at = Instant::now();
    assert_eq!(
        admin_a.delete("/namespaces/ns/queues/q/pause").await.status,
        200
    );
    let got = poll.await.expect("poll");
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        resumed_at.elapsed() < Duration::from_secs(1),
        "answered within a poll of the table"
    );
}

#[tokio::test]
async fn the_cli_pauses_and_resumes_queues_and_namespaces() {
    let (_store, gw, _token, _api) = started_on(ShardKind::Standalone, "ns").await;
    let run = |args: &[&str]| {
        let r = gw.cli(args, &[]);
        assert_eq!(r.code, 0, "{r:?}");
        r.stdout.trim().to_owned()
    };
    assert_eq!(
        run(&["queue", "pause", "ns", "q"]),
        "queue ns/q in pool default: paused: its consumers get no job until it resumes"
    );
    assert_eq!(
        run(&["namespace", "pause", "ns"]),
        "namespace ns in pool default: paused: its consumers get no job until it resumes"
    );
    assert_eq!(
        run(&["queue", "resume", "ns", "q"]),
        "queue ns/q in pool default: resumed, but its namespace is paused: its consumers still get no job"
    );
    assert_eq!(
        run(&["namespace", "resume", "ns"]),
        "namespace ns in pool default: not paused"
    );
    let r = gw.cli(&["queue", "--json", "pause", "ns", "bad/name"], &[]);
    assert_ne!(r.code, 0, "{r:?}");
}
