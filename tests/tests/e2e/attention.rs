//! `GET /attention`: every namespace's queues that need a look (dead jobs,
//! or a ready job that has waited long), dead first, and none that do not.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

#[tokio::test]
async fn queues_with_dead_or_waiting_jobs_are_listed_across_namespaces() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nlanes = 2\nshards = [{{ url = \"{}\" }}]\n",
        redis.url()
    ));
    let gw = Sundial::start(&cfg);
    let a = Api::new(gw.api(), Some(&create_token(&gw.admin(), "a").await));
    let b = Api::new(gw.api(), Some(&create_token(&gw.admin(), "b").await));
    let admin = Api::new(gw.admin(), None);
    for i in 0..2 {
        a.publish("a", "failing", "tries=1", format!("{i}").as_bytes())
            .await;
        assert_eq!(a.get("/api/a/failing?ttr=1").await.status, 200);
    }
    b.publish("b", "waiting", "", b"old").await;
    b.publish("b", "later", "delay=3600", b"not yet").await;
    wait_until_async(Duration::from_secs(10), "two dead jobs", || async {
        a.get("/api/a/failing/deadletter/size").await.json["size"] == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // the wait is the thing under test
    b.publish("b", "fresh", "", b"new").await;

    let r = admin.get("/attention?min_age_s=1").await;
    assert_eq!(r.status, 200, "{r:?}");
    let listed: Vec<(String, String)> = r.json["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| {
            (
                q["namespace"].as_str().unwrap_or_default().to_owned(),
                q["queue"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("a".to_owned(), "failing".to_owned()),
            ("b".to_owned(), "waiting".to_owned())
        ],
        "dead first, then the wait; not the fresh or the delayed queue: {r:?}"
    );
    let waiting = &r.json["queues"][1];
    assert_eq!(
        (waiting["ready"].as_u64(), waiting["dead"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(waiting["oldest_ready_s"].as_u64() >= Some(1), "{waiting}");
    assert_eq!(r.json["queues"][0]["dead"], 2);
    // With the default minute, the waiting queue is not yet in need.
    let r = admin.get("/attention").await;
    assert_eq!(r.json["queues"].as_array().map(Vec::len), Some(1), "{r:?}");
    // The largest wait asked for lists only dead jobs, and does not overflow.
    let r = admin
        .get(&format!("/attention?min_age_s={}", u64::MAX))
        .await;
    assert_eq!(
        (r.status, r.json["queues"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{r:?}"
    );
    for (path, status) in [
        ("/attention?pool=nope", 404),
        ("/attention?min_age_s=x", 400),
    ] {
        let r = admin.get(path).await;
        assert_eq!(r.status, status, "{path}: {r:?}");
    }
}
