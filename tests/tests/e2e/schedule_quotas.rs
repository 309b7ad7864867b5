//! A schedule's fires are held to its namespace's quotas as publishes are:
//! fires due together take what room is left, and while the namespace
//! holds its `max_jobs`, or more than its share of a shard near its
//! `maxmemory`, a fire publishes nothing and counts as refused; once
//! consumers make room, the next fires publish again; and another
//! namespace's schedules fire all along.

use std::time::Duration;

use serde_json::json;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// Makes an every-second schedule `name` on `ns/queue`, on the second
/// (cron), so that a queue's schedules are due together.
async fn every_second(api: &Api, ns: &str, queue: &str, name: &str) {
    let spec = json!({"cron": "* * * * * *", "job": {"data": "dGljaw==", "ttl": 600}});
    let path = format!("/api/{ns}/{queue}/schedules/{name}");
    let r = api.put(&path, spec.to_string().as_bytes()).await;
    assert_eq!(r.status, 201, "{r:?}");
}

async fn ready(api: &Api, ns: &str, queue: &str) -> u64 {
    let stats = api.get(&format!("/api/{ns}/{queue}/stats")).await;
    stats.json["ready"].as_u64().unwrap_or(0)
}

/// The refused fires `sundial_schedule_fires_total` counts for `ns`.
async fn refused(gw: &Sundial, ns: &str) -> u64 {
    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    let needle = format!("namespace=\"{ns}\"");
    text.as_str()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("sundial_schedule_fires_total") && l.contains(&needle))
        .filter(|l| l.contains("outcome=\"refused\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test]
async fn fires_fill_the_backlog_quota_and_start_again_once_jobs_leave() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    let other = Api::new(gw.api(), Some(&create_token(&gw.admin(), "other").await));
    let admin = Api::new(gw.admin(), None);
    let r = admin
        .put(
            "/namespaces/ns/quota",
            json!({"max_jobs": 5}).to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        api.put("/api/ns/held?delay=600", b"by hand").await.status,
        201
    );
    // Three schedules of one queue, in one slot: they fire together.
    for name in ["a", "b", "c"] {
        every_second(&api, "ns", "s", name).await;
    }
    every_second(&other, "other", "s", "tick").await;

    // Three fires, then one of the next three fills the bound (the room
    // left takes what fits); the fires after them are refused.
    wait_until_async(Duration::from_secs(10), "four fires", || async {
        ready(&api, "ns", "s").await == 4
    })
    .await;
    wait_until_async(Duration::from_secs(10), "a refused fire", || async {
        refused(&gw, "ns").await > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(ready(&api, "ns", "s").await, 4, "held to max_jobs 5");
    let r = api.put("/api/ns/s", b"by hand").await;
    assert_eq!(
        (r.status, &r.json["quota"]),
        (429, &json!("max_jobs")),
        "{r:?}"
    );
    // The other namespace's schedule fired all along.
    assert!(ready(&other, "other", "s").await >= 3);
    assert_eq!(refused(&gw, "other").await, 0);

    // A consumer makes room: the next fires publish again.
    let got = api.get("/api/ns/s?count=2&ttr=60").await;
    assert_eq!(got.status, 200, "{got:?}");
    for job in got.json.as_array().expect("two jobs") {
        let id = job["job_id"].as_str().expect("id");
        let r = api.delete(&format!("/api/ns/s/job/{id}")).await;
        assert_eq!(r.status, 204, "{r:?}");
    }
    wait_until_async(Duration::from_secs(10), "fires again", || async {
        ready(&api, "ns", "s").await == 4
    })
    .await;
}

/// 8 KiB bodies, to fill a Redis of 64 MiB fast.
const BODY: [u8; 8192] = [b'x'; 8192];

#[tokio::test]
async fn fires_of_a_namespace_over_its_share_of_a_full_redis_are_refused() {
    let redis = RedisServer::start_with(&["--maxmemory", "64mb"]);
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let noisy = Api::new(gw.api(), Some(&create_token(&gw.admin(), "noisy").await));
    let quiet = Api::new(gw.api(), Some(&create_token(&gw.admin(), "quiet").await));
    quiet.publish("quiet", "q", "", b"small").await;
    let mut stored = 0u64;
    loop {
        let r = noisy.put("/api/noisy/q", &BODY).await;
        if r.status != 201 {
            assert_eq!(r.json["quota"], "memory_share", "{r:?}");
            break;
        }
        stored += 1;
        assert!(stored < 20_000, "20,000 jobs of 8 KiB fit in 64 MiB");
    }
    every_second(&noisy, "noisy", "s", "tick").await;
    every_second(&quiet, "quiet", "s", "tick").await;
    wait_until_async(Duration::from_secs(10), "refused fires", || async {
        refused(&gw, "noisy").await >= 2
    })
    .await;
    assert_eq!(
        ready(&noisy, "noisy", "s").await,
        0,
        "no fire over the share"
    );
    assert!(ready(&quiet, "quiet", "s").await >= 1, "the other fires");

    // Its flood consumed and gone, the namespace's fires publish again.
    assert_eq!(noisy.delete("/api/noisy/q").await.status, 204);
    wait_until_async(Duration::from_secs(10), "fires again", || async {
        ready(&noisy, "noisy", "s").await >= 1
    })
    .await;
}
