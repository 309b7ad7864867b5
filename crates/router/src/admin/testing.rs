//! What the admin tables' tests share: a real Redis and a store on it.

use std::{sync::Arc, time::Duration};

use sundial_core::{Shard, ShardOptions};
use sundial_tests::RedisServer;

use super::AdminStore;

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
