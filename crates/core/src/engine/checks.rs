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
    /// Replicas connected to the master (on a cluster, the fewest of any
    /// primary's).
    pub replicas: u32,
    /// Its `maxmemory` in bytes, 0 for none (on a cluster, the smallest of
    /// any primary's).
    pub maxmemory: u64,
}

impl Shard {
    /// Startup check: refuses a shard that would evict keys or that holds
    /// data of a layout this build does not read, and pins the data layout
    /// version and the pool's slot and lane counts in the shard, so that a
    /// later change is refused instead of silently orphaning jobs.
    ///
    /// On a Redis Cluster every primary is checked (the first that fails
    /// is named; AOF counts as on only if every primary has it), and the
    /// scripts' keys must lie in one cluster hash slot.
    pub async fn check(&self, slots: u32, lanes: u32) -> Result<ShardCheck, EngineError> {
        let check = self.check_servers().await?;
        self.pin_format().await?;
        self.pin_counts(slots, lanes).await?;
        self.count_usage_once(slots).await?;
        Ok(check)
    }

    /// The check of the shard's servers alone: a Redis recent enough for
    /// the scripts, that evicts nothing (on a cluster, every primary). The
    /// admin Redis gets this one: it holds no jobs, but runs scripts and
    /// holds the tokens.
    pub async fn check_servers(&self) -> Result<ShardCheck, EngineError> {
        if self.is_cluster() {
            return self.check_primaries().await;
        }
        let info: String = self
            .conn()
            .idempotent(keys::META, |c| async move { c.info(None).await })
            .await?;
        let found = read_info(&info);
        self.refuse_unsafe(&found, None)?;
        Ok(found)
    }

    /// Refuses data of a format this build does not read, and pins this
    /// build's format in a shard that has none yet.
    async fn pin_format(&self) -> Result<(), EngineError> {
        let (old_buckets, format): (Option<String>, Option<u32>) = self
            .conn()
            .idempotent(keys::META, |c| async move {
                c.hmget(keys::META, vec![keys::META_BUCKETS_V1, keys::META_FORMAT])
                    .await
            })
            .await?;
        if old_buckets.is_some() && format.is_none() {
            return Err(self.unsafe_because(
                "this shard holds data in Sundial's format 1 (per-namespace buckets), which this \
                 build does not read; drain it with the build that wrote it, or point this pool at \
                 an empty Redis (see \"Upgrading from format 1\" in docs/POOLS.md)"
                    .to_owned(),
            ));
        }
        match format {
            Some(keys::FORMAT) => {}
            Some(older) if keys::OLDER_FORMATS.contains(&older) => {
                let _: () = self
                    .conn()
                    .idempotent(keys::META, |c| async move {
                        c.hset(keys::META, (keys::META_FORMAT, keys::FORMAT)).await
                    })
                    .await?;
            }
            Some(other) => {
                return Err(self.unsafe_because(format!(
                    "this shard holds data in Sundial's format {other}, but this build reads \
                     format {}; run a build that reads it",
                    keys::FORMAT
                )));
            }
            None => {
                let _: bool = self
                    .conn()
                    .idempotent(keys::META, |c| async move {
                        c.hsetnx(keys::META, keys::META_FORMAT, keys::FORMAT).await
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// Pins the pool's slot and lane counts in the shard, and refuses other
    /// counts than those pinned.
    async fn pin_counts(&self, slots: u32, lanes: u32) -> Result<(), EngineError> {
        for (field, want, what) in [
            (keys::META_SLOTS, slots, "slots"),
            (keys::META_LANES, lanes, "lanes"),
        ] {
            let _: bool = self
                .conn()
                .idempotent(keys::META, |c| async move {
                    c.hsetnx(keys::META, field, want).await
                })
                .await?;
            let stored: Option<u32> = self
                .conn()
                .idempotent(
                    keys::META,
                    |c| async move { c.hget(keys::META, field).await },
                )
                .await?;
            if stored != Some(want) {
                return Err(self.unsafe_because(format!(
                    "this shard holds data written with {} {what} per pool, but the config says \
                     {want}; the {what} count cannot change once jobs exist (set it back to {0})",
                    stored.map_or_else(|| "an unknown number of".to_owned(), |b| b.to_string())
                )));
            }
        }
        Ok(())
    }

    /// The startup check of every primary of a cluster shard, and of the
    /// scripts' keys.
    async fn check_primaries(&self) -> Result<ShardCheck, EngineError> {
        super::keysets::check_single_hash_slot().map_err(|what| self.unsafe_because(what))?;
        let mut all: Option<ShardCheck> = None;
        self.conn()
            .each_primary_info(|addr, info| {
                let found = read_info(info);
                self.refuse_unsafe(&found, Some(addr))?;
                let aof = all.as_ref().is_none_or(|a| a.aof_enabled) && found.aof_enabled;
                let replicas = all
                    .as_ref()
                    .map_or(found.replicas, |a| a.replicas.min(found.replicas));
                let maxmemory = all
                    .as_ref()
                    .map_or(found.maxmemory, |a| a.maxmemory.min(found.maxmemory));
                all = Some(ShardCheck {
                    aof_enabled: aof,
                    replicas,
                    maxmemory,
                    ..found
                });
                Ok(())
            })
            .await?;
        // Not read yet: the cluster could not be reached.
        all.ok_or_else(|| {
            self.conn()
                .unavailable_node("(none known: the slot map was not read)")
        })
    }

    fn unsafe_because(&self, what: String) -> EngineError {
        EngineError::Unsafe {
            shard: self.name().to_owned(),
            what,
        }
    }

    /// Refuses a Redis too old for the scripts, or one that evicts keys;
    /// `node` names the cluster node the check is of.
    fn refuse_unsafe(&self, check: &ShardCheck, node: Option<&str>) -> Result<(), EngineError> {
        let on = node.map(|n| format!("node {n}: ")).unwrap_or_default();
        // The scripts declare their flags in a `#!lua` line (Redis 7.0), and
        // a cluster shard uses sharded pub/sub (Redis 7.0).
        let need = (7, 0);
        let version: Vec<u32> = check
            .redis_version
            .split('.')
            .map_while(|p| p.parse().ok())
            .collect();
        if version.len() >= 2 && (version[0], version[1]) < need {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "{on}Redis {} is too old: Sundial needs Redis {}.{} or later",
                    check.redis_version, need.0, need.1
                ),
            });
        }
        // allkeys-* evicts jobs and tokens; volatile-* evicts the keys that
        // Sundial gives a TTL (gateway views, rate counters),
        // and a lost view can retire a shard layout still written to.
        if check.maxmemory_policy != "noeviction" {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "{on}maxmemory-policy is {}, which evicts keys (jobs and tokens, or the gateway \
                     views and rate counters that Sundial sets with a TTL); set `maxmemory-policy noeviction` in \
                     redis.conf (or CONFIG SET) and restart Sundial",
                    check.maxmemory_policy
                ),
            });
        }
        Ok(())
    }
}

/// The value of field `name` of an `INFO` answer ("" when absent).
pub(super) fn info_field<'a>(info: &'a str, name: &str) -> &'a str {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map_or("", str::trim)
}

/// The fields of `INFO` that the check reads.
fn read_info(info: &str) -> ShardCheck {
    let field = |name: &str| info_field(info, name).to_owned();
    ShardCheck {
        maxmemory_policy: field("maxmemory_policy"),
        aof_enabled: field("aof_enabled") == "1",
        redis_version: field("redis_version"),
        replicas: field("connected_slaves").parse().unwrap_or(0),
        maxmemory: field("maxmemory").parse().unwrap_or(0),
    }
}
