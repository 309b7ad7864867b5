//! `sundial namespace list` and `sundial stats`: every namespace, and
//! every namespace's queues at a glance, from the real binary against a
//! real gateway.

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token};

#[tokio::test]
async fn namespaces_and_their_queues_are_listed_at_a_glance() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    for ns in ["shop", "billing", "idle"] {
        create_token(&gw.admin(), ns).await;
    }
    let shop = Api::new(gw.api(), Some(&create_token(&gw.admin(), "shop").await));
    let billing = Api::new(gw.api(), Some(&create_token(&gw.admin(), "billing").await));
    shop.publish("shop", "emails", "", b"a").await;
    shop.publish("shop", "emails", "", b"b").await;
    shop.publish("shop", "later", "delay=3600", b"c").await;
    billing.publish("billing", "invoices", "", b"d").await;
    assert_eq!(shop.get("/api/shop/later?timeout=0").await.status, 404);

    let r = gw.cli(&["namespace", "list"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "billing\nidle\nshop\n", "{r:?}");

    let r = gw.cli(&["stats"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0][..6],
        ["NAMESPACE", "QUEUE", "READY", "DELAYED", "RESERVED", "DEAD"]
    );
    let row = |ns: &str, q: &str| {
        rows.iter()
            .find(|r| r[0] == ns && r[1] == q)
            .unwrap_or_else(|| panic!("no row {ns} {q}: {rows:?}"))
            .clone()
    };
    assert_eq!(row("shop", "emails")[2..6], ["2", "0", "0", "0"]);
    assert_eq!(row("shop", "later")[2..6], ["0", "1", "0", "0"]);
    assert_eq!(row("billing", "invoices")[2..6], ["1", "0", "0", "0"]);
    assert_eq!(rows.len(), 4, "a header and three queues: {rows:?}");

    // --json: the listing's entries, each with its namespace.
    let r = gw.cli(&["stats", "--json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    let entry = v
        .as_array()
        .expect("array")
        .iter()
        .find(|q| q["queue"] == "invoices")
        .expect("invoices");
    assert_eq!(
        (entry["namespace"].as_str(), entry["ready"].as_u64()),
        (Some("billing"), Some(1))
    );

    // --busy leaves out queues that hold nothing.
    let got = shop.get("/api/shop/emails?count=2&ttr=600").await;
    for job in got.json.as_array().expect("jobs") {
        let id = job["job_id"].as_str().expect("id");
        assert_eq!(
            shop.delete(&format!("/api/shop/emails/job/{id}"))
                .await
                .status,
            204
        );
    }
    let r = gw.cli(&["stats", "--busy"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("emails"), "{r:?}");
    assert!(
        r.stdout.contains("later") && r.stdout.contains("invoices"),
        "{r:?}"
    );

    let r = gw.cli(&["namespace", "list", "--pool", "nope"], &[]);
    assert_eq!(r.code, 3, "an unknown pool is not found: {r:?}");
}
