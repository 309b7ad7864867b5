//! Schedules move with their slots and their namespaces: the place a
//! schedule moves to takes its state over once the place it left parked
//! it, so that an every-second schedule fires each second once, none
//! doubled and none lost, through a shard added, a shard removed and a
//! namespace moved to another pool; the places left keep no schedule.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use redis::Commands;
use serde_json::json;
use sundial_tests::{Api, RedisServer};

use super::common::{SLOTS, TwoPools, draining, on_a, pool, reload};

const NAMES: [&str; 4] = ["s0", "s1", "s2", "s3"];

async fn every_second(api: &Api) {
    for name in NAMES {
        let spec = json!({"every": 1, "job": {"data": ""}});
        let body = serde_json::to_vec(&spec).expect("json");
        let r = api.put(&format!("/api/ns/q/schedules/{name}"), &body).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
}

/// Consumes and acks `q`'s jobs for `span`, adding each fire's time to
/// its schedule's in `seen`.
async fn fires_for(api: &Api, span: Duration, seen: &mut BTreeMap<String, Vec<u64>>) {
    let end = Instant::now() + span;
    while Instant::now() < end {
        let r = api.get("/api/ns/q?timeout=1&ttr=30&count=16").await;
        if r.status == 404 {
            continue;
        }
        assert_eq!(r.status, 200, "{r:?}");
        for job in r
            .json
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![r.json.clone()])
        {
            let attrs = &job["attributes"];
            let name = attrs["schedule"].as_str().expect("a fire").to_owned();
            let at = attrs["scheduled-at"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("time");
            let id = job["job_id"].as_str().expect("id");
            assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
            seen.entry(name).or_default().push(at);
        }
    }
}

/// Every schedule fired each second once, from its first fire seen to its
/// last: none doubled, none lost.
fn each_second_once(seen: &BTreeMap<String, Vec<u64>>, least: usize) {
    assert_eq!(seen.len(), NAMES.len(), "{seen:?}");
    for (name, times) in seen {
        let mut times = times.clone();
        times.sort_unstable();
        assert!(times.len() >= least, "{name}: {times:?}");
        for w in times.windows(2) {
            assert_eq!(w[1] - w[0], 1000, "{name}: {times:?}");
        }
    }
}

/// Each schedule's state came with it: its count of fires covers every
/// fire seen, from before the move too.
async fn counted(api: &Api, seen: &BTreeMap<String, Vec<u64>>) {
    for (name, times) in seen {
        let r = api.get(&format!("/api/ns/q/schedules/{name}")).await;
        let fired = r.json["fired"].as_u64().expect("a count");
        assert!(
            fired >= times.len() as u64,
            "{name}: {fired} counted, {} seen: {r:?}",
            times.len()
        );
    }
}

/// Schedule keys `redis` holds over the pool's slots: definitions, and
/// fire states.
fn schedules_on(redis: &RedisServer) -> (u64, u64) {
    let mut c = redis.client();
    let mut out = (0, 0);
    for s in 0..SLOTS {
        let k = sundial_core::keys::SlotKeys::new(s);
        out.0 += c.hlen::<_, u64>(k.schedules()).expect("hlen");
        out.1 += c.hlen::<_, u64>(k.fire_states()).expect("hlen");
    }
    out
}

#[tokio::test]
async fn schedules_fire_each_second_once_through_a_shard_added_and_one_removed() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let (mut cfg, mut gw, api) = on_a(&a, "").await;
    let admin = Api::new(gw.admin(), None);
    every_second(&api).await;
    let mut seen = BTreeMap::new();
    fires_for(&api, Duration::from_secs(2), &mut seen).await;

    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    fires_for(&api, Duration::from_secs(5), &mut seen).await;
    let (on_b, _) = schedules_on(&b);
    assert!(on_b > 0, "b took some of the schedules");
    assert_eq!(
        schedules_on(&a).0 + on_b,
        NAMES.len() as u64,
        "each held once"
    );

    cfg.pools = Some(pool(&[("a", &a, 0), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    fires_for(&api, Duration::from_secs(5), &mut seen).await;
    while draining(&admin).await > 0 {
        fires_for(&api, Duration::from_secs(1), &mut seen).await;
    }
    fires_for(&api, Duration::from_secs(2), &mut seen).await;
    each_second_once(&seen, 12);
    counted(&api, &seen).await;
    assert_eq!(schedules_on(&a), (0, 0), "a keeps no schedule");
    assert_eq!(schedules_on(&b).0, NAMES.len() as u64);
}

#[tokio::test]
async fn schedules_fire_each_second_once_through_their_namespace_moved_to_another_pool() {
    let two = TwoPools::start().await;
    every_second(&two.api).await;
    let mut seen = BTreeMap::new();
    fires_for(&two.api, Duration::from_secs(2), &mut seen).await;
    two.move_to("b", Duration::from_secs(30)).await;
    fires_for(&two.api, Duration::from_secs(4), &mut seen).await;
    each_second_once(&seen, 5);
    counted(&two.api, &seen).await;
    assert_eq!(
        schedules_on(&two.a),
        (0, 0),
        "the pool left keeps no schedule"
    );
    assert_eq!(schedules_on(&two.b).0, NAMES.len() as u64);
}
