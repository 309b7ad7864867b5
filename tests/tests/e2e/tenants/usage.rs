//! Usage per namespace, for billing and alerts: the admin API, the CLI and
//! Prometheus say what a namespace holds (jobs, bytes, queues) and did
//! (published, consumed, acked, refused), and nothing of another's.

use std::time::Duration;

use serde_json::json;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// A sample of `/metrics` for namespace `ns`: the sum of `name` over series.
async fn metric(gw: &Sundial, name: &str, ns: &str) -> f64 {
    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    let prefix = format!("{name}{{");
    text.as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|rest| rest.contains(&format!("namespace=\"{ns}\"")))
        .filter_map(|rest| rest.rsplit_once("} ")?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_namespaces_usage_counts_what_it_holds_and_did_and_nothing_of_anothers() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pump_extra = "metrics_interval_ms = 200".into();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let other = create_token(&gw.admin(), "other").await;
    let (api, admin) = (Api::new(gw.api(), Some(&token)), Api::new(gw.admin(), None));
    // 5 jobs of 10-byte bodies in two queues, one consumed and acked, one
    // consumed and left reserved; a refused publish; another namespace's job.
    for q in ["a", "a", "a", "b", "b"] {
        assert_eq!(
            api.put(&format!("/api/ns/{q}"), b"0123456789").await.status,
            201
        );
    }
    for ack in [true, false] {
        let got = api.get("/api/ns/a?ttr=60").await;
        assert_eq!(got.status, 200, "{got:?}");
        if ack {
            let id = got.json["job_id"].as_str().expect("id");
            assert_eq!(api.delete(&format!("/api/ns/a/job/{id}")).await.status, 204);
        }
    }
    let r = admin
        .put(
            "/namespaces/ns/quota",
            br#"{"max_body": 5, "max_jobs": 100}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(api.put("/api/ns/a", b"0123456789").await.status, 413);
    let api_other = Api::new(gw.api(), Some(&other));
    assert_eq!(api_other.put("/api/other/q", b"x").await.status, 201);

    // Four jobs held: each its id (26 bytes here), record header (26) and
    // body; the one still reserved was delivered, so its record is
    // extended by 7 bytes (its delivery count and empty policy and reason).
    let want_bytes = 4 * (26 + 26 + 10) + 7;
    let one = |u: &serde_json::Value| {
        (
            u["jobs"].clone(),
            u["bytes"].clone(),
            u["queues"].clone(),
            u["published"].clone(),
            u["consumed"].clone(),
            u["acked"].clone(),
        )
    };
    let want = (
        json!(4),
        json!(want_bytes),
        json!(2),
        json!(5),
        json!(2),
        json!(1),
    );
    wait_until_async(Duration::from_secs(5), "the refusal counted", || async {
        admin.get("/namespaces/ns/usage").await.json["refused"]["max_body"] == 1
    })
    .await;
    let u = admin.get("/namespaces/ns/usage").await;
    assert_eq!(u.status, 200, "{u:?}");
    assert_eq!(one(&u.json), want, "{u:?}");
    assert_eq!(
        u.json["limits"],
        json!({"max_jobs": 100, "max_bytes": null, "max_queues": null})
    );
    let all = admin.get("/usage").await;
    let lines = all.json["namespaces"].as_array().expect("lines").clone();
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["namespace"].as_str())
        .collect();
    assert_eq!(names, ["ns", "other"], "{all:?}");
    assert_eq!(one(&lines[0]), want);
    assert_eq!(
        (&lines[1]["jobs"], &lines[1]["published"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(admin.get("/namespaces/bad!/usage").await.status, 400);
    assert_eq!(admin.get("/usage?pool=nope").await.status, 404);

    // The CLI's table: used/bound where a quota sets a bound.
    let r = gw.cli(&["usage"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("ns "))
        .expect("a row");
    let want_row = [
        "ns",
        "4/100",
        &want_bytes.to_string(),
        "2",
        "5",
        "2",
        "1",
        "1",
    ];
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        want_row,
        "{}",
        r.stdout
    );
    let r = gw.cli(&["usage", "other", "--json"], &[]);
    assert_eq!(r.json()["jobs"], 1, "{r:?}");

    // Prometheus: the pumps' gauges.
    wait_until_async(Duration::from_secs(5), "the usage gauges", || async {
        metric(&gw, "sundial_namespace_jobs", "ns").await == 4.0
            && metric(&gw, "sundial_namespace_bytes", "ns").await == f64::from(want_bytes)
    })
    .await;
    assert_eq!(metric(&gw, "sundial_namespace_jobs", "other").await, 1.0);
}
