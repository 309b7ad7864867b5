//! The job and admin APIs in process, through `Router::oneshot`, against a
//! real Redis: the error cases a client meets, and that each one leaves
//! Redis as it was. (The same APIs over a real listener and the real binary
//! are in `tests/tests/e2e/api.rs`.)
//!
//! Length: each test is one client's story, top to bottom; some run past 60
//! lines.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use sundial_core::{Ack, Acked, Limits};
use sundial_gateway::{
    admin, api,
    api::body::Bodies,
    http::layered,
    openapi::Document,
    state::{AppState, Settings},
};
use sundial_router::{
    LiveTopology, PoolConfig, ShardConfig, Token,
    admin::{AdminStore, default_shard},
    health::Health,
    prepare::prepare,
    reload::{Desired, Reloader},
};
use sundial_tests::RedisServer;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A gateway's two routers over `redis`, and a token for namespace `ns`.
struct Gateway {
    api: Router,
    admin: Router,
    token: String,
}

async fn gateway(redis: &RedisServer, accounts: &[(&str, &str)]) -> Gateway {
    gateway_with_lanes(redis, accounts, 1).await
}

/// A gateway whose pool spreads each queue over `lanes` slots.
async fn gateway_with_lanes(redis: &RedisServer, accounts: &[(&str, &str)], lanes: u32) -> Gateway {
    let shard = ShardConfig {
        timeout_ms: 1_000,
        ..ShardConfig::at(redis.url())
    };
    let pools = BTreeMap::from([(
        "default".to_owned(),
        PoolConfig {
            quotas: Default::default(),
            slots: 8,
            lanes,
            shards: vec![shard],
        },
    )]);
    let topology = prepare(&pools, None, Duration::from_secs(10))
        .await
        .expect("topology");
    let live = Arc::new(LiveTopology::new(topology));
    let store = AdminStore::new(default_shard(&live).expect("shard"));
    store.reload().await.expect("token table");
    let token = Token::mint("default");
    store
        .tokens()
        .create(&token, "ns", "test", &sundial_router::Grant::full())
        .await
        .expect("token");
    let settings = Settings {
        limits: Limits::default(),
        bodies: Bodies::new(8 << 20, Duration::from_secs(5), 1 << 20),
        accounts: accounts
            .iter()
            .map(|(u, p)| ((*u).to_owned(), (*p).to_owned()))
            .collect(),
        admin_hosts: Vec::new(),
        query_token: true,
    };
    let state = AppState::new(
        settings,
        live.clone(),
        store,
        Health::default(),
        sundial_router::mover::Status::default(),
        CancellationToken::new(),
    );
    let desired = Desired {
        pools,
        others: String::new(),
    };
    let reloader = Reloader::new(None, Box::new(move |_| Ok(desired.clone())), live);
    let document = Document(sundial_gateway::document::text(Vec::new()).into());
    Gateway {
        api: layered(api::router(state.clone(), document.clone()), None),
        admin: layered(
            admin::router(state, reloader, Router::new(), Router::new(), document),
            None,
        ),
        token: token.to_string(),
    }
}

/// Sends one request; returns its status and JSON body (`null` if none).
async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Body::from(body.to_owned())).expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let json = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
    };
    (status, json)
}

/// Every key Redis holds but the pinned metadata and the token table.
fn job_keys(redis: &RedisServer) -> Vec<String> {
    let mut c = redis.client();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).expect("keys");
    let mut keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !matches!(k.as_str(), "sd:meta" | "sd:tokens" | "sd:tokens:version"))
        .collect();
    keys.sort();
    keys
}

/// Sends a request that must fail with `status` and `{"error": error}`.
async fn refused(
    app: &Router,
    method: Method,
    uri: &str,
    token: &str,
    body: &str,
    status: StatusCode,
    error: &str,
) {
    let headers: &[(&str, &str)] = if token.is_empty() {
        &[]
    } else {
        &[("x-token", token)]
    };
    let (got, json) = call(app, method, uri, headers, body).await;
    assert_eq!(
        (got, json["error"].as_str()),
        (status, Some(error)),
        "{uri}"
    );
}

#[tokio::test]
async fn bad_publishes_are_refused_and_store_nothing() {
    let redis = RedisServer::start();
    let g = gateway(&redis, &[]).await;
    let (t, put) = (g.token.as_str(), Method::PUT);
    let bad = StatusCode::BAD_REQUEST;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q",
        "",
        "x",
        StatusCode::UNAUTHORIZED,
        "token not found",
    )
    .await;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q",
        "nope",
        "x",
        StatusCode::UNAUTHORIZED,
        "invalid token",
    )
    .await;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q",
        "elsewhere:abc",
        "x",
        StatusCode::NOT_FOUND,
        "pool not found",
    )
    .await;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q?delay=-1",
        t,
        "x",
        bad,
        "invalid delay",
    )
    .await;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q?tries=0",
        t,
        "x",
        bad,
        "tries shouldn't be zero",
    )
    .await;
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q?delay=10&ttl=5",
        t,
        "x",
        bad,
        "ttl is shorter than delay",
    )
    .await;
    let not_array = "request body should be an array of objects";
    refused(
        &g.api,
        put.clone(),
        "/api/ns/q/bulk",
        t,
        "{}",
        bad,
        not_array,
    )
    .await;
    let forbidden = "namespace name contains forbidden characters";
    refused(&g.api, put, "/api/n%20s/q", t, "x", bad, forbidden).await;
    assert_eq!(job_keys(&redis), Vec::<String>::new(), "nothing stored");
}

#[tokio::test]
async fn a_head_request_consumes_nothing_and_unknown_routes_are_json() {
    let redis = RedisServer::start();
    let g = gateway(&redis, &[]).await;
    let t = [("x-token", g.token.as_str())];
    let (status, _) = call(&g.api, Method::PUT, "/api/ns/q", &t, "hello").await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, json) = call(&g.api, Method::HEAD, "/api/ns/q", &t, "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{json}");
    let (status, json) = call(&g.api, Method::GET, "/api/ns/q/size", &t, "").await;
    assert_eq!(
        (status, json["size"].as_u64()),
        (StatusCode::OK, Some(1)),
        "still there"
    );
    let (status, json) = call(&g.api, Method::POST, "/api/ns/q", &t, "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{json}");
    assert!(json["error"].is_string());
    let (status, json) = call(&g.api, Method::GET, "/nowhere", &[], "").await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("api not found"))
    );
    let (status, json) = call(&g.api, Method::GET, "/api/ns/q?count=0", &t, "").await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid count"))
    );
    let (status, json) = call(&g.api, Method::GET, "/api/ns/a,b%20c", &t, "").await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid queue name(s)"))
    );
    let (status, json) = call(&g.api, Method::GET, "/api/ns/q/job/nope", &t, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
}

#[tokio::test]
async fn a_consume_calls_only_the_lanes_that_hold_ready_jobs() {
    let redis = RedisServer::start();
    let g = gateway_with_lanes(&redis, &[], 8).await;
    let t = [("x-token", g.token.as_str())];
    // An empty queue over 8 lanes: 8 counter reads, and no script call.
    let before = calls(&redis, "evalsha");
    let (status, _) = call(&g.api, Method::GET, "/api/ns/q?timeout=0", &t, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(calls(&redis, "evalsha") - before, 0, "no lane was called");
    // One job, in one of the lanes: one call, to that lane.
    let (status, json) = call(&g.api, Method::PUT, "/api/ns/q", &t, "hello").await;
    assert_eq!(status, StatusCode::CREATED);
    let id = json["job_id"].as_str().expect("job id").to_owned();
    let before = calls(&redis, "evalsha");
    let (status, json) = call(&g.api, Method::GET, "/api/ns/q?timeout=0", &t, "").await;
    assert_eq!(
        (status, json["job_id"].as_str()),
        (StatusCode::OK, Some(id.as_str()))
    );
    assert_eq!(
        calls(&redis, "evalsha") - before,
        1,
        "only its lane was called"
    );
}

#[tokio::test]
async fn the_admin_api_asks_for_accounts_and_checks_its_forms() {
    let redis = RedisServer::start();
    let g = gateway(&redis, &[("ops", "s3cret")]).await;
    let (status, _) = call(&g.admin, Method::POST, "/token/ns2?description=x", &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // "ops:s3cret", with the scheme in lower case (it is case-insensitive).
    let auth = [(header::AUTHORIZATION.as_str(), "basic b3BzOnMzY3JldA==")];
    let (status, json) = call(&g.admin, Method::POST, "/token/ns2", &auth, "").await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid description"))
    );
    let form = [
        auth[0],
        (
            header::CONTENT_TYPE.as_str(),
            "application/x-www-form-urlencoded",
        ),
    ];
    let (status, json) = call(
        &g.admin,
        Method::POST,
        "/token/ns2",
        &form,
        "description=from%20a+form",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{json}");
    // As curl -d sends it, raw space and all.
    let raw = "description=nightly jobs";
    let (status, json) = call(&g.admin, Method::POST, "/token/ns2", &form, raw).await;
    assert_eq!(status, StatusCode::CREATED, "{json}");
    let (status, json) = call(&g.admin, Method::GET, "/token/ns2", &auth, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(json.to_string().contains("from a form"), "{json}");
    assert!(json.to_string().contains("nightly jobs"), "{json}");
    let wrong = [(header::AUTHORIZATION.as_str(), "Basic b3BzOndyb25n")];
    let (status, _) = call(&g.admin, Method::GET, "/token/ns2", &wrong, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, json) = call(&g.admin, Method::GET, "/nowhere", &[], "").await;
    assert_eq!(
        (status, json["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("api not found"))
    );
}

#[tokio::test]
async fn a_redis_that_is_gone_is_a_503_in_bounded_time() {
    let mut redis = RedisServer::start();
    let g = gateway(&redis, &[]).await;
    let t = [("x-token", g.token.as_str())];
    redis.kill();
    let start = std::time::Instant::now();
    let (status, json) = call(&g.api, Method::PUT, "/api/ns/q", &t, "x").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert!(json["error"].is_string());
    let (status, _) = call(&g.api, Method::GET, "/api/ns/q", &t, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
}

/// Calls of one command so far, from `INFO commandstats`.
fn calls(redis: &RedisServer, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.client())
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A shard of the engine on `redis`, connected, its scripts loaded.
async fn engine_shard(redis: &RedisServer) -> sundial_core::Shard {
    use sundial_core::{Shard, ShardOptions};
    let shard = Shard::connect("t", &ShardOptions::new(redis.url())).expect("connect");
    shard
        .wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    shard.load_scripts().await.expect("scripts");
    shard
}

#[tokio::test]
async fn publishes_that_arrive_together_share_one_call_and_a_failing_one_changes_nothing_else() {
    use sundial_core::{JobId, NewJob, Publication, Schedule};
    let redis = RedisServer::start();
    let shard = engine_shard(&redis).await;
    let batch = sundial_gateway::batch::Publishes::default();
    let schedule = Schedule {
        delay_ms: 0,
        ttl_ms: 0,
        tries: 1,
        priority: 0,
        policy: None,
    };
    let job = |id: JobId| NewJob {
        id,
        attrs: String::new(),
        body: bytes::Bytes::from_static(b"x"),
    };
    // A job that exists already, then 50 publications at once; the 26th
    // carries a fresh id and that existing one.
    let taken = JobId::mint(false);
    batch
        .publish(
            &shard,
            0,
            "ns/q",
            1,
            Publication {
                schedule,
                jobs: vec![job(taken.clone())],
                keys: None,
            },
        )
        .await
        .expect("first");
    let before = calls(&redis, "evalsha");
    // The 41st reuses the 11th's id: it clashes with a job of its own call.
    let fresh: Vec<JobId> = (0..50).map(|_| JobId::mint(false)).collect();
    let publications: Vec<Publication> = (0..50)
        .map(|i| Publication {
            schedule,
            jobs: match i {
                25 => vec![job(fresh[i].clone()), job(taken.clone())],
                40 => vec![job(fresh[10].clone())],
                _ => vec![job(fresh[i].clone())],
            },
            keys: None,
        })
        .collect();
    let stored: Vec<JobId> = (0..50)
        .filter(|&i| i != 25 && i != 40)
        .map(|i| fresh[i].clone())
        .collect();
    let refused_fresh = publications[25].jobs[0].id.clone();
    // Polled together on this one thread: all 50 wait before the first
    // call runs, so one call carries them (a second call is started once 8
    // wait, but the first, spawned before it, takes them all).
    let answers = futures::future::join_all(
        publications
            .into_iter()
            .map(|p| batch.publish(&shard, 0, "ns/q", 1, p)),
    )
    .await;
    assert_eq!(
        calls(&redis, "evalsha") - before,
        1,
        "one script call for 50 publications"
    );
    for (i, a) in answers.iter().enumerate() {
        if i == 25 || i == 40 {
            assert!(
                matches!(a, Err(sundial_core::EngineError::Exists { .. })),
                "{a:?}"
            );
        } else {
            assert!(a.is_ok(), "{i}: {a:?}");
        }
    }
    // What Redis holds: the 48 and the first, not the refused one's fresh id.
    let mut c = redis.client();
    let jobs_key = sundial_core::keys::SlotKeys::new(0).jobs();
    for id in &stored {
        let has: bool = redis::Commands::hexists(&mut c, &jobs_key, id.as_str()).expect("hexists");
        assert!(has, "{id}");
    }
    let has: bool =
        redis::Commands::hexists(&mut c, &jobs_key, refused_fresh.as_str()).expect("hexists");
    assert!(!has, "nothing of the refused publication was stored");
    // In arrival order, once each (the list is consumed from the right).
    let mut listed: Vec<String> = redis::Commands::lrange(
        &mut c,
        sundial_core::keys::SlotKeys::new(0).ready("ns/q"),
        0,
        -1,
    )
    .expect("lrange");
    listed.reverse();
    let mut expected = vec![taken.as_str().to_owned()];
    expected.extend(stored.iter().map(|id| id.as_str().to_owned()));
    assert_eq!(listed, expected);
    let counts = shard.queues().counts(0, "ns/q").await.expect("counts");
    assert_eq!((counts.ready, counts.published), (49, 49));
    assert_eq!(batch.lines(), 0, "an idle queue leaves no line behind");
}

#[tokio::test]
async fn acks_that_arrive_together_share_one_call_and_each_finds_its_own_job() {
    use sundial_core::{JobId, NewJob, Schedule};
    let redis = RedisServer::start();
    let shard = engine_shard(&redis).await;
    let schedule = Schedule {
        delay_ms: 0,
        ttl_ms: 60_000,
        tries: 1,
        priority: 0,
        policy: None,
    };
    let ids: Vec<JobId> = (0..30).map(|_| JobId::mint(false)).collect();
    shard
        .jobs()
        .publish(
            0,
            "ns/q",
            &schedule,
            &ids.iter()
                .map(|id| NewJob {
                    id: id.clone(),
                    attrs: String::new(),
                    body: bytes::Bytes::from_static(b"x"),
                })
                .collect::<Vec<_>>(),
        )
        .await
        .expect("publish");
    let acks = sundial_gateway::batch::Workers::default();
    // 20 of the 30 jobs, one id that never existed, and one of the 20 twice.
    let mut asked: Vec<JobId> = ids[..20].to_vec();
    asked.push(JobId::mint(false));
    asked.push(ids[3].clone());
    let before = calls(&redis, "evalsha");
    let answers = futures::future::join_all(
        asked
            .iter()
            .map(|id| acks.ack(&shard, 0, "ns/q", 1, Ack::any(id.clone()))),
    )
    .await;
    assert_eq!(
        calls(&redis, "evalsha") - before,
        1,
        "one script call for 22 acks"
    );
    let found: Vec<bool> = answers
        .into_iter()
        .map(|a| a.expect("ack") == Acked::Deleted)
        .collect();
    let mut expected = vec![true; 20];
    expected.extend([false, false]);
    assert_eq!(found, expected, "each ack finds its own job, once");
    // What Redis holds: the 10 others, on the list, their expiries (a
    // minute away) in their wheel second.
    let mut c = redis.client();
    let k = sundial_core::keys::SlotKeys::new(0);
    let held: u64 = redis::Commands::hlen(&mut c, k.jobs()).expect("hlen");
    let listed: u64 = redis::Commands::llen(&mut c, k.ready("ns/q")).expect("llen");
    let seconds: Vec<u64> =
        redis::Commands::zrange(&mut c, k.wheel_index(), 0, -1).expect("zrange");
    let expiring: u64 = seconds
        .iter()
        .map(|&s| redis::Commands::hlen::<_, u64>(&mut c, k.expiry_wheel(s)).expect("hlen"))
        .sum();
    assert_eq!((held, listed, expiring), (10, 10, 10));
    let counts = shard.queues().counts(0, "ns/q").await.expect("counts");
    assert_eq!(counts.ready, 10);
    assert_eq!(acks.lines(), 0, "an idle queue leaves no line behind");
}

/// Publishes `n` ready jobs of `ns/q` in slot 0 (3 tries, no TTL), one
/// call each, so that they queue in this order; their ids.
async fn publish_ready(shard: &sundial_core::Shard, n: usize) -> Vec<sundial_core::JobId> {
    use sundial_core::{JobId, NewJob, Schedule};
    let schedule = Schedule {
        delay_ms: 0,
        ttl_ms: 0,
        tries: 3,
        priority: 0,
        policy: None,
    };
    let ids: Vec<JobId> = (0..n).map(|_| JobId::mint(false)).collect();
    for id in &ids {
        let job = NewJob {
            id: id.clone(),
            attrs: String::new(),
            body: bytes::Bytes::from_static(b"x"),
        };
        shard
            .jobs()
            .publish(0, "ns/q", &schedule, &[job])
            .await
            .expect("publish");
    }
    ids
}

#[tokio::test]
async fn consumers_that_ask_together_share_one_call_and_a_departed_ones_jobs_are_released() {
    use futures::FutureExt;
    use sundial_core::{JobId, Want};
    let redis = RedisServer::start();
    let shard = engine_shard(&redis).await;
    let ids = publish_ready(&shard, 15).await;
    let consumes = sundial_gateway::batch::Workers::default();
    let want = |count, ttr_ms| Want { count, ttr_ms };
    let before = calls(&redis, "evalsha");
    // 20 consumers at once, asking 1 job each but the third asking 4: the
    // first 12 are served in arrival order (15 jobs), the last 8 get none.
    // All wait before the first call runs, so it takes them all (the
    // second call started at 16 waiting finds nothing left).
    let answers = futures::future::join_all((0..20).map(|i| {
        let w = if i == 2 {
            want(4, 60_000)
        } else {
            want(1, 30_000)
        };
        consumes.consume(&shard, 0, "ns/q", 1, w)
    }))
    .await;
    assert_eq!(
        calls(&redis, "evalsha") - before,
        1,
        "one script call for 20 consumers"
    );
    let got: Vec<Vec<String>> = answers
        .into_iter()
        .map(|a| {
            a.expect("consume")
                .answered()
                .into_iter()
                .map(|d| d.job.id)
                .collect()
        })
        .collect();
    let mut expected: Vec<Vec<String>> = Vec::new();
    let mut next = ids.iter().map(|id| id.as_str().to_owned());
    for i in 0..20 {
        let n = if i == 2 { 4 } else { 1 };
        expected.push(next.by_ref().take(n).collect());
    }
    assert_eq!(got, expected, "oldest jobs first, in arrival order");
    let counts = shard.queues().counts(0, "ns/q").await.expect("counts");
    assert_eq!((counts.ready, counts.reserved), (0, 15));

    // Each consumer's jobs carry its own TTR: the third's run 60 s, the
    // others' 30 s (timer scores, shard clock).
    let mut c = redis.client();
    let k = sundial_core::keys::SlotKeys::new(0);
    let score = |c: &mut redis::Connection, id: &JobId| -> f64 {
        redis::Commands::zscore(c, k.timer(), id.as_str()).expect("zscore")
    };
    let gap = score(&mut c, &ids[2]) - score(&mut c, &ids[0]);
    assert!((29_000.0..31_000.0).contains(&gap), "{gap}");

    // A consumer that leaves while it waits for a call is not served: the
    // job it would have had stays at the head of the queue, untouched.
    let more = publish_ready(&shard, 2).await;
    let mut stays = Box::pin(consumes.consume(&shard, 0, "ns/q", 1, want(1, 30_000)));
    assert!(futures::poll!(stays.as_mut()).is_pending(), "in the line");
    assert!(
        consumes
            .consume(&shard, 0, "ns/q", 1, want(1, 30_000))
            .now_or_never()
            .is_none(),
        "joined the line, then left"
    );
    let kept = stays.await.expect("consume").answered();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].job.id, more[0].as_str());
    let released = async {
        loop {
            let listed: Vec<String> =
                redis::Commands::lrange(&mut c, k.ready("ns/q"), 0, -1).expect("lrange");
            if listed == [more[1].as_str()] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), released)
        .await
        .expect("the departed consumer's job is on the queue");
    let counts = shard.queues().counts(0, "ns/q").await.expect("counts");
    assert_eq!(
        (counts.ready, counts.reserved, counts.delivered),
        (1, 16, 16),
        "no delivery counted for it"
    );
    let again = shard
        .jobs()
        .consume(0, "ns/q", 1, 30_000)
        .await
        .expect("consume");
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job.id, more[1].as_str());
    assert_eq!(again[0].job.tries_left, 2, "no try was spent on it");
    assert!(again[0].first, "never delivered before");

    // Jobs reserved for a consumer that leaves once its call has run go back
    // to the head of the queue, the oldest first again, their tries back.
    let last = publish_ready(&shard, 2).await;
    let taken = consumes
        .consume(&shard, 0, "ns/q", 1, want(2, 30_000))
        .await
        .expect("consume");
    assert_eq!(taken.len(), 2);
    drop(taken);
    let back = async {
        while shard
            .queues()
            .counts(0, "ns/q")
            .await
            .expect("counts")
            .ready
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), back)
        .await
        .expect("released");
    let again = shard
        .jobs()
        .consume(0, "ns/q", 2, 30_000)
        .await
        .expect("consume");
    let ids: Vec<&str> = again.iter().map(|d| d.job.id.as_str()).collect();
    assert_eq!(ids, [last[0].as_str(), last[1].as_str()], "oldest first");
    assert!(again.iter().all(|d| d.job.tries_left == 2), "tries back");
    assert_eq!(consumes.lines(), 0, "an idle queue leaves no line behind");
}

#[tokio::test]
async fn acks_and_consumes_that_arrive_together_share_one_call_acks_first() {
    use sundial_core::Want;
    let redis = RedisServer::start();
    let shard = engine_shard(&redis).await;
    let ids = publish_ready(&shard, 10).await;
    let first = shard
        .jobs()
        .consume(0, "ns/q", 3, 30_000)
        .await
        .expect("consume");
    assert_eq!(first.len(), 3);
    let workers = sundial_gateway::batch::Workers::default();
    let before = calls(&redis, "evalsha");
    // In one call: acks of the 3 reserved jobs and of the oldest ready one
    // (ids[3]), and 3 consumers asking 1 job each.
    let acks = futures::future::join_all(
        ids[..4]
            .iter()
            .map(|id| workers.ack(&shard, 0, "ns/q", 1, Ack::any(id.clone()))),
    );
    let takes = futures::future::join_all((0..3).map(|_| {
        workers.consume(
            &shard,
            0,
            "ns/q",
            1,
            Want {
                count: 1,
                ttr_ms: 30_000,
            },
        )
    }));
    let (acked, taken) = futures::future::join(acks, takes).await;
    assert_eq!(
        calls(&redis, "evalsha") - before,
        1,
        "one script call for 4 acks and 3 consumes"
    );
    let acked: Vec<bool> = acked
        .into_iter()
        .map(|a| a.expect("ack") == Acked::Deleted)
        .collect();
    assert_eq!(acked, [true; 4], "every ack finds its job");
    let taken: Vec<Vec<String>> = taken
        .into_iter()
        .map(|t| {
            t.expect("consume")
                .answered()
                .into_iter()
                .map(|d| d.job.id)
                .collect()
        })
        .collect();
    let expected: Vec<Vec<String>> = ids[4..7]
        .iter()
        .map(|id| vec![id.as_str().to_owned()])
        .collect();
    assert_eq!(
        taken, expected,
        "the acked ready job is not delivered; the next ones are, in order"
    );
    // What Redis holds: ids[4..7] reserved (on the timer), ids[7..] ready.
    let mut c = redis.client();
    let k = sundial_core::keys::SlotKeys::new(0);
    let held: u64 = redis::Commands::hlen(&mut c, k.jobs()).expect("hlen");
    let listed: Vec<String> =
        redis::Commands::lrange(&mut c, k.ready("ns/q"), 0, -1).expect("lrange");
    let timed: Vec<String> = redis::Commands::zrange(&mut c, k.timer(), 0, -1).expect("zrange");
    assert_eq!(held, 6);
    let mut want_listed: Vec<String> = ids[7..].iter().map(|id| id.as_str().to_owned()).collect();
    want_listed.reverse();
    assert_eq!(listed, want_listed, "the acked ready id left the list");
    let mut timed_sorted = timed.clone();
    timed_sorted.sort();
    let mut want_timed: Vec<String> = ids[4..7].iter().map(|id| id.as_str().to_owned()).collect();
    want_timed.sort();
    assert_eq!(timed_sorted, want_timed, "only the reserved jobs are timed");
    let counts = shard.queues().counts(0, "ns/q").await.expect("counts");
    assert_eq!((counts.ready, counts.reserved), (3, 3));
    assert_eq!(workers.lines(), 0, "an idle queue leaves no line behind");
}
