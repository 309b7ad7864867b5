//! A pool's config (its slots, lanes and shards) and the checks of it
//! that need no connection.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::shard::ShardConfig;
use crate::{Layout, quota::Quota};

/// The default number of slots per pool; see `docs/ARCHITECTURE.md` for
/// why.
pub const DEFAULT_SLOTS: u32 = 128;
/// The most slots a pool may have (Redis Cluster's hash slot count).
pub const MAX_SLOTS: u32 = 16_384;
/// The default number of lanes per queue.
pub const DEFAULT_LANES: u32 = 1;
/// The most lanes a queue may have.
pub const MAX_LANES: u32 = 64;

/// One pool: a named set of shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Slots of the pool: the unit that the ring places on shards, that a
    /// pump lease covers, and that moves when shards change. Fixed once the
    /// pool holds data.
    #[serde(default = "default_slots")]
    pub slots: u32,
    /// Lanes per queue: a queue's jobs spread over this many slots (so over
    /// up to this many shards), and a consume visits each. Fixed once the
    /// pool holds data.
    #[serde(default = "default_lanes")]
    pub lanes: u32,
    /// The pool's shards.
    pub shards: Vec<ShardConfig>,
    /// The quota of each of its namespaces, unless the quota table says
    /// otherwise for one (the config's `[quotas]` under it: see
    /// `crate::quota`).
    #[serde(default, skip_serializing_if = "Quota::is_empty")]
    pub quotas: Quota,
}

fn default_slots() -> u32 {
    DEFAULT_SLOTS
}

fn default_lanes() -> u32 {
    DEFAULT_LANES
}

impl PoolConfig {
    /// Checks what can be checked without connecting.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        self.check_sizes(name)?;
        self.check_timeouts(name)?;
        self.check_shards(name)?;
        self.quotas
            .validate()
            .map_err(|e| format!("pool {name}: quotas: {e}"))?;
        if self.shards.iter().all(|s| s.weight == 0) {
            return Err(format!(
                "pool {name}: at least one shard needs a weight above 0"
            ));
        }
        Ok(())
    }

    /// Slots and lanes within their bounds, and at least one shard.
    fn check_sizes(&self, name: &str) -> Result<(), String> {
        if !(1..=MAX_SLOTS).contains(&self.slots) {
            return Err(format!(
                "pool {name}: slots must be within 1..={MAX_SLOTS}, not {}",
                self.slots
            ));
        }
        if !(1..=MAX_LANES).contains(&self.lanes) {
            return Err(format!(
                "pool {name}: lanes must be within 1..={MAX_LANES}, not {}",
                self.lanes
            ));
        }
        if self.shards.is_empty() {
            return Err(format!("pool {name}: needs at least one shard"));
        }
        Ok(())
    }

    /// Each shard's command timeout, and its `wait` within it.
    fn check_timeouts(&self, name: &str) -> Result<(), String> {
        if let Some(s) = self
            .shards
            .iter()
            .find(|s| !(10..=86_400_000).contains(&s.timeout_ms))
        {
            return Err(format!(
                "pool {name}: shard {}: timeout_ms must be within 10 ms and one day, not {}",
                s.ring_name(),
                s.timeout_ms
            ));
        }
        for s in &self.shards {
            if let Some(w) = &s.wait
                && (w.replicas == 0 || !(1..=s.timeout_ms).contains(&w.timeout_ms))
            {
                return Err(format!(
                    "pool {name}: shard {}: wait needs replicas of 1 or more and a timeout_ms \
                     within 1 ms and the shard's timeout_ms ({}), not {} replicas in {} ms",
                    s.ring_name(),
                    s.timeout_ms,
                    w.replicas,
                    w.timeout_ms
                ));
            }
        }
        Ok(())
    }

    /// Each shard's connection (one way to reach it, its TLS files) and
    /// its name: given when the pool has several, well formed, unique.
    fn check_shards(&self, name: &str) -> Result<(), String> {
        if self.shards.len() > 1 && self.shards.iter().any(|s| s.name.is_none()) {
            return Err(format!(
                "pool {name}: every shard of a pool with several shards needs a `name` \
                 (its place on the ring depends on it)"
            ));
        }
        let mut seen = BTreeSet::new();
        for s in &self.shards {
            s.connect_url()
                .and_then(|_| s.check_tls())
                .map_err(|e| format!("pool {name}, shard {}: {e}", s.ring_name()))?;
            let n = s.ring_name();
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            {
                return Err(format!(
                    "pool {name}: shard name {n:?} must match [-_A-Za-z0-9]+"
                ));
            }
            if !seen.insert(n) {
                return Err(format!("pool {name}: two shards are named {n:?}"));
            }
        }
        Ok(())
    }

    /// The ring's membership: pinned in every shard, so that a change is
    /// noticed at start.
    pub fn layout(&self) -> Layout {
        Layout::new(self.shards.iter().map(|s| (s.ring_name(), s.weight)))
    }
}

impl ShardConfig {
    /// Checks the `tls` table: that the shard uses TLS, and that its files
    /// can be read and go together.
    fn check_tls(&self) -> Result<(), String> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        if self.sentinel.is_some() {
            return Err("a `tls` table is not supported on a Sentinel shard".to_owned());
        }
        if !self
            .connect_url()
            .is_ok_and(|url| sundial_core::url_uses_tls(&url))
        {
            return Err(
                "a `tls` table needs a TLS connection: a rediss:// (or rediss-cluster://) url, \
                 or cluster.tls = true"
                    .to_owned(),
            );
        }
        tls.files().config().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::super::shard::{DEFAULT_TIMEOUT_MS, WaitConfig, tests::shard};
    use super::*;

    #[test]
    fn validation() {
        let pool = |shards| PoolConfig {
            quotas: Default::default(),
            slots: 16,
            lanes: 1,
            shards,
        };
        assert!(pool(vec![shard(None, 1)]).validate("p").is_ok());
        assert!(
            pool(vec![shard(None, 1), shard(Some("b"), 1)])
                .validate("p")
                .is_err()
        );
        assert!(
            pool(vec![shard(Some("a"), 1), shard(Some("a"), 1)])
                .validate("p")
                .is_err()
        );
        assert!(pool(vec![shard(Some("a/b"), 1)]).validate("p").is_err());
        assert!(pool(vec![shard(Some("a"), 0)]).validate("p").is_err());
        assert!(
            pool(vec![shard(Some("a"), 0), shard(Some("b"), 2)])
                .validate("p")
                .is_ok()
        );
        assert!(pool(vec![]).validate("p").is_err());
        let waiting = |replicas, timeout_ms| {
            let mut s = shard(None, 1);
            s.wait = Some(WaitConfig {
                replicas,
                timeout_ms,
            });
            pool(vec![s]).validate("p")
        };
        assert!(waiting(1, 100).is_ok());
        assert!(waiting(2, DEFAULT_TIMEOUT_MS).is_ok());
        assert!(waiting(0, 100).is_err(), "no replica to wait for");
        assert!(waiting(1, 0).is_err(), "WAIT 0 would block for ever");
        assert!(
            waiting(1, DEFAULT_TIMEOUT_MS + 1).is_err(),
            "longer than a request may wait for the shard"
        );
    }

    #[test]
    fn layout_ignores_order_and_addresses() {
        let a = PoolConfig {
            quotas: Default::default(),
            slots: 16,
            lanes: 1,
            shards: vec![shard(Some("x"), 1), shard(Some("y"), 2)],
        };
        let mut b = PoolConfig {
            quotas: Default::default(),
            slots: 16,
            lanes: 1,
            shards: vec![shard(Some("y"), 2), shard(Some("x"), 1)],
        };
        b.shards[0].url = Some("redis://10.0.0.9:6380".to_owned());
        assert_eq!(a.layout(), b.layout());
        assert_eq!(a.layout().to_string(), "x:1,y:2");
    }
}
