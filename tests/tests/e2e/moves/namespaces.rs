//! A namespace that moves to another pool: under load, away and back, with
//! a worker waiting in a long poll, and held by a gateway whose config
//! lacks the pool it leaves.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{collections::HashSet, time::Duration};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

use super::{
    common::{TwoPools, as_before, bulk, each_once, held, peek, pool, reload, two_pools},
    load::Load,
};

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
async fn a_move_into_a_pool_holding_an_earlier_tenants_jobs_of_that_name_is_refused() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let gw = Sundial::start(&two_pools(&a, &b));
    let admin = Api::new(gw.admin(), None);
    // An earlier tenant `shop` of pool b left jobs, and its token went.
    let r = admin.post("/token/shop?pool=b&description=earlier").await;
    assert_eq!(r.status, 201, "{r:?}");
    let earlier = r.json["token"].as_str().expect("token").to_owned();
    let old = Api::new(gw.api(), Some(&earlier));
    for _ in 0..3 {
        old.publish("shop", "q", "tries=1", b"the earlier tenant's")
            .await;
    }
    let earlier_id = r.json["id"].as_str().expect("id").to_owned();
    create_token(&gw.admin(), "shop").await;
    let move_to_b = || async {
        admin
            .call(
                reqwest::Method::POST,
                "/namespaces/shop/move",
                Some(br#"{"to":"b"}"#.to_vec()),
                &[],
            )
            .await
    };
    // While that tenant has a token, it is a tenant of its own.
    let r = move_to_b().await;
    assert_eq!(r.status, 409, "{r:?}");
    let why = r.json["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("pool b has a namespace shop of its own"),
        "{why}"
    );
    // Its token goes; its jobs stay. Today's `shop` of the default pool
    // may not move in among them.
    assert_eq!(
        admin
            .delete(&format!("/token/shop/{earlier_id}?pool=b"))
            .await
            .status,
        204
    );
    let r = move_to_b().await;
    assert_eq!(r.status, 409, "{r:?}");
    let why = r.json["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("pool b holds 3 jobs of a namespace shop"),
        "{why}"
    );
    assert_eq!(
        admin.get("/namespaces/shop/move").await.status,
        404,
        "nothing started"
    );
    // Once they are gone, it moves.
    let r = admin.post("/token/shop?pool=b&description=cleanup").await;
    let cleanup = Api::new(gw.api(), r.json["token"].as_str());
    assert_eq!(cleanup.delete("/api/shop/q").await.status, 204);
    let id = r.json["id"].as_str().expect("id").to_owned();
    assert_eq!(
        admin
            .delete(&format!("/token/shop/{id}?pool=b"))
            .await
            .status,
        204
    );
    let r = move_to_b().await;
    assert_eq!(r.status, 202, "{r:?}");
}
