//! Redis Cluster: Sundial's key layout against a real cluster's hash slots,
//! and a cluster shard that loses a master under load. (The whole API runs
//! on a cluster shard in `api::cluster`.)

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sundial_core::keys::{self, SlotKeys};
use sundial_tests::{
    Api, CLUSTER_SLOTS, RedisCluster, Sundial, SundialConfig, create_token, wait_until_async,
};

#[test]
fn every_key_of_a_sundial_slot_lands_in_one_cluster_slot_and_slots_spread_over_the_masters() {
    let cluster = RedisCluster::start(3, 0);
    // Every slot is served, by one of the three masters.
    let masters: HashSet<usize> = [0, CLUSTER_SLOTS / 2, CLUSTER_SLOTS - 1]
        .into_iter()
        .map(|s| cluster.master_of(s))
        .collect();
    assert_eq!(masters.len(), 3, "three masters share the slots");

    // The keys a script of one Sundial slot touches, with the queue and
    // wheel-second names the scripts build inside: one cluster slot each.
    let qualified = keys::qualified("shop", "emails");
    let mut landed = HashSet::new();
    for slot in 0..128 {
        let k = SlotKeys::new(slot);
        let all = [
            k.jobs(),
            k.timer(),
            k.counters(),
            k.wheel_index(),
            k.wheel(1_764_000_000),
            k.queues(),
            k.lease(),
            k.ready(&qualified),
            k.dead(&qualified),
        ];
        let slots: HashSet<u16> = all.iter().map(|key| cluster.key_slot(key)).collect();
        assert_eq!(slots.len(), 1, "slot {slot}'s keys {all:?} span {slots:?}");
        landed.insert(cluster.master_of(*slots.iter().next().expect("one")));
    }
    assert_eq!(landed.len(), 3, "128 Sundial slots use every master");

    // A write sent to a node that does not serve the key's slot is
    // redirected, not served: the cluster really is sharded.
    let key = SlotKeys::new(7).jobs();
    let owner = cluster.master_of(cluster.key_slot(&key));
    let other = (0..3).find(|&i| i != owner).expect("another master");
    let refused: redis::RedisResult<i64> = redis::cmd("HSET")
        .arg(&key)
        .arg("id")
        .arg("x")
        .query(&mut cluster.nodes()[other].client());
    let err = refused.expect_err("a node that does not own the slot refuses");
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    let stored: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg("id")
        .arg("x")
        .query(&mut cluster.nodes()[owner].client())
        .expect("the owner serves it");
    assert_eq!(stored, 1);
}

/// The queues of the failover test: enough that each master serves some.
const QUEUES: usize = 12;

/// A master killed under load: its replica takes over, and the gateway
/// follows without a restart. Meanwhile requests fail with 503, never
/// another error, and every job answered 201 before the last moment
/// replication was confirmed is consumed exactly once. Jobs answered between
/// then and the kill may be lost with the master (Redis replicates
/// asynchronously); the test counts them.
///
/// Until the replica is promoted, fred's cluster client cannot reconnect
/// (it connects to every primary or to none), so requests for the other
/// masters' slots fail with 503 too; docs/OPERATIONS.md says so.
#[tokio::test]
async fn a_master_killed_under_load_is_replaced_and_no_replicated_job_is_lost() {
    let mut cluster = RedisCluster::start(3, 1);
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    // Which master serves each queue's (one) slot.
    let slot_of = |q: usize| keys::slot_of("ns", &format!("q{q}"), 0, 128);
    let master_of =
        |c: &RedisCluster, q: usize| c.master_of(c.key_slot(&SlotKeys::new(slot_of(q)).jobs()));
    let victim = master_of(&cluster, 0);
    let on_victim: Vec<usize> = (0..QUEUES)
        .filter(|&q| master_of(&cluster, q) == victim)
        .collect();
    assert!(on_victim.len() < QUEUES, "other masters serve some queues");
    // A queue of its own on the victim, for a delayed job after the failover.
    let late = (0..)
        .map(|i| format!("late{i}"))
        .find(|q| {
            let slot = keys::slot_of("ns", q, 0, 128);
            cluster.master_of(cluster.key_slot(&SlotKeys::new(slot).jobs())) == victim
        })
        .expect("a queue on the victim");

    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicU64::new(0));
    let published: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let unavailable = Arc::new(AtomicU64::new(0));
    let mut publishers = Vec::new();
    for p in 0..3 {
        let (api, stop, paused, in_flight, published, unavailable) = (
            api.clone(),
            stop.clone(),
            paused.clone(),
            in_flight.clone(),
            published.clone(),
            unavailable.clone(),
        );
        publishers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                if paused.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                in_flight.fetch_add(1, Ordering::SeqCst);
                let q = (n * 3 + p) % QUEUES;
                let r = api.put(&format!("/api/ns/q{q}"), b"x").await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                match r.status {
                    201 => published.lock().expect("lock").push((
                        r.json["job_id"].as_str().expect("id").to_owned(),
                        Instant::now(),
                    )),
                    503 => {
                        unavailable.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!("publish during a failover: {other} {r:?}"),
                }
                n += 1;
            }
        }));
    }
    let count = || published.lock().expect("lock").len();
    wait_until_async(Duration::from_secs(10), "load before the kill", || {
        std::future::ready(count() > 300)
    })
    .await;

    // The replication point: with publishing paused and nothing in flight,
    // a write of our own that the replica acknowledges (WAIT) follows
    // every job answered so far in the replication stream.
    paused.store(true, Ordering::SeqCst);
    wait_until_async(Duration::from_secs(5), "publishes in flight to end", || {
        std::future::ready(in_flight.load(Ordering::SeqCst) == 0)
    })
    .await;
    let replicated = Instant::now();
    let marker = format!("sd:{{{}}}:test-marker", slot_of(0));
    let mut c = cluster.nodes()[victim].client();
    let _: () = redis::cmd("SET")
        .arg(&marker)
        .arg(1)
        .query(&mut c)
        .expect("SET");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query(&mut c)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica is in sync before the kill");
    paused.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await; // load after the replication point
    let killed_at = Instant::now();
    let before_kill = count();
    cluster.kill(victim);

    // The victim's slots come back once its replica is promoted, with no
    // restart of the gateway, and so do the others'.
    let recovered = {
        let api = api.clone();
        async move {
            wait_until_async(
                Duration::from_secs(30),
                "the victim's slots to be served again",
                || async { api.put("/api/ns/q0", b"after").await.status == 201 },
            )
            .await;
            killed_at.elapsed()
        }
    }
    .await;
    let other_q = (0..QUEUES)
        .find(|q| !on_victim.contains(q))
        .expect("a queue elsewhere");
    let r = api.put(&format!("/api/ns/q{other_q}"), b"elsewhere").await;
    assert_eq!(r.status, 201, "a queue on another master: {r:?}");
    // Timers fire on the promoted replica: its slots' pump leases and timer
    // announcements followed it.
    let id = api.publish("ns", &late, "delay_ms=300", b"later").await;
    let r = api.get(&format!("/api/ns/{late}?timeout=10")).await;
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "a delayed job on the failed-over slots: {r:?}"
    );
    wait_until_async(Duration::from_secs(10), "load after the failover", || {
        std::future::ready(count() > before_kill + 300)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for p in publishers {
        p.await.expect("publisher");
    }

    // Consume everything: each job at most once, and every job answered
    // before the replication point exactly once.
    let mut consumed: Vec<String> = Vec::new();
    for q in 0..QUEUES {
        loop {
            let r = api.get(&format!("/api/ns/q{q}?count=100&ttr=600")).await;
            if r.status == 404 {
                break;
            }
            assert_eq!(r.status, 200, "{r:?}");
            for j in r.json.as_array().expect("array") {
                consumed.push(j["job_id"].as_str().expect("id").to_owned());
            }
        }
    }
    let unique: HashSet<&String> = consumed.iter().collect();
    assert_eq!(unique.len(), consumed.len(), "no job was delivered twice");
    let published = published.lock().expect("lock").clone();
    let (safe, at_risk): (Vec<_>, Vec<_>) = published
        .iter()
        .partition(|(_, answered)| *answered < replicated);
    let lost_safe = safe.iter().filter(|(id, _)| !unique.contains(id)).count();
    let lost_at_risk = at_risk
        .iter()
        .filter(|(id, _)| !unique.contains(id))
        .count();
    assert_eq!(
        lost_safe,
        0,
        "jobs answered 201 before the replication point are never lost ({} of them)",
        safe.len()
    );
    eprintln!(
        "failover: slots served again {recovered:?} after the kill; {} publishes answered 503 \
         meanwhile; {} jobs answered 201 before the replication point, none lost; {} after it, \
         {lost_at_risk} of them lost with the master",
        unavailable.load(Ordering::SeqCst),
        safe.len(),
        at_risk.len()
    );
}

/// A slot moved to another master while a long poll waits on it: the
/// subscriber follows the slot (its old node dropped the subscription), so
/// the waiter wakes for a job published after the move, and the slot's
/// timers fire on its new master.
#[tokio::test]
async fn long_polls_and_timers_follow_a_slot_moved_to_another_master() {
    let cluster = RedisCluster::start(3, 0);
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let sundial_slot = keys::slot_of("ns", "q", 0, 128);
    let slot = cluster.key_slot(&SlotKeys::new(sundial_slot).jobs());
    let channel = SlotKeys::new(sundial_slot).ready_channel(&keys::qualified("ns", "q"));
    let listeners = |c: &RedisCluster, node: usize| -> u64 {
        let n: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query(&mut c.nodes()[node].client())
            .expect("PUBSUB SHARDNUMSUB");
        n.first().map_or(0, |(_, n)| *n)
    };
    // A job, so that the slot's keys exist and move with it.
    let first = api.publish("ns", "q", "", b"before").await;
    let r = api.get("/api/ns/q").await;
    assert_eq!(r.json["job_id"], first.as_str());
    assert_eq!(
        api.delete(&format!("/api/ns/q/job/{first}")).await.status,
        204
    );

    let waiter = {
        let api = api.clone();
        tokio::spawn(async move { api.get("/api/ns/q?timeout=30").await })
    };
    let from = cluster.master_of(slot);
    wait_until_async(Duration::from_secs(10), "the waiter to subscribe", || {
        std::future::ready(listeners(&cluster, from) > 0)
    })
    .await;
    let to = (0..3).find(|&i| i != from).expect("another master");
    cluster.move_slot(slot, to);
    wait_until_async(
        Duration::from_secs(10),
        "the subscription to follow the slot",
        || std::future::ready(listeners(&cluster, to) > 0),
    )
    .await;
    let published = Instant::now();
    let id = api.publish("ns", "q", "", b"after the move").await;
    let r = waiter.await.expect("waiter");
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "{r:?}"
    );
    assert!(
        published.elapsed() < Duration::from_secs(5),
        "woken by the publish, not the timeout: {:?}",
        published.elapsed()
    );

    // The slot's timers run on its new master: its lease and the timer
    // channel moved with it.
    let later = api.publish("ns", "q", "delay_ms=300", b"later").await;
    let r = api.get("/api/ns/q?timeout=10").await;
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(later.as_str())),
        "{r:?}"
    );
}
