//! A worker's hold on a job, end to end: delivery numbers and fenced acks.

use sundial_tests::{Api, ShardKind, started_on};

on_every_shard_kind!(a_stale_ack_is_refused_and_the_job_stays_with_its_new_holder);

async fn a_stale_ack_is_refused_and_the_job_stays_with_its_new_holder(kind: ShardKind) {
    let (_store, mut gw, token, api) = started_on(kind, "ns").await;
    let id = api.publish("ns", "q", "tries=2", b"job").await;
    let first = api.get("/api/ns/q?ttr_ms=300").await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json["delivery"], 1);
    assert_eq!(first.headers["x-sundial-delivery"], "1");
    assert_eq!(first.json["reason"], serde_json::Value::Null);

    // The first worker stalls past its TTR; the gateway is killed and
    // restarted meanwhile; another worker gets the job.
    gw.restart();
    let api = Api::new(gw.api(), Some(&token));
    let second = api.get("/api/ns/q?ttr=30&timeout=10").await;
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.json["job_id"], id.as_str());
    assert_eq!(second.json["delivery"], 2);
    assert_eq!(second.headers["x-sundial-delivery"], "2");

    // The first worker's ack comes late: refused, and nothing changes.
    let stale = api.delete(&format!("/api/ns/q/job/{id}?delivery=1")).await;
    assert_eq!(stale.status, 409, "{stale:?}");
    let msg = stale.json["error"].as_str().expect("error");
    assert!(
        msg.starts_with("job is not reserved by delivery 1"),
        "{msg}"
    );
    let held = api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!((held.status, &held.json["delivery"]), (200, &2.into()));
    assert_eq!(api.get("/api/ns/q").await.status, 404, "still reserved");

    // Bad fences: 400, nothing changed.
    for bad in ["0", "-1", "x", ""] {
        let r = api
            .delete(&format!("/api/ns/q/job/{id}?delivery={bad}"))
            .await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert_eq!(r.json["error"], "invalid delivery");
    }

    // The holder's ack deletes it; a second fenced ack finds nothing.
    let ack = api.delete(&format!("/api/ns/q/job/{id}?delivery=2")).await;
    assert_eq!(ack.status, 204, "{ack:?}");
    let again = api.delete(&format!("/api/ns/q/job/{id}?delivery=2")).await;
    assert_eq!(
        (again.status, again.json["error"].as_str()),
        (404, Some("job not found"))
    );
    let plain = api.delete(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(plain.status, 204, "an unfenced ack stays lmstfy's");
}
