//! Bucket leases across real `sundial pumpd` processes: each bucket pumped
//! by one process at a time, spread, taken over, fenced, handed over.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use redis::Commands;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

const BUCKETS: u32 = 16;
const TTL_MS: u64 = 2_000;

fn pumpd(cfg: &SundialConfig) -> Sundial {
    Sundial::start_pumpd(cfg, &format!("lease_ttl_ms = {TTL_MS}"))
}

/// The owner id a pumpd logged at start.
fn owner_of(p: &Sundial) -> String {
    let log = p.log();
    let at = log.find("owner=").expect("owner in log") + "owner=".len();
    log[at..]
        .trim_start_matches('"')
        .split(|c: char| c == '"' || c.is_whitespace())
        .next()
        .expect("owner")
        .to_owned()
}

/// Lease holders of the namespaces' buckets over the shards: bucket → owner.
fn holders(shards: &[&RedisServer], namespaces: &[&str]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for r in shards {
        let mut c = r.client();
        for ns in namespaces {
            for b in 0..BUCKETS {
                let key = format!("sd:{{{ns}/{b}}}:lease");
                if let Some(owner) = c.get::<_, Option<String>>(&key).expect("get") {
                    out.insert(key, owner);
                }
            }
        }
    }
    out
}

/// A gateway without pumps, `n` namespaces registered, their clients.
async fn gateway(cfg: &SundialConfig, n: usize) -> (Sundial, Vec<(String, Api)>) {
    let mut g = cfg.clone();
    g.pump = false;
    let gw = Sundial::start(&g);
    let mut apis = Vec::new();
    for i in 0..n {
        let ns = format!("ns{i}");
        let token = create_token(&gw.admin(), &ns).await;
        let api = Api::new(gw.api(), Some(&token));
        // Jobs register the namespace in the shards they land on; 64 reach
        // every shard of these pools (a bucket is only leased where its
        // namespace is registered: elsewhere it has nothing to pump).
        for _ in 0..64 {
            api.publish(&ns, "q", "delay_ms=1", b"x").await;
        }
        apis.push((ns, api));
    }
    (gw, apis)
}

/// Publishes `per_ns` delayed jobs in every namespace and consumes them all,
/// asserting each is delivered once.
async fn deliver_all(apis: &[(String, Api)], per_ns: usize) {
    let mut expected = HashSet::new();
    for (ns, api) in apis {
        for i in 0..per_ns {
            expected.insert(
                api.publish(ns, "d", "delay_ms=300", format!("{i}").as_bytes())
                    .await,
            );
        }
    }
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < expected.len() {
        assert!(
            Instant::now() < deadline,
            "delivered {} of {}",
            seen.len(),
            expected.len()
        );
        for (ns, api) in apis {
            let r = api
                .get(&format!("/api/{ns}/d?count=100&timeout=1&ttr=600"))
                .await;
            if r.status == 200 {
                for j in r.json.as_array().expect("array") {
                    let id = j["job_id"].as_str().expect("id").to_owned();
                    assert!(seen.insert(id.clone()), "{id} delivered twice");
                    api.delete(&format!("/api/{ns}/d/job/{id}")).await;
                }
            }
        }
    }
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn leases_spread_over_processes_on_a_sharded_pool() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(format!(
        "[pools.default]\nbuckets = {BUCKETS}\nshards = [{{ name = \"a\", url = \"{}\" }}, {{ name = \"b\", url = \"{}\" }}]\n",
        a.url(),
        b.url()
    ));
    let (_gw, apis) = gateway(&cfg, 4).await;
    let pumps: Vec<Sundial> = (0..3).map(|_| pumpd(&cfg)).collect();
    let owners: Vec<String> = pumps.iter().map(owner_of).collect();
    let namespaces: Vec<&str> = apis.iter().map(|(ns, _)| ns.as_str()).collect();
    // 4 namespaces x 16 buckets, each held, spread over the three.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let h = holders(&[&a, &b], &namespaces);
        let per: Vec<usize> = owners
            .iter()
            .map(|o| h.values().filter(|v| *v == o).count())
            .collect();
        if h.len() == 64 && per.iter().all(|n| *n >= 8) {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = pumps
                .iter()
                .map(|p| p.log().lines().rev().take(6).collect::<Vec<_>>().join("\n"))
                .collect();
            panic!(
                "leases never spread: {} held, per process {per:?}\n{}",
                h.len(),
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let h = holders(&[&a, &b], &namespaces);
    let counts: Vec<usize> = owners
        .iter()
        .map(|o| h.values().filter(|v| *v == o).count())
        .collect();
    eprintln!("64 buckets leased {counts:?} over three pumpd processes");
    deliver_all(&apis, 50).await;
}

#[tokio::test]
async fn a_killed_pump_is_taken_over_and_a_paused_one_is_fenced() {
    let redis = RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let (_gw, apis) = gateway(&cfg, 2).await;
    let namespaces: Vec<&str> = apis.iter().map(|(ns, _)| ns.as_str()).collect();
    let mut pumps: Vec<Sundial> = (0..3).map(|_| pumpd(&cfg)).collect();
    let owners: Vec<String> = pumps.iter().map(owner_of).collect();
    wait_until_async(
        Duration::from_secs(20),
        "every bucket leased by all three",
        || {
            let h = holders(&[&redis], &namespaces);
            std::future::ready(h.len() == 32 && owners.iter().all(|o| h.values().any(|v| v == o)))
        },
    )
    .await;

    // SIGKILL: the others take its buckets once its leases expire.
    let killed = Instant::now();
    pumps[0].kill();
    wait_until_async(
        Duration::from_secs(10),
        "the killed pump's buckets to pass on",
        || {
            let h = holders(&[&redis], &namespaces);
            std::future::ready(h.len() == 32 && !h.values().any(|v| *v == owners[0]))
        },
    )
    .await;
    let takeover = killed.elapsed();
    eprintln!("takeover after SIGKILL: {takeover:?} (lease TTL {TTL_MS} ms)");
    assert!(takeover < Duration::from_millis(TTL_MS * 2), "{takeover:?}");
    deliver_all(&apis, 40).await;

    // SIGSTOP: the paused pump's leases expire and pass on; when it resumes
    // it must not pump (the script fences it) and it lets go.
    pumps[1].signal("STOP");
    wait_until_async(
        Duration::from_secs(10),
        "the paused pump's buckets to pass on",
        || {
            let h = holders(&[&redis], &namespaces);
            std::future::ready(h.len() == 32 && !h.values().any(|v| *v == owners[1]))
        },
    )
    .await;
    deliver_all(&apis, 40).await;
    pumps[1].signal("CONT");
    wait_until_async(
        Duration::from_secs(10),
        "the resumed pump to notice it lost its leases",
        || std::future::ready(pumps[1].log().contains("pump lease lost")),
    )
    .await;
    deliver_all(&apis, 40).await;
}

#[tokio::test]
async fn a_stopping_pump_hands_its_buckets_over_at_once() {
    let redis = RedisServer::start();
    let cfg = SundialConfig::new(redis.url());
    let (_gw, apis) = gateway(&cfg, 2).await;
    let namespaces: Vec<&str> = apis.iter().map(|(ns, _)| ns.as_str()).collect();
    let mut pumps: Vec<Sundial> = (0..2).map(|_| pumpd(&cfg)).collect();
    let owners: Vec<String> = pumps.iter().map(owner_of).collect();
    wait_until_async(
        Duration::from_secs(20),
        "both pumps to hold buckets",
        || {
            let h = holders(&[&redis], &namespaces);
            std::future::ready(h.len() == 32 && owners.iter().all(|o| h.values().any(|v| v == o)))
        },
    )
    .await;
    let stopped = Instant::now();
    pumps[0].signal("TERM");
    wait_until_async(Duration::from_secs(10), "its leases to be released", || {
        std::future::ready(
            !holders(&[&redis], &namespaces)
                .values()
                .any(|v| *v == owners[0]),
        )
    })
    .await;
    let released = stopped.elapsed();
    assert!(
        pumps[0]
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    eprintln!("leases released {released:?} after SIGTERM (expiry would take up to {TTL_MS} ms)");
    assert!(
        released < Duration::from_millis(TTL_MS / 2),
        "released, not expired: {released:?}"
    );
    wait_until_async(
        Duration::from_secs(10),
        "the other pump to hold everything",
        || {
            let h = holders(&[&redis], &namespaces);
            std::future::ready(h.len() == 32 && h.values().all(|v| *v == owners[1]))
        },
    )
    .await;
    deliver_all(&apis, 40).await;
}
