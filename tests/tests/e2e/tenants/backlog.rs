//! Backlog quotas (`max_jobs`, `max_bytes`): a namespace that holds its
//! bound gets 429 naming it, with nothing stored, a bulk all or nothing;
//! room freed by consumers shows within seconds; and the bound holds within
//! 1% for 64 publishers on 4 gateways.

use std::time::{Duration, Instant};

use serde_json::json;
use sundial_tests::{Api, RedisServer, ShardKind, Store, Sundial, SundialConfig, create_token};

on_every_shard_kind!(
    a_full_backlog_refuses_whole_publishes_and_takes_more_once_jobs_leave,
    a_new_queue_past_max_queues_is_refused_on_every_gateway_and_used_ones_go_on,
);

/// The namespace's jobs ready in `queue`.
async fn ready(api: &Api, queue: &str) -> u64 {
    api.get(&format!("/api/ns/{queue}/stats")).await.json["ready"]
        .as_u64()
        .unwrap_or(0)
}

async fn set_quota(admin: &Api, ns: &str, quota: serde_json::Value) {
    let r = admin
        .put(
            &format!("/namespaces/{ns}/quota"),
            quota.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}

async fn a_full_backlog_refuses_whole_publishes_and_takes_more_once_jobs_leave(kind: ShardKind) {
    let store = Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let other = create_token(&gw.admin(), "other").await;
    let (api, admin) = (Api::new(gw.api(), Some(&token)), Api::new(gw.admin(), None));
    set_quota(&admin, "ns", json!({"max_jobs": 5})).await;
    for _ in 0..3 {
        assert_eq!(api.put("/api/ns/q?delay=60", b"j").await.status, 201);
    }
    // A bulk of 3 would make 6: refused whole.
    let r = api.put("/api/ns/q/bulk", b"[1,2,3]").await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        (&r.json["quota"], &r.json["limit"], &r.json["usage"]),
        (&json!("max_jobs"), &json!(5), &json!(3)),
        "{r:?}"
    );
    assert!(r.headers.contains_key("retry-after"), "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .unwrap_or_default()
            .contains("max_jobs of 5 jobs"),
        "{r:?}"
    );
    assert_eq!(api.put("/api/ns/q/bulk", b"[1,2]").await.status, 201);
    let r = api.put("/api/ns/q", b"j").await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        ready(&api, "q").await,
        2,
        "only what was admitted is stored"
    );
    // Another namespace is not held to it.
    let api_other = Api::new(gw.api(), Some(&other));
    assert_eq!(
        api_other
            .put("/api/other/q/bulk", b"[1,2,3,4,5,6]")
            .await
            .status,
        201
    );
    // A consumer frees room: a publish is taken again within seconds.
    let got = api.get("/api/ns/q?timeout=1").await;
    assert_eq!(got.status, 200, "{got:?}");
    let id = got.json["job_id"].as_str().expect("id").to_owned();
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    let start = Instant::now();
    loop {
        let r = api.put("/api/ns/q", b"j").await;
        if r.status == 201 {
            break;
        }
        assert_eq!(r.status, 429, "{r:?}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "no room after an ack"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(api.put("/api/ns/q", b"j").await.status, 429);

    // Bytes: every job's id and record, body included.
    set_quota(&admin, "ns", json!({"max_jobs": 0, "max_bytes": 2000})).await;
    let r = api.put("/api/ns/big", &[b'x'; 1900]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        (&r.json["quota"], &r.json["limit"]),
        (&json!("max_bytes"), &json!(2000))
    );
    assert_eq!(ready(&api, "big").await, 0);
    assert_eq!(api.put("/api/ns/big", &[b'x'; 1000]).await.status, 201);
}

#[tokio::test]
async fn a_backlog_bound_holds_within_one_percent_for_64_publishers_on_4_gateways() {
    const MAX: u64 = 1_000;
    let redis = RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let gws: Vec<Sundial> = (0..4).map(|_| Sundial::start(&cfg)).collect();
    let token = create_token(&gws[0].admin(), "ns").await;
    set_quota(
        &Api::new(gws[0].admin(), None),
        "ns",
        json!({"max_jobs": MAX}),
    )
    .await;
    for gw in &gws {
        let admin = Api::new(gw.admin(), None);
        sundial_tests::wait_until_async(
            Duration::from_secs(5),
            "every gateway to hold the quota",
            || async { admin.get("/namespaces/ns/quota").await.json["quota"]["max_jobs"] == MAX },
        )
        .await;
    }
    // Half the publishers send single jobs, half bulks of 8, until each
    // has been refused 20 times.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let api = Api::new(gws[i % 4].api(), Some(&token));
        tasks.push(tokio::spawn(async move {
            let (path, body, jobs): (&str, &[u8], u64) = if i % 2 == 0 {
                ("/api/ns/q", b"x", 1)
            } else {
                ("/api/ns/q/bulk", b"[1,2,3,4,5,6,7,8]", 8)
            };
            let (mut accepted, mut refused) = (0, 0);
            let deadline = Instant::now() + Duration::from_secs(20);
            while refused < 20 && Instant::now() < deadline {
                let r = api.put(path, body).await;
                match r.status {
                    201 => accepted += jobs,
                    429 => {
                        assert_eq!(r.json["quota"], "max_jobs", "{r:?}");
                        refused += 1;
                    }
                    _ => panic!("{r:?}"),
                }
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.expect("publisher");
    }
    let api = Api::new(gws[0].api(), Some(&token));
    let held = ready(&api, "q").await;
    eprintln!("{held} jobs held under a bound of {MAX}");
    assert_eq!(held, accepted, "stored what was accepted, no more");
    assert!(
        held <= MAX + MAX / 100,
        "{held} jobs held under a bound of {MAX}"
    );
    assert!(
        held >= MAX - 8,
        "{held} jobs held: the bound held back more than a bulk"
    );
}

async fn a_new_queue_past_max_queues_is_refused_on_every_gateway_and_used_ones_go_on(
    kind: ShardKind,
) {
    let store = Store::start(kind);
    let cfg = SundialConfig::new(store.url());
    let (one, two) = (Sundial::start(&cfg), Sundial::start(&cfg));
    let token = create_token(&one.admin(), "ns").await;
    set_quota(&Api::new(one.admin(), None), "ns", json!({"max_queues": 3})).await;
    let (api_one, api_two) = (
        Api::new(one.api(), Some(&token)),
        Api::new(two.api(), Some(&token)),
    );
    let admin_two = Api::new(two.admin(), None);
    sundial_tests::wait_until_async(
        Duration::from_secs(5),
        "the quota on the other gateway",
        || async { admin_two.get("/namespaces/ns/quota").await.json["quota"]["max_queues"] == 3 },
    )
    .await;
    for (api, q) in [(&api_one, "q1"), (&api_one, "q2"), (&api_two, "q3")] {
        assert_eq!(
            api.put(&format!("/api/ns/{q}"), b"j").await.status,
            201,
            "{q}"
        );
    }
    for api in [&api_one, &api_two] {
        let r = api.put("/api/ns/q4", b"j").await;
        assert_eq!(r.status, 403, "{r:?}");
        assert_eq!(
            (&r.json["quota"], &r.json["limit"], &r.json["usage"]),
            (&json!("max_queues"), &json!(3), &json!(3)),
            "{r:?}"
        );
        let bulk = api.put("/api/ns/q4/bulk", b"[1]").await;
        assert_eq!(bulk.status, 403, "{bulk:?}");
    }
    assert_eq!(ready(&api_one, "q4").await, 0);
    // Queues in use take publishes on every gateway.
    for q in ["q1", "q2", "q3"] {
        assert_eq!(
            api_two.put(&format!("/api/ns/{q}"), b"j").await.status,
            201,
            "{q}"
        );
        assert_eq!(
            api_one
                .put(&format!("/api/ns/{q}/bulk"), b"[1,2]")
                .await
                .status,
            201,
            "{q}"
        );
    }
}

#[tokio::test]
async fn a_publish_refused_by_another_bound_takes_no_queue() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    set_quota(
        &Api::new(gw.admin(), None),
        "ns",
        json!({"max_queues": 2, "max_jobs": 1}),
    )
    .await;
    assert_eq!(api.put("/api/ns/q1", b"j").await.status, 201);
    // Refused by the backlog: q2 must not count as a queue in use.
    let r = api.put("/api/ns/q2", b"j").await;
    assert_eq!(
        (r.status, &r.json["quota"]),
        (429, &json!("max_jobs")),
        "{r:?}"
    );
    let job = api.get("/api/ns/q1?ttr=30").await;
    let id = job.json["job_id"].as_str().expect("a job").to_owned();
    assert_eq!(
        api.delete(&format!("/api/ns/q1/job/{id}")).await.status,
        204
    );
    // q1 and q3 are two queues: q3 is taken once the backlog has room.
    sundial_tests::wait_until_async(Duration::from_secs(5), "q3 taken", || async {
        let r = api.put("/api/ns/q3", b"j").await;
        assert_ne!(r.json["quota"], "max_queues", "{r:?}");
        r.status == 201
    })
    .await;
}
