//! The connected pools, and which shard holds which bucket of a namespace.

use std::{collections::BTreeMap, sync::Arc};

use arc_swap::ArcSwap;
use sundial_core::{EngineError, Shard, ShardOptions};

use crate::{
    config::{PoolConfig, ShardConfig},
    ring::Ring,
};

/// Why a topology could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("invalid pool configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// One pool, connected.
#[derive(Debug)]
pub struct Pool {
    name: String,
    buckets: u32,
    shards: Vec<Shard>,
    /// The config each shard was built from (same order as `shards`), to
    /// reuse connections across reloads.
    specs: Vec<ShardConfig>,
    ring: Ring,
    signature: String,
}

impl Pool {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Buckets per namespace.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The shard that holds `bucket` of namespace `ns`.
    pub fn shard_for(&self, ns: &str, bucket: u32) -> &Shard {
        // Validation guarantees a shard with weight, so the ring answers.
        &self.shards[self.ring.shard_of(ns, bucket).unwrap_or(0)]
    }

    /// The shards that hold buckets of `ns`, each with those buckets: what a
    /// queue-wide operation visits, one call per shard.
    pub fn groups(&self, ns: &str) -> Vec<(&Shard, Vec<u32>)> {
        let mut per: Vec<Vec<u32>> = vec![Vec::new(); self.shards.len()];
        for b in 0..self.buckets {
            per[self.ring.shard_of(ns, b).unwrap_or(0)].push(b);
        }
        self.shards
            .iter()
            .zip(per)
            .filter(|(_, b)| !b.is_empty())
            .collect()
    }

    /// Every shard of the pool.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter()
    }

    /// The ring's membership, as pinned in the shards.
    pub fn signature(&self) -> &str {
        &self.signature
    }
}

/// Every pool, by name. Immutable: a reload builds a new one.
#[derive(Debug, Default)]
pub struct Topology {
    pools: BTreeMap<String, Arc<Pool>>,
}

impl Topology {
    /// Connects every pool of `config` (connections come up in the
    /// background; an unreachable shard answers 503 until it is back).
    /// Shards whose address and settings are unchanged from `previous` keep
    /// their connections; others get new ones.
    pub fn build(
        config: &BTreeMap<String, PoolConfig>,
        previous: Option<&Topology>,
    ) -> Result<Self, RouterError> {
        if !config.contains_key(crate::token::DEFAULT_POOL) {
            return Err(RouterError::Config(
                "a pool named `default` is required".to_owned(),
            ));
        }
        let mut pools = BTreeMap::new();
        for (name, pc) in config {
            pc.validate(name).map_err(RouterError::Config)?;
            let mut shards = Vec::with_capacity(pc.shards.len());
            for sc in &pc.shards {
                let reused = previous.and_then(|t| t.pool(name)).and_then(|p| {
                    p.specs
                        .iter()
                        .position(|s| s == sc)
                        .map(|i| p.shards[i].clone())
                });
                let shard = match reused {
                    Some(s) => s,
                    None => {
                        let url = sc.connect_url().map_err(RouterError::Config)?;
                        let mut opts = ShardOptions::new(url);
                        opts.connections = sc.connections;
                        Shard::connect(format!("{name}/{}", sc.ring_name()), &opts)?
                    }
                };
                shards.push(shard);
            }
            let pool = Pool {
                name: name.clone(),
                buckets: pc.buckets,
                shards,
                specs: pc.shards.clone(),
                ring: Ring::new(pc.shards.iter().map(|s| (s.ring_name(), s.weight))),
                signature: pc.ring_signature(),
            };
            pools.insert(name.clone(), Arc::new(pool));
        }
        Ok(Self { pools })
    }

    /// Every shard of every pool.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.pools.values().flat_map(|p| p.shards())
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.get(name)
    }

    pub fn pools(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.values()
    }
}

/// The current topology, swappable as one value.
#[derive(Debug)]
pub struct Router {
    current: ArcSwap<Topology>,
    /// Bumped on every swap, for those that follow the topology (pumps,
    /// wake-up registries).
    generation: tokio::sync::watch::Sender<u64>,
}

impl Router {
    pub fn new(topology: Topology) -> Self {
        Self {
            current: ArcSwap::from_pointee(topology),
            generation: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The topology now. Hold the `Arc` (not a guard) across `.await`.
    pub fn topology(&self) -> Arc<Topology> {
        self.current.load_full()
    }

    /// Replaces the topology in one store; requests in flight finish on the
    /// one they loaded.
    pub fn swap(&self, topology: Topology) {
        self.current.store(Arc::new(topology));
        self.generation.send_modify(|g| *g += 1);
    }

    /// A receiver that sees every swap.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }
}
