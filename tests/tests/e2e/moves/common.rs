//! What the move scenarios share: the pool they start from, where Redis
//! holds a job, the jobs they publish, and the checks that moved jobs are
//! each held once and as they were.

use std::time::Duration;

use redis::Commands;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// Slots of the default pool in every scenario.
pub(super) const SLOTS: u32 = 16;

/// The default pool over `shards` (name, server, weight), 8 lanes a queue.
pub(super) fn pool(shards: &[(&str, &RedisServer, u32)]) -> String {
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

/// Job records `redis` holds, over the pool's slots.
pub(super) fn jobs_on(redis: &RedisServer) -> u64 {
    let mut c = redis.client();
    (0..SLOTS)
        .map(|s| {
            c.hlen::<_, u64>(sundial_core::keys::SlotKeys::new(s).jobs())
                .expect("hlen")
        })
        .sum()
}

/// Draining layouts of the default pool, as `GET /drains` reports them.
pub(super) async fn draining(admin: &Api) -> usize {
    let r = admin.get("/drains").await;
    r.json["pools"][0]["draining"]
        .as_array()
        .map_or(usize::MAX, Vec::len)
}

pub(super) async fn reload(gw: &mut Sundial, cfg: &SundialConfig) {
    gw.rewrite(cfg);
    let r = Api::new(gw.admin(), None).post("/reload").await;
    assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
}

/// Where Redis holds job `id`: (shard name, slot), or `None`.
pub(super) fn where_is(id: &str, shards: &[(&str, &RedisServer)]) -> Option<(String, u32)> {
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

/// Publishes `n` jobs to `queue` in bulks of 64; returns their ids.
pub(super) async fn bulk(api: &Api, queue: &str, query: &str, n: usize) -> Vec<String> {
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
pub(super) fn held(shards: &[&RedisServer]) -> std::collections::HashMap<String, usize> {
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
pub(super) fn each_once(shards: &[&RedisServer], ids: &[String]) {
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
pub(super) async fn peek(api: &Api, queue: &str, id: &str) -> (serde_json::Value, u64, u64) {
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
pub(super) async fn as_before<'a>(
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

/// The jobs a moved slot holds, over eight queues: per queue `delayed`
/// due in an hour and 10 ready, then 5 of `q0` reserved by a worker that
/// went away, and 2 of each queue dead (their worker went away on their
/// last try). Each (queue, id).
pub(super) async fn mixed_jobs(api: &Api, delayed: usize) -> Vec<(String, String)> {
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
pub(super) async fn on_a(a: &RedisServer, extra: &str) -> (SundialConfig, Sundial, Api) {
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = format!("watch_config = false\nlayout_check_ms = 300\n{extra}");
    cfg.pools = Some(pool(&[("a", a, 1)]));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    (cfg, gw, api)
}

/// Two pools, `default` on `a` and `b` on `b`, 16 slots each (`b` with
/// other lanes, so a job's slot differs between them).
pub(super) fn two_pools(a: &RedisServer, b: &RedisServer) -> SundialConfig {
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
pub(super) struct TwoPools {
    /// Kept running for the test.
    _gw: Sundial,
    pub(super) a: RedisServer,
    pub(super) b: RedisServer,
    pub(super) api: Api,
    pub(super) admin: Api,
}

impl TwoPools {
    pub(super) async fn start() -> Self {
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
    pub(super) async fn move_to(&self, to: &str, within: Duration) {
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
