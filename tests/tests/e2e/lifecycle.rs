//! A worker's hold on a job, end to end: delivery numbers, fenced acks,
//! touches, releases.

use sundial_tests::{Api, ShardKind, started_on};

on_every_shard_kind!(
    a_stale_ack_is_refused_and_the_job_stays_with_its_new_holder,
    a_touch_keeps_a_job_from_redelivery_past_its_first_ttr,
    a_released_job_comes_back_after_its_delay_and_dies_on_its_last_try,
);

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

async fn a_touch_keeps_a_job_from_redelivery_past_its_first_ttr(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    let id = api.publish("ns", "q", "tries=3", b"long job").await;
    let touch = |q: &str| format!("/api/ns/q/job/{id}/touch?{q}");
    let r = api.post(&touch("ttr=5")).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("job is not reserved"))
    );
    let got = api.get("/api/ns/q?ttr_ms=600").await;
    assert_eq!(got.json["delivery"], 1);

    // Bad input: 400, and the reservation is untouched.
    for (q, msg) in [
        ("ttr=43201", "ttr over limits.max_ttr (43200 s)"),
        ("ttr=0", "invalid ttr"),
        ("ttr=-1", "invalid ttr"),
        ("ttr_ms=x", "invalid ttr_ms"),
        ("delivery=0", "invalid delivery"),
    ] {
        let r = api.post(&touch(q)).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(msg)),
            "{q}"
        );
    }
    let r = api.post(&touch("ttr=5&delivery=2")).await;
    assert_eq!(r.status, 409, "another delivery's touch: {r:?}");

    // The holder asks for 5 s more: past the first TTR, nobody gets it.
    let r = api.post(&touch("ttr=5&delivery=1")).await;
    assert_eq!(
        (r.status, &r.json["msg"]),
        (200, &"touched".into()),
        "{r:?}"
    );
    let left = r.json["ttr_ms"].as_u64().expect("ttr_ms");
    assert!((4_000..=5_000).contains(&left), "{left}");
    let none = api.get("/api/ns/q?timeout=2").await;
    assert_eq!(none.status, 404, "held past its first TTR: {none:?}");
    let ack = api.delete(&format!("/api/ns/q/job/{id}?delivery=1")).await;
    assert_eq!(ack.status, 204);
    let r = api.post(&touch("ttr=5")).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("job not found"))
    );
}

async fn a_released_job_comes_back_after_its_delay_and_dies_on_its_last_try(kind: ShardKind) {
    let (_store, gw, _token, api) = started_on(kind, "ns").await;
    let id = api.publish("ns", "q", "tries=2", b"flaky").await;
    let release = |q: &str| format!("/api/ns/q/job/{id}/release?{q}");
    let got = api.get("/api/ns/q?ttr=30").await;
    assert_eq!(got.json["delivery"], 1);

    // Bad input: 400, and the job stays reserved as it was.
    let long = "x".repeat(1025);
    for (q, msg) in [
        ("delay=-1".to_owned(), "invalid delay"),
        ("delay_ms=x".to_owned(), "invalid delay_ms"),
        (
            "spend_try=maybe".to_owned(),
            "invalid spend_try: true or false",
        ),
        (
            format!("reason={long}"),
            "reason too long: at most 1024 bytes",
        ),
        ("delivery=0".to_owned(), "invalid delivery"),
    ] {
        let r = api.post(&release(&q)).await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(msg)),
            "{q}"
        );
    }
    let held = api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(
        (&held.json["remain_tries"], &held.json["reason"]),
        (&1.into(), &serde_json::Value::Null)
    );

    // Delivery 1 fails and asks for 1 s: delayed, then back with the reason.
    let r = api
        .post(&release("delay=1&reason=db%20down&delivery=1"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (&r.json["state"], &r.json["delay_ms"]),
        (&"delayed".into(), &1000.into())
    );
    let early = api.get("/api/ns/q").await;
    assert_eq!(early.status, 404, "not before its delay");
    let again = api.get("/api/ns/q?ttr=30&timeout=5").await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(
        (
            &again.json["delivery"],
            &again.json["reason"],
            &again.json["remain_tries"]
        ),
        (&2.into(), &"db down".into(), &0.into())
    );
    let stale = api.post(&release("delivery=1")).await;
    assert_eq!(stale.status, 409, "delivery 1 no longer holds it");

    // The last try fails: the dead letter, with its reason.
    let r = api.post(&release("reason=gave%20up&delivery=2")).await;
    assert_eq!((r.status, &r.json["state"]), (200, &"dead".into()), "{r:?}");
    let dl = api.get("/api/ns/q/deadletter/size").await;
    assert_eq!(dl.json["size"], 1);
    let dead = api.get(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(dead.json["reason"], "gave up");
    let admin = Api::new(gw.admin(), None);
    for listing in ["deadletter", "jobs?state=dead"] {
        let r = admin
            .get(&format!("/namespaces/ns/queues/q/{listing}"))
            .await;
        let j = &r.json["jobs"][0];
        assert_eq!(
            (&j["job_id"], &j["delivery"], &j["reason"]),
            (&id.as_str().into(), &2.into(), &"gave up".into()),
            "{listing}: {r:?}"
        );
    }
    let r = api.post(&release("")).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("job is not reserved"))
    );
}
