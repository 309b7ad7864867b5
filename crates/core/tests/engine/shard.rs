//! A shard as a whole: the startup check, scripts reloaded after a flush, a
//! dead shard, what its slots hold.

use std::time::Duration;

use redis::Commands;
use sundial_core::keys;
use sundial_tests::RedisServer;

use crate::helpers::{L, S, counts, now_sched, publish, qn, shard, slot};

#[tokio::test]
async fn startup_check_refuses_evicting_redis_and_layout_changes() {
    let evicting = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let s = shard(&evicting).await;
    let err = s.check(S, L).await.expect_err("allkeys-lru loses jobs");
    assert!(err.to_string().contains("noeviction"), "{err}");
    let volatile = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let s = shard(&volatile).await;
    let err = s.check(S, L).await.expect_err("volatile-lru loses views");
    assert!(err.to_string().contains("volatile-lru"), "{err}");

    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let ok = s.check(S, L).await.expect("a safe shard");
    assert_eq!(ok.maxmemory_policy, "noeviction");
    assert!(!ok.aof_enabled);
    let err = s
        .check(S * 2, L)
        .await
        .expect_err("the slot count is pinned");
    assert!(err.to_string().contains("cannot change"), "{err}");
    let err = s
        .check(S, L + 1)
        .await
        .expect_err("the lane count is pinned");
    assert!(err.to_string().contains("lanes"), "{err}");
    let format: u32 = redis
        .client()
        .hget(keys::META, keys::META_FORMAT)
        .expect("hget");
    assert_eq!(format, keys::FORMAT, "the data format is recorded");

    // A shard written by format 1 (per-namespace buckets) is refused with
    // what to do, and nothing is written to it.
    let old = RedisServer::start();
    let _: () = old
        .client()
        .hset(keys::META, keys::META_BUCKETS_V1, 16)
        .expect("hset");
    let s = shard(&old).await;
    let err = s.check(S, L).await.expect_err("format 1");
    assert!(err.to_string().contains("format 1"), "{err}");
    assert!(err.to_string().contains("docs/POOLS.md"), "{err}");
    let fields: Vec<String> = old.client().hkeys(keys::META).expect("hkeys");
    assert_eq!(fields, [keys::META_BUCKETS_V1]);
    let _: () = old
        .client()
        .hset(keys::META, keys::META_FORMAT, keys::FORMAT + 1)
        .expect("hset");
    let err = s.check(S, L).await.expect_err("a later format");
    let later = format!("format {}", keys::FORMAT + 1);
    assert!(err.to_string().contains(&later), "{err}");

    // A shard of an older format (2: plain records only, 3: never keyed,
    // 4: never prioritized, 5: no expiry in the wheel) is read as it is
    // and marked with this build's format, which the build that wrote it
    // refuses.
    for older in keys::OLDER_FORMATS {
        let plain = RedisServer::start();
        let _: () = plain
            .client()
            .hset(keys::META, keys::META_FORMAT, older)
            .expect("hset");
        shard(&plain)
            .await
            .check(S, L)
            .await
            .expect("an older format is read");
        let format: u32 = plain
            .client()
            .hget(keys::META, keys::META_FORMAT)
            .expect("hget");
        assert_eq!(format, keys::FORMAT, "format {older} is marked");
    }
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    s.load_scripts().await.expect("load");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut redis.client())
        .expect("flush");
    publish(&s, "q", now_sched(1), "x").await;
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 1);
}

#[tokio::test]
async fn a_dead_shard_is_unavailable_not_a_panic() {
    let mut redis = RedisServer::start();
    let s = shard(&redis).await;
    redis.kill();
    let err = counts(&s, "q").await.expect_err("redis is gone");
    assert!(err.is_unavailable(), "{err:?}");
    redis.restart();
    s.wait_connected(Duration::from_secs(10))
        .await
        .expect("reconnects by itself");
    assert_eq!(counts(&s, "q").await.expect("counts").ready, 0);
}

#[tokio::test]
async fn holds_jobs_sees_live_jobs_only() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(!s.slots().hold_jobs(S).await.expect("empty shard"));
    let id = publish(&s, "q", now_sched(1), "x").await;
    assert!(s.slots().hold_jobs(S).await.expect("one job"));
    assert!(
        s.jobs()
            .delete(slot("q", &id), &qn("q"), &id)
            .await
            .expect("delete")
    );
    assert!(
        !s.slots().hold_jobs(S).await.expect("acked"),
        "a queue that had jobs but has none"
    );
}
