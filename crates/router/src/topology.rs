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

/// A ring over some of the pool's shards, by name.
#[derive(Debug)]
struct PlacedRing {
    signature: String,
    ring: Ring,
    /// Ring index → index in the pool's `shards`.
    to_shard: Vec<usize>,
}

impl PlacedRing {
    /// Builds the ring of a membership signature (`name:weight,...`) over
    /// the pool's shards, found by name.
    fn new(signature: &str, specs: &[ShardConfig]) -> Result<Self, String> {
        let mut members = Vec::new();
        let mut to_shard = Vec::new();
        for part in signature.split(',').filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .rsplit_once(':')
                .and_then(|(n, w)| Some((n, w.parse::<u32>().ok()?)))
                .ok_or_else(|| format!("unreadable ring membership {signature:?}"))?;
            let idx = specs.iter().position(|s| s.ring_name() == name);
            match idx {
                Some(i) => {
                    members.push((name, weight));
                    to_shard.push(i);
                }
                // A shard with no weight in that ring held none of its buckets.
                None if weight == 0 => {}
                None => {
                    return Err(format!(
                        "shard {name:?} still holds buckets of an earlier layout ({signature}) that are draining; \
                         keep it in the config (with weight 0) until GET /drains shows that layout empty"
                    ));
                }
            }
        }
        Ok(Self {
            signature: signature.to_owned(),
            ring: Ring::new(members),
            to_shard,
        })
    }

    fn shard_of(&self, ns: &str, bucket: u32) -> Option<usize> {
        self.ring.shard_of(ns, bucket).map(|i| self.to_shard[i])
    }
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
    /// The current ring first, then earlier rings whose moved buckets still
    /// drain: writes go to the current ring's shard; reads, queue-wide
    /// operations and pumps also cover the earlier rings' shards.
    rings: Vec<PlacedRing>,
}

impl Pool {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Buckets per namespace.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The shard where `bucket` of namespace `ns` is written now.
    pub fn shard_for(&self, ns: &str, bucket: u32) -> &Shard {
        // Validation guarantees a shard with weight, so the ring answers.
        &self.shards[self.rings[0].shard_of(ns, bucket).unwrap_or(0)]
    }

    /// Every shard that may hold jobs of `bucket` of `ns`: where it is
    /// written now first, then where earlier layouts put it (while they
    /// drain).
    pub fn locations(&self, ns: &str, bucket: u32) -> Vec<&Shard> {
        let mut idx: Vec<usize> = Vec::with_capacity(self.rings.len());
        for r in &self.rings {
            if let Some(i) = r.shard_of(ns, bucket)
                && !idx.contains(&i)
            {
                idx.push(i);
            }
        }
        idx.into_iter().map(|i| &self.shards[i]).collect()
    }

    /// The shards that may hold jobs of `ns`, each with the buckets it may
    /// hold (in the current layout or one that drains): what a queue-wide
    /// operation or a pump visits, one call per shard.
    pub fn groups(&self, ns: &str) -> Vec<(&Shard, Vec<u32>)> {
        let mut per: Vec<Vec<u32>> = vec![Vec::new(); self.shards.len()];
        for b in 0..self.buckets {
            for r in &self.rings {
                if let Some(i) = r.shard_of(ns, b)
                    && per[i].last() != Some(&b)
                {
                    per[i].push(b);
                }
            }
        }
        self.shards
            .iter()
            .zip(per)
            .filter(|(_, b)| !b.is_empty())
            .collect()
    }

    /// The buckets of `ns` that earlier layouts placed elsewhere than the
    /// current one: (shard where they drain, bucket, layout signature).
    pub fn moved(&self, ns: &str) -> Vec<(&Shard, u32, &str)> {
        let mut out = Vec::new();
        for b in 0..self.buckets {
            let now = self.rings[0].shard_of(ns, b);
            for r in &self.rings[1..] {
                if let Some(i) = r.shard_of(ns, b)
                    && Some(i) != now
                {
                    out.push((&self.shards[i], b, r.signature.as_str()));
                }
            }
        }
        out
    }

    /// Earlier layouts that still drain.
    pub fn draining(&self) -> impl Iterator<Item = &str> {
        self.rings[1..].iter().map(|r| r.signature.as_str())
    }

    /// Every shard of the pool.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter()
    }

    /// The ring names of the pool's shards, in config order.
    pub fn shard_names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(ShardConfig::ring_name)
    }

    /// The current ring's membership, as pinned in the shards.
    pub fn signature(&self) -> &str {
        &self.rings[0].signature
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
                        opts.command_timeout =
                            std::time::Duration::from_millis(sc.timeout_ms.max(1));
                        Shard::connect(format!("{name}/{}", sc.ring_name()), &opts)?
                    }
                };
                shards.push(shard);
            }
            let current =
                PlacedRing::new(&pc.ring_signature(), &pc.shards).map_err(RouterError::Config)?;
            let pool = Pool {
                name: name.clone(),
                buckets: pc.buckets,
                shards,
                specs: pc.shards.clone(),
                rings: vec![current],
            };
            pools.insert(name.clone(), Arc::new(pool));
        }
        Ok(Self { pools })
    }

    /// Sets the earlier layouts of `pool` that still drain (read from the
    /// shards' pins). Only while the topology is being built, before it is
    /// shared.
    pub fn set_draining(&mut self, pool: &str, signatures: &[String]) -> Result<(), RouterError> {
        let p = self
            .pools
            .get_mut(pool)
            .and_then(Arc::get_mut)
            .ok_or_else(|| RouterError::Config(format!("pool {pool} is shared already")))?;
        p.rings.truncate(1);
        for sig in signatures {
            if sig != p.signature() {
                p.rings.push(
                    PlacedRing::new(sig, &p.specs)
                        .map_err(|e| RouterError::Config(format!("pool {pool}: {e}")))?,
                );
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShardConfig;

    fn spec(name: &str, port: u16, weight: u32) -> ShardConfig {
        ShardConfig {
            name: Some(name.to_owned()),
            url: Some(format!("redis://127.0.0.1:{port}")),
            sentinel: None,
            weight,
            connections: 1,
            timeout_ms: crate::config::DEFAULT_TIMEOUT_MS,
        }
    }

    /// A topology needs a runtime for its (lazy) connections; nothing here
    /// talks to Redis.
    fn topology(shards: Vec<ShardConfig>) -> Topology {
        let pools = BTreeMap::from([(
            "default".to_owned(),
            PoolConfig {
                buckets: 64,
                shards,
            },
        )]);
        Topology::build(&pools, None).expect("topology")
    }

    #[tokio::test]
    async fn a_draining_layout_adds_old_locations_without_changing_writes() {
        let grown = vec![spec("a", 1, 1), spec("b", 2, 1), spec("c", 3, 1)];
        let mut t = topology(grown.clone());
        let before: Vec<String> = (0..64)
            .map(|b| {
                t.pool("default")
                    .expect("pool")
                    .shard_for("ns", b)
                    .name()
                    .to_owned()
            })
            .collect();
        t.set_draining("default", &["a:1,b:1".to_owned()])
            .expect("draining");
        let p = t.pool("default").expect("pool");
        assert_eq!(p.draining().collect::<Vec<_>>(), ["a:1,b:1"]);
        let old = Ring::new([("a", 1), ("b", 1)]);
        let mut moved = 0;
        for b in 0..64 {
            assert_eq!(
                p.shard_for("ns", b).name(),
                before[b as usize],
                "writes follow the current ring"
            );
            let locs: Vec<&str> = p.locations("ns", b).iter().map(|s| s.name()).collect();
            let was = ["default/a", "default/b"][old.shard_of("ns", b).expect("old")];
            assert_eq!(locs[0], before[b as usize]);
            if locs[0] == was {
                assert_eq!(locs.len(), 1);
            } else {
                assert_eq!(locs, [before[b as usize].as_str(), was]);
                moved += 1;
            }
        }
        assert!(moved > 0);
        assert_eq!(
            p.moved("ns").len(),
            moved,
            "every moved bucket drains from its old shard"
        );
        for (shard, b, sig) in p.moved("ns") {
            assert_ne!(shard.name(), p.shard_for("ns", b).name());
            assert_eq!(sig, "a:1,b:1");
        }
        let covered: usize = p.groups("ns").iter().map(|(_, b)| b.len()).sum();
        assert_eq!(
            covered,
            64 + moved,
            "queue-wide operations cover both locations of a moved bucket"
        );
    }

    #[tokio::test]
    async fn a_shard_that_drains_must_stay_in_the_config() {
        let mut t = topology(vec![spec("a", 1, 1), spec("b", 2, 1)]);
        let err = t
            .set_draining("default", &["a:1,b:1,c:1".to_owned()])
            .expect_err("c is gone");
        assert!(err.to_string().contains("keep it in the config"), "{err}");
        // A shard that had no weight in that layout held none of its buckets.
        t.set_draining("default", &["a:1,b:1,c:0".to_owned()])
            .expect("c held nothing");
    }
}
