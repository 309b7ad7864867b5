//! Idempotent publish end to end: a key given as `Idempotency-Key` or
//! `dedup`, each mode of it, bulks with some duplicates, bad keys, and
//! keys that outlive the gateway that stored them.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sundial_tests::{Api, ShardKind, Sundial, SundialConfig, create_token, started_on};

on_every_shard_kind!(
    each_mode_answers_a_later_publish_with_the_first_job,
    a_bulk_with_some_duplicates_stores_the_rest,
    bad_keys_are_refused_and_store_nothing,
);

/// Publishes `body` to `q` with `query` and `headers`; the answer.
async fn put(
    api: &Api,
    q: &str,
    query: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> sundial_tests::Resp {
    api.call(
        Method::PUT,
        &format!("/api/ns/{q}?{query}"),
        Some(body.as_bytes().to_vec()),
        headers,
    )
    .await
}

/// The ready jobs of `q` (at most 10), consumed with a TTR of 60 s.
async fn take(api: &Api, q: &str) -> Vec<Value> {
    let r = api
        .get(&format!("/api/ns/{q}?count=10&ttr=60&timeout=0"))
        .await;
    match r.json {
        Value::Array(jobs) => jobs,
        Value::Object(_) => vec![r.json],
        _ => Vec::new(),
    }
}

fn replayed(r: &sundial_tests::Resp) -> bool {
    r.headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

async fn each_mode_answers_a_later_publish_with_the_first_job(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    // Until done, as a header; then as a parameter.
    let first = put(&api, "q", "", &[("Idempotency-Key", "order-1")], "a").await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(
        first.json.get("duplicate"),
        None,
        "a stored job is not marked"
    );
    assert!(!replayed(&first));
    let id = first.json["job_id"].as_str().expect("id").to_owned();
    let again = put(&api, "q", "dedup=order-1", &[], "b").await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(
        again.json,
        json!({"msg": "published", "job_id": id, "duplicate": true})
    );
    assert!(replayed(&again));
    let got = take(&api, "q").await;
    assert_eq!(got.len(), 1, "one job: {got:?}");
    assert_eq!(got[0]["data"], "YQ==", "the first body");
    // Reserved, still not done; acked, done.
    assert_eq!(
        put(&api, "q", "dedup=order-1", &[], "c").await.json["job_id"],
        id.as_str()
    );
    let r = api.delete(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(r.status, 204, "{r:?}");
    let next = put(&api, "q", "dedup=order-1", &[], "d").await;
    assert_eq!(next.json.get("duplicate"), None, "{next:?}");
    assert_ne!(next.json["job_id"], id.as_str());

    // A window: the key holds after its job is acked, then lets go.
    let w = put(&api, "w", "dedup=w-1&dedup_ttl=1", &[], "a").await;
    let wid = w.json["job_id"].as_str().expect("id").to_owned();
    let r = api.delete(&format!("/api/ns/w/job/{wid}")).await;
    assert_eq!(r.status, 204, "{r:?}");
    let again = put(&api, "w", "dedup=w-1&dedup_ttl=1", &[], "b").await;
    assert_eq!(
        (
            again.json["job_id"].as_str(),
            again.json["duplicate"].as_bool()
        ),
        (Some(wid.as_str()), Some(true))
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = put(&api, "w", "dedup=w-1&dedup_ttl=1", &[], "c").await;
    assert_eq!(
        later.json.get("duplicate"),
        None,
        "the window is over: {later:?}"
    );

    // Debounce: a waiting job takes the later body and delay, and its id.
    let d = put(
        &api,
        "d",
        "dedup=d-1&dedup_mode=debounce&delay=60",
        &[],
        "v1",
    )
    .await;
    let did = d.json["job_id"].as_str().expect("id").to_owned();
    let again = put(
        &api,
        "d",
        "dedup=d-1&dedup_mode=debounce&delay_ms=200",
        &[],
        "v2",
    )
    .await;
    assert_eq!(
        again.json,
        json!({"msg": "published", "job_id": did, "replaced": true})
    );
    assert!(!replayed(&again), "something was stored");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = take(&api, "d").await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0]["job_id"].as_str(), got[0]["data"].as_str()),
        (Some(did.as_str()), Some("djI="))
    );
    let size = api.get("/api/ns/d/size").await;
    assert_eq!(size.json["size"], 0, "{size:?}");
}

async fn a_bulk_with_some_duplicates_stores_the_rest(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    let one = put(&api, "q", "dedup=b", &[], "\"x\"").await;
    let b = one.json["job_id"].as_str().expect("id").to_owned();
    let r = api
        .put(
            "/api/ns/q/bulk?dedup=a&dedup=b&dedup=c&dedup=a",
            br#"[1, 2, 3, 4]"#,
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let ids: Vec<&str> = r.json["job_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(
        (ids[1], ids[3]),
        (b.as_str(), ids[0]),
        "b named the single job; a given twice"
    );
    assert_ne!(ids[0], ids[2]);
    assert_eq!(r.json["duplicates"], json!([1, 3]));
    assert_eq!(r.json["replaced"], json!([]));
    assert!(!replayed(&r), "two were stored");
    let size = api.get("/api/ns/q/size").await;
    assert_eq!(size.json["size"], 3, "{size:?}");
    // The same bulk sent again, keyed by one header: all stored once.
    let h = [("Idempotency-Key", "batch-1")];
    let first = api
        .call(Method::PUT, "/api/ns/h/bulk", Some(b"[1, 2]".to_vec()), &h)
        .await;
    assert_eq!(first.json.get("duplicates"), Some(&json!([])), "{first:?}");
    let again = api
        .call(Method::PUT, "/api/ns/h/bulk", Some(b"[1, 2]".to_vec()), &h)
        .await;
    assert_eq!(again.json["job_ids"], first.json["job_ids"]);
    assert_eq!(again.json["duplicates"], json!([0, 1]));
    assert!(replayed(&again));
    assert_eq!(api.get("/api/ns/h/size").await.json["size"], 2);
    // A bulk without keys answers as lmstfy's does.
    let plain = api.put("/api/ns/p/bulk", b"[1]").await;
    let fields: Vec<&String> = plain.json.as_object().expect("object").keys().collect();
    assert_eq!(fields, ["msg", "job_ids"]);
}

async fn bad_keys_are_refused_and_store_nothing(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    let long = "k".repeat(257);
    type Case<'a> = (String, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        ("dedup=".into(), vec![], "invalid dedup: empty"),
        (
            format!("dedup={long}"),
            vec![],
            "invalid dedup: longer than 256 bytes",
        ),
        ("dedup=%FF".into(), vec![], "invalid dedup: not UTF-8"),
        (
            "dedup=a&dedup=b".into(),
            vec![],
            "dedup given more than once",
        ),
        (
            "dedup=a%01b".into(),
            vec![],
            "invalid dedup: contains a control character",
        ),
        ("dedup=a&dedup_ttl=0".into(), vec![], "invalid dedup_ttl"),
        (
            "dedup=a&dedup_mode=never".into(),
            vec![],
            "invalid dedup_mode: until_done or debounce",
        ),
        (
            "dedup=a&dedup_ttl=9&dedup_mode=debounce".into(),
            vec![],
            "dedup_ttl does not go with debounce",
        ),
        (
            "dedup_ttl=9".into(),
            vec![],
            "dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)",
        ),
        (
            "dedup=a".into(),
            vec![("Idempotency-Key", "b")],
            "Idempotency-Key and dedup differ",
        ),
    ];
    for (query, headers, error) in &cases {
        let r = put(&api, "q", query, headers, "x").await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(*error)),
            "{query}: {r:?}"
        );
    }
    let r = api.put("/api/ns/q/bulk?dedup=a", b"[1, 2]").await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("dedup must be given once per job"))
    );
    let r = api
        .call(
            Method::PUT,
            "/api/ns/q/bulk?dedup=a&dedup=b",
            Some(b"[1, 2]".to_vec()),
            &[("Idempotency-Key", "c")],
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = api
        .put("/api/ns/q/job/01JD3M6Y7ZQ8K5X4W2V1T0S9R8?dedup=a", b"x")
        .await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (400, Some("a republish takes no idempotency key"))
    );
    let size = api.get("/api/ns/q/size").await;
    assert_eq!(size.json["size"], 0, "nothing stored: {size:?}");
}

#[tokio::test]
async fn a_key_outlives_the_gateway_that_stored_it() {
    let redis = sundial_tests::RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let id = Api::new(gw.api(), Some(&token))
        .publish("ns", "q", "dedup=k", b"a")
        .await;
    gw.kill();
    let gw = Sundial::start(&cfg);
    let api = Api::new(gw.api(), Some(&token));
    let r = put(&api, "q", "", &[("Idempotency-Key", "k")], "b").await;
    assert_eq!(
        (r.json["job_id"].as_str(), r.json["duplicate"].as_bool()),
        (Some(id.as_str()), Some(true)),
        "{r:?}"
    );
}

#[tokio::test]
async fn the_cli_publishes_with_a_key() {
    let redis = sundial_tests::RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let env = [("SUNDIAL_TOKEN", token.as_str())];
    let publish = |extra: &[&str]| {
        let mut args = vec![
            "publish", "ns", "q", "hello", "--delay", "60", "--key", "k 1",
        ];
        args.extend_from_slice(extra);
        gw.cli(&args, &env)
    };
    let first = publish(&[]);
    assert_eq!(first.code, 0, "{first:?}");
    let id = first.stdout.trim().to_owned();
    assert_eq!(id.len(), 26, "{first:?}");
    let again = publish(&[]);
    assert_eq!(
        again.stdout.trim(),
        format!("{id} (duplicate: nothing stored)"),
        "{again:?}"
    );
    let replaced = publish(&["--debounce"]);
    assert_eq!(
        replaced.stdout.trim(),
        format!("{id} (replaced the waiting job)"),
        "{replaced:?}"
    );
    let r = gw.cli(&["publish", "ns", "q", "x", "--dedup-ttl", "5"], &env);
    assert_ne!(r.code, 0, "--dedup-ttl needs --key: {r:?}");
}
