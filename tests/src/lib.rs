//! Harness for Sundial's tests: real `redis-server` and `sundial` processes,
//! started on free loopback ports and stopped on drop.
//!
//! - [`RedisServer`]: a throwaway Redis, which a test may kill and restart.
//! - [`FaultProxy`]: a TCP proxy in front of a Redis that adds latency,
//!   stalls, resets connections, and heals.
//! - [`SentinelSet`]: a master, a replica and three real `redis-sentinel`s.
//! - [`RedisCluster`]: a Redis Cluster made with `redis-cli --cluster create`.
//! - [`Store`]: either, as the shard of a scenario that runs on each
//!   [`ShardKind`].
//! - [`Sundial`]: the real `sundial` binary with a generated config.
//! - [`contract`]: every answer a test receives through [`Api`], checked
//!   against the OpenAPI document the binary serves.
//! - [`wait_until`]: the only way tests wait (no sleeps as synchronisation).

mod client;
mod cluster;
pub mod contract;
mod fault_proxy;
mod redis_server;
mod sentinel;
mod store;
mod sundial;

pub use client::{Api, Resp, create_token, token_id};
pub use cluster::{CLUSTER_SLOTS, RedisCluster};
pub use fault_proxy::{Fault, FaultProxy};
pub use redis_server::RedisServer;
pub use sentinel::{MASTER_NAME, SentinelSet};
pub use store::{ShardKind, Store};
pub use sundial::{CliRun, Sundial, SundialConfig, binary as sundial_binary, check_config};

use std::{
    net::TcpListener,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

/// Milliseconds since the Unix epoch, by this machine's clock (which the
/// gateway and Redis share in tests and benchmarks).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// Polls `cond` until it holds or `timeout` passes; panics with `what` then.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The async form of [`wait_until`].
pub async fn wait_until_async<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How most tests start: a Redis, a gateway on it with the default config,
/// and a client with a token for `ns` (also returned).
pub async fn started(ns: &str) -> (RedisServer, Sundial, String, Api) {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), ns).await;
    let api = Api::new(gw.api(), Some(&token));
    (redis, gw, token, api)
}

/// [`started`] on a shard of `kind`: the store, a gateway whose default
/// pool is that shard, and a client with a token for `ns`.
pub async fn started_on(kind: ShardKind, ns: &str) -> (Store, Sundial, String, Api) {
    let store = Store::start(kind);
    let gw = Sundial::start(&SundialConfig::new(store.url()));
    let token = create_token(&gw.admin(), ns).await;
    let api = Api::new(gw.api(), Some(&token));
    (store, gw, token, api)
}
