//! A pool whose shard is a Sentinel-managed master: the gateway follows a
//! failover without a restart, and its schedules fire each time through
//! it.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use sundial_tests::{
    Api, MASTER_NAME, SentinelSet, Sundial, SundialConfig, create_token, wait_until_async,
};

fn sentinel_pool(set: &SentinelSet) -> String {
    let addrs: Vec<String> = set.addresses().iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[pools.default]\nshards = [{{ sentinel = {{ addresses = [{}], master = \"{MASTER_NAME}\" }} }}]\n",
        addrs.join(", ")
    )
}

#[tokio::test]
async fn a_master_failover_is_followed_without_a_restart() {
    let mut set = SentinelSet::start();
    let mut cfg = SundialConfig::new("unused");
    cfg.pools = Some(sentinel_pool(&set));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    // Jobs published and replicated before the failover survive it.
    let mut before = Vec::new();
    for i in 0..50 {
        before.push(
            api.publish("ns", "kept", "", format!("{i}").as_bytes())
                .await,
        );
    }
    let old = set.master_port().expect("a master");
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query(&mut set.master().client())
        .expect("WAIT for the replica");

    // Continuous publish + consume, recording when requests fail.
    let stop = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let successes: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut load = Vec::new();
    for _ in 0..4 {
        let (api, stop, failures, successes) = (
            api.clone(),
            stop.clone(),
            failures.clone(),
            successes.clone(),
        );
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let p = api.put("/api/ns/q", b"x").await.status;
                let c = api.get("/api/ns/q").await.status;
                let now = Instant::now();
                if p == 201 && (c == 200 || c == 404) {
                    successes.lock().expect("lock").push(now);
                } else {
                    assert!(
                        p == 503 || c == 503,
                        "only 503s during a failover: publish {p}, consume {c}"
                    );
                    failures.lock().expect("lock").push(now);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // some load before the kill (the load is what is measured)
    let killed = Instant::now();
    set.master().kill();
    let new = set.wait_failover(old, Duration::from_secs(30));
    assert_ne!(new, old);
    wait_until_async(Duration::from_secs(30), "requests to succeed again", || {
        let ok = successes
            .lock()
            .expect("lock")
            .iter()
            .any(|t| *t > killed + Duration::from_millis(100))
            && failures
                .lock()
                .expect("lock")
                .last()
                .is_none_or(|f| f.elapsed() > Duration::from_millis(500));
        std::future::ready(ok)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }
    let fails = failures.lock().expect("lock").clone();
    let window = fails.last().map_or(Duration::ZERO, |last| *last - killed);
    eprintln!(
        "failover: {} failed requests, the last {window:?} after the master was killed; new master on port {new}",
        fails.len()
    );

    // A pooled connection that the load did not use may meet the dead
    // master once more, answer 503 and reconnect; the job must be there.
    for id in &before {
        wait_until_async(
            Duration::from_secs(5),
            "a replicated job to survive the failover",
            || async { api.get(&format!("/api/ns/kept/job/{id}")).await.status == 200 },
        )
        .await;
    }
    assert_eq!(api.get("/api/ns/kept/size").await.json["size"], 50);
    // Health is checked every second: it follows the new master too.
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(10),
        "/ready to see the new master",
        || async { admin.get("/ready").await.json["status"] == "ready" },
    )
    .await;
}

/// Schedules through a master failover: no fire time is lost, and a fire
/// is doubled only in the replication window. A fire's job and its fire
/// state are one script's writes, which reach the replica together: a
/// fire the replica had not received when the master died is lost whole,
/// and the new master fires it again (within the schedule's grace), so a
/// consumer that took its job from the old master sees that time twice
/// (docs/OPERATIONS.md, "Schedules").
#[tokio::test]
async fn schedules_fire_each_time_through_a_master_failover() {
    let mut set = SentinelSet::start();
    let mut cfg = SundialConfig::new("unused");
    cfg.pools = Some(sentinel_pool(&set));
    let gw = Sundial::start(&cfg);
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    let spec = br#"{"every": 1, "job": {"data": "dGljaw==", "ttl": 600}}"#;
    let r = api.put("/api/ns/q/schedules/tick", spec).await;
    assert_eq!(r.status, 201, "{r:?}");

    // A consumer takes and acks every fire, noting the time it was for.
    let stop = Arc::new(AtomicBool::new(false));
    let times: Arc<Mutex<Vec<u64>>> = Arc::default();
    let consumer = {
        let (api, stop, times) = (api.clone(), stop.clone(), times.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = api.get("/api/ns/q?timeout=1&ttr=30").await;
                if r.status == 503 {
                    // The master is down: no need to hammer the gateway.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if r.status != 200 {
                    continue;
                }
                let at = r.json["attributes"]["scheduled-at"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                    .expect("a fire time");
                times.lock().expect("lock").push(at);
                let id = r.json["job_id"].as_str().expect("id");
                let _ = api.delete(&format!("/api/ns/q/job/{id}")).await;
            }
        })
    };
    let count = || times.lock().expect("lock").len();
    wait_until_async(Duration::from_secs(10), "fires before the kill", || {
        std::future::ready(count() >= 3)
    })
    .await;
    let old = set.master_port().expect("a master");
    set.master().kill();
    let new = set.wait_failover(old, Duration::from_secs(30));
    assert_ne!(new, old);
    let at_failover = count();
    wait_until_async(Duration::from_secs(30), "fires after the failover", || {
        std::future::ready(count() >= at_failover + 4)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    consumer.await.expect("consumer");

    let mut seen = times.lock().expect("lock").clone();
    seen.sort_unstable();
    let all = seen.len();
    seen.dedup();
    let doubled = all - seen.len();
    eprintln!("{all} fires taken, {doubled} twice, new master on port {new}");
    for w in seen.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "a fire time lost: {seen:?}");
    }
    assert!(
        doubled <= 2,
        "{doubled} fires twice: more than a replication window's"
    );
}
