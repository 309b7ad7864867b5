//! Bounded metrics: a queue's series go once nothing updated them for
//! `metrics.idle_series_secs`, and come back, from 0, with its next event;
//! series of queues that still hold jobs stay.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// The queues that have a series of `name` in `/metrics`.
async fn queues_with(gw: &Sundial, name: &str) -> Vec<String> {
    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    let prefix = format!("{name}{{");
    let mut out: Vec<String> = text
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let q = rest.split("queue=\"").nth(1)?;
            Some(q.split('"').next()?.to_owned())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn a_queues_series_go_once_idle_and_come_back_with_its_next_event() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = "[metrics]\nidle_series_secs = 2\n".into();
    cfg.pump_extra = "metrics_interval_ms = 200".into();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // 20 queues published to and emptied; one that keeps a job.
    for i in 0..20 {
        let q = format!("user{i:02}");
        api.publish("ns", &q, "", b"x").await;
        let got = api.get(&format!("/api/ns/{q}")).await;
        let id = got.json["job_id"].as_str().expect("id").to_owned();
        assert_eq!(
            api.delete(&format!("/api/ns/{q}/job/{id}")).await.status,
            204
        );
    }
    api.publish("ns", "kept", "", b"x").await;
    let published = queues_with(&gw, "sundial_jobs_published_total").await;
    assert_eq!(published.len(), 21, "{published:?}");
    assert_eq!(queues_with(&gw, "sundial_jobs_acked_total").await.len(), 20);
    // Idle for 2 s: the series go, but the backlog of a queue that holds a
    // job stays (the pumps set it at every refresh).
    wait_until_async(Duration::from_secs(10), "the idle series to go", || async {
        queues_with(&gw, "sundial_jobs_published_total")
            .await
            .is_empty()
            // (A backlog gauge set to 0 goes 2 s after the refresh that set it.)
            && queues_with(&gw, "sundial_queue_jobs").await == ["kept"]
    })
    .await;
    assert!(
        queues_with(&gw, "sundial_jobs_acked_total")
            .await
            .is_empty()
    );
    assert!(
        queues_with(&gw, "sundial_job_first_delivery_seconds_count")
            .await
            .is_empty()
    );
    assert_eq!(queues_with(&gw, "sundial_queue_jobs").await, ["kept"]);
    // A queue's next event brings its series back, counting from 0.
    api.publish("ns", "user03", "", b"x").await;
    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    let line = text
        .as_str()
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("sundial_jobs_published_total{") && l.contains("user03"))
        .expect("the series is back")
        .to_owned();
    assert!(line.ends_with(" 1"), "{line}");
}
