//! `WAIT`-based durability: a shard configured with `wait` answers a
//! publish 201 only once a replica holds the job, and 503 (the job stays on
//! the master) when no replica confirms it in time.

use std::time::{Duration, Instant};

use sundial_core::keys::{self, SlotKeys};
use sundial_tests::{
    Api, RedisCluster, RedisServer, Sundial, SundialConfig, create_token, wait_until,
    wait_until_async,
};

/// Whether `job` of queue `q` of `ns` is stored on `server` (default pool:
/// 128 slots, one lane), which may be a replica.
fn holds(server: &RedisServer, ns: &str, q: &str, job: &str) -> bool {
    let key = SlotKeys::new(keys::slot_of(ns, q, 0, 128)).jobs();
    let mut c = server.client();
    // A cluster replica serves reads only to a READONLY connection (a
    // standalone one refuses the command, and serves reads anyway).
    let _: redis::RedisResult<()> = redis::cmd("READONLY").query(&mut c);
    redis::cmd("HEXISTS")
        .arg(key)
        .arg(job)
        .query::<bool>(&mut c)
        .expect("HEXISTS")
}

fn link_up(replica: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut replica.client())
        .unwrap_or_default();
    info.contains("master_link_status:up")
}

/// Stalls `server` for `ms` (`DEBUG SLEEP`, sent from a thread of its
/// own), so that it acknowledges replication only after that. Returns once
/// the stall has begun (a PING goes unanswered), with the thread to join.
fn stall(server: &RedisServer, ms: u64) -> std::thread::JoinHandle<()> {
    // A connection made before the stall (making one during it would wait
    // for its end), whose PING times out once the stall has begun.
    let mut probe = server.client();
    probe
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("read timeout");
    let mut c = server.client();
    let sleeper = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(ms as f64 / 1000.0)
            .query(&mut c)
            .expect("DEBUG SLEEP");
    });
    wait_until(Duration::from_millis(ms / 2), "the stall to begin", || {
        redis::cmd("PING").query::<String>(&mut probe).is_err()
    });
    sleeper
}

/// Publishes one job to `q` while `replica` is stalled for `ms`, and checks
/// that the replica holds it when the answer (201) arrives. Returns how
/// long the publish took: the stall's rest at least, if the gateway waited
/// for that replica.
async fn publish_while_stalled(api: &Api, replica: &RedisServer, q: &str, ms: u64) -> Duration {
    let stalled = stall(replica, ms);
    let t = Instant::now();
    let id = api.publish("ns", q, "", b"while the replica sleeps").await;
    let took = t.elapsed();
    stalled.join().expect("stall");
    assert!(
        holds(replica, "ns", q, &id),
        "the job of {q} on the replica"
    );
    took
}

fn metric(text: &str, needle: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(needle)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_publish_is_answered_once_a_replica_holds_it_and_503_when_none_does() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let mut replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--enable-debug-command",
        "local",
    ]);
    wait_until(Duration::from_secs(10), "the replica to sync", || {
        link_up(&replica)
    });
    let mut cfg = SundialConfig::new(master.url());
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\", wait = {{ replicas = 1, timeout_ms = 800 }} }}]\n",
        master.url()
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    // Every job answered 201 is on the replica already, the moment the
    // answer arrives.
    for i in 0..30 {
        let id = api
            .publish("ns", "q", "", format!("job {i}").as_bytes())
            .await;
        assert!(holds(&replica, "ns", "q", &id), "job {i} on the replica");
    }

    // A replica that acknowledges late: the answer waits for it.
    let took = publish_while_stalled(&api, &replica, "q", 400).await;
    assert!(
        took >= Duration::from_millis(100),
        "waited for the replica: {took:?}"
    );

    // No replica: the publish waits out the timeout, then 503 says what
    // happened; the job is on the master and is still delivered.
    replica.kill();
    let t = Instant::now();
    let r = api.put("/api/ns/lonely", b"unconfirmed").await;
    let took = t.elapsed();
    assert_eq!(r.status, 503, "{r:?}");
    let msg = r.json["error"].as_str().expect("error");
    assert!(msg.contains("not confirmed by the replicas"), "{msg}");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "answered after the wait's timeout, in bounded time: {took:?}"
    );
    // Meanwhile publishes are refused at once, storing nothing, and the
    // workers' calls (their own connections) are not held up by WAITs.
    let t = Instant::now();
    let refused = futures::future::join_all((0..20).map(|i| {
        let api = api.clone();
        async move { api.put("/api/ns/refused", format!("{i}").as_bytes()).await }
    }))
    .await;
    assert!(
        refused.iter().all(|r| r.status == 503),
        "publishes while no replica confirms: {refused:?}"
    );
    let got = api.get("/api/ns/lonely?timeout=1").await;
    assert_eq!(
        got.status, 200,
        "the unconfirmed job is on the master: {got:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "20 refused publishes and a consume took {:?}",
        t.elapsed()
    );
    assert_eq!(
        api.get("/api/ns/refused/size").await.json["size"],
        0,
        "refused publishes stored nothing"
    );

    // The replica comes back: publishes are confirmed again.
    replica.restart();
    wait_until(Duration::from_secs(10), "the replica to sync again", || {
        link_up(&replica)
    });
    // (Within a second of the last unconfirmed write, publishes are still
    // refused: try until one is confirmed.)
    let deadline = Instant::now() + Duration::from_secs(5);
    let id = loop {
        let r = api.put("/api/ns/q", b"after").await;
        if r.status == 201 {
            break r.json["job_id"].as_str().expect("id").to_owned();
        }
        assert!(Instant::now() < deadline, "no confirmed publish: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(holds(&replica, "ns", "q", &id), "confirmed again");

    assert!(
        !gw.log().contains("publishes wait for more replicas"),
        "{}",
        gw.log()
    );
    // A gateway that waits for more replicas than the master has says so
    // at start.
    let mut two = SundialConfig::new(master.url());
    two.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\", wait = {{ replicas = 2 }} }}]\n",
        master.url()
    ));
    let warned = Sundial::start(&two);
    assert!(
        warned.log().contains("publishes wait for more replicas"),
        "{}",
        warned.log()
    );

    let text = Api::new(gw.admin(), None).get("/metrics").await.json;
    let text = text.as_str().expect("metrics text");
    let waits = |result: &str| {
        metric(
            text,
            &format!("sundial_replica_waits_total{{shard=\"default/main\",result=\"{result}\"}}"),
        )
    };
    assert_eq!((waits("confirmed"), waits("short")), (32, 1), "{text}");
}

/// On a Redis Cluster, the `WAIT` goes to the master that stored the job
/// (the one serving its slot), over the connection that stored it: every
/// job answered 201 is on that master's replica, whichever master it is.
#[tokio::test]
async fn on_a_cluster_a_publish_is_answered_once_its_masters_replica_holds_it() {
    let cluster = RedisCluster::start(3, 1);
    let mut cfg = SundialConfig::new(cluster.url());
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\", wait = {{ replicas = 1, timeout_ms = 1000 }} }}]\n",
        cluster.url()
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    wait_until_async(Duration::from_secs(10), "every replica to sync", || {
        std::future::ready(
            (0..3).all(|m| link_up(&cluster.nodes()[cluster.replica_of(m).expect("replica")])),
        )
    })
    .await;

    let mut masters = std::collections::HashSet::new();
    for i in 0..24 {
        let q = format!("q{i}");
        let id = api.publish("ns", &q, "", b"x").await;
        let slot = cluster.key_slot(&SlotKeys::new(keys::slot_of("ns", &q, 0, 128)).jobs());
        let master = cluster.master_of(slot);
        masters.insert(master);
        let replica = cluster.replica_of(master).expect("a replica");
        assert!(
            holds(&cluster.nodes()[replica], "ns", &q, &id),
            "job of {q} on the replica of its master"
        );
    }
    assert_eq!(masters.len(), 3, "the jobs went to every master");

    // Each master's replica stalled in turn: a publish to that master waits
    // for it (a WAIT sent to another node would answer at once).
    for m in 0..3 {
        let q = (0..24)
            .map(|i| format!("q{i}"))
            .find(|q| {
                let slot = cluster.key_slot(&SlotKeys::new(keys::slot_of("ns", q, 0, 128)).jobs());
                cluster.master_of(slot) == m
            })
            .expect("a queue on each master");
        let replica = &cluster.nodes()[cluster.replica_of(m).expect("a replica")];
        let took = publish_while_stalled(&api, replica, &q, 600).await;
        assert!(
            took >= Duration::from_millis(150),
            "a publish to master {m} waited for its replica: {took:?}"
        );
    }
}
