//! Retiring a pool: once every namespace whose tokens name it has moved
//! out, a config without it is taken (the tokens kept, served from where
//! their namespaces went); before that, it is refused.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, wait_until_async};

use super::common::{pool, two_pools};

#[tokio::test]
async fn a_pool_every_namespace_moved_out_of_can_be_dropped_with_its_tokens_kept() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = two_pools(&a, &b);
    let mut gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    let r = admin.post("/token/ns?description=on+b&pool=b").await;
    assert_eq!(r.status, 201, "{r:?}");
    let token = r.json["token"].as_str().expect("token").to_owned();
    let api = Api::new(gw.api(), Some(&token));
    let id = api.publish("ns", "q", "", b"kept").await;

    // While tokens need pool b, a config without it is refused.
    let without_b = {
        let mut c = cfg.clone();
        c.pools = Some(pool(&[("a", &a, 1)]));
        c
    };
    gw.rewrite(&without_b);
    let r = admin.post("/reload").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("tokens need pools that the config does not list: b")),
        "{r:?}"
    );

    // Moved to default, the namespace needs b no more.
    gw.rewrite(&cfg);
    assert_eq!(admin.post("/reload").await.status, 200);
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/ns/move?pool=b",
            Some(b"{\"to\":\"default\"}".to_vec()),
            &[],
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    wait_until_async(Duration::from_secs(60), "the move to end", || async {
        admin.get("/namespaces/ns/move?pool=b").await.json["state"] == "moved"
    })
    .await;
    cfg = without_b;
    gw.rewrite(&cfg);
    let r = admin.post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        admin.get("/pools").await.json,
        serde_json::json!(["default"])
    );
    // The token of pool b still works: its namespace lives in default.
    let r = api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    api.publish("ns", "q", "", b"after").await;
    let r = api.get("/api/ns/q?count=2&ttr=60").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(2), "{r:?}");
}
