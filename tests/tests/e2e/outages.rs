//! Redis outages, and what works after them: Redis killed and restarted
//! from its AOF, stalled behind a fault proxy, partitioned away from one
//! shard of two, restarted empty. Every job id is accounted for.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use sundial_tests::{
    Api, Fault, FaultProxy, RedisServer, Sundial, SundialConfig, create_token, wait_until_async,
};

/// A Redis that keeps every write (AOF, fsync always), as a restart test needs.
fn durable_redis() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
}

/// Consumes (and acks) from `ns/q` until every id of `want` was delivered
/// once; panics, naming `what` and the ids never delivered, if `within`
/// passes first.
async fn all_delivered(api: &Api, q: &str, want: &HashSet<String>, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    let mut seen: HashMap<String, u32> = HashMap::new();
    while !want.iter().all(|id| seen.contains_key(id)) && Instant::now() < deadline {
        take_and_ack(api, q, "timeout=1&count=100&ttr=600", &mut seen).await;
    }
    let missing: Vec<&String> = want.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "{what} never delivered: {missing:?}");
}

/// One consume of `ns/q` with `query` (a batch); counts and acks what it
/// got. Waits a moment after a failure (a 503 while a shard heals).
async fn take_and_ack(api: &Api, q: &str, query: &str, taken: &mut HashMap<String, u32>) {
    let r = api.get(&format!("/api/ns/{q}?{query}")).await;
    if r.status != 200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        return;
    }
    for job in r.json.as_array().cloned().unwrap_or_default() {
        let id = job["job_id"].as_str().unwrap_or_default().to_owned();
        *taken.entry(id.clone()).or_insert(0) += 1;
        api.delete(&format!("/api/ns/{q}/job/{id}")).await;
    }
}

/// Waits until the pumps dropped every job of `ns/q`, which were published
/// with a TTL: its size reaches 0 (nothing consumes them) within `within`.
async fn gone_by_ttl(api: &Api, q: &str, within: Duration) {
    wait_until_async(within, "expired jobs to go", || async {
        api.get(&format!("/api/ns/{q}/size")).await.json["size"] == 0
    })
    .await;
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
/// generous margin for a busy machine; and that ready jobs whose TTL ends
/// during or after the outage (their expiries in the timer wheel) go.
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
    // Ready jobs whose TTL ends during the outage or just after it, more
    // than 2 s ahead: their expiries wait in the timer wheel.
    let ttl_s = (outage_ms / 2 + 2_500).div_ceil(1_000);
    publish_n(&api, "e", &format!("ttl={ttl_s}"), 10).await;
    assert_eq!(api.get("/api/ns/e/size").await.json["size"], 10);

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
    // The target is one lease TTL (3 s) plus one second from Redis being
    // back; the rest is margin for a busy machine.
    let deadline = back + Duration::from_secs(3 + 1 + 4);
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
    gone_by_ttl(&api, "e", Duration::from_secs(ttl_s + 8)).await;

    // And the pumps keep working for what is published afterwards.
    delayed.extend(publish_n(&api, "d", "delay=1", 40).await);
    let retried_after = reserve_n(&api, "r2", 10, 1_000).await;
    publish_n(&api, "e2", "ttl=3", 10).await;
    assert_eq!(api.get("/api/ns/e2/size").await.json["size"], 10);
    gone_by_ttl(&api, "e2", Duration::from_secs(3 + 8)).await;

    all_delivered(&api, "d", &delayed, Duration::from_secs(30), "delayed jobs").await;
    for (q, ids) in [("r", &retried), ("r2", &retried_after)] {
        // The first delivery was the reservation above; one more is due.
        all_delivered(&api, q, ids, Duration::from_secs(30), "TTR retries").await;
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

/// A pool of one shard reached through `proxy`, with a short Redis timeout.
fn behind(proxy: &FaultProxy, timeout_ms: u64) -> SundialConfig {
    let mut cfg = SundialConfig::new(proxy.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nshards = [{{ url = \"{}\", timeout_ms = {timeout_ms} }}]\n",
        proxy.url()
    ));
    cfg
}

#[tokio::test]
async fn a_stalled_redis_is_a_bounded_503_and_everything_recovers() {
    let redis = durable_redis();
    let proxy = FaultProxy::start(redis.port());
    let gw = Sundial::start(&behind(&proxy, 500));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    // Due during the stall: must fire after it.
    let delayed = publish_n(&api, "d", "delay_ms=1500", 10).await;

    proxy.set(Fault::Stall);
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let start = Instant::now();
        let r = api.put("/api/ns/q", b"during").await;
        worst = worst.max(start.elapsed());
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.json["error"], "storage unavailable, retry later");
    }
    assert!(
        worst < Duration::from_secs(3),
        "bounded by the 500 ms timeout: {worst:?}"
    );
    wait_until_async(
        Duration::from_secs(10),
        "/ready to say unavailable",
        || async {
            let r = admin.get("/ready").await;
            r.status == 503 && r.json["status"] == "unavailable"
        },
    )
    .await;
    // Longer than the lease TTL (3 s): the pumps' leases expire meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;

    proxy.heal();
    let healed = Instant::now();
    wait_until_async(
        Duration::from_secs(15),
        "a publish to work again",
        || async { api.put("/api/ns/q", b"after").await.status == 201 },
    )
    .await;
    let first_request = healed.elapsed();
    all_delivered(&api, "d", &delayed, Duration::from_secs(20), "delayed jobs").await;
    let first_pumped = healed.elapsed();
    wait_until_async(Duration::from_secs(10), "/ready to say ready", || async {
        admin.get("/ready").await.json["status"] == "ready"
    })
    .await;
    eprintln!(
        "stall 5 s: 503 within {worst:?}; after healing, first request {first_request:?}, \
         all delayed jobs delivered by {first_pumped:?}"
    );
}

#[tokio::test]
async fn a_partitioned_shard_stops_only_its_own_jobs() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = FaultProxy::start(b.port());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nlanes = 8\nshards = [\n  {{ name = \"a\", url = \"{}\" }},\n  {{ name = \"b\", url = \"{}\", timeout_ms = 500 }},\n]\n",
        a.url(),
        proxy.url()
    ));
    cfg.extra = format!("admin_redis = \"{}\"\n", a.url());
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    // Three tries: a consume that times out on b may still reserve jobs
    // there (see below), which spends a try.
    let before = publish_n(&api, "q", "tries=3", 60).await;

    proxy.set(Fault::Stall);
    wait_until_async(
        Duration::from_secs(10),
        "/ready to report b down",
        || async {
            let r = admin.get("/ready").await;
            r.status == 200 && r.json["pools"]["default"]["default/b"]["up"] == false
        },
    )
    .await;
    // Publishes land on a (201) or fail fast for b (503); delayed jobs on a
    // keep firing; consumers keep getting a's jobs.
    let mut during = HashSet::new();
    let (mut ok, mut refused) = (0, 0);
    for i in 0..60 {
        let r = api
            .put("/api/ns/q?delay_ms=300&tries=3", format!("p{i}").as_bytes())
            .await;
        match r.status {
            201 => {
                ok += 1;
                during.insert(r.json["job_id"].as_str().expect("id").to_owned());
            }
            503 => refused += 1,
            other => panic!("publish during the partition: {other} {r:?}"),
        }
    }
    assert!(
        ok > 0 && refused > 0,
        "both shards took part: {ok} ok, {refused} refused"
    );
    // A consume that timed out on b may still run there once the stall
    // ends (its bytes were sent): the jobs it reserved for nobody come back
    // after their TTR, 2 s here.
    let consume = "count=100&timeout=1&ttr=2";
    let mut taken = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !during.iter().all(|id| taken.contains_key(id)) {
        assert!(
            Instant::now() < deadline,
            "a's delayed jobs did not fire during the partition"
        );
        take_and_ack(&api, "q", consume, &mut taken).await;
    }
    assert_eq!(
        admin.get("/ready").await.status,
        200,
        "one shard down is not unready"
    );

    proxy.heal();
    let mut all = before.clone();
    all.extend(during.iter().cloned());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !all.iter().all(|id| taken.contains_key(id)) {
        if Instant::now() >= deadline {
            let missing = all.iter().filter(|id| !taken.contains_key(*id)).count();
            panic!("{missing} of b's jobs did not come back after healing");
        }
        take_and_ack(&api, "q", consume, &mut taken).await;
    }
    assert!(
        taken.values().all(|n| *n == 1),
        "each job delivered once: {taken:?}"
    );
    // A publish that timed out on b (503) was sent, and b may run it once
    // the stall ends: such a job exists though its producer saw a 503. It
    // is delivered like any other; there can be no more of them than 503s.
    let extra = taken.len() - all.len();
    assert!(
        extra <= refused,
        "{extra} unexpected jobs for {refused} refused publishes"
    );
    eprintln!(
        "partition: {ok} publishes on a, {refused} refused for b, {extra} of those stored after healing"
    );
}

#[tokio::test]
async fn a_redis_restarted_empty_is_reported_and_serves_new_jobs() {
    let mut redis = RedisServer::start(); // no persistence
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    publish_n(&api, "q", "delay=60", 5).await;
    // The loss counters are there at 0 before any loss, so that an alert
    // on their increase sees the first one.
    let value = |metrics: &str, name: &str| -> Option<String> {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.to_owned())
    };
    let metrics = || async {
        Api::new(gw.admin(), None)
            .get("/metrics")
            .await
            .json
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    wait_until_async(Duration::from_secs(5), "the loss counters at 0", || async {
        let m = metrics().await;
        value(&m, "sundial_shard_data_lost_total").as_deref() == Some("0")
            && value(&m, "sundial_pump_leases_lost_total").as_deref() == Some("0")
    })
    .await;

    redis.restart();
    wait_until_async(Duration::from_secs(15), "the loss to be reported", || {
        std::future::ready(
            gw.log().contains("restarted without its data")
                && gw.log().contains("writing this gateway's copy back"),
        )
    })
    .await;
    // The tenant's token still works (restored), and new jobs flow, delayed
    // ones included.
    wait_until_async(Duration::from_secs(15), "publishes to work", || async {
        api.put("/api/ns/q2?delay_ms=500", b"new").await.status == 201
    })
    .await;
    let r = api.get("/api/ns/q2?timeout=5").await;
    assert_eq!(r.status, 200, "{r:?}");
    // The health probe (each second) finds the shard empty and pins the
    // layout again; the admin store may have found its own loss first.
    let pinned = || {
        let (format, slots): (Option<u32>, Option<u32>) = redis::cmd("HMGET")
            .arg("sd:meta")
            .arg("format")
            .arg("slots")
            .query(&mut redis.client())
            .expect("HMGET");
        (format, slots)
            == (
                Some(sundial_core::keys::FORMAT),
                Some(sundial_router::config::DEFAULT_SLOTS),
            )
    };
    wait_until_async(
        Duration::from_secs(10),
        "the layout to be pinned again",
        || std::future::ready(pinned()),
    )
    .await;
    assert!(
        gw.log()
            .contains("shard answers without Sundial's metadata"),
        "{}",
        gw.log()
    );
    let m = metrics().await;
    assert_eq!(
        value(&m, "sundial_shard_data_lost_total").as_deref(),
        Some("1"),
        "{m}"
    );
    assert!(!gw.log().contains("panicked"));
}

#[tokio::test]
async fn latency_and_connection_resets_are_survived() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port());
    // 1.5 s: the proxy forwards one chunk per latency period, so a command
    // may queue behind the pumps' and probes' own for a few periods.
    let gw = Sundial::start(&behind(&proxy, 1_500));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let delayed = publish_n(&api, "d", "delay_ms=1000", 5).await;

    // Slow but within the timeout: served. (A command may wait behind a few
    // chunks of the pumps' traffic on its connection, each one period, so
    // the period is well under a tenth of the timeout.)
    proxy.set(Fault::Latency(Duration::from_millis(100)));
    let start = Instant::now();
    let r = api.put("/api/ns/q", b"slow").await;
    assert_eq!(r.status, 201, "{r:?}");
    assert!(start.elapsed() >= Duration::from_millis(100));
    // Slower than the timeout: a bounded 503.
    proxy.set(Fault::Latency(Duration::from_millis(3_000)));
    let start = Instant::now();
    let r = api.put("/api/ns/q", b"too slow").await;
    let took = start.elapsed();
    assert_eq!(r.status, 503, "{r:?}");
    assert!(
        took < Duration::from_secs(3),
        "bounded by the 1.5 s timeout: {took:?}"
    );

    // Every connection reset, and new ones too: 503s, then recovery.
    proxy.set(Fault::Reset);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(api.put("/api/ns/q", b"reset").await.status);
    }
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    proxy.heal();
    wait_until_async(
        Duration::from_secs(15),
        "publishes to work again",
        || async { api.put("/api/ns/q", b"healed").await.status == 201 },
    )
    .await;
    all_delivered(
        &api,
        "d",
        &delayed,
        Duration::from_secs(20),
        "delayed jobs from before the faults",
    )
    .await;
}

/// A gateway and its Redis started together (a reboot, a new deployment):
/// Redis answers `LOADING` while it reads its data. The gateway waits for
/// it, within its startup wait, instead of exiting at the first refusal,
/// and then serves the jobs Redis loaded.
#[tokio::test]
async fn a_gateway_started_while_redis_loads_its_data_waits_then_serves_it() {
    // Redis sleeps 100 µs per key while loading, and answers clients
    // (`LOADING`) between keys: about 2 s of loading for 20,000 keys.
    let mut redis = RedisServer::start_with(&[
        "--key-load-delay",
        "100",
        "--loading-process-events-interval-bytes",
        "1024",
    ]);
    let cfg = SundialConfig::new(redis.url());
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let published = publish_n(&api, "q", "", 5).await;
    gw.kill();
    {
        let mut c = redis.client();
        let mut fill = redis::pipe();
        for i in 0..20_000 {
            fill.set(format!("filler:{i}"), "x").ignore();
        }
        let () = fill.query(&mut c).expect("fill");
        let () = redis::cmd("SAVE").query(&mut c).expect("SAVE");
    }
    redis.restart();
    let mut c = redis.client();
    let loading: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut c)
        .expect("INFO");
    assert!(
        loading.contains("loading:1"),
        "Redis should still be loading: {loading}"
    );

    gw.restart();
    // A new client: the old one's pooled connections went with the old process.
    let api = Api::new(gw.api(), Some(&token));
    assert!(
        gw.log().contains("LOADING"),
        "the gateway met Redis loading: {}",
        gw.log()
    );
    all_delivered(
        &api,
        "q",
        &published,
        Duration::from_secs(15),
        "jobs Redis loaded",
    )
    .await;
    assert!(!gw.log().contains("panicked"));
}
