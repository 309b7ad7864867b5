//! Per-job priority end to end: the highest goes first, each level in
//! order; delayed and retried jobs keep theirs; a bulk takes one; bad
//! values store nothing; a job without one answers as lmstfy's do.

use std::time::Duration;

use serde_json::Value;
use sundial_tests::{Api, ShardKind, started_on};

on_every_shard_kind!(
    jobs_go_by_priority_then_in_order,
    delayed_and_retried_jobs_keep_their_priority,
);

/// Publishes `body` to `q` with `query`; the job's id.
async fn put(api: &Api, q: &str, query: &str, body: &str) -> String {
    let r = api
        .put(&format!("/api/ns/{q}?{query}"), body.as_bytes())
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json["job_id"].as_str().expect("id").to_owned()
}

/// Up to 10 ready jobs of `q`, with a TTR of `ttr` seconds.
async fn take(api: &Api, q: &str, ttr: u32) -> Vec<Value> {
    let r = api
        .get(&format!("/api/ns/{q}?count=10&ttr={ttr}&timeout=0"))
        .await;
    match r.json {
        Value::Array(jobs) => jobs,
        Value::Object(_) => vec![r.json],
        _ => Vec::new(),
    }
}

/// The bodies (base64-decoded as text) of `jobs`.
fn bodies(jobs: &[Value]) -> Vec<String> {
    use base64::Engine as _;
    jobs.iter()
        .map(|j| {
            let b = base64::engine::general_purpose::STANDARD
                .decode(j["data"].as_str().expect("data"))
                .expect("base64");
            String::from_utf8(b).expect("text")
        })
        .collect()
}

async fn jobs_go_by_priority_then_in_order(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    put(&api, "q", "", "a").await;
    put(&api, "q", "priority=9", "b").await;
    put(&api, "q", "priority=0", "c").await;
    put(&api, "q", "priority=255", "d").await;
    put(&api, "q", "priority=9", "e").await;
    let r = api
        .put("/api/ns/q/bulk?priority=200", br#"["f", "g"]"#)
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    // Bad values: 400, nothing stored.
    for bad in ["256", "-1", "high", ""] {
        let r = api.put(&format!("/api/ns/q?priority={bad}"), b"x").await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert_eq!(r.json["error"], "invalid priority", "{bad}");
    }
    let peek = api.get("/api/ns/q/peek").await;
    assert_eq!(peek.json["priority"], 255, "{peek:?}");
    let got = take(&api, "q", 60).await;
    assert_eq!(
        bodies(&got),
        ["d", "\"f\"", "\"g\"", "b", "e", "a", "c"],
        "{got:?}"
    );
    assert_eq!(got[0]["priority"], 255);
    assert_eq!(got[3]["priority"], 9);
    assert_eq!(
        got[5].get("priority"),
        None,
        "a job without one answers as lmstfy's do"
    );
}

async fn delayed_and_retried_jobs_keep_their_priority(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    put(&api, "q", "delay_ms=300&priority=5&tries=3", "late").await;
    put(&api, "q", "", "plain").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    put(&api, "q", "", "newer").await;
    // Due, it goes ahead of the older plain job; its TTR of 1 s runs out.
    let got = take(&api, "q", 1).await;
    assert_eq!(bodies(&got[..1]), ["late"], "{got:?}");
    let late = got[0]["job_id"].as_str().expect("id").to_owned();
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    put(&api, "q", "", "last").await;
    let again = take(&api, "q", 60).await;
    assert_eq!(bodies(&again[..1]), ["late"], "retried first: {again:?}");
    assert_eq!(again[0]["job_id"], late.as_str());
    assert_eq!(
        (again[0]["priority"].as_u64(), again[0]["delivery"].as_u64()),
        (Some(5), Some(2))
    );
}

#[tokio::test]
async fn the_cli_publishes_with_a_priority() {
    let redis = sundial_tests::RedisServer::start();
    let gw = sundial_tests::Sundial::start(&sundial_tests::SundialConfig::new(redis.url()));
    let token = sundial_tests::create_token(&gw.admin(), "ns").await;
    let env = [("SUNDIAL_TOKEN", token.as_str())];
    for (body, extra) in [("low", None), ("high", Some("7"))] {
        let mut args = vec!["publish", "ns", "q", body];
        if let Some(p) = extra {
            args.extend(["--priority", p]);
        }
        let r = gw.cli(&args, &env);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = gw.cli(&["publish", "ns", "q", "x", "--priority", "256"], &env);
    assert_ne!(r.code, 0, "256 is no priority: {r:?}");
    let api = Api::new(gw.api(), Some(&token));
    let got = take(&api, "q", 60).await;
    assert_eq!(bodies(&got), ["high", "low"], "{got:?}");
}
