//! Idempotency keys through a drain: a key names its job at the shard
//! its slot moved to, as it did before.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, wait_until_async};

use super::common::{draining, jobs_on, on_a, pool, reload};

#[tokio::test]
async fn keys_name_their_jobs_after_their_slots_move() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    // Keys over the queue's 8 lanes: jobs that wait an hour, and ready
    // jobs nobody consumes.
    let mut keyed = Vec::new();
    for i in 0..40 {
        let key = format!("order-{i}");
        let query = if i % 2 == 0 {
            "delay=3600&ttl=7200"
        } else {
            "ttl=7200"
        };
        let id = api
            .publish("ns", "q", &format!("dedup={key}&{query}"), b"x")
            .await;
        keyed.push((key, id));
    }
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(60), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    assert!(jobs_on(&b) > 0, "some slots moved to b");
    for (key, id) in &keyed {
        let r = api.put(&format!("/api/ns/q?dedup={key}"), b"again").await;
        assert_eq!(r.status, 201, "{r:?}");
        assert_eq!(
            (r.json["job_id"].as_str(), r.json["duplicate"].as_bool()),
            (Some(id.as_str()), Some(true)),
            "{key}: {r:?}"
        );
    }
    let size = api.get("/api/ns/q/size").await;
    assert_eq!(size.json["size"], 20, "{size:?}");
}
