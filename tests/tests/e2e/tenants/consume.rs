//! A consume that names many queues: at most a documented number, each
//! once, and Redis work per pass that does not grow with the empty ones.

use sundial_tests::{Api, ShardKind, Store, Sundial, SundialConfig, create_token};

on_every_shard_kind!(
    a_consume_names_at_most_64_queues_each_once,
    a_pass_calls_scripts_only_for_queues_with_jobs,
);

/// Names `q0`…`q{n-1}`, in order.
fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("q{i}")).collect()
}

async fn a_consume_names_at_most_64_queues_each_once(kind: ShardKind) {
    let store = Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.publish("ns", "q63", "", b"last").await;

    let over = names(65).join(",");
    let r = api.get(&format!("/api/ns/{over}")).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("too many queues: a consume names at most 64")),
        "{r:?}"
    );
    assert_eq!(
        api.get("/api/ns/q63/stats").await.json["ready"],
        1,
        "nothing taken"
    );

    // 64 names, each given three times: 64 queues.
    let mut thrice = names(64);
    thrice.extend(names(64));
    thrice.extend(names(64));
    let r = api.get(&format!("/api/ns/{}", thrice.join(","))).await;
    assert_eq!((r.status, &r.json["job_id"]), (200, &id.into()), "{r:?}");
    assert_eq!(r.json["queue"], "q63");
}

async fn a_pass_calls_scripts_only_for_queues_with_jobs(kind: ShardKind) {
    let store = Store::start(kind);
    let mut cfg = SundialConfig::new(store.url());
    cfg.pump = false; // only the requests below run scripts
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q40", "", b"one").await;
    api.publish("ns", "q50", "", b"two").await;
    let all = names(64).join(",");

    let (scripts, counts) = (store.calls_of("evalsha"), store.calls_of("hget"));
    let r = api.get(&format!("/api/ns/{all}?count=5")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let got: Vec<&str> = r
        .json
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["queue"].as_str().expect("queue"))
        .collect();
    assert_eq!(got, ["q40", "q50"], "in the order the queues were named");
    // One ready count per queue, one script call per queue with jobs: not
    // one per named queue, as before (64).
    assert_eq!(store.calls_of("evalsha") - scripts, 2);
    assert!(store.calls_of("hget") - counts >= 64);

    let (scripts, counts) = (store.calls_of("evalsha"), store.calls_of("hget"));
    assert_eq!(api.get(&format!("/api/ns/{all}")).await.status, 404);
    assert_eq!(
        store.calls_of("evalsha") - scripts,
        0,
        "no script for empty queues"
    );
    let hgets = store.calls_of("hget") - counts;
    assert!(
        (64..70).contains(&hgets),
        "{hgets} HGETs for 64 empty queues"
    );
}
