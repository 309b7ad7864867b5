//! A schedule whose job has an idempotency key (`job.dedup`): a fire while
//! the key names a job publishes nothing and is counted a duplicate; the
//! key is the publish API's own (a publish with it answers the fired job,
//! which shows the schedule lives in the key's lane: the pool here has
//! four); once the job is done, the next fire publishes again.

use std::time::Duration;

use serde_json::json;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

#[tokio::test]
async fn a_keyed_schedule_publishes_nothing_while_its_job_is_pending() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nlanes = 4\nshards = [{{ url = \"{}\" }}]\n",
        redis.url()
    ));
    let gw = Sundial::start(&cfg);
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    let spec = json!({"every": 1, "job": {"data": "dGljaw==", "ttl": 60, "dedup": "tick"}});
    let r = api
        .put(
            "/api/ns/q/schedules/pulse",
            &serde_json::to_vec(&spec).expect("json"),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json["job"]["dedup"], "tick");
    assert_eq!(r.json["job"].get("dedup_ttl"), None);
    // The key places the schedule: it cannot change.
    let other = json!({"every": 1, "job": {"data": "dGljaw==", "ttl": 60, "dedup": "tock"}});
    let r = api
        .put(
            "/api/ns/q/schedules/pulse",
            &serde_json::to_vec(&other).expect("json"),
        )
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("job.dedup cannot change")),
        "{r:?}"
    );

    // The first fire publishes; the fires after it find the key taken.
    let size = || async { api.get("/api/ns/q/size").await.json["size"].clone() };
    wait_until_async(Duration::from_secs(10), "a first fire", || async {
        size().await == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await; // fires that must publish nothing
    assert_eq!(size().await, 1, "one job while the key names it");
    let first = api.get("/api/ns/q?ttr=30").await;
    assert_eq!(first.status, 200, "{first:?}");
    let id = first.json["job_id"].as_str().expect("id").to_owned();
    assert_eq!(first.json["attributes"]["schedule"], "pulse");

    // A publish with the key answers the fired job: the key's index is
    // the one in the key's lane, where the schedule lives (the name
    // `pulse` alone would place it in lane 1 of 4, slot 4; the key `tick`
    // is in lane 0, slot 2).
    let again = api.put("/api/ns/q?dedup=tick", b"by hand").await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(
        again.json,
        json!({"msg": "published", "job_id": id, "duplicate": true})
    );
    let metrics = Api::new(gw.admin(), None).get("/metrics").await;
    let text = metrics.json.as_str().expect("text").to_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("sundial_schedule_fires_total")
                && l.contains("outcome=\"duplicate\"")),
        "{text}"
    );

    // Done: the key is free, and the next fire publishes a new job.
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    wait_until_async(Duration::from_secs(5), "a fire after the ack", || async {
        size().await == 1
    })
    .await;
    let next = api.get("/api/ns/q?ttr=30").await;
    assert_eq!(next.status, 200, "{next:?}");
    assert_ne!(next.json["job_id"].as_str(), Some(id.as_str()));
    let at = |r: &sundial_tests::Resp| -> u64 {
        r.json["attributes"]["scheduled-at"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("a fire time")
    };
    assert!(at(&next) > at(&first));
}

#[tokio::test]
async fn a_bad_key_or_window_is_refused_and_nothing_is_stored() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    let cases = [
        (json!({"dedup": ""}), "invalid dedup: empty"),
        (
            json!({"dedup_ttl": 60}),
            "invalid dedup_ttl: 1 to 2592000 seconds, with a dedup",
        ),
        (
            json!({"dedup": "k", "dedup_ttl": 0}),
            "invalid dedup_ttl: 1 to 2592000 seconds, with a dedup",
        ),
    ];
    for (extra, why) in cases {
        let mut job = json!({"data": "dGljaw=="});
        for (k, v) in extra.as_object().expect("fields") {
            job[k] = v.clone();
        }
        let spec = json!({"every": 1, "job": job});
        let r = api
            .put(
                "/api/ns/q/schedules/bad",
                &serde_json::to_vec(&spec).expect("json"),
            )
            .await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(why)),
            "{r:?}"
        );
    }
    assert_eq!(api.get("/api/ns/q/schedules/bad").await.status, 404);
}
