//! Adding and removing a shard of a pool that holds jobs, under load, with
//! two gateways that reload a moment apart (each with its own config file,
//! as on two machines), consumers acknowledging on the other gateway.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use redis::Commands;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

const SLOTS: u32 = 16;

fn pool(shards: &[(&str, &RedisServer, u32)]) -> String {
    let list: Vec<String> = shards
        .iter()
        .map(|(name, r, w)| {
            format!(
                "{{ name = \"{name}\", url = \"{}\", weight = {w} }}",
                r.url()
            )
        })
        .collect();
    format!(
        "[pools.default]\nslots = {SLOTS}\nlanes = 8\nshards = [{}]\n",
        list.join(", ")
    )
}

fn jobs_on(redis: &RedisServer) -> u64 {
    let mut c = redis.client();
    (0..SLOTS)
        .map(|s| {
            c.hlen::<_, u64>(sundial_core::keys::SlotKeys::new(s).jobs())
                .expect("hlen")
        })
        .sum()
}

/// Draining layouts of the default pool, as `GET /drains` reports them.
async fn draining(admin: &Api) -> usize {
    let r = admin.get("/drains").await;
    r.json["pools"][0]["draining"]
        .as_array()
        .map_or(usize::MAX, Vec::len)
}

async fn reload(gw: &mut Sundial, cfg: &SundialConfig) {
    gw.rewrite(cfg);
    let r = Api::new(gw.admin(), None).post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
}

/// Producers and workers on two gateways, on queue `q` of namespace `ns`:
/// on each gateway `per` publishers (every `delayed`th job delayed by 1 s,
/// so that some wait in the timer while things move) and as many workers,
/// each job acknowledged on the other gateway. An ack that did nothing
/// shows as the job delivered twice (after its TTR of 30 s) or, if the
/// test ends first, as a job left at the end. With `busy_ok`, a publish
/// may be refused with 503 (nothing stored; its client would try again).
struct Load {
    stop_publishing: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    published: Arc<Mutex<HashSet<String>>>,
    consumed: Arc<Mutex<Vec<String>>>,
    publishers: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(apis: &[Api; 2], per: usize, delayed: u64, busy_ok: bool) -> Self {
        let mut load = Self {
            stop_publishing: Arc::default(),
            stop_consuming: Arc::default(),
            published: Arc::default(),
            consumed: Arc::default(),
            publishers: Vec::new(),
            consumers: Vec::new(),
        };
        for (i, api) in apis.iter().enumerate() {
            for _ in 0..per {
                let (papi, stop, published) = (
                    api.clone(),
                    load.stop_publishing.clone(),
                    load.published.clone(),
                );
                load.publishers.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let query = if n.is_multiple_of(delayed) {
                            "delay=1"
                        } else {
                            ""
                        };
                        let r = papi
                            .put(&format!("/api/ns/q?{query}"), format!("{i}-{n}").as_bytes())
                            .await;
                        match r.status {
                            201 => {
                                published
                                    .lock()
                                    .expect("lock")
                                    .insert(r.json["job_id"].as_str().expect("id").to_owned());
                            }
                            503 if busy_ok => {}
                            _ => panic!("publish during a move: {r:?}"),
                        }
                        n += 1;
                        tokio::time::sleep(Duration::from_millis(4)).await;
                    }
                }));
                let (api, stop, consumed) = (
                    api.clone(),
                    load.stop_consuming.clone(),
                    load.consumed.clone(),
                );
                let acker = apis[1 - i].clone();
                load.consumers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let r = api.get("/api/ns/q?timeout=1&count=10&ttr=30").await;
                        match r.status {
                            200 => {
                                for j in r.json.as_array().expect("array") {
                                    let id = j["job_id"].as_str().expect("id").to_owned();
                                    let ack = acker.delete(&format!("/api/ns/q/job/{id}")).await;
                                    assert_eq!(ack.status, 204);
                                    consumed.lock().expect("lock").push(id);
                                }
                            }
                            404 => {}
                            other => panic!("consume during a move: {other} {r:?}"),
                        }
                    }
                }));
            }
        }
        load
    }

    /// Waits until `more` jobs more than now were published.
    async fn progress(&self, what: &str, more: usize) {
        let before = self.published.lock().expect("lock").len();
        wait_until_async(Duration::from_secs(10), what, || {
            std::future::ready(self.published.lock().expect("lock").len() > before + more)
        })
        .await;
    }

    /// Stops publishing, waits for every published job to be consumed (or
    /// 30 s), stops the workers; returns the jobs published and those
    /// consumed, in order, each time it was delivered.
    async fn finish(self) -> (HashSet<String>, Vec<String>) {
        self.stop_publishing.store(true, Ordering::Relaxed);
        for p in self.publishers {
            p.await.expect("publisher");
        }
        let expected = self.published.lock().expect("lock").clone();
        let consumed = self.consumed.clone();
        wait_until_async(
            Duration::from_secs(30),
            "every published job to be consumed",
            || std::future::ready(consumed.lock().expect("lock").len() >= expected.len()),
        )
        .await;
        self.stop_consuming.store(true, Ordering::Relaxed);
        for c in self.consumers {
            c.await.expect("consumer");
        }
        let consumed = self.consumed.lock().expect("lock").clone();
        let unique: HashSet<&String> = consumed.iter().collect();
        assert_eq!(unique.len(), consumed.len(), "no job was delivered twice");
        (expected, consumed)
    }
}

#[tokio::test]
async fn a_shard_is_added_then_removed_under_load_and_nothing_is_lost() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    let mut gw1 = Sundial::start(&cfg);
    let mut gw2 = Sundial::start(&cfg);
    let token = create_token(&gw1.admin(), "ns").await;
    let apis = [
        Api::new(gw1.api(), Some(&token)),
        Api::new(gw2.api(), Some(&token)),
    ];
    wait_until_async(
        Duration::from_secs(5),
        "the token on both gateways",
        || async { apis[1].get("/api/ns/q/size").await.status == 200 },
    )
    .await;

    let load = Load::start(&apis, 2, 5, false);
    let admin = Api::new(gw1.admin(), None);
    let progress = |what: &'static str| load.progress(what, 100);
    progress("load before the move").await;

    // Add shard c: gateway 1 reloads, gateway 2 two seconds later.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 1)]));
    reload(&mut gw1, &cfg).await;
    progress("load while the gateways disagree").await;
    tokio::time::sleep(Duration::from_secs(2)).await; // the disagreement is what is tested
    reload(&mut gw2, &cfg).await;
    assert!(draining(&admin).await >= 1, "the old layout drains");
    wait_until_async(
        Duration::from_secs(60),
        "the old layout to drain and retire",
        || async { draining(&admin).await == 0 },
    )
    .await;
    assert!(
        jobs_on(&c) > 0 || load.published.lock().expect("lock").len() < 10,
        "c took jobs"
    );

    // Remove shard c: weight 0 first, then out of the config once drained.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 0)]));
    reload(&mut gw1, &cfg).await;
    progress("load while c drains").await;
    reload(&mut gw2, &cfg).await;
    wait_until_async(
        Duration::from_secs(60),
        "c to drain and the layout to retire",
        || async { draining(&admin).await == 0 },
    )
    .await;
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw1, &cfg).await;
    reload(&mut gw2, &cfg).await;
    progress("load after c left").await;

    let (expected, consumed) = load.finish().await;
    let unique: HashSet<String> = consumed.into_iter().collect();
    let missing: Vec<&String> = expected.difference(&unique).collect();
    let extra: Vec<&String> = unique.difference(&expected).collect();
    if !missing.is_empty() || !extra.is_empty() {
        let mut found = Vec::new();
        for id in missing.iter().take(5) {
            for (name, srv) in [("a", &a), ("b", &b), ("c", &c)] {
                for slot in 0..SLOTS {
                    let raw: Option<Vec<u8>> = srv
                        .client()
                        .hget(sundial_core::keys::SlotKeys::new(slot).jobs(), id.as_str())
                        .expect("hget");
                    if let Some(raw) = raw {
                        found.push(format!("{id} on {name}/{slot} state {}", raw[0]));
                    }
                }
            }
        }
        panic!(
            "{} of {} published jobs not consumed, {} consumed that were not published; first missing: {found:?}",
            missing.len(),
            expected.len(),
            extra.len()
        );
    }
    assert_eq!(jobs_on(&c), 0, "the removed shard ends empty");
    assert_eq!(jobs_on(&a) + jobs_on(&b), 0, "every location ends empty");
    eprintln!(
        "{} jobs published and consumed across an added and a removed shard",
        expected.len()
    );
}

/// Gateways that reload only when told (each its own file) and check the
/// pins often, on a pool of shards a and b.
fn skew_config(a: &RedisServer, b: &RedisServer) -> SundialConfig {
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pool(&[("a", a, 1), ("b", b, 1)]));
    cfg
}

/// Job `id` of `queue` is peeked and acknowledged through `api`, and is
/// then gone from every shard.
async fn found_and_acked(api: &Api, queue: &str, id: &str, shards: &[(&str, &RedisServer)]) {
    let r = api.get(&format!("/api/ns/{queue}/job/{id}")).await;
    assert_eq!(r.status, 200, "peek {id}: {r:?}");
    assert_eq!(
        api.delete(&format!("/api/ns/{queue}/job/{id}"))
            .await
            .status,
        204
    );
    assert_eq!(where_is(id, shards), None, "{id} is gone once acknowledged");
}

/// Where Redis holds job `id`: (shard name, slot), or `None`.
fn where_is(id: &str, shards: &[(&str, &RedisServer)]) -> Option<(String, u32)> {
    for (name, srv) in shards {
        for slot in 0..SLOTS {
            let held: bool = srv
                .client()
                .hexists(sundial_core::keys::SlotKeys::new(slot).jobs(), id)
                .expect("hexists");
            if held {
                return Some(((*name).to_owned(), slot));
            }
        }
    }
    None
}

#[tokio::test]
async fn a_gateway_whose_config_is_behind_finds_every_job_by_id() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let shards = [("a", &a), ("b", &b), ("c", &c)];
    let mut cfg = skew_config(&a, &b);
    let mut behind = Sundial::start(&cfg);
    let mut ahead = Sundial::start(&cfg);
    let token = create_token(&behind.admin(), "ns").await;
    let (old, new) = (
        Api::new(behind.api(), Some(&token)),
        Api::new(ahead.api(), Some(&token)),
    );
    wait_until_async(Duration::from_secs(5), "the token on both", || async {
        new.get("/api/ns/q/size").await.status == 200
    })
    .await;

    // One gateway (its own config file, as on another machine) gets shard
    // c; the other's file does not have it yet, so it cannot follow.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 1)]));
    reload(&mut ahead, &cfg).await;
    let admin = Api::new(ahead.admin(), None);
    let drains = admin.get("/drains").await.json;
    let pool_report = &drains["pools"][0];
    assert_ne!(pool_report["writes"], pool_report["current"], "{drains}");
    // Long enough for several rounds of views: writes must stay held.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Jobs published where the config is ahead, in queues over every slot:
    // each is found, peeked and acknowledged where the config is behind.
    let mut ids = Vec::new();
    for i in 0..60 {
        let queue = format!("q{i}");
        ids.push((queue.clone(), new.publish("ns", &queue, "", b"x").await));
    }
    assert_eq!(
        jobs_on(&c),
        0,
        "no job goes to c while a gateway cannot see it"
    );
    for (queue, id) in &ids {
        let r = old.get(&format!("/api/ns/{queue}/job/{id}")).await;
        assert_eq!(r.status, 200, "peek {id} where the config is behind: {r:?}");
        let r = new.get(&format!("/api/ns/{queue}?ttr=600")).await;
        assert_eq!(r.json["job_id"], id.as_str(), "{r:?}");
        assert_eq!(
            old.delete(&format!("/api/ns/{queue}/job/{id}"))
                .await
                .status,
            204
        );
        assert_eq!(
            where_is(id, &shards),
            None,
            "{id} acknowledged where the config is behind"
        );
    }

    // Once the other gateway has c too, writes follow the current layout.
    reload(&mut behind, &cfg).await;
    wait_until_async(
        Duration::from_secs(10),
        "writes to follow the new layout",
        || async {
            let r = admin.get("/drains").await.json;
            r["pools"][0]["writes"] == r["pools"][0]["current"]
        },
    )
    .await;
    let mut on_c = 0;
    for i in 0..60 {
        let queue = format!("q{i}");
        let id = new.publish("ns", &queue, "", b"y").await;
        if where_is(&id, &shards).is_some_and(|(s, _)| s == "c") {
            on_c += 1;
        }
        found_and_acked(&old, &queue, &id, &shards).await;
    }
    assert!(
        on_c > 0,
        "c takes its slots' jobs once every gateway knows it"
    );
}

#[tokio::test]
async fn a_gateway_that_starts_ahead_holds_its_writes_for_the_one_behind() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let shards = [("a", &a), ("b", &b), ("c", &c)];
    let mut cfg = skew_config(&a, &b);
    let behind = Sundial::start(&cfg);
    let token = create_token(&behind.admin(), "ns").await;
    let old = Api::new(behind.api(), Some(&token));
    old.publish("ns", "q0", "", b"before").await;
    // Let the running gateway announce what it knows and writes.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A new gateway starts with shard c in its config.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1), ("c", &c, 1)]));
    let ahead = Sundial::start(&cfg);
    let new = Api::new(ahead.api(), Some(&token));
    let drains = Api::new(ahead.admin(), None).get("/drains").await.json;
    assert_eq!(drains["pools"][0]["writes"], "a:1,b:1", "{drains}");
    for i in 0..40 {
        let queue = format!("q{i}");
        let id = new.publish("ns", &queue, "", b"x").await;
        assert_ne!(where_is(&id, &shards).map(|(s, _)| s), Some("c".to_owned()));
        found_and_acked(&old, &queue, &id, &shards).await;
    }
}

/// `sundial wipe-shard --url <shard> --yes`, run to its end.
fn wipe(gw: &Sundial, shard: &RedisServer) -> sundial_tests::CliRun {
    gw.cli(&["wipe-shard", "--url", &shard.url(), "--yes"], &[])
}

#[tokio::test]
async fn a_shard_that_left_its_pool_is_wiped_of_every_key() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // Queues over every slot, all consumed: b keeps their tables and totals.
    for i in 0..40 {
        let queue = format!("q{i}");
        let id = api.publish("ns", &queue, "", b"x").await;
        assert_eq!(
            api.delete(&format!("/api/ns/{queue}/job/{id}"))
                .await
                .status,
            204
        );
    }
    // Jobs due in an hour, some of them on b.
    let mut later = Vec::new();
    for i in 0..20 {
        let queue = format!("q{i}");
        later.push((
            queue.clone(),
            api.publish("ns", &queue, "delay=3600", b"later").await,
        ));
    }
    let on_b = jobs_on(&b);
    assert!(on_b > 0, "some of them on b");

    // Refused, with the reason, and nothing removed: a gateway still lists
    // the shard; then (the gateway stopped, withdrawing its view) a job is
    // there.
    let keys = |r: &RedisServer| r.client().keys::<_, Vec<String>>("*").expect("keys");
    let r = gw.cli(&["wipe-shard", "--url", &b.url()], &[]);
    assert!(r.code != 0 && r.stderr.contains("--yes"), "{r:?}");
    // A Redis that is not a shard is not touched.
    let stranger = RedisServer::start();
    let _: () = stranger.client().set("sd:mine", "x").expect("set");
    let r = wipe(&gw, &stranger);
    assert!(
        r.code != 0 && r.stderr.contains("not a Sundial shard"),
        "{r:?}"
    );
    assert_eq!(keys(&stranger), ["sd:mine"]);
    // The shard's data: its slots' keys and sd:meta (views and pump leases
    // come and go with the processes).
    let data = |r: &RedisServer| {
        keys(r)
            .into_iter()
            .filter(|k| (k.contains("}:") && !k.ends_with(":lease")) || k == "sd:meta")
            .count()
    };
    let before = data(&b);
    let r = wipe(&gw, &b);
    assert!(r.code != 0 && r.stderr.contains("live gateway"), "{r:?}");
    assert_eq!(data(&b), before, "a refused wipe removes nothing");
    gw.signal("TERM");
    assert!(gw.wait_exit(Duration::from_secs(15)).is_some(), "stopped");
    let r = wipe(&gw, &b);
    assert!(
        r.code != 0 && r.stderr.contains(&format!("holds {on_b} job(s)")),
        "{r:?}"
    );
    assert_eq!(data(&b), before, "a refused wipe removes nothing");
    gw.restart();
    let api = Api::new(gw.api(), Some(&token));
    for (queue, id) in &later {
        let r = api.delete(&format!("/api/ns/{queue}/job/{id}")).await;
        assert_eq!(r.status, 204);
    }

    // b leaves: weight 0, drained, then out of the config.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 0)]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(30), "b's layout to retire", || async {
        draining(&admin).await == 0
    })
    .await;
    cfg.pools = Some(pool(&[("a", &a, 1)]));
    reload(&mut gw, &cfg).await;
    // The mover cleared the slots b gave away. What a drain without the
    // mover leaves (it waits for the jobs to go): a queue table, and an id
    // left in a ready list after its job went (as a deletion from far
    // inside a long list leaves it). Wiped with the rest.
    let k0 = sundial_core::keys::SlotKeys::new(0);
    let _: () = b
        .client()
        .hset_multiple(k0.queues(), &[("ns/q0", "1"), ("#1", "ns/q0"), ("#", "1")])
        .expect("hset");
    let _: () = b
        .client()
        .rpush(k0.ready("ns/q0"), "01J00000000000000000000000")
        .expect("rpush");
    // What it keeps is the documented set: per slot its queue table,
    // totals, lease and wheel index, wheel lists of the delayed jobs deleted
    // early, and the shard's own three keys (and expiring views).
    let left = keys(&b);
    fn per_slot(k: &str) -> bool {
        k.split_once("}:").is_some_and(|(_, rest)| {
            ["c", "q", "lease", "s"].contains(&rest)
                || ["w:", "r:", "d:"].iter().any(|p| rest.starts_with(p))
        })
    }
    let odd: Vec<&String> = left
        .iter()
        .filter(|k| {
            !per_slot(k)
                && !["sd:meta", "sd:pumps", "sd:views"].contains(&k.as_str())
                && !k.starts_with("sd:view:")
        })
        .collect();
    assert!(odd.is_empty(), "undocumented keys left: {odd:?}");
    let bounded = left
        .iter()
        .filter(|k| !["}:w:", "}:r:", "}:d:"].iter().any(|p| k.contains(p)))
        .count();
    assert!(bounded <= 4 * SLOTS as usize + 4, "{left:?}");
    // Its view is withdrawn at once; its pump heartbeat lapses in 3 s.
    wait_until_async(
        Duration::from_secs(15),
        "the wipe to be allowed",
        || async { wipe(&gw, &b).code == 0 },
    )
    .await;
    assert_eq!(
        keys(&b),
        Vec::<String>::new(),
        "nothing of Sundial's is left"
    );
    // The pool goes on without it.
    let id = api.publish("ns", "q0", "", b"after").await;
    assert_eq!(api.get("/api/ns/q0").await.json["job_id"], id.as_str());
}

/// Publishes `n` jobs to `queue` in bulks of 64; returns their ids.
async fn bulk(api: &Api, queue: &str, query: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let k = (n - ids.len()).min(64);
        let body = format!("[{}]", vec!["{\"n\":1}"; k].join(","));
        let r = api
            .put(&format!("/api/ns/{queue}/bulk?{query}"), body.as_bytes())
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        for id in r.json["job_ids"].as_array().expect("ids") {
            ids.push(id.as_str().expect("id").to_owned());
        }
    }
    ids
}

/// Every job id the servers hold, in any state or in transit to another
/// shard, with how many times it is held (a cluster's masters are listed
/// one by one).
fn held(shards: &[&RedisServer]) -> std::collections::HashMap<String, usize> {
    let mut out = std::collections::HashMap::new();
    for srv in shards {
        let mut c = srv.client();
        // The keys this server holds (a cluster master holds its slots').
        let mut hashes: Vec<String> = c.keys("sd:{*}:j").expect("keys");
        hashes.extend(c.keys::<_, Vec<String>>("sd:{*}:m").expect("keys"));
        for key in hashes {
            let ids: Vec<String> = c.hkeys(key).expect("hkeys");
            for id in ids {
                *out.entry(id).or_default() += 1;
            }
        }
    }
    out
}

/// Each of `ids` is held exactly once, and nothing else is.
fn each_once(shards: &[&RedisServer], ids: &[String]) {
    let held = held(shards);
    let twice: Vec<(&String, &usize)> = held.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "held more than once: {twice:?}");
    let missing: Vec<&String> = ids.iter().filter(|id| !held.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} lost, first {:?}",
        missing.len(),
        missing.first()
    );
    assert_eq!(held.len(), ids.len(), "no job appeared from nowhere");
}

/// What a peek by id shows, without the fields that change with time.
async fn peek(api: &Api, queue: &str, id: &str) -> (serde_json::Value, u64, u64) {
    let r = api.get(&format!("/api/ns/{queue}/job/{id}")).await;
    assert_eq!(r.status, 200, "peek {id}: {r:?}");
    let mut j = r.json;
    let ttl = j["ttl"].as_u64().expect("ttl");
    let age = j["elapsed_ms"].as_u64().expect("elapsed");
    j["ttl"] = serde_json::Value::Null;
    j["elapsed_ms"] = serde_json::Value::Null;
    (j, ttl, age)
}

/// Each of `jobs` shows as it did in `before` (peeks taken earlier): every
/// field the same, its TTL down by at most `slack` s, its age not down.
async fn as_before<'a>(
    api: &Api,
    jobs: impl IntoIterator<Item = &'a (String, String)>,
    before: &[(serde_json::Value, u64, u64)],
    slack: u64,
) {
    for ((q, id), (was, ttl, age)) in jobs.into_iter().zip(before) {
        let (now, ttl_now, age_now) = peek(api, q, id).await;
        assert_eq!(&now, was, "{q}/{id}");
        assert!(
            ttl_now <= *ttl && ttl - ttl_now <= slack,
            "{id}: ttl {ttl} then {ttl_now}"
        );
        assert!(age_now >= *age, "{id}: age {age} then {age_now}");
    }
}

/// Each queue of `jobs` with its running totals (published, consumed), as
/// its stats show them.
async fn totals(api: &Api, jobs: &[(String, String)]) -> Vec<(String, u64, u64)> {
    let queues: std::collections::BTreeSet<&String> = jobs.iter().map(|(q, _)| q).collect();
    let mut out = Vec::new();
    for q in queues {
        let s = api.get(&format!("/api/ns/{q}/stats")).await.json;
        let n = |k: &str| s[k].as_u64().expect("a total");
        out.push((q.clone(), n("published_total"), n("consumed_total")));
    }
    out
}

/// The jobs a moved slot holds, over eight queues: per queue `delayed`
/// due in an hour and 10 ready, then 5 of `q0` reserved by a worker that
/// went away, and 2 of each queue dead (their worker went away on their
/// last try). Each (queue, id).
async fn mixed_jobs(api: &Api, delayed: usize) -> Vec<(String, String)> {
    let mut jobs: Vec<(String, String)> = Vec::new();
    for i in 0..8 {
        let q = format!("q{i}");
        for id in bulk(api, &q, "delay=3600&tries=3", delayed).await {
            jobs.push((q.clone(), id));
        }
        for id in bulk(api, &q, "tries=2", 10).await {
            jobs.push((q.clone(), id));
        }
        for id in bulk(api, &format!("d{i}"), "tries=1", 2).await {
            jobs.push((format!("d{i}"), id));
        }
        let r = api.get(&format!("/api/ns/d{i}?count=2&ttr=1")).await;
        assert_eq!(r.json.as_array().map(Vec::len), Some(2), "{r:?}");
    }
    let r = api.get("/api/ns/q0?count=5&ttr=600").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(5), "{r:?}");
    wait_until_async(Duration::from_secs(10), "the dead jobs", || async {
        for i in 0..8 {
            let r = api.get(&format!("/api/ns/d{i}/deadletter/size")).await;
            if r.json["size"] != 2 {
                return false;
            }
        }
        true
    })
    .await;
    jobs
}

/// A gateway on a pool of shard `a` alone (reloaded only when told,
/// checking the pins often), with `extra` config lines, and a client with
/// a token of `ns`.
async fn on_a(a: &RedisServer, extra: &str) -> (SundialConfig, Sundial, Api) {
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = format!("watch_config = false\nlayout_check_ms = 300\n{extra}");
    cfg.pools = Some(pool(&[("a", a, 1)]));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    (cfg, gw, api)
}

#[tokio::test]
async fn a_drain_moves_the_jobs_nobody_consumes_each_once_and_as_it_was() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    // What made a drain wait forever: jobs due in an hour, ready jobs with
    // no worker, a worker that went away with its jobs, dead jobs.
    let mut jobs: Vec<(String, String)> = Vec::new();
    for i in 0..20 {
        let q = format!("later{i}");
        for id in bulk(&api, &q, "delay=3600&ttl=7200&tries=3", 10).await {
            jobs.push((q.clone(), id));
        }
    }
    for i in 0..5 {
        let q = format!("idle{i}");
        for id in bulk(&api, &q, "tries=2", 10).await {
            jobs.push((q.clone(), id));
        }
    }
    for id in bulk(&api, "dead", "tries=1", 20).await {
        jobs.push(("dead".to_owned(), id));
    }
    let r = api.get("/api/ns/dead?count=20&ttr=1").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(20), "{r:?}");
    for id in bulk(&api, "gone", "tries=3&ttl=7200", 10).await {
        jobs.push(("gone".to_owned(), id));
    }
    let r = api.get("/api/ns/gone?count=10&ttr=600").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(10), "{r:?}");
    wait_until_async(Duration::from_secs(10), "20 dead jobs", || async {
        api.get("/api/ns/dead/deadletter/size").await.json["size"] == 20
    })
    .await;
    let mut before = Vec::new();
    for (q, id) in &jobs {
        before.push(peek(&api, q, id).await);
    }
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let totals_before = totals(&api, &jobs).await;

    // A shard is added: its slots' jobs move to it, though nobody consumes.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    let admin = Api::new(gw.admin(), None);
    let started = std::time::Instant::now();
    reload(&mut gw, &cfg).await;
    wait_until_async(Duration::from_secs(60), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    let took = started.elapsed();
    assert!(jobs_on(&b) > 0, "b took its slots' jobs");
    each_once(&[&a, &b], &ids);
    as_before(&api, &jobs, &before, 90).await;
    assert_eq!(totals(&api, &jobs).await, totals_before, "running totals");
    assert_eq!(
        api.get("/api/ns/dead/deadletter/size").await.json["size"],
        20
    );
    let mover = &admin.get("/drains").await.json["pools"][0]["mover"];
    eprintln!("{} jobs moved in {took:?}: {mover}", mover["jobs_moved"]);

    // The first shard then leaves at once: every job moves to b.
    cfg.pools = Some(pool(&[("a", &a, 0), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    wait_until_async(Duration::from_secs(60), "a's drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    assert_eq!(jobs_on(&a), 0);
    each_once(&[&a, &b], &ids);
    assert_eq!(totals(&api, &jobs).await, totals_before, "running totals");
    let slot_keys: Vec<String> = a
        .client()
        .keys::<_, Vec<String>>("sd:{*")
        .expect("keys")
        .into_iter()
        .filter(|k| !k.ends_with(":lease"))
        .collect();
    assert!(
        slot_keys.is_empty(),
        "a keeps only pump leases: {slot_keys:?}"
    );
    // The moved jobs still work: a ready job is consumed and acknowledged.
    let r = api.get("/api/ns/idle0?ttr=30").await;
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.json["job_id"].as_str().expect("id");
    assert_eq!(
        api.delete(&format!("/api/ns/idle0/job/{id}")).await.status,
        204
    );
    assert!(!held(&[&a, &b]).contains_key(id));
}

/// Waits until `redis` has loaded its data (a Redis loading its AOF
/// answers `LOADING` to every command).
async fn loaded(redis: &RedisServer) {
    wait_until_async(Duration::from_secs(30), "Redis to load its data", || {
        std::future::ready(
            redis::cmd("PING")
                .query::<String>(&mut redis.client())
                .is_ok(),
        )
    })
    .await;
}

/// Waits until `n` more jobs than now are at `to`.
async fn more_moved_to(to: &RedisServer, n: u64, what: &str) {
    let cut = jobs_on(to);
    wait_until_async(Duration::from_secs(30), what, || {
        std::future::ready(jobs_on(to) >= cut + n)
    })
    .await;
}

#[tokio::test]
async fn a_mover_killed_and_both_redis_restarted_mid_move_lose_and_double_no_job() {
    // Both shards write to disk each second, as is usual.
    let aof = ["--appendonly", "yes", "--appendfsync", "everysec"];
    let (mut a, mut b) = (RedisServer::start_with(&aof), RedisServer::start_with(&aof));
    // Small batches, one slot at a time: slow enough to cut mid-move.
    let mover = "[mover]\nbatch = 50\nslots_at_once = 1\nlease_ms = 2000\nsettle_ms = 1000";
    let (mut cfg, mut gw, api) = on_a(&a, mover).await;
    // Delayed, ready, reserved and dead jobs: 4,096.
    let jobs = mixed_jobs(&api, 500).await;
    let ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    let mut before = Vec::new();
    for (q, id) in &jobs {
        before.push(peek(&api, q, id).await);
    }

    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    more_moved_to(&b, 300, "the move to start").await;
    // The mover dies mid-move, and starts again.
    gw.kill();
    gw.restart();
    more_moved_to(&b, 300, "the move to go on after the mover's restart").await;
    // The new shard's Redis dies mid-move and comes back from its disk.
    b.restart();
    loaded(&b).await;
    more_moved_to(&b, 300, "the move to go on after b's restart").await;
    // Then the old shard's.
    let admin = Api::new(gw.admin(), None);
    let drains = admin.get("/drains").await.json;
    let left = drains["pools"][0]["draining"][0]["jobs_left"].as_u64();
    assert!(
        left.is_some_and(|n| n > 0),
        "a is restarted mid-move: {drains}"
    );
    a.restart();
    wait_until_async(Duration::from_secs(120), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    assert!(jobs_on(&b) > 0);
    each_once(&[&a, &b], &ids);
    // Each job as it was: state, tries, attributes, body, TTL.
    as_before(&api, &jobs, &before, 240).await;
}

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

/// Two pools, `default` on `a` and `b` on `b`, 16 slots each (`b` with
/// other lanes, so a job's slot differs between them).
fn two_pools(a: &RedisServer, b: &RedisServer) -> SundialConfig {
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(format!(
        "{}[pools.b]\nslots = 16\nlanes = 2\nshards = [{{ name = \"b\", url = \"{}\" }}]\n",
        pool(&[("a", a, 1)]),
        b.url()
    ));
    cfg
}

/// One gateway over [`two_pools`], with a token of `ns` in `default`.
struct TwoPools {
    /// Kept running for the test.
    _gw: Sundial,
    a: RedisServer,
    b: RedisServer,
    api: Api,
    admin: Api,
}

impl TwoPools {
    async fn start() -> Self {
        let (a, b) = (RedisServer::start(), RedisServer::start());
        let gw = Sundial::start(&two_pools(&a, &b));
        let token = create_token(&gw.admin(), "ns").await;
        let (api, admin) = (Api::new(gw.api(), Some(&token)), Api::new(gw.admin(), None));
        Self {
            _gw: gw,
            a,
            b,
            api,
            admin,
        }
    }

    /// Moves `ns` to pool `to` through the admin API, and waits until it
    /// is `moved` (at most `within`).
    async fn move_to(&self, to: &str, within: Duration) {
        let r = self
            .admin
            .call(
                reqwest::Method::POST,
                "/namespaces/ns/move",
                Some(format!("{{\"to\":\"{to}\"}}").into_bytes()),
                &[],
            )
            .await;
        assert_eq!(r.status, 202, "{r:?}");
        wait_until_async(within, "the move to end", || async {
            self.admin.get("/namespaces/ns/move").await.json["state"] == "moved"
        })
        .await;
    }
}

#[tokio::test]
async fn a_namespace_moves_to_another_pool_under_load_and_nothing_is_lost() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let cfg = two_pools(&a, &b);
    let gw1 = Sundial::start(&cfg);
    let gw2 = Sundial::start(&cfg);
    let token = create_token(&gw1.admin(), "ns").await;
    let apis = [
        Api::new(gw1.api(), Some(&token)),
        Api::new(gw2.api(), Some(&token)),
    ];
    wait_until_async(Duration::from_secs(5), "the token on both", || async {
        apis[1].get("/api/ns/q/size").await.status == 200
    })
    .await;
    // Jobs nobody consumes during the move: due in an hour, ready in a
    // queue without workers, dead.
    let api = &apis[0];
    let mut kept: Vec<(String, String)> = Vec::new();
    for id in bulk(api, "later", "delay=3600&tries=3&ttl=7200", 100).await {
        kept.push(("later".to_owned(), id));
    }
    for id in bulk(api, "idle", "tries=2", 30).await {
        kept.push(("idle".to_owned(), id));
    }
    for id in bulk(api, "dead", "tries=1", 10).await {
        kept.push(("dead".to_owned(), id));
    }
    let r = api.get("/api/ns/dead?count=10&ttr=1").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(10), "{r:?}");
    wait_until_async(Duration::from_secs(10), "10 dead jobs", || async {
        api.get("/api/ns/dead/deadletter/size").await.json["size"] == 10
    })
    .await;
    let mut before = Vec::new();
    for (q, id) in &kept {
        before.push(peek(api, q, id).await);
    }

    // Producers and workers on both gateways, each job acked on the other;
    // a publish that straddles the switch of writes is refused, nothing
    // stored (503), and its client tries again.
    let load = Load::start(&apis, 1, 4, true);
    let progress = |what: &'static str| load.progress(what, 50);
    progress("load before the move").await;

    // The move, through the CLI.
    let r = gw1.cli(&["namespace", "move", "ns", "--to", "b"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("announced from default to b"), "{r:?}");
    let admin = Api::new(gw2.admin(), None);
    let r = admin.post("/namespaces/ns/move").await;
    assert_eq!(r.status, 400, "a move needs its body: {r:?}");
    // The other gateway learns of it with its next read of the token table.
    wait_until_async(
        Duration::from_secs(5),
        "the move on the other gateway",
        || async { admin.get("/namespaces/ns/move").await.status == 200 },
    )
    .await;
    progress("load while the namespace moves").await;
    let r = gw2.cli(
        &["namespace", "moving", "ns", "--watch", "--every", "1"],
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("moved from default to b"), "{r:?}");
    let status = admin.get("/namespaces/ns/move").await.json;
    assert_eq!(
        (status["state"].as_str(), status["jobs_left"].as_u64()),
        (Some("moved"), Some(0)),
        "{status}"
    );
    progress("load after the move").await;

    let (expected, consumed) = load.finish().await;
    let unique: HashSet<String> = consumed.into_iter().collect();
    assert_eq!(unique, expected, "every published job consumed once");

    // Nothing of the namespace is left in the old pool; the jobs nobody
    // consumed are in the new one, as they were.
    assert!(held(&[&a]).is_empty(), "{:?}", held(&[&a]));
    let ids: Vec<String> = kept.iter().map(|(_, id)| id.clone()).collect();
    each_once(&[&a, &b], &ids);
    as_before(&apis[1], &kept, &before, 120).await;
    assert_eq!(
        apis[0].get("/api/ns/dead/deadletter/size").await.json["size"],
        10
    );
    // New jobs go to the new pool, with the same token.
    let id = apis[0].publish("ns", "after", "", b"x").await;
    assert!(held(&[&b]).contains_key(&id));
    // A second move while one is under way is refused; a move to where it
    // is, too.
    let r = gw1.cli(&["namespace", "move", "ns", "--to", "b"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    eprintln!(
        "{} jobs published and consumed while the namespace moved; {} moved",
        expected.len(),
        status["jobs_moved"]
    );
}

#[tokio::test]
async fn a_namespace_moves_away_back_and_away_again_with_its_jobs_each_time() {
    let t = TwoPools::start().await;
    let (a, b, api, admin) = (&t.a, &t.b, &t.api, &t.admin);
    let mut ids = bulk(api, "later", "delay=3600", 40).await;
    for (round, to) in ["b", "default", "b"].into_iter().enumerate() {
        // Jobs published between moves, in the pool the namespace is in.
        ids.extend(bulk(api, &format!("q{round}"), "delay=3600", 10).await);
        t.move_to(to, Duration::from_secs(60)).await;
        if round == 0 {
            // Its tokens are the old pool's: one of the new pool would name
            // a second tenant of the same name there.
            let r = admin.post("/token/ns?description=second&pool=b").await;
            assert_eq!(r.status, 409, "{r:?}");
        }
        let (there, elsewhere) = if to == "b" { (&b, &a) } else { (&a, &b) };
        assert!(
            held(&[elsewhere]).is_empty(),
            "round {round}: jobs left behind"
        );
        each_once(&[there], &ids);
        // Every job is found by id through the same token.
        for id in ids.iter().step_by(7) {
            let q = if ids[..40].contains(id) {
                "later".to_owned()
            } else {
                format!(
                    "q{}",
                    ids.iter()
                        .position(|x| x == id)
                        .expect("id")
                        .saturating_sub(40)
                        / 10
                )
            };
            assert_eq!(
                api.get(&format!("/api/ns/{q}/job/{id}")).await.status,
                200,
                "{q}/{id}"
            );
        }
    }
}

#[tokio::test]
async fn a_job_acked_in_transit_to_another_pool_loses_its_copy_there_when_a_sweep_finishes_it() {
    // What a namespace's mover that died after its copy leaves behind, once
    // the job was acked in transit: its copy in the new pool, and at the
    // old shard the mark of the ack (`transit_acked` in `lua/lib.lua`). A
    // sweep of the old shard, not the namespace's move, finishes it.
    let t = TwoPools::start().await;
    let (a, b, api, admin) = (&t.a, &t.b, &t.api, &t.admin);
    let id = api
        .publish("ns", "q", "delay=3600", b"acked in transit")
        .await;
    let (_, slot) = where_is(&id, &[("a", a)]).expect("held at a");
    // The copy: the job exported from its pool and imported into `b`.
    let r = admin.get("/namespaces/ns/export").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/ns/import?pool=b",
            Some(format!("{}\n", r.json).into_bytes()),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(held(&[b]).get(&id), Some(&1), "the copy in the new pool");
    // The ack at the old shard, and the mark it would have left in transit.
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    let mut mark = b"x".to_vec();
    mark.extend(4u16.to_be_bytes());
    mark.extend(b"ns/q@b");
    let transit = sundial_core::keys::SlotKeys::new(slot).transit();
    let _: () = a
        .client()
        .hset(&transit, &id, mark)
        .expect("write the mark");
    // The sweep (every twelve layout checks) deletes the copy where the
    // mark says it went, then the mark.
    wait_until_async(
        Duration::from_secs(30),
        "the sweep to finish the mark",
        || {
            let mut c = a.client();
            let left: u64 = c.hlen(&transit).expect("hlen");
            std::future::ready(left == 0)
        },
    )
    .await;
    assert!(held(&[a, b]).is_empty(), "{:?}", held(&[a, b]));
    let r = api.get("/api/ns/q/size").await;
    assert_eq!(r.json["size"], 0, "{r:?}");
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

#[tokio::test]
async fn a_slot_moved_back_while_its_jobs_were_in_transit_brings_back_no_acked_job() {
    moved_back_mid_batch(false).await;
}

#[tokio::test]
async fn a_slot_moved_back_after_its_copies_were_all_acked_brings_none_back() {
    moved_back_mid_batch(true).await;
}

/// A slot moves from a to b; its mover dies between its copy and letting
/// the entries go; jobs are acked (at b, or in transit at a; with
/// `all_acked`, every job of the slot at b, so that b holds none of it);
/// the slot moves back to a. Every job that was not acked is held once,
/// at a, and no acked one comes back.
async fn moved_back_mid_batch(all_acked: bool) {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    // No mover at first: the test plays one that dies mid-batch.
    let mover = |enabled: bool| {
        format!(
            "watch_config = false\nlayout_check_ms = 300\n\
             [mover]\nenabled = {enabled}\nsettle_ms = 1000"
        )
    };
    cfg.extra = mover(false);
    cfg.pools = Some(pool(&[("a", &a, 1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // One by one: each job gets its own lane (a bulk's share one), so
    // each of the queue's 8 slots holds about 15.
    let mut old = Vec::new();
    for _ in 0..120 {
        old.push(api.publish("ns", "q", "delay=3600", b"old").await);
    }
    // b joins; a job published now to a slot that moved lands at b.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    // Writes switch once the gateway sees that every gateway knows the new
    // layout; the first job that lands at b names a slot that moved.
    let mut new = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let slot = loop {
        let id = api.publish("ns", "q", "delay=3600", b"new").await;
        let at_b = where_is(&id, &[("b", &b)]);
        new.push(id);
        if let Some((_, slot)) = at_b {
            break slot;
        }
        assert!(std::time::Instant::now() < deadline, "no job lands at b");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // (New jobs published before the switch may be there too.)
    let in_slot: Vec<&String> = old
        .iter()
        .chain(&new)
        .filter(|id| where_is(id, &[("a", &a)]) == Some(("a".to_owned(), slot)))
        .collect();
    assert!(
        in_slot.len() >= 2,
        "{} of the old jobs in slot {slot}",
        in_slot.len()
    );

    // A mover takes the slot's old jobs out at a and copies them to b, then
    // dies before letting the entries go. Its lease outlasts the move of
    // the slot back to a, had that not waited for the entries at a (15 s).
    let shard = |name: &str, r: &RedisServer| {
        sundial_core::Shard::connect(name, &sundial_core::ShardOptions::new(r.url()))
            .expect("connect")
    };
    let (sa, sb) = (shard("default/a", &a), shard("default/b", &b));
    sa.wait_connected(Duration::from_secs(5)).await.expect("a");
    sb.wait_connected(Duration::from_secs(5)).await.expect("b");
    let t = sa
        .mover()
        .take(
            slot,
            "dead mover",
            Duration::from_secs(15),
            sundial_core::MoveMode::Take,
            1000,
            "default/b",
            "0",
            "",
        )
        .await
        .expect("take")
        .expect("lease");
    assert_eq!(t.jobs.len(), in_slot.len());
    let c = sb
        .mover()
        .store(slot, t.now_ms, &t.jobs, true)
        .await
        .expect("copy");
    assert_eq!(c.copied, in_slot.len() as u64);
    let job = |id: &str| sundial_core::JobId::parse(id).expect("id");
    let mut acked: Vec<String> = Vec::new();
    if all_acked {
        // Workers ack every job of the slot at b: the copies, and the new
        // job published there.
        for id in in_slot.iter().copied().chain(new.last()) {
            assert!(
                sb.jobs()
                    .delete(slot, "ns/q", &job(id))
                    .await
                    .expect("ack at b")
            );
            acked.push(id.clone());
        }
    } else {
        // A worker acks one of the copies at b; another ack reaches a job's
        // transit entry at a (while its copy at b lives).
        assert!(
            sb.jobs()
                .delete(slot, "ns/q", &job(in_slot[0]))
                .await
                .expect("ack at b")
        );
        assert!(
            sa.jobs()
                .delete(slot, "ns/q", &job(in_slot[1]))
                .await
                .expect("ack in transit")
        );
        acked.extend([in_slot[0].clone(), in_slot[1].clone()]);
    }

    // The slot moves back to a, with a mover now: the entries at a are
    // finished first (their copies are at b), then b's jobs move back.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 0)]));
    cfg.extra = mover(true);
    gw.rewrite(&cfg);
    // Stopped cleanly, it withdraws its view at once (killed, the others
    // would wait for it to expire before they move anything).
    gw.signal("TERM");
    assert!(gw.wait_exit(Duration::from_secs(10)).is_some());
    gw.restart();
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(90), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    let ids: Vec<String> = old
        .iter()
        .chain(&new)
        .filter(|id| !acked.contains(id))
        .cloned()
        .collect();
    each_once(&[&a, &b], &ids);
    assert!(held(&[&b]).is_empty(), "every job back at a");
    for id in &acked {
        let r = api.get(&format!("/api/ns/q/job/{id}")).await;
        assert_eq!(r.status, 404, "an acked job stays acked: {r:?}");
    }
}

#[tokio::test]
async fn a_worker_waiting_in_a_long_poll_follows_its_namespace_to_another_pool() {
    let t = TwoPools::start().await;
    let api = &t.api;
    // A worker that long-polls for 60 s at a time, as workers do.
    let worker = {
        let api = api.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut polls = 0;
            loop {
                polls += 1;
                let r = api.get("/api/ns/q?timeout=60&ttr=30").await;
                if r.status == 200 {
                    return (
                        r.json["job_id"].as_str().expect("id").to_owned(),
                        polls,
                        started.elapsed(),
                    );
                }
                assert_eq!(r.status, 404, "{r:?}");
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    t.move_to("b", Duration::from_secs(45)).await;
    // A job published now is in the new pool: the worker's poll that
    // waited on the old one ended when the namespace's route changed, and
    // its next one finds the job, long before the first 60 s poll would
    // have ended.
    let id = api.publish("ns", "q", "", b"after the move").await;
    assert!(held(&[&t.b]).contains_key(&id));
    let (got, polls, after) = tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the worker gets the job")
        .expect("worker");
    assert_eq!(got, id);
    assert!(
        after < Duration::from_secs(50) && polls > 1,
        "a poll on the old pool ended with the move: {polls} polls, {after:?}"
    );
    eprintln!("the worker got the job after {after:?}, in its poll number {polls}");
}

/// Script calls `redis` has run (`INFO commandstats`).
fn script_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.client())
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn a_slot_another_gateway_moves_is_asked_for_once_a_check() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    for i in 0..8 {
        bulk(&api, &format!("q{i}"), "delay=3600", 20).await;
    }
    // Another gateway holds the mover lease of every slot at a.
    let mut c = a.client();
    for slot in 0..SLOTS {
        let key = sundial_core::keys::SlotKeys::new(slot).mover();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("another gateway")
            .arg("PX")
            .arg(120_000)
            .query(&mut c)
            .expect("set lease");
    }
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(30), "the mover to try", || async {
        admin.get("/drains").await.json["pools"][0]["mover"]["state"] == "moving"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = script_calls(&a);
    tokio::time::sleep(Duration::from_secs(2)).await; // the window measured
    let calls = script_calls(&a) - before;
    // A try per slot (at most `slots_at_once`, 8) per 300 ms check: about
    // 55 in 2 s. Asking again as each try ends would be thousands.
    assert!(calls < 200, "{calls} script calls in 2 s at a");
    assert_eq!(jobs_on(&b), 0, "nothing moved under another's lease");
    eprintln!("{calls} script calls in 2 s while another gateway holds every slot's lease");
}

#[tokio::test]
async fn a_gateway_whose_config_lacks_the_old_pool_holds_a_namespace_move_and_answers_503() {
    let (a, s, b) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let pools = |with_small: bool| {
        let small = format!(
            "[pools.small]\nshards = [{{ name = \"s\", url = \"{}\" }}]\n",
            s.url()
        );
        format!(
            "{}{}[pools.big]\nshards = [{{ name = \"b\", url = \"{}\" }}]\n",
            pool(&[("a", &a, 1)]),
            if with_small { small.as_str() } else { "" },
            b.url()
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(pools(true));
    let gw1 = Sundial::start(&cfg);
    // The second gateway's config lacks pool small, which the namespace
    // leaves.
    cfg.pools = Some(pools(false));
    let mut gw2 = Sundial::start(&cfg);
    let admin = Api::new(gw1.admin(), None);
    let r = admin.post("/token/ns?pool=small&description=test").await;
    assert_eq!(r.status, 201, "{r:?}");
    let token = r.json["token"].as_str().expect("token").to_owned();
    let (api1, api2) = (
        Api::new(gw1.api(), Some(&token)),
        Api::new(gw2.api(), Some(&token)),
    );
    let id = api1.put("/api/ns/q?delay=3600", b"kept").await.json["job_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/ns/move?pool=small",
            Some(br#"{"to":"big"}"#.to_vec()),
            &[],
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    wait_until_async(
        Duration::from_secs(5),
        "gateway 2 to know the move",
        || async { api2.get(&format!("/api/ns/q/job/{id}")).await.status == 503 },
    )
    .await;
    // Gateway 2 holds the move: many checks later it is still announced,
    // every request there is refused, and nothing changed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = |admin: &Api| {
        let admin = admin.clone();
        async move { admin.get("/namespaces/ns/move?pool=small").await.json["state"].clone() }
    };
    assert_eq!(status(&admin).await, "announced");
    let ack = api2.delete(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(ack.status, 503, "{ack:?}");
    assert!(
        ack.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("lacks pool small")),
        "{ack:?}"
    );
    assert_eq!(api2.put("/api/ns/q", b"x").await.status, 503);
    // A token that is not good hears nothing of the move.
    let stranger = Api::new(gw2.api(), Some("small:not-a-token"));
    assert_eq!(
        stranger.get(&format!("/api/ns/q/job/{id}")).await.status,
        401
    );
    assert_eq!(api1.get(&format!("/api/ns/q/job/{id}")).await.status, 200);
    assert_eq!(s.job_records(), 1, "the job stays in pool small");
    // While it moves, neither pool exports or imports it: each would see
    // part of its jobs.
    let line = format!(
        "{{\"queue\":\"q\",\"job_id\":\"{id}\",\"state\":\"ready\",\"remain_tries\":1,\"data\":\"eA==\"}}\n"
    );
    let import = |pool: &str| {
        let (admin, path, line) = (
            admin.clone(),
            format!("/namespaces/ns/import?pool={pool}"),
            line.clone(),
        );
        async move {
            admin
                .call(reqwest::Method::POST, &path, Some(line.into_bytes()), &[])
                .await
        }
    };
    for pool in ["small", "big"] {
        let r = admin
            .get(&format!("/namespaces/ns/export?pool={pool}"))
            .await;
        assert_eq!(r.status, 409, "{r:?}");
        assert_eq!(import(pool).await.status, 409);
    }

    // Its config gains the pool: the move goes through, and an ack there
    // finds the job in its new pool.
    cfg.pools = Some(pools(true));
    reload(&mut gw2, &cfg).await;
    wait_until_async(Duration::from_secs(60), "the move to end", || async {
        status(&admin).await == "moved"
    })
    .await;
    // Moved: its jobs are exported from (and imported to) pool big only.
    let r = admin.get("/namespaces/ns/export?pool=small").await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("moved to pool big")),
        "{r:?}"
    );
    assert_eq!(import("small").await.status, 409);
    assert_eq!(s.job_records(), 0, "nothing imported into the pool it left");
    let r = admin.get("/namespaces/ns/export?pool=big").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json.to_string().contains(&id), "{r:?}");
    assert_eq!(
        api2.delete(&format!("/api/ns/q/job/{id}")).await.status,
        204
    );
    assert_eq!((s.job_records(), b.job_records()), (0, 0));
}

#[tokio::test]
async fn an_ack_whose_job_the_mover_carries_between_its_lookups_still_acks_it() {
    use sundial_core::{JobId, MoveMode, Shard, ShardOptions, keys};
    use sundial_tests::{Fault, FaultProxy};
    let (a, b) = (RedisServer::start(), RedisServer::start());
    // The gateway reaches shard a through a proxy that can hold its
    // commands, and waits long for a (the test plays the mover meanwhile).
    let proxy = FaultProxy::start(a.port());
    let shard_a = |w: u32| {
        format!(
            "{{ name = \"a\", url = \"{}\", weight = {w}, timeout_ms = 20000 }}",
            proxy.url()
        )
    };
    let pool_of = |shards: &[String]| {
        format!(
            "[pools.default]\nslots = {SLOTS}\nlanes = 8\nshards = [{}]\n",
            shards.join(", ")
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300\n[mover]\nenabled = false".to_owned();
    cfg.pools = Some(pool_of(&[shard_a(1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.put("/api/ns/q", b"carried").await.json["job_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let slot = keys::slot_of("ns", "q", JobId::parse(&id).expect("id").lane(8), SLOTS);

    // Every slot moves to b; writes go there once the gateway settles them.
    let shard_b = format!("{{ name = \"b\", url = \"{}\", weight = 1 }}", b.url());
    cfg.pools = Some(pool_of(&[shard_a(0), shard_b]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(30),
        "writes on the new layout",
        || async {
            let r = admin.get("/drains").await.json;
            r["pools"][0]["writes"] == r["pools"][0]["current"]
        },
    )
    .await;

    // The ack looks at b (nothing yet), then waits on a.
    proxy.set(Fault::Stall);
    let ack = {
        let api = api.clone();
        let path = format!("/api/ns/q/job/{id}");
        tokio::spawn(async move { api.delete(&path).await.status })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Meanwhile the job moves: taken out at a, copied to b, let go at a.
    let shard = |r: &RedisServer, name: &str| {
        Shard::connect(name, &ShardOptions::new(r.url())).expect("connect")
    };
    let (from, to) = (shard(&a, "default/a"), shard(&b, "default/b"));
    from.wait_connected(Duration::from_secs(5))
        .await
        .expect("a");
    to.wait_connected(Duration::from_secs(5)).await.expect("b");
    let lease = Duration::from_secs(30);
    let taken = from
        .mover()
        .take(slot, "test", lease, MoveMode::Take, 10, to.name(), "0", "")
        .await
        .expect("take")
        .expect("lease");
    assert_eq!(taken.jobs.len(), 1, "the job is taken");
    to.mover()
        .store(slot, taken.now_ms, &taken.jobs, true)
        .await
        .expect("copy");
    from.mover()
        .done(slot, std::slice::from_ref(&id))
        .await
        .expect("let go");
    from.mover().release(slot, "test").await.expect("release");
    let on_b: Option<Vec<u8>> = b
        .client()
        .hget(keys::SlotKeys::new(slot).jobs(), &id)
        .expect("hget");
    assert!(on_b.is_some(), "the copy is at b");

    // The ack's look at a now finds nothing there; it must find the copy.
    proxy.heal();
    assert_eq!(ack.await.expect("ack"), 204);
    let on_b: Option<Vec<u8>> = b
        .client()
        .hget(keys::SlotKeys::new(slot).jobs(), &id)
        .expect("hget");
    assert!(on_b.is_none(), "the ack deleted the copy at b");
    assert_eq!(api.get(&format!("/api/ns/q/job/{id}")).await.status, 404);
}
