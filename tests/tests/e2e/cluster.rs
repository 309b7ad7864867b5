//! Redis Cluster: Sundial's key layout against a real cluster's hash slots,
//! and a cluster shard that loses a master under load. (The whole API runs
//! on a cluster shard in `api::cluster`.)

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sundial_core::keys::{self, SlotKeys};
use sundial_tests::{
    Api, CLUSTER_SLOTS, RedisCluster, Sundial, SundialConfig, create_token, wait_until,
    wait_until_async,
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
/// follows without a restart. Meanwhile requests to the failed master's
/// slots fail with 503, never another error, and those to the other
/// masters' slots succeed. Every job answered 201 before the last moment
/// replication was confirmed is consumed exactly once. Jobs answered between
/// then and the kill may be lost with the master (Redis replicates
/// asynchronously); the test counts them.
#[tokio::test]
async fn a_master_killed_under_load_is_replaced_and_no_replicated_job_is_lost() {
    let mut cluster = RedisCluster::start(3, 1);
    // As docs/OPERATIONS.md advises: with the default (`yes`), every node
    // refuses every slot (CLUSTERDOWN) from when the master is marked
    // failed until its replica is promoted.
    cluster.config_set("cluster-require-full-coverage", "no");
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
    // 503s of queues on the other masters: none, the failed master's
    // slots alone are refused.
    let unavailable_elsewhere = Arc::new(AtomicU64::new(0));
    let mut publishers = Vec::new();
    for p in 0..3 {
        let (api, stop, paused, in_flight, published, unavailable, unavailable_elsewhere) = (
            api.clone(),
            stop.clone(),
            paused.clone(),
            in_flight.clone(),
            published.clone(),
            unavailable.clone(),
            unavailable_elsewhere.clone(),
        );
        let on_victim = on_victim.clone();
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
                        if !on_victim.contains(&q) {
                            eprintln!("q{q} (not on the killed master): {r:?}");
                            unavailable_elsewhere.fetch_add(1, Ordering::SeqCst);
                        }
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
    assert_eq!(
        unavailable_elsewhere.load(Ordering::SeqCst),
        0,
        "publishes to the other masters' slots are not refused while one master fails over"
    );

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

/// A master dies and has no replica: only its own slots are refused (503,
/// each in bounded time), while the other masters' queues publish, consume
/// and wake long polls as before. When it comes back (empty: it had no
/// AOF), the gateway reconnects to it by itself: its queues publish again,
/// a long poll on one of them wakes, and a delayed job there fires.
#[tokio::test]
async fn a_dead_master_costs_only_its_own_slots_and_they_return_when_it_restarts() {
    let mut cluster = RedisCluster::start(3, 0);
    cluster.config_set("cluster-require-full-coverage", "no");
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // The victim holds none of the gateway's own keys that a restart
    // would empty (the metadata, the admin tables, the pumps' heartbeats).
    let master_of_key = |c: &RedisCluster, k: &str| c.master_of(c.key_slot(k));
    let victim = master_of_key(&cluster, keys::VIEWS);
    for k in [keys::META, "sd:pumps", "sd:{admin}:tokens"] {
        assert_ne!(master_of_key(&cluster, k), victim, "{k} is elsewhere");
    }
    let queue_on = |c: &RedisCluster, want: bool| {
        (0..)
            .map(|i| format!("q{i}"))
            .find(|q| {
                let slot = keys::slot_of("ns", q, 0, 128);
                (master_of_key(c, &SlotKeys::new(slot).jobs()) == victim) == want
            })
            .expect("a queue")
    };
    let (dead_q, live_q) = (queue_on(&cluster, true), queue_on(&cluster, false));
    let live_waiter = {
        let (api, q) = (api.clone(), live_q.clone());
        tokio::spawn(async move { api.get(&format!("/api/ns/{q}?timeout=20")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // subscribed

    cluster.kill(victim);
    let killed = Instant::now();
    let (mut slowest_503, mut slowest_201) = (Duration::ZERO, Duration::ZERO);
    for i in 0..20 {
        let start = Instant::now();
        let r = api.put(&format!("/api/ns/{dead_q}"), b"x").await;
        assert_eq!(r.status, 503, "the dead master's queue, publish {i}: {r:?}");
        slowest_503 = slowest_503.max(start.elapsed());
        // A publish in flight as the master dies waits out the command
        // timeout (2 s); the next ones are refused at once.
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "a 503 in bounded time, not {:?}",
            start.elapsed()
        );
        let start = Instant::now();
        let r = api.put(&format!("/api/ns/{live_q}"), b"x").await;
        assert_eq!(r.status, 201, "another master's queue, publish {i}: {r:?}");
        slowest_201 = slowest_201.max(start.elapsed());
    }
    let r = live_waiter.await.expect("waiter");
    assert_eq!(r.status, 200, "a long poll on another master wakes: {r:?}");
    // The gateway stays ready (the other masters serve), and says which
    // primary is down.
    let admin = Api::new(gw.admin(), None);
    let dead_addr = cluster.nodes()[victim]
        .url()
        .trim_start_matches("redis://")
        .to_owned();
    wait_until_async(
        Duration::from_secs(10),
        "/ready to name the dead primary",
        || async {
            let r = admin.get("/ready").await;
            let down = &r.json["pools"]["default"]["default/main"]["primaries_down"];
            r.status == 200
                && r.json["status"] == "degraded"
                && down == &serde_json::json!([dead_addr])
        },
    )
    .await;
    assert_eq!(admin.get("/ready?strict=true").await.status, 503);
    assert!(gw.log().contains("cluster primaries down"), "{}", gw.log());
    // A long poll of both queues waits on the live one, and names the dead.
    let drained = api.get(&format!("/api/ns/{live_q}?count=100")).await;
    assert_eq!(drained.status, 200, "{drained:?}");
    let both = format!("/api/ns/{dead_q},{live_q}");
    let r = api.get(&format!("{both}?timeout=1")).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(
        r.headers["x-sundial-unavailable-queues"],
        dead_q.as_str(),
        "{r:?}"
    );
    let waiter = {
        let (api, both) = (api.clone(), both.clone());
        tokio::spawn(async move { api.get(&format!("{both}?timeout=20")).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await; // waiting
    let id = api.publish("ns", &live_q, "", b"for the waiter").await;
    let r = waiter.await.expect("waiter");
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "{r:?}"
    );
    assert_eq!(
        r.headers["x-sundial-unavailable-queues"],
        dead_q.as_str(),
        "{r:?}"
    );
    let r = api.get(&format!("/api/ns/{dead_q}")).await;
    assert_eq!(r.status, 503, "the dead queue alone: {r:?}");
    eprintln!(
        "dead master: 20 publishes each to its queue (503, slowest {slowest_503:?}) and \
         another's (201, slowest {slowest_201:?}) in {:?}",
        killed.elapsed()
    );

    cluster.nodes_mut()[victim].restart();
    wait_until_async(
        Duration::from_secs(30),
        "the restarted master's queue to publish again",
        || async { api.put(&format!("/api/ns/{dead_q}"), b"back").await.status == 201 },
    )
    .await;
    let back = killed.elapsed();
    // Its jobs died with it (no AOF); take the one just published.
    let r = api.get(&format!("/api/ns/{dead_q}?timeout=1")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let waiter = {
        let (api, q) = (api.clone(), dead_q.clone());
        tokio::spawn(async move { api.get(&format!("/api/ns/{q}?timeout=20")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = api.publish("ns", &dead_q, "", b"wake").await;
    let r = waiter.await.expect("waiter");
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "a long poll on the restarted master wakes: {r:?}"
    );
    let id = api.publish("ns", &dead_q, "delay_ms=300", b"later").await;
    let r = api.get(&format!("/api/ns/{dead_q}?timeout=10")).await;
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "a delayed job on the restarted master fires: {r:?}"
    );
    eprintln!("dead master: its queue published again {back:?} after the kill");
}

/// A gateway started while its cluster answers `CLUSTERDOWN` (here a
/// master that restarts and rejoins; also a cluster that is still forming)
/// waits for it within its startup wait instead of exiting at the first
/// refusal, then serves every slot.
#[tokio::test]
async fn a_gateway_started_while_its_cluster_is_down_waits_for_it() {
    let mut cluster = RedisCluster::start(3, 0);
    cluster.kill(0);
    wait_until(
        Duration::from_secs(30),
        "the other masters to see the cluster down",
        || cluster.state_of(1) == "fail",
    );
    cluster.nodes_mut()[0].restart();
    assert_eq!(
        cluster.state_of(1),
        "fail",
        "still down as the gateway starts"
    );

    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    assert!(
        gw.log().contains("CLUSTERDOWN") && gw.log().contains("asking again"),
        "the gateway met the cluster down: {}",
        gw.log()
    );
    assert_eq!(cluster.state_of(1), "ok");
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // Queues on every master.
    let mut on: HashMap<usize, String> = HashMap::new();
    for q in (0..).map(|i| format!("q{i}")) {
        let slot = keys::slot_of("ns", &q, 0, 128);
        let master = cluster.master_of(cluster.key_slot(&SlotKeys::new(slot).jobs()));
        on.entry(master).or_insert(q);
        if on.len() == 3 {
            break;
        }
    }
    for q in on.values() {
        // The cluster says ok; the gateway's connections to the restarted
        // master may take a moment more (a clear 503 meanwhile).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let id = loop {
            let r = api.put(&format!("/api/ns/{q}?delay_ms=200"), b"x").await;
            match r.status {
                201 => break r.json["job_id"].as_str().expect("id").to_owned(),
                503 if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => panic!("publish once the cluster is back: {r:?}"),
            }
        };
        let r = api.get(&format!("/api/ns/{q}?timeout=10")).await;
        assert_eq!(
            (r.status, r.json["job_id"].as_str()),
            (200, Some(id.as_str())),
            "a delayed job on {q} fires: {r:?}"
        );
    }
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

/// Where the cluster holds job `id` of queue `q` of `ns` (default pool):
/// its record's state (1 delayed, 2 ready, 3 reserved, 4 dead, +16 once
/// delivered), its timer entry, and whether its queue's ready list names
/// it; for a test's failure message.
fn held(cluster: &RedisCluster, q: &str, id: &str) -> String {
    let k = SlotKeys::new(keys::slot_of("ns", q, 0, 128));
    let node = cluster.master_of(cluster.key_slot(&k.jobs()));
    let mut c = cluster.nodes()[node].client();
    let raw: Option<Vec<u8>> = redis::cmd("HGET")
        .arg(k.jobs())
        .arg(id)
        .query(&mut c)
        .ok()
        .flatten();
    let timer: Option<f64> = redis::cmd("ZSCORE")
        .arg(k.timer())
        .arg(id)
        .query(&mut c)
        .ok()
        .flatten();
    let listed: Option<i64> = redis::cmd("LPOS")
        .arg(k.ready(&keys::qualified("ns", q)))
        .arg(id)
        .query(&mut c)
        .ok()
        .flatten();
    format!(
        "node {node}: state {:?}, timer {timer:?}, ready list position {listed:?}",
        raw.and_then(|r| r.first().copied())
    )
}

/// `queues` as a consume names them, starting at the `turn`th: a consume
/// of several queues is in strict priority order, so workers that rotate
/// the first queue serve every queue even when they fall behind.
fn rotated(queues: &[String], turn: usize) -> String {
    let (tail, head) = queues.split_at(turn % queues.len());
    head.iter()
        .chain(tail)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// The queues of the resharding test.
const RESHARD_QUEUES: usize = 32;

/// `redis-cli --cluster reshard` moves slots between masters while
/// producers and workers run: every job answered 201 is consumed exactly
/// once, delayed jobs on moved slots fire (the pumps followed them), and
/// every request is answered 2xx or 503 (a slot's keys in the middle of a
/// move; the client retries).
#[tokio::test]
async fn resharding_under_load_consumes_every_job_exactly_once() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    let stop = Arc::new(AtomicBool::new(false));
    let producing = Arc::new(AtomicBool::new(true));
    // Job id → its queue.
    let published: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let consumed: Arc<Mutex<Vec<String>>> = Arc::default();
    let unavailable = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for p in 0..2 {
        let (api, producing, published, unavailable) = (
            api.clone(),
            producing.clone(),
            published.clone(),
            unavailable.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while producing.load(Ordering::SeqCst) {
                let q = (n * 2 + p) % RESHARD_QUEUES;
                // Ready jobs, jobs due on the timer, and jobs far enough
                // off to wait in the timer wheel's lists.
                let delay = match n % 4 {
                    0 | 1 => 0,
                    2 => 700,
                    _ => 2_000 + (n * 397) % 8_000,
                };
                let r = api
                    .put(&format!("/api/ns/q{q}?delay_ms={delay}"), b"x")
                    .await;
                match r.status {
                    201 => {
                        let id = r.json["job_id"].as_str().expect("id").to_owned();
                        let fresh = published
                            .lock()
                            .expect("lock")
                            .insert(id, format!("q{q}"))
                            .is_none();
                        assert!(fresh, "a job id answered twice");
                    }
                    503 => {
                        unavailable.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!("publish while resharding: {other} {r:?}"),
                }
                n += 1;
                // Paced, so that the workers keep up on a busy machine.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    let all: Vec<String> = (0..RESHARD_QUEUES).map(|q| format!("q{q}")).collect();
    for c in 0..2 {
        let (api, stop, consumed, unavailable) = (
            api.clone(),
            stop.clone(),
            consumed.clone(),
            unavailable.clone(),
        );
        // Each worker serves half of the queues, up to 10 jobs a call, and
        // starts each call at the next of its queues: a consume of several
        // queues is in strict priority order, so a worker that fell behind
        // on a busy machine would otherwise starve its last queues.
        let mine: Vec<String> = all.iter().skip(c).step_by(2).cloned().collect();
        tasks.push(tokio::spawn(async move {
            let mut turn = 0;
            while !stop.load(Ordering::SeqCst) {
                turn = (turn + 1) % mine.len();
                let path = format!(
                    "/api/ns/{}?timeout=1&ttr=120&count=10",
                    rotated(&mine, turn)
                );
                let r = api.get(&path).await;
                match r.status {
                    200 => {}
                    404 => continue,
                    503 => {
                        unavailable.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    other => panic!("consume while resharding: {other} {r:?}"),
                }
                for job in r.json.as_array().expect("a batch") {
                    let id = job["job_id"].as_str().expect("id").to_owned();
                    let queue = job["queue"].as_str().expect("queue").to_owned();
                    consumed.lock().expect("lock").push(id.clone());
                    loop {
                        let r = api.delete(&format!("/api/ns/{queue}/job/{id}")).await;
                        match r.status {
                            204 => break,
                            503 => {
                                unavailable.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            other => panic!("ack while resharding: {other} {r:?}"),
                        }
                    }
                }
            }
        }));
    }
    let count = || published.lock().expect("lock").len();
    wait_until_async(Duration::from_secs(10), "load before resharding", || {
        std::future::ready(count() > 300)
    })
    .await;

    // Three reshards in a ring, each of a sixth of the cluster's slots,
    // and each slot with whatever keys it holds then.
    let queue_slot = |q: usize| {
        cluster.key_slot(&SlotKeys::new(keys::slot_of("ns", &format!("q{q}"), 0, 128)).jobs())
    };
    let masters = || -> Vec<usize> {
        (0..RESHARD_QUEUES)
            .map(|q| cluster.master_of(queue_slot(q)))
            .collect()
    };
    let started = Instant::now();
    // How many queues' slots each move carried (redis-cli picks the slots).
    let mut moved_queues = 0;
    for (from, to) in [(0, 1), (1, 2), (2, 0)] {
        let before = masters();
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.reshard(from, to, 2_700))
            .await
            .expect("reshard");
        let after = masters();
        moved_queues += before.iter().zip(&after).filter(|(b, a)| b != a).count();
    }
    let resharded = started.elapsed();
    assert!(moved_queues > 0, "the reshards moved slots that hold jobs");
    let during = count();
    producing.store(false, Ordering::SeqCst);

    // Every job answered 201 is consumed, once.
    let missing = || -> Vec<(String, String)> {
        let consumed: HashSet<String> = consumed.lock().expect("lock").iter().cloned().collect();
        published
            .lock()
            .expect("lock")
            .iter()
            .filter(|(id, _)| !consumed.contains(*id))
            .map(|(id, q)| (id.clone(), q.clone()))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !missing().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = missing();
    assert!(
        left.is_empty(),
        "{} published jobs never consumed; where Redis holds them: {:?}\n{}",
        left.len(),
        left.iter()
            .take(10)
            .map(|(id, q)| (id, q, held(&cluster, q, id)))
            .collect::<Vec<_>>(),
        gw.log()
    );
    // Then a while longer: a job delivered twice would show up now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("client task");
    }
    let consumed = consumed.lock().expect("lock").clone();
    let unique: HashSet<&String> = consumed.iter().collect();
    assert_eq!(unique.len(), consumed.len(), "no job was delivered twice");
    let published = published.lock().expect("lock").clone();
    assert_eq!(
        unique.len(),
        published.len(),
        "nothing but published jobs was consumed"
    );
    eprintln!(
        "reshard: 3 x 2700 slots moved in {resharded:?} under load, carrying \
         {moved_queues} slots of the {RESHARD_QUEUES} queues; {} jobs published ({during} before the \
         last move ended), each consumed exactly once; {} requests answered 503",
        published.len(),
        unavailable.load(Ordering::SeqCst)
    );
}

/// While a slot's keys are half moved between masters, no script runs
/// halfway: Redis refuses every script of the slot before it starts
/// (`TRYAGAIN`), where a script that started would fail at the first key
/// it did not declare and the node no longer (or not yet) holds, having
/// written part of its work. A publish meanwhile is answered 503 and
/// stores nothing; a job that falls due meanwhile is neither lost nor
/// doubled, and fires once the move ends.
#[tokio::test]
async fn no_script_runs_halfway_on_a_slot_whose_keys_are_half_moved() {
    let cluster = RedisCluster::start(3, 0);
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let q = keys::qualified("ns", "q");
    let k = SlotKeys::new(keys::slot_of("ns", "q", 0, 128));
    let slot = cluster.key_slot(&k.jobs());

    // Every key the scripts of the slot declare exists: a ready job (the
    // ready list), one due in an hour (the wheel index), one due soon (the
    // timer), and the pump's lease.
    let ready = api.publish("ns", "q", "", b"ready").await;
    let far = api.publish("ns", "q", "delay=3600", b"far").await;
    let mut c = cluster.nodes()[cluster.master_of(slot)].client();
    wait_until_async(Duration::from_secs(5), "the pump's lease", || {
        std::future::ready(redis::cmd("EXISTS").arg(k.lease()).query::<i64>(&mut c) == Ok(1))
    })
    .await;
    let soon = api.publish("ns", "q", "delay_ms=1500", b"soon").await;
    let from = cluster.master_of(slot);
    let to = (0..3).find(|&i| i != from).expect("another master");
    let mv = cluster.start_move(slot, to);

    // A job for a wheel second that has no list yet: the node cannot make
    // one for a slot it is giving away.
    let r = api.put("/api/ns/q?delay=30", b"refused").await;
    assert_eq!(r.status, 503, "a publish into a moving slot: {r:?}");
    // The ready list moves ahead of the rest, and `soon` falls due: its
    // pump must not mark it ready and then fail to list it.
    mv.migrate(&[k.ready(&q)]);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    mv.finish();

    let mut got = Vec::new();
    for _ in 0..2 {
        let r = api.get("/api/ns/q?timeout=10&ttr=600").await;
        assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
        got.push(r.json["job_id"].as_str().expect("id").to_owned());
    }
    got.sort();
    let mut want = vec![ready.clone(), soon.clone()];
    want.sort();
    assert_eq!(
        got, want,
        "the ready job and the one due meanwhile, once each"
    );
    assert_eq!(api.get("/api/ns/q?timeout=1").await.status, 404);
    for id in [&ready, &soon] {
        assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    }
    // What Redis holds: the far job only (the refused publish stored
    // nothing), on its wheel second.
    let mut c = cluster.nodes()[to].client();
    let jobs: Vec<String> = redis::cmd("HKEYS")
        .arg(k.jobs())
        .query(&mut c)
        .expect("HKEYS");
    assert_eq!(jobs, vec![far], "the refused publish stored nothing");
}

/// How late delayed jobs reach long-polling workers on a shard of `kind`:
/// the 99th percentile, in ms, of (delivered − (sent + delay)) over `JOBS`
/// jobs due over about two seconds, spread over `QUEUES` queues (and so
/// over the masters of a cluster).
async fn lateness_p99_ms(kind: sundial_tests::ShardKind) -> u64 {
    const JOBS: usize = 400;
    const LATE_QUEUES: usize = 8;
    let (_store, _gw, _token, api) = sundial_tests::started_on(kind, "ns").await;
    let queues: Vec<String> = (0..LATE_QUEUES).map(|q| format!("t{q}")).collect();
    let late: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (api, late) = (api.clone(), late.clone());
        let path = format!("/api/ns/{}?timeout=5&count=10&ttr=600", queues.join(","));
        workers.push(tokio::spawn(async move {
            loop {
                let r = api.get(&path).await;
                if r.status == 404 {
                    return;
                }
                assert_eq!(r.status, 200, "{r:?}");
                let arrived = sundial_tests::now_ms();
                let jobs = match r.json.as_array() {
                    Some(a) => a.clone(),
                    None => vec![r.json.clone()],
                };
                for j in jobs {
                    let data = j["data"].as_str().expect("data");
                    let due: u64 = String::from_utf8(
                        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data)
                            .expect("base64"),
                    )
                    .expect("utf8")
                    .parse()
                    .expect("due");
                    late.lock().expect("lock").push(arrived.saturating_sub(due));
                }
            }
        }));
    }
    // Publish in a burst: each job carries the earliest time it may be due.
    for i in 0..JOBS {
        let delay = 1_000 + (i as u64 * 1_500 / JOBS as u64);
        let due = sundial_tests::now_ms() + delay;
        let r = api
            .put(
                &format!("/api/ns/{}?delay_ms={delay}", queues[i % LATE_QUEUES]),
                due.to_string().as_bytes(),
            )
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    for w in workers {
        w.await.expect("worker");
    }
    let mut late = late.lock().expect("lock").clone();
    assert_eq!(late.len(), JOBS, "every delayed job was delivered");
    late.sort_unstable();
    late[late.len() * 99 / 100 - 1]
}

/// Timers on a cluster shard fire when their jobs are due, as on a
/// standalone one: every delayed job reaches a long-polling worker, and
/// the 99th percentile of how late is far below the pumps' idle check
/// (30 s), which is how late jobs would be if the scripts' timer
/// announcements (sharded channels, one per slot) did not wake the pumps.
/// How late, on each kind of shard, is a figure for `tests/bench/run
/// cluster lateness` (docs/BENCHMARKS.md): on two cores shared by the
/// whole test suite it swings by hundreds of milliseconds, and a ratio of
/// the two failed on unchanged builds.
#[tokio::test]
async fn timers_on_a_cluster_shard_fire_on_time_as_on_a_standalone_one() {
    // Both at once, so that both see the same machine.
    let (standalone, cluster) = tokio::join!(
        lateness_p99_ms(sundial_tests::ShardKind::Standalone),
        lateness_p99_ms(sundial_tests::ShardKind::Cluster)
    );
    eprintln!("lateness p99: standalone {standalone} ms, cluster {cluster} ms");
    for (kind, p99) in [("standalone", standalone), ("cluster", cluster)] {
        assert!(
            p99 < 5_000,
            "lateness p99 on a {kind} shard {p99} ms (standalone {standalone} ms, cluster {cluster} ms)"
        );
    }
}

/// Hot reload with a cluster shard: a cluster joins a pool of one
/// standalone shard under load and takes its share of the slots; then the
/// standalone shard is weighted to 0, drains into the cluster and leaves.
/// Every job answered 201 is consumed exactly once, and the standalone
/// Redis holds no job at the end.
#[tokio::test]
async fn a_cluster_shard_joins_a_pool_under_load_then_takes_every_slot() {
    const SLOTS: u32 = 16;
    let a = sundial_tests::RedisServer::start();
    let c = RedisCluster::start(3, 0);
    let pool = |shards: &[(&str, String, u32)]| {
        let list: Vec<String> = shards
            .iter()
            .map(|(name, url, w)| format!("{{ name = \"{name}\", url = \"{url}\", weight = {w} }}"))
            .collect();
        format!(
            "[pools.default]\nslots = {SLOTS}\nshards = [{}]\n",
            list.join(", ")
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pool(&[("a", a.url(), 1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    let jobs_in = |conn: &mut redis::Connection, slot: u32| -> u64 {
        redis::cmd("HLEN")
            .arg(SlotKeys::new(slot).jobs())
            .query(conn)
            .expect("HLEN")
    };
    let on_a = || -> u64 {
        let mut conn = a.client();
        (0..SLOTS).map(|s| jobs_in(&mut conn, s)).sum()
    };
    let on_cluster = || -> u64 {
        (0..SLOTS)
            .map(|s| {
                let node = c.master_of(c.key_slot(&SlotKeys::new(s).jobs()));
                jobs_in(&mut c.nodes()[node].client(), s)
            })
            .sum()
    };
    let draining = || async {
        admin.get("/drains").await.json["pools"][0]["draining"]
            .as_array()
            .map_or(usize::MAX, Vec::len)
    };

    let stop_publishing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let published: Arc<Mutex<HashSet<String>>> = Arc::default();
    let consumed: Arc<Mutex<Vec<String>>> = Arc::default();
    let (mut publishers, mut tasks) = (Vec::new(), Vec::new());
    for p in 0..2 {
        let (api, stop, published) = (api.clone(), stop_publishing.clone(), published.clone());
        publishers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                // Eight queues over the pool's slots; some jobs delayed, so
                // that some wait in a timer while their slot moves.
                let q = (n * 2 + p) % 8;
                let query = if n.is_multiple_of(5) { "delay=1" } else { "" };
                let r = api.put(&format!("/api/ns/q{q}?{query}"), b"x").await;
                assert_eq!(r.status, 201, "publish while shards change: {r:?}");
                let id = r.json["job_id"].as_str().expect("id").to_owned();
                published.lock().expect("lock").insert(id);
                n += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }));
    }
    let queues: Vec<String> = (0..8).map(|q| format!("q{q}")).collect();
    for w in 0..2 {
        let (api, stop, consumed, queues) = (
            api.clone(),
            stop_consuming.clone(),
            consumed.clone(),
            queues.clone(),
        );
        tasks.push(tokio::spawn(async move {
            // Batches, each starting at the next queue (a consume of several
            // queues is in strict priority order): the workers keep up with
            // every queue on a busy machine.
            let mut turn = w;
            while !stop.load(Ordering::SeqCst) {
                turn = (turn + 1) % queues.len();
                let path = format!(
                    "/api/ns/{}?timeout=1&ttr=600&count=10",
                    rotated(&queues, turn)
                );
                let r = api.get(&path).await;
                match r.status {
                    200 => {
                        for job in r.json.as_array().expect("a batch") {
                            let id = job["job_id"].as_str().expect("id").to_owned();
                            let q = job["queue"].as_str().expect("queue").to_owned();
                            let ack = api.delete(&format!("/api/ns/{q}/job/{id}")).await;
                            assert_eq!(ack.status, 204, "{ack:?}");
                            consumed.lock().expect("lock").push(id);
                        }
                    }
                    404 => {}
                    other => panic!("consume while shards change: {other} {r:?}"),
                }
            }
        }));
    }
    let progress = |what: &'static str| {
        let published = published.clone();
        async move {
            let before = published.lock().expect("lock").len();
            wait_until_async(Duration::from_secs(10), what, || {
                std::future::ready(published.lock().expect("lock").len() > before + 100)
            })
            .await;
        }
    };
    let reload = |gw: &mut Sundial, cfg: &SundialConfig| {
        gw.rewrite(cfg);
        let admin = admin.clone();
        async move {
            let r = admin.post("/reload").await;
            assert_eq!(r.status, 200, "{r:?}");
        }
    };
    progress("load before the cluster joins").await;

    // The cluster joins with an equal weight, and takes about half the slots.
    cfg.pools = Some(pool(&[("a", a.url(), 1), ("c", c.url(), 1)]));
    reload(&mut gw, &cfg).await;
    progress("load while slots move to the cluster").await;
    wait_until_async(Duration::from_secs(60), "the move to drain", || async {
        draining().await == 0
    })
    .await;
    assert!(on_cluster() > 0, "the cluster took jobs");

    // The standalone shard leaves: weight 0, drained, then out of the config.
    cfg.pools = Some(pool(&[("a", a.url(), 0), ("c", c.url(), 1)]));
    reload(&mut gw, &cfg).await;
    progress("load while a drains into the cluster").await;
    wait_until_async(Duration::from_secs(60), "a to drain", || async {
        draining().await == 0
    })
    .await;
    cfg.pools = Some(pool(&[("c", c.url(), 1)]));
    reload(&mut gw, &cfg).await;
    progress("load on the cluster alone").await;

    stop_publishing.store(true, Ordering::SeqCst);
    for p in publishers {
        p.await.expect("publisher");
    }
    let expected = published.lock().expect("lock").clone();
    wait_until_async(
        Duration::from_secs(60),
        "every published job to be consumed",
        || {
            let consumed: HashSet<String> =
                consumed.lock().expect("lock").iter().cloned().collect();
            std::future::ready(expected.is_subset(&consumed))
        },
    )
    .await;
    stop_consuming.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("client task");
    }
    let consumed = consumed.lock().expect("lock").clone();
    let unique: HashSet<&String> = consumed.iter().collect();
    assert_eq!(unique.len(), consumed.len(), "no job was delivered twice");
    assert_eq!(
        unique.len(),
        expected.len(),
        "only published jobs were consumed"
    );
    assert_eq!(on_a(), 0, "the standalone shard that left holds no job");
    eprintln!(
        "a cluster joined, then took every slot: {} jobs, each consumed once",
        expected.len()
    );
}
