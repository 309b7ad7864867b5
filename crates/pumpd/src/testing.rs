//! What the crate's unit tests share.

use std::time::Duration;

use sundial_core::{Shard, ShardOptions};
use sundial_tests::RedisServer;

/// A shard of `redis`, connected, with `slot`'s lease held by "me".
pub(crate) async fn leased_shard(redis: &RedisServer, slot: u32) -> Shard {
    let shard = Shard::connect("t", &ShardOptions::new(redis.url())).expect("connect");
    shard
        .wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    assert!(
        shard.leases().claim(slot, "me").await.expect("claim"),
        "taken"
    );
    shard
}
