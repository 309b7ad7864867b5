//! One Redis Cluster master that dies or hangs delays only its own slots:
//! the other masters' timers fire as usual, so their tenants see nothing.
//!
//! Long because: each test is one timed scenario (a failure under a steady
//! load, measured from the worker's side) read top to bottom.

use std::time::{Duration, Instant};

use sundial_core::keys::{self, SlotKeys};
use sundial_tests::{Api, RedisCluster, Sundial, SundialConfig, create_token};

/// A queue of namespace `ns` whose (only) slot is on master `victim`
/// (`on`), or on another master (`!on`), after `skip` such queues.
fn queue(cluster: &RedisCluster, victim: usize, on: bool, skip: usize) -> String {
    (0..)
        .map(|i| format!("q{i}"))
        .filter(|q| {
            let slot = keys::slot_of("ns", q, 0, 128);
            let master = cluster.master_of(cluster.key_slot(&SlotKeys::new(slot).jobs()));
            (master == victim) == on
        })
        .nth(skip)
        .expect("a queue")
}

/// How the victim master fails.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `SIGKILL`: its connections drop.
    Kill,
    /// `SIGSTOP`: its connections stay open and nothing answers.
    Pause,
}

#[tokio::test]
async fn a_killed_master_delays_only_its_own_timers() {
    only_its_own_timers(Fault::Kill).await;
}

#[tokio::test]
async fn a_paused_master_delays_only_its_own_timers() {
    only_its_own_timers(Fault::Pause).await;
}

async fn only_its_own_timers(fault: Fault) {
    let mut cluster = RedisCluster::start(3, 0);
    cluster.config_set("cluster-require-full-coverage", "no");
    let gw = Sundial::start(&SundialConfig::new(cluster.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    sundial_tests::wait_until_async(
        Duration::from_secs(20),
        "the pumps to hear announcements",
        || std::future::ready(gw.log().contains("subscribed to timer announcements")),
    )
    .await;
    // The victim holds none of the gateway's own keys.
    let master_of_key = |k: &str| cluster.master_of(cluster.key_slot(k));
    let victim = master_of_key(keys::VIEWS);
    for k in [keys::META, "sd:pumps", "sd:{admin}:tokens"] {
        assert_ne!(master_of_key(k), victim, "{k} is elsewhere");
    }
    // Timers on the victim that fall due while it hangs: its slots' pump
    // calls hang too, each for the shard's timeout (2 s).
    for i in 0..8 {
        let q = queue(&cluster, victim, true, i);
        api.publish("ns", &q, "delay_ms=700", b"on the victim")
            .await;
    }
    let live: Vec<String> = (0..4).map(|i| queue(&cluster, victim, false, i)).collect();
    match fault {
        Fault::Kill => cluster.kill(victim),
        Fault::Pause => cluster.nodes()[victim].pause(),
    }

    // For 5 s, a job due 300 ms later on one of the other masters' queues
    // every 100 ms; a worker takes each as it falls due.
    let worker = {
        let (api, queues) = (api.clone(), live.join(","));
        tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < 50 {
                let r = api.get(&format!("/api/ns/{queues}?timeout=5")).await;
                match r.status {
                    200 => got.push((
                        Instant::now(),
                        r.json["data"].as_str().unwrap_or_default().to_owned(),
                    )),
                    404 => break,
                    _ => panic!("{r:?}"),
                }
            }
            got
        })
    };
    let mut due = std::collections::HashMap::new();
    for i in 0..50 {
        let body = format!("{i}");
        let sent = Instant::now();
        api.publish("ns", &live[i % live.len()], "delay_ms=300", body.as_bytes())
            .await;
        due.insert(base64(&body), sent + Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(100)).await; // the load's pace
    }
    let got = worker.await.expect("worker");
    if let Fault::Pause = fault {
        cluster.nodes()[victim].resume();
    }
    let log = gw.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .take(40)
        .collect();
    assert_eq!(
        got.len(),
        50,
        "every job on the other masters delivered:\n{}",
        warnings.join("\n")
    );
    let mut late: Vec<Duration> = got
        .iter()
        .map(|(at, data)| at.saturating_duration_since(due[data]))
        .collect();
    late.sort();
    let worst = late[late.len() - 1];
    eprintln!(
        "{fault:?}: the others' timers p50 {:?}, worst {worst:?} late",
        late[25]
    );
    // A hung master used to hold both of the shard's pump-call permits:
    // the others' timers then waited out its 2 s timeouts.
    assert!(
        worst < Duration::from_millis(1_000),
        "the others' timers waited: {late:?}"
    );
    // After the pause, the victim's own timers fire: every job due on it
    // while it hung is delivered.
    if let Fault::Pause = fault {
        let victims: Vec<String> = (0..8).map(|i| queue(&cluster, victim, true, i)).collect();
        for q in &victims {
            let r = api.get(&format!("/api/ns/{q}?timeout=15")).await;
            assert_eq!(
                r.status, 200,
                "the paused master's job of {q}, after: {r:?}"
            );
        }
    }
}

/// The `data` field the API gives a body.
fn base64(body: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(body)
}
