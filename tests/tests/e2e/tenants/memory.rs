//! A pool's Redis at its `maxmemory`: what clients see, what keeps working,
//! and that publishing works again once memory is freed; and expired jobs
//! giving their memory back on time.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// 8 KiB, as in the measurement that found a full Redis answered 500.
const BODY: [u8; 8192] = [b'x'; 8192];

/// Publishes `body` until the first refusal, and returns how many were
/// stored and the refusal.
async fn fill(api: &Api, queue: &str, body: &[u8]) -> (u64, sundial_tests::Resp) {
    for stored in 0..10_000 {
        let r = api.put(&format!("/api/ns/{queue}"), body).await;
        if r.status != 201 {
            return (stored, r);
        }
    }
    panic!("10,000 jobs fit in a Redis of 8 MiB");
}

#[tokio::test]
async fn a_full_redis_refuses_publishes_whole_with_a_503_and_keeps_serving_workers() {
    let redis = RedisServer::start_with(&["--maxmemory", "8mb"]);
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let timer = api.publish("ns", "timed", "delay=2", b"due later").await;

    let (stored, refused) = fill(&api, "q", &BODY).await;
    assert!(stored > 100, "{stored} stored before the refusal");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(
        refused.json["error"],
        "pool default is out of memory: nothing was stored; retry later"
    );
    // Redis refuses while its used memory is over the bound, and takes a
    // write that starts under it: small jobs fill what is left.
    let (small, refused) = fill(&api, "other", b"small").await;
    assert!(small < 1_000, "{small} small jobs stored");
    assert_eq!(refused.status, 503, "{refused:?}");
    // A bulk is whole or not at all: refused while Redis is over its bound,
    // or stored whole when its used memory dipped under it (it varies with
    // client buffers, as the gateways read the shard's usage).
    let bulk = api.put("/api/ns/q/bulk", b"[\"a\",\"b\",\"c\"]").await;
    assert!(matches!(bulk.status, 503 | 201), "{bulk:?}");
    let stored = stored + if bulk.status == 201 { 3 } else { 0 };

    // Nothing of the refused publishes was stored.
    let stats = api.get("/api/ns/q/stats").await;
    assert_eq!(stats.json["ready"], stored, "{stats:?}");
    assert_eq!(api.get("/api/ns/other/stats").await.json["ready"], small);

    // Timers fire, and workers consume and ack at any memory level.
    let due = api.get("/api/ns/timed?timeout=10").await;
    assert_eq!(
        (due.status, &due.json["job_id"]),
        (200, &timer.clone().into())
    );
    assert_eq!(
        api.delete(&format!("/api/ns/timed/job/{timer}"))
            .await
            .status,
        204
    );
    let mut acked = 0;
    while acked < stored / 2 {
        let r = api.get("/api/ns/q?count=50&ttr=60").await;
        assert_eq!(r.status, 200, "{r:?}");
        for job in r.json.as_array().expect("a list of jobs") {
            let id = job["job_id"].as_str().expect("job_id");
            assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
            acked += 1;
        }
    }

    // With memory freed, publishes are taken again, by every namespace.
    wait_until_async(
        Duration::from_secs(5),
        "publishes to work again",
        || async { api.put("/api/ns/other", b"small").await.status == 201 },
    )
    .await;
    assert!(!gw.log().contains("panicked"), "{}", gw.log());
}

on_every_shard_kind!(
    expired_jobs_leave_the_counts_and_redis_within_a_second_after_an_idle_spell,
    respawned_jobs_expire_on_time_after_an_idle_spell,
);

async fn expired_jobs_leave_the_counts_and_redis_within_a_second_after_an_idle_spell(
    kind: sundial_tests::ShardKind,
) {
    let store = sundial_tests::Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // An idle pool: every pump sleeps until its idle check (30 s), having
    // nothing due.
    tokio::time::sleep(Duration::from_secs(2)).await; // the idle spell is the thing under test
    let jobs: Vec<u32> = (0..64).collect();
    let body = serde_json::to_vec(&jobs).expect("json");
    for _ in 0..5 {
        let r = api.put("/api/ns/q/bulk?ttl=1", &body).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let published = std::time::Instant::now();
    assert_eq!(api.get("/api/ns/q/stats").await.json["ready"], 320);
    wait_until_async(
        Duration::from_secs(10),
        "the expired jobs to leave",
        || async { api.get("/api/ns/q/stats").await.json["ready"] == 0 },
    )
    .await;
    // Due at 1 s; gone within a second of it (they stayed up to the idle
    // check's 30 s when a pump was asleep).
    assert!(
        published.elapsed() < Duration::from_secs(2),
        "gone {:?} after the publish",
        published.elapsed()
    );
    assert_eq!(
        store.keys("sd:*:j"),
        Vec::<String>::new(),
        "their records freed"
    );
}

async fn respawned_jobs_expire_on_time_after_an_idle_spell(kind: sundial_tests::ShardKind) {
    let store = sundial_tests::Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    for i in 0..3 {
        api.publish("ns", "q", "tries=1", format!("{i}").as_bytes())
            .await;
    }
    assert_eq!(api.get("/api/ns/q?count=3&ttr_ms=100").await.status, 200);
    wait_until_async(Duration::from_secs(10), "the jobs to die", || async {
        api.get("/api/ns/q/deadletter/size").await.json["size"] == 3
    })
    .await;
    // Nothing due for a day: the pump sleeps until its idle check (30 s).
    tokio::time::sleep(Duration::from_secs(1)).await; // the idle spell is the thing under test
    let r = api.put("/api/ns/q/deadletter?limit=3&ttl=1", b"").await;
    assert_eq!(
        (r.status, &r.json["count"]),
        (200, &serde_json::json!(3)),
        "{r:?}"
    );
    let respawned = std::time::Instant::now();
    wait_until_async(
        Duration::from_secs(10),
        "the respawned jobs to expire",
        || async { api.get("/api/ns/q/stats").await.json["ready"] == 0 },
    )
    .await;
    assert!(
        respawned.elapsed() < Duration::from_secs(2),
        "gone {:?} after the respawn",
        respawned.elapsed()
    );
}

/// Publishes 8 KiB jobs to `noisy/q` until refused; returns how many were
/// stored and the refusal.
async fn flood(api: Api) -> (u64, sundial_tests::Resp) {
    for stored in 0..20_000 {
        let r = api.put("/api/noisy/q", &BODY).await;
        if r.status != 201 {
            return (stored, r);
        }
    }
    panic!("20,000 jobs of 8 KiB fit in a Redis of 64 MiB");
}

#[tokio::test]
async fn a_namespace_that_fills_a_redis_is_held_to_its_share_and_the_others_still_publish() {
    let redis = RedisServer::start_with(&["--maxmemory", "64mb"]);
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let noisy = Api::new(gw.api(), Some(&create_token(&gw.admin(), "noisy").await));
    let quiet = Api::new(gw.api(), Some(&create_token(&gw.admin(), "quiet").await));
    for _ in 0..10 {
        quiet.publish("quiet", "q", "", b"small").await;
    }
    // Four connections flood: each is refused with a 429 that names the
    // share, never a 503 (the Redis never reaches its maxmemory).
    let floods: Vec<_> = (0..4).map(|_| tokio::spawn(flood(noisy.clone()))).collect();
    let mut stored = 0;
    for f in floods {
        let (n, refused) = f.await.expect("flood");
        stored += n;
        assert_eq!(refused.status, 429, "{refused:?}");
        assert_eq!(refused.json["quota"], "memory_share", "{refused:?}");
        assert!(refused.headers.contains_key("retry-after"), "{refused:?}");
        assert!(
            refused.json["usage"].as_u64() > refused.json["limit"].as_u64(),
            "{refused:?}"
        );
    }
    assert!(stored > 1000, "{stored} stored before the share held");
    assert_eq!(noisy.get("/api/noisy/q/stats").await.json["ready"], stored);
    // The other namespace publishes, singles and bulks.
    for i in 0..200 {
        let r = quiet
            .put("/api/quiet/q", format!("job {i}").as_bytes())
            .await;
        assert_eq!(r.status, 201, "quiet publish {i}: {r:?}");
    }
    assert_eq!(quiet.put("/api/quiet/q/bulk", b"[1,2,3]").await.status, 201);
    // The flood's jobs are consumed and acked at this level; once they are
    // gone, the namespace publishes again.
    let got = noisy.get("/api/noisy/q?count=100&ttr=60").await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(noisy.delete("/api/noisy/q").await.status, 204);
    wait_until_async(
        Duration::from_secs(5),
        "the flood's namespace publishes again",
        || async { noisy.put("/api/noisy/q", &BODY).await.status == 201 },
    )
    .await;
}
