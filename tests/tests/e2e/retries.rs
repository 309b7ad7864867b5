//! Retry policies end to end: a queue's policy set through the admin API,
//! a publish's own fields over it, backoff measured from the job's times.

use std::time::Duration;

use serde_json::{Value, json};
use sundial_tests::{Api, ShardKind, started_on, wait_until_async};

on_every_shard_kind!(
    a_queue_policy_delays_retries_and_sets_tries,
    bad_policies_are_refused_and_change_nothing,
);

#[tokio::test]
async fn the_cli_sets_reads_and_clears_a_queue_policy() {
    let (_store, gw, _token, _api) = started_on(ShardKind::Standalone, "ns").await;
    let set = [
        "queue",
        "policy",
        "set",
        "ns",
        "q",
        "--backoff",
        "fixed",
        "--initial-delay-ms",
        "500",
        "--tries",
        "4",
    ];
    let r = gw.cli(&set, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("initial_delay_ms"), "{r:?}");
    let r = gw.cli(&["queue", "--json", "policy", "get", "ns", "q"], &[]);
    assert_eq!(
        r.json()["policy"],
        json!({"backoff": "fixed", "initial_delay_ms": 500, "tries": 4})
    );
    let r = gw.cli(
        &["queue", "policy", "set", "ns", "q", "--backoff", "fixed"],
        &[],
    );
    assert_ne!(r.code, 0, "no initial delay: {r:?}");
    assert!(
        r.stderr.contains("a backoff needs initial_delay_ms"),
        "{r:?}"
    );
    let r = gw.cli(&["queue", "policy", "clear", "ns", "q"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("no retry policy"), "{r:?}");
}

/// The queue's job `id` as the admin listing of `state` shows it.
async fn listed(admin: &Api, state: &str, id: &str) -> Option<Value> {
    let r = admin
        .get(&format!("/namespaces/ns/queues/q/jobs?state={state}"))
        .await;
    r.json["jobs"]
        .as_array()?
        .iter()
        .find(|j| j["job_id"] == id)
        .cloned()
}

async fn a_queue_policy_delays_retries_and_sets_tries(kind: ShardKind) {
    let (_store, gw, _token, api) = started_on(kind, "ns").await;
    let admin = Api::new(gw.admin(), None);
    let policy = json!({"backoff": "exponential", "initial_delay_ms": 800, "multiplier": 2.0,
        "max_delay_ms": 60000, "tries": 3});
    let r = admin
        .put(
            "/namespaces/ns/queues/q/policy",
            policy.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["policy"], policy);
    let got = admin.get("/namespaces/ns/queues/q/policy").await;
    assert_eq!(got.json["policy"], policy);
    // The gateway's copy holds it within a poll.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let id = api.publish("ns", "q", "", b"flaky").await;
    let first = api.get("/api/ns/q?ttr_ms=200").await;
    assert_eq!(
        first.json["remain_tries"], 2,
        "the policy's 3 tries: {first:?}"
    );
    let deadline = listed(&admin, "reserved", &id).await.expect("reserved")["ttr_deadline_ms"]
        .as_u64()
        .expect("deadline");
    // Its TTR runs out: delayed by 800 ms from then, not ready at once.
    wait_until_async(
        Duration::from_secs(5),
        "the job delayed by its backoff",
        || async { listed(&admin, "delayed", &id).await.is_some() },
    )
    .await;
    let delayed = listed(&admin, "delayed", &id).await;
    let delayed = delayed.expect("delayed");
    let due = delayed["due_at_ms"].as_u64().expect("due");
    assert!(
        due >= deadline + 800 && due < deadline + 800 + 500,
        "due {due}, deadline {deadline}"
    );
    assert_eq!(delayed["reason"], "ttr expired");
    let second = api.get("/api/ns/q?ttr=30&timeout=5").await;
    assert_eq!(
        (second.status, &second.json["delivery"]),
        (200, &2.into()),
        "{second:?}"
    );

    // A release without a delay takes the backoff of delivery 2: 1600 ms.
    let r = api
        .post(&format!(
            "/api/ns/q/job/{id}/release?delivery=2&reason=busy"
        ))
        .await;
    assert_eq!(
        (&r.json["state"], &r.json["delay_ms"]),
        (&"delayed".into(), &1600.into()),
        "{r:?}"
    );

    // A publish's own fields over the queue's: fixed 50 ms, 1 try.
    let own = api
        .publish(
            "ns",
            "q",
            "backoff=fixed&initial_delay_ms=50&tries=1",
            b"own",
        )
        .await;
    let j = api.get(&format!("/api/ns/q/job/{own}")).await;
    assert_eq!(j.json["remain_tries"], 1);

    // Cleared: a later publish is lmstfy's again.
    let r = admin.delete("/namespaces/ns/queues/q/policy").await;
    assert_eq!((r.status, &r.json["policy"]), (200, &json!({})));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let plain = api.publish("ns", "plain", "", b"x").await;
    let j = api.get(&format!("/api/ns/plain/job/{plain}")).await;
    assert_eq!(j.json["remain_tries"], 1, "limits.default_tries");
}

async fn bad_policies_are_refused_and_change_nothing(kind: ShardKind) {
    let (_store, gw, _token, api) = started_on(kind, "ns").await;
    let admin = Api::new(gw.admin(), None);
    for (body, msg) in [
        (
            r#"{"backof": "fixed"}"#,
            "invalid policy: unknown field `backof`",
        ),
        (
            r#"{"backoff": "fixed"}"#,
            "invalid policy: a backoff needs initial_delay_ms",
        ),
        (
            r#"{"backoff": "linear", "initial_delay_ms": 1}"#,
            "invalid policy: unknown variant `linear`",
        ),
        (
            r#"{"multiplier": 11}"#,
            "invalid policy: multiplier: 1 to 10",
        ),
        (r#"{"tries": 0}"#, "invalid policy: tries: at least 1"),
        ("not json", "invalid policy: expected ident"),
    ] {
        let r = admin
            .put("/namespaces/ns/queues/q/policy", body.as_bytes())
            .await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        let got = r.json["error"].as_str().expect("error");
        assert!(got.starts_with(msg), "{body}: {got}");
    }
    let r = admin.get("/namespaces/ns/queues/q/policy").await;
    assert_eq!(r.json["policy"], json!({}), "nothing set");
    let r = admin
        .put("/namespaces/ns/queues/bad.name/policy", b"{}")
        .await;
    assert_eq!(r.status, 400);

    // A publish's own fields are checked too: 400, nothing stored.
    for (q, msg) in [
        ("backoff=linear", "invalid backoff: fixed or exponential"),
        (
            "backoff=fixed",
            "invalid policy: a backoff needs initial_delay_ms",
        ),
        ("initial_delay_ms=-1", "invalid initial_delay_ms"),
        ("multiplier=x", "invalid multiplier"),
        ("jitter_percent=300", "invalid jitter_percent"),
        (
            "max_retry_ms=0",
            "invalid policy: max_retry_ms: 1 to 4294967295",
        ),
    ] {
        let r = api.put(&format!("/api/ns/q?{q}"), b"x").await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(msg)),
            "{q}"
        );
    }
    assert_eq!(api.get("/api/ns/q/size").await.json["size"], 0);
}
