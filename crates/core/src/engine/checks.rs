//! The startup check of a shard: safe to use, and holding what the config
//! says.

use fred::prelude::*;

use crate::{EngineError, Shard, keys};

/// What the startup check found on a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardCheck {
    pub maxmemory_policy: String,
    pub aof_enabled: bool,
    pub redis_version: String,
}

impl Shard {
    /// Startup check: refuses a shard that would evict keys, and pins the
    /// pool's bucket count in the shard so that a later change is refused
    /// instead of silently orphaning jobs.
    pub async fn check(&self, buckets: u32) -> Result<ShardCheck, EngineError> {
        let client = self.client()?;
        let info: String = client.info(None).await.map_err(|e| self.err(e))?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        let check = ShardCheck {
            maxmemory_policy: field("maxmemory_policy"),
            aof_enabled: field("aof_enabled") == "1",
            redis_version: field("redis_version"),
        };
        self.refuse_unsafe(&check)?;
        let stored: Option<u32> = {
            let _: bool = client
                .hsetnx(keys::META, keys::META_BUCKETS, buckets)
                .await
                .map_err(|e| self.err(e))?;
            client
                .hget(keys::META, keys::META_BUCKETS)
                .await
                .map_err(|e| self.err(e))?
        };
        if stored != Some(buckets) {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "this shard holds data written with {} buckets per namespace, but the config says {buckets}; \
                     the bucket count cannot change once jobs exist (set it back to {0})",
                    stored.map_or_else(|| "an unknown number of".to_owned(), |b| b.to_string())
                ),
            });
        }
        Ok(check)
    }

    /// Refuses a Redis too old for the scripts, or one that evicts keys.
    fn refuse_unsafe(&self, check: &ShardCheck) -> Result<(), EngineError> {
        // The scripts use LPOP with a count and LPOS (Redis 6.2).
        let version: Vec<u32> = check
            .redis_version
            .split('.')
            .map_while(|p| p.parse().ok())
            .collect();
        if version.len() >= 2 && (version[0], version[1]) < (6, 2) {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "Redis {} is too old: Sundial needs Redis 6.2 or later",
                    check.redis_version
                ),
            });
        }
        // allkeys-* evicts jobs and tokens; volatile-* evicts the keys that
        // Sundial gives a TTL (pump leases, gateway views, rate counters),
        // and a lost view can retire a shard layout still written to.
        if check.maxmemory_policy != "noeviction" {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "maxmemory-policy is {}, which evicts keys (jobs and tokens, or the leases and \
                     views that Sundial sets with a TTL); set `maxmemory-policy noeviction` in \
                     redis.conf (or CONFIG SET) and restart Sundial",
                    check.maxmemory_policy
                ),
            });
        }
        Ok(())
    }
}
