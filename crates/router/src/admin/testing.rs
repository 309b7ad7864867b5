//! What the admin tables' tests share: a real Redis and a store on it.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use sundial_core::{Shard, ShardOptions};
use sundial_tests::RedisServer;
use tokio_util::sync::CancellationToken;

use super::AdminStore;
use crate::{LiveTopology, PoolConfig, ShardConfig, config::DEFAULT_TIMEOUT_MS, prepare::prepare};

/// A connection to `redis`, named `name`.
pub(crate) async fn shard(redis: &RedisServer, name: &str) -> Shard {
    let s = Shard::connect(name, &ShardOptions::new(redis.url())).expect("connect");
    s.wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    s
}

/// A store of the admin Redis `redis`, loaded.
pub(crate) async fn store(redis: &RedisServer) -> Arc<AdminStore> {
    let store = AdminStore::new(shard(redis, "admin").await);
    store.reload().await.expect("load");
    store
}

/// Another gateway's store of the admin Redis `redis`, loaded and polling
/// it until the token is cancelled (dropping the token does not stop it).
pub(crate) async fn polling(redis: &RedisServer) -> (Arc<AdminStore>, CancellationToken) {
    let two = AdminStore::new(shard(redis, "admin").await);
    two.reload().await.expect("load");
    let stop = CancellationToken::new();
    tokio::spawn(two.clone().run(None, stop.clone()));
    (two, stop)
}

/// A topology of one pool, `default` (8 slots, 1 lane), on `jobs`.
pub(crate) async fn one_pool(jobs: &RedisServer) -> Arc<LiveTopology> {
    let pools = BTreeMap::from([(
        "default".to_owned(),
        PoolConfig {
            quotas: Default::default(),
            slots: 8,
            lanes: 1,
            shards: vec![ShardConfig {
                name: None,
                url: Some(jobs.url()),
                sentinel: None,
                cluster: None,
                weight: 1,
                connections: 1,
                timeout_ms: DEFAULT_TIMEOUT_MS,
                wait: None,
                tls: None,
                password: None,
            }],
        },
    )]);
    let topology = prepare(&pools, None, Duration::from_secs(10))
        .await
        .expect("topology");
    Arc::new(LiveTopology::new(topology))
}
