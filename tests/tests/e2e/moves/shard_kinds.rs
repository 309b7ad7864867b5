//! Jobs that move to other kinds of shard and back: a Redis Cluster, and a
//! Sentinel-managed master that fails over mid-move.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

use super::common::{SLOTS, as_before, draining, each_once, held, mixed_jobs, peek, reload};

#[tokio::test]
async fn jobs_move_from_a_standalone_shard_to_a_cluster_and_back() {
    let a = RedisServer::start();
    let c = sundial_tests::RedisCluster::start(3, 0);
    let shards = |wa: u32, wc: u32| {
        format!(
            "[pools.default]\nslots = {SLOTS}\nlanes = 8\nshards = [\
             {{ name = \"a\", url = \"{}\", weight = {wa} }}, \
             {{ name = \"c\", url = \"{}\", weight = {wc} }}]\n",
            a.url(),
            c.url()
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(shards(1, 0));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    let jobs = mixed_jobs(&api, 20).await;
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let mut before = Vec::new();
    for (q, id) in &jobs {
        before.push(peek(&api, q, id).await);
    }
    let mut servers: Vec<&RedisServer> = c.masters();
    servers.push(&a);
    // All to the cluster, then all back.
    for (wa, wc) in [(0, 1), (1, 0)] {
        cfg.pools = Some(shards(wa, wc));
        reload(&mut gw, &cfg).await;
        wait_until_async(Duration::from_secs(60), "the drain to end", || async {
            draining(&admin).await == 0
        })
        .await;
        each_once(&servers, &ids);
        let on_a = held(&[&a]).len();
        assert_eq!(
            on_a,
            if wa == 1 { ids.len() } else { 0 },
            "weights {wa}/{wc}"
        );
        as_before(&api, &jobs, &before, 120).await;
    }
}

#[tokio::test]
async fn jobs_move_to_a_sentinel_master_through_its_failover_and_back() {
    let a = RedisServer::start();
    let mut set = sundial_tests::SentinelSet::start();
    let sentinels: Vec<String> = set.addresses().iter().map(|a| format!("\"{a}\"")).collect();
    // The Sentinel shard answers a write once its replica holds it (as a
    // failover must lose none of the moved jobs).
    let shards = |wa: u32, ws: u32| {
        format!(
            "[pools.default]\nslots = {SLOTS}\nlanes = 8\nshards = [\
             {{ name = \"a\", url = \"{}\", weight = {wa} }}, \
             {{ name = \"s\", sentinel = {{ addresses = [{}], master = \"{}\" }}, \
             weight = {ws}, wait = {{ replicas = 1, timeout_ms = 1000 }} }}]\n",
            a.url(),
            sentinels.join(", "),
            sundial_tests::MASTER_NAME
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    // Small batches, four slots at a time: slow enough to fail over mid-move.
    cfg.extra = "watch_config = false\nlayout_check_ms = 300\n\
                 [mover]\nbatch = 50\nslots_at_once = 4\nsettle_ms = 1000"
        .to_owned();
    cfg.pools = Some(shards(1, 0));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    let jobs = mixed_jobs(&api, 200).await;
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let sample: Vec<&(String, String)> = jobs.iter().step_by(41).collect();
    let mut before = Vec::new();
    for (q, id) in &sample {
        before.push(peek(&api, q, id).await);
    }

    // All to the Sentinel shard; its master dies mid-move, the replica
    // takes over, and the old master comes back as its replica.
    cfg.pools = Some(shards(0, 1));
    reload(&mut gw, &cfg).await;
    let old = set.master_port().expect("a master");
    wait_until_async(Duration::from_secs(60), "the move to start", || {
        std::future::ready(
            held(&[set
                .servers
                .iter()
                .find(|s| s.port() == old)
                .expect("master")])
            .len()
                >= 300,
        )
    })
    .await;
    let left = held(&[&a]).len();
    assert!(left > 0, "the master dies mid-move");
    set.master().kill();
    let new = set.wait_failover(old, Duration::from_secs(30));
    set.servers
        .iter_mut()
        .find(|s| s.port() == old)
        .expect("the old master")
        .restart();
    wait_until_async(Duration::from_secs(120), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    let master = set
        .servers
        .iter()
        .find(|s| s.port() == new)
        .expect("new master");
    say_what_the_failover_did(&set, master, new, &gw);
    each_once(&[&a, master], &ids);
    assert_eq!(
        held(&[&a]).len(),
        0,
        "every job moved to the Sentinel shard"
    );
    as_before(&api, sample.iter().copied(), &before, 120).await;
    let moved = &admin.get("/drains").await.json["pools"][0]["mover"];
    let failed = gw.log().matches("moving a slot failed").count();
    assert_eq!(
        moved["jobs_moved"].as_u64(),
        Some(ids.len() as u64),
        "each job counted once, whatever the failover cut"
    );
    eprintln!(
        "{} jobs moved through a failover ({left} still at a when it began; \
         {failed} slot moves cut by it): {moved}",
        ids.len()
    );

    // And all back to the standalone shard.
    cfg.pools = Some(shards(1, 0));
    reload(&mut gw, &cfg).await;
    wait_until_async(
        Duration::from_secs(120),
        "the drain back to end",
        || async { draining(&admin).await == 0 },
    )
    .await;
    let master = set
        .servers
        .iter()
        .find(|s| s.port() == new)
        .expect("new master");
    say_what_the_failover_did(&set, master, new, &gw);
    each_once(&[&a, master], &ids);
    assert_eq!(held(&[master]).len(), 0, "every job moved back");
    as_before(&api, sample.iter().copied(), &before, 180).await;
    // A moved reserved job still comes back after its TTR, and a moved
    // ready job is consumed and acked.
    let r = api.get("/api/ns/q3?ttr=30").await;
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.json["job_id"].as_str().expect("id").to_owned();
    assert_eq!(
        api.delete(&format!("/api/ns/q3/job/{id}")).await.status,
        204
    );
    assert!(!held(&[&a, master]).contains_key(&id));
}

/// Should a job be lost: was the shard emptied under the gateway (a resync
/// from an empty master), or did the mover let a job go? Printed for the
/// test's output.
fn say_what_the_failover_did(
    set: &sundial_tests::SentinelSet,
    master: &RedisServer,
    port: u16,
    gw: &Sundial,
) {
    let replication: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut master.client())
        .unwrap_or_default();
    let events = set.log();
    eprintln!(
        "new master {port}: {}; the sentinels switched masters {} times and \
         converted {} servers to replicas; the gateway found the shard empty {} times",
        replication
            .lines()
            .filter(|l| l.starts_with("role") || l.starts_with("master_repl_offset"))
            .collect::<Vec<_>>()
            .join(", "),
        events.matches("+switch-master").count(),
        events.matches("+convert-to-slave").count(),
        gw.log().matches("without Sundial's metadata").count()
    );
}
