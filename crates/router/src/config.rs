//! Pool and shard configuration, as the operator writes it.

use serde::{Deserialize, Serialize};

/// The default number of buckets per namespace; see `docs/ARCHITECTURE.md`
/// for the measurement behind it.
pub const DEFAULT_BUCKETS: u32 = 16;

/// One pool: a named set of shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Buckets per namespace; fixed once the pool holds data.
    #[serde(default = "default_buckets")]
    pub buckets: u32,
    /// The pool's shards.
    pub shards: Vec<ShardConfig>,
}

/// One shard: a standalone Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// `redis://[[user]:password@]host:port[/db]`, or `rediss://` for TLS.
    pub url: String,
    /// Pooled connections to this shard.
    #[serde(default = "default_connections")]
    pub connections: usize,
}

fn default_buckets() -> u32 {
    DEFAULT_BUCKETS
}

fn default_connections() -> usize {
    4
}

impl PoolConfig {
    /// Checks what can be checked without connecting.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if !(1..=1024).contains(&self.buckets) {
            return Err(format!(
                "pool {name}: buckets must be within 1..=1024, not {}",
                self.buckets
            ));
        }
        match self.shards.len() {
            0 => Err(format!("pool {name}: needs one shard")),
            1 => Ok(()),
            // Spreading buckets over several shards needs the consistent-hash
            // ring and bucket moves (issue #3); refuse rather than pretend.
            n => Err(format!(
                "pool {name}: has {n} shards, but this version serves one shard per pool"
            )),
        }
    }
}
