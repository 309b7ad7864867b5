//! A full listener still lets health probes in: connections that send
//! nothing make room, and connections with a request in flight keep theirs.

use std::time::{Duration, Instant};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token};

/// The count of connections closed on `listener` for `reason`, from
/// `/metrics`.
async fn closed(admin: &Api, listener: &str, reason: &str) -> u64 {
    let text = admin.get("/metrics").await.json;
    let text = text.as_str().unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("sundial_http_connections_closed_total"))
        .filter(|l| {
            l.contains(&format!("listener=\"{listener}\""))
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn probes_get_in_past_connections_that_send_nothing() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    // A head may take a minute: without room made, a probe would wait that
    // long for a slot.
    cfg.extra = "[http]\nmax_connections = 4\nadmin_max_connections = 8\n\
                 header_timeout_ms = 60000\n"
        .to_owned();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // A long poll in flight on the job listener.
    let waiting = {
        let api = api.clone();
        tokio::spawn(async move { api.get("/api/ns/q?timeout=10").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Five times each listener's cap of connections that send nothing.
    let mut silent = Vec::new();
    for port in [gw.admin_port, gw.api_port] {
        for _ in 0..40 {
            silent.push(
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .expect("connect"),
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    let probe = Api::new(gw.admin(), None);
    for path in ["/live", "/ready"] {
        let r = tokio::time::timeout(Duration::from_secs(10), probe.get(path))
            .await
            .expect("a probe answered within 10 s, not the 60 s head timeout");
        assert_eq!(r.status, 200, "{path}");
    }
    // A publish gets in too, and the long poll, which kept its connection,
    // takes its job.
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        api.put("/api/ns/q", b"for the waiting worker"),
    )
    .await
    .expect("a publish answered within 10 s");
    assert_eq!(r.status, 201);
    let got = waiting.await.expect("long poll");
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.json["job_id"], r.json["job_id"]);
    eprintln!(
        "probes and a publish answered in {:?} past 80 silent connections",
        start.elapsed()
    );
    assert!(closed(&probe, "admin", "room").await >= 32);
    assert!(closed(&probe, "api", "room").await >= 36);
    drop(silent);
}

#[tokio::test]
async fn an_answer_still_being_sent_keeps_its_connection() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = "[http]\nadmin_max_connections = 4\n".to_owned();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // An export larger than the sockets' buffers: 200 jobs of 60 KB.
    let body = vec![b'x'; 60_000];
    for _ in 0..200 {
        api.publish("ns", "q", "delay=3600", &body).await;
    }
    let mut export = reqwest::get(format!("{}/namespaces/ns/export", gw.admin()))
        .await
        .expect("export");
    assert_eq!(export.status(), 200);
    let mut got = export.chunk().await.expect("chunk").map_or(0, |c| c.len());
    // The operator reads slowly while others fill the listener.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut silent = Vec::new();
    for _ in 0..6 {
        silent.push(
            tokio::net::TcpStream::connect(("127.0.0.1", gw.admin_port))
                .await
                .expect("connect"),
        );
    }
    let probe = Api::new(gw.admin(), None);
    let r = tokio::time::timeout(Duration::from_secs(10), probe.get("/live"))
        .await
        .expect("the probe got in");
    assert_eq!(r.status, 200);
    while let Some(c) = export.chunk().await.expect("the export goes on") {
        got += c.len();
    }
    assert!(got > 200 * 60_000, "the whole export arrived: {got} bytes");
    drop(silent);
}
