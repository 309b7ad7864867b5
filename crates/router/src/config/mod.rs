//! Pool and shard configuration, as the operator writes it: `pool.rs`
//! (a pool, and the checks of its config that need no connection),
//! `shard.rs` (a shard's tables and defaults), `url.rs` (the URL a shard's
//! tables make for the client).

mod pool;
mod secret;
mod shard;
mod url;

pub use pool::{DEFAULT_LANES, DEFAULT_SLOTS, MAX_LANES, MAX_SLOTS, PoolConfig};
pub use secret::Secret;
pub use shard::{
    ClusterConfig, DEFAULT_SHARD_NAME, DEFAULT_TIMEOUT_MS, SentinelConfig, ShardConfig, TlsConfig,
    WaitConfig,
};
pub use url::redis_url;
