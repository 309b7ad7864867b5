//! The connected pools, and which shard holds which bucket of a namespace.
//!
//! A topology is built in two steps: [`connect`] opens (or reuses) the
//! shards' connections, so that their pins can be read; [`Topology::new`]
//! then builds it whole from the config, those connections and the layouts
//! that still drain. It never changes afterwards.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
};

use sundial_core::{EngineError, Shard, ShardOptions};

use crate::{
    Layout,
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
    layout: Layout,
    ring: Ring,
    /// Ring index → index in the pool's `shards`.
    to_shard: Vec<usize>,
}

impl PlacedRing {
    /// Builds the ring of a layout over the pool's shards, found by name.
    fn new(layout: &Layout, specs: &[ShardConfig]) -> Result<Self, String> {
        let mut members = Vec::new();
        let mut to_shard = Vec::new();
        for (name, weight) in layout.members() {
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
                        "shard {name:?} still holds buckets of an earlier layout ({layout}) that are draining; \
                         keep it in the config (with weight 0) until GET /drains shows that layout empty"
                    ));
                }
            }
        }
        Ok(Self {
            layout: layout.clone(),
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
    /// [`Pool::groups`] per namespace, computed once per topology (a
    /// consume pass asks for them every time).
    groups: RwLock<HashMap<String, Groups>>,
}

/// The shards that may hold a namespace's jobs, each with those of its
/// buckets that they may hold.
pub type Groups = Arc<[(Shard, Arc<[u32]>)]>;

/// Namespaces whose groups a pool keeps before it starts over.
const MAX_CACHED_GROUPS: usize = 10_000;

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
    pub fn groups(&self, ns: &str) -> Groups {
        let cached = self.groups.read().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = cached.get(ns) {
            return g.clone();
        }
        drop(cached);
        let groups = self.compute_groups(ns);
        let mut cache = self.groups.write().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_GROUPS {
            cache.clear();
        }
        cache.insert(ns.to_owned(), groups.clone());
        groups
    }

    fn compute_groups(&self, ns: &str) -> Groups {
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
            .map(|(s, b)| (s.clone(), Arc::from(b)))
            .collect()
    }

    /// The buckets of `ns` that earlier layouts placed elsewhere than the
    /// current one: (shard where they drain, bucket, that layout).
    pub fn moved(&self, ns: &str) -> Vec<(&Shard, u32, &Layout)> {
        let mut out = Vec::new();
        for b in 0..self.buckets {
            let now = self.rings[0].shard_of(ns, b);
            for r in &self.rings[1..] {
                if let Some(i) = r.shard_of(ns, b)
                    && Some(i) != now
                {
                    out.push((&self.shards[i], b, &r.layout));
                }
            }
        }
        out
    }

    /// Earlier layouts that still drain.
    pub fn draining(&self) -> impl Iterator<Item = &Layout> {
        self.rings[1..].iter().map(|r| &r.layout)
    }

    /// Every shard of the pool.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter()
    }

    /// The ring names of the pool's shards, in config order.
    pub fn shard_names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(ShardConfig::ring_name)
    }

    /// The current layout, as pinned in the shards.
    pub fn layout(&self) -> &Layout {
        &self.rings[0].layout
    }
}

/// Every pool, by name. Immutable: a reload builds a new one.
#[derive(Debug, Default)]
pub struct Topology {
    pools: BTreeMap<String, Arc<Pool>>,
}

/// The shards of every pool of `config`, connected (connections come up in
/// the background; an unreachable shard answers 503 until it is back).
/// Shards whose address and settings are unchanged from `previous` keep
/// their connections; others get new ones.
pub fn connect(
    config: &BTreeMap<String, PoolConfig>,
    previous: Option<&Topology>,
) -> Result<BTreeMap<String, Vec<Shard>>, RouterError> {
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
                    opts.command_timeout = std::time::Duration::from_millis(sc.timeout_ms.max(1));
                    Shard::connect(format!("{name}/{}", sc.ring_name()), &opts)?
                }
            };
            shards.push(shard);
        }
        pools.insert(name.clone(), shards);
    }
    Ok(pools)
}

impl Topology {
    /// The topology of `config` over `shards` (from [`connect`], same
    /// order), where the layouts in `draining` (per pool) still drain.
    pub fn new(
        config: &BTreeMap<String, PoolConfig>,
        mut shards: BTreeMap<String, Vec<Shard>>,
        draining: &BTreeMap<String, Vec<Layout>>,
    ) -> Result<Self, RouterError> {
        let mut pools = BTreeMap::new();
        for (name, pc) in config {
            let shards = shards
                .remove(name)
                .filter(|s| s.len() == pc.shards.len())
                .ok_or_else(|| RouterError::Config(format!("pool {name}: shards not connected")))?;
            let current = pc.layout();
            let mut rings =
                vec![PlacedRing::new(&current, &pc.shards).map_err(RouterError::Config)?];
            for layout in draining.get(name).into_iter().flatten() {
                if *layout != current {
                    rings.push(
                        PlacedRing::new(layout, &pc.shards)
                            .map_err(|e| RouterError::Config(format!("pool {name}: {e}")))?,
                    );
                }
            }
            let pool = Pool {
                name: name.clone(),
                buckets: pc.buckets,
                shards,
                specs: pc.shards.clone(),
                rings,
                groups: RwLock::default(),
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
    fn topology(shards: Vec<ShardConfig>, draining: &str) -> Result<Topology, RouterError> {
        let pools = BTreeMap::from([(
            "default".to_owned(),
            PoolConfig {
                buckets: 64,
                shards,
            },
        )]);
        let draining: Vec<Layout> = draining
            .split(';')
            .filter(|l| !l.is_empty())
            .map(|l| l.parse().expect("layout"))
            .collect();
        let draining = BTreeMap::from([("default".to_owned(), draining)]);
        Topology::new(&pools, connect(&pools, None)?, &draining)
    }

    #[tokio::test]
    async fn a_draining_layout_adds_old_locations_without_changing_writes() {
        let grown = vec![spec("a", 1, 1), spec("b", 2, 1), spec("c", 3, 1)];
        let before: Vec<String> = (0..64)
            .map(|b| {
                topology(grown.clone(), "")
                    .expect("topology")
                    .pool("default")
                    .expect("pool")
                    .shard_for("ns", b)
                    .name()
                    .to_owned()
            })
            .collect();
        let t = topology(grown, "a:1,b:1").expect("draining");
        let p = t.pool("default").expect("pool");
        let old_layout: Layout = "a:1,b:1".parse().expect("layout");
        assert_eq!(p.draining().collect::<Vec<_>>(), [&old_layout]);
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
            assert_eq!(sig, &old_layout);
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
        let shards = || vec![spec("a", 1, 1), spec("b", 2, 1)];
        let err = topology(shards(), "a:1,b:1,c:1").expect_err("c is gone");
        assert!(err.to_string().contains("keep it in the config"), "{err}");
        // A shard that had no weight in that layout held none of its buckets.
        topology(shards(), "a:1,b:1,c:0").expect("c held nothing");
    }
}
