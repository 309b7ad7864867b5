//! Adding and removing a shard of a pool that holds jobs, under load, with
//! two gateways that reload a moment apart (each with its own config file,
//! as on two machines), consumers acknowledging on the other gateway.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{collections::HashSet, time::Duration};

use redis::Commands;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

use super::{
    common::{SLOTS, draining, jobs_on, pool, reload},
    load::Load,
};

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
