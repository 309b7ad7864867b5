//! Backlog gauges for autoscalers: summed over all processes they give the
//! true numbers, never a multiple.

use std::{collections::HashMap, time::Duration};

use sundial_tests::{
    Api, ShardKind, Store, Sundial, SundialConfig, create_token, wait_until_async,
};

fn pumpd(cfg: &SundialConfig) -> Sundial {
    Sundial::start_pumpd(cfg, "lease_ttl_ms = 2000\nmetrics_interval_ms = 200")
}

/// `sundial_queue_jobs` of one process: (queue, state) → value, summed over shards.
async fn gauges(p: &Sundial) -> HashMap<(String, String), f64> {
    let text = Api::new(p.admin(), None).get("/metrics").await.json;
    let mut out = HashMap::new();
    for line in text.as_str().unwrap_or_default().lines() {
        let Some(rest) = line.strip_prefix("sundial_queue_jobs{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        if label("namespace") != "ns" {
            continue;
        }
        *out.entry((label("queue"), label("state"))).or_default() +=
            value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

async fn summed(pumps: &[&Sundial]) -> (HashMap<(String, String), f64>, Vec<f64>) {
    let mut total: HashMap<(String, String), f64> = HashMap::new();
    let mut shares = Vec::new();
    for p in pumps {
        let g = gauges(p).await;
        shares.push(g.values().sum());
        for (k, v) in g {
            *total.entry(k).or_default() += v;
        }
    }
    (total, shares)
}

fn expected() -> HashMap<(String, String), f64> {
    [
        (("q", "ready"), 30.0),
        (("q", "reserved"), 10.0),
        (("q", "delayed"), 20.0),
        (("q", "dead"), 0.0),
        (("d", "dead"), 5.0),
        (("d", "ready"), 0.0),
        (("d", "reserved"), 0.0),
        (("d", "delayed"), 0.0),
    ]
    .into_iter()
    .map(|((q, s), n)| ((q.to_owned(), s.to_owned()), n))
    .collect()
}

async fn wait_for_true_sums(pumps: &[&Sundial], what: &str) -> Vec<f64> {
    let want = expected();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let (total, shares) = summed(pumps).await;
        let ok = want
            .iter()
            .all(|(k, v)| total.get(k).copied().unwrap_or(0.0) == *v);
        if ok {
            return shares;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: sums {total:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every process reports a share and the shares sum to the truth.
async fn spread_and_true(pumps: &[&Sundial], what: &str) -> Vec<f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let shares = wait_for_true_sums(pumps, what).await;
        if shares.iter().all(|s| *s > 0.0) {
            return shares;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not every process took a share: {shares:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_every_shard_kind!(backlog_gauges_sum_to_the_truth_over_two_and_three_processes);

async fn backlog_gauges_sum_to_the_truth_over_two_and_three_processes(kind: ShardKind) {
    let store = Store::start(kind);
    let mut cfg = SundialConfig::new(store.url());
    // Queues over 64 lanes: their 70 jobs spread over about 40 of the 64
    // slots, so every one of three pump processes holds some (each misses
    // all of them with a chance of about (2/3)^40).
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 64\nlanes = 64\nshards = [{{ url = \"{}\" }}]\n",
        store.url()
    ));
    cfg.pump = false;
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    for i in 0..40 {
        api.publish("ns", "q", "", format!("r{i}").as_bytes()).await;
    }
    for i in 0..20 {
        api.publish("ns", "q", "delay=3600", format!("l{i}").as_bytes())
            .await;
    }
    for i in 0..5 {
        api.publish("ns", "d", "tries=1", format!("x{i}").as_bytes())
            .await;
    }
    assert_eq!(
        api.get("/api/ns/q?count=10&ttr=600")
            .await
            .json
            .as_array()
            .map(Vec::len),
        Some(10)
    );
    assert_eq!(
        api.get("/api/ns/d?count=5&ttr_ms=1")
            .await
            .json
            .as_array()
            .map(Vec::len),
        Some(5)
    );

    cfg.pump = true;
    let p1 = pumpd(&cfg);
    let p2 = pumpd(&cfg);
    wait_until_async(
        Duration::from_secs(20),
        "the dead letter to fill",
        || async { api.get("/api/ns/d/deadletter/size").await.json["size"] == 5 },
    )
    .await;
    let shares = spread_and_true(&[&p1, &p2], "two processes").await;
    eprintln!("two processes report {shares:?} of 65 jobs");
    let mut p3 = pumpd(&cfg);
    let shares = spread_and_true(&[&p1, &p2, &p3], "three processes").await;
    eprintln!("three processes report {shares:?} of 65 jobs");
    // One dies; the others take its slots and its share.
    p3.kill();
    wait_for_true_sums(&[&p1, &p2], "after a SIGKILL").await;
}

/// `sundial_queue_oldest_ready_seconds` of `ns/queue` on one process: the
/// largest over its shards, or `None` with no series.
async fn oldest_ready(p: &Sundial, queue: &str) -> Option<f64> {
    let text = Api::new(p.admin(), None).get("/metrics").await.json;
    let want = format!("queue=\"{queue}\"");
    text.as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("sundial_queue_oldest_ready_seconds{"))
        .filter(|l| l.contains("namespace=\"ns\"") && l.contains(&want))
        .filter_map(|l| l.rsplit_once("} ")?.1.parse::<f64>().ok())
        .reduce(f64::max)
}

#[tokio::test]
async fn the_oldest_ready_gauge_grows_while_work_waits_and_drops_to_zero() {
    let store = Store::start(ShardKind::Standalone);
    let mut cfg = SundialConfig::new(store.url());
    cfg.pump_extra = "metrics_interval_ms = 100".to_owned();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "", b"waiting").await;
    api.publish("ns", "later", "delay=3600", b"not ready").await;
    wait_until_async(Duration::from_secs(20), "the job to wait 0.5 s", || async {
        oldest_ready(&gw, "q").await.is_some_and(|s| s >= 0.5)
    })
    .await;
    assert_eq!(
        oldest_ready(&gw, "later").await,
        None,
        "a delayed job is not waiting"
    );
    let got = api.get("/api/ns/q?ttr=600").await;
    let id = got.json["job_id"].as_str().expect("a job").to_owned();
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    wait_until_async(
        Duration::from_secs(20),
        "the gauge to drop to 0",
        || async { oldest_ready(&gw, "q").await == Some(0.0) },
    )
    .await;
}
