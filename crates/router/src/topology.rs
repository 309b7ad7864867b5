//! The connected pools, and which shard holds which slot.
//!
//! A topology is built in two steps: [`connect`] opens (or reuses) the
//! shards' connections, so that their pins can be read; [`Topology::new`]
//! then builds it whole from the config, those connections and the layouts
//! that still drain. It never changes afterwards, but for one thing: which
//! of its layouts each pool writes to (see [`Pool::shard_for`]).

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use sundial_core::{EngineError, ReplicaWait, Shard, ShardOptions, keys};

use crate::{
    Layout,
    config::{PoolConfig, ShardConfig},
    quota::Quota,
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

/// A layout placed on the pool's shards: which shard holds each slot.
#[derive(Debug)]
struct PlacedRing {
    layout: Layout,
    /// Slot → index in the pool's `shards`; `None` when the layout gives no
    /// shard weight.
    placement: Vec<Option<usize>>,
}

impl PlacedRing {
    /// Places a layout's `slots` over the pool's shards, found by name.
    fn new(layout: &Layout, specs: &[ShardConfig], slots: u32) -> Result<Self, String> {
        let mut members = Vec::new();
        let mut to_shard = Vec::new();
        for (name, weight) in layout.members() {
            let idx = specs.iter().position(|s| s.ring_name() == name);
            match idx {
                Some(i) => {
                    members.push((name, weight));
                    to_shard.push(i);
                }
                // A shard with no weight in that ring held none of its slots.
                None if weight == 0 => {}
                None => {
                    return Err(format!(
                        "shard {name:?} still holds slots of an earlier layout ({layout}) that are draining; \
                         keep it in the config (with weight 0) until GET /drains shows that layout empty"
                    ));
                }
            }
        }
        let ring = Ring::new(members);
        let placement = (0..slots)
            .map(|s| ring.shard_of(s).map(|i| to_shard[i]))
            .collect();
        Ok(Self {
            layout: layout.clone(),
            placement,
        })
    }

    fn shard_of(&self, slot: u32) -> Option<usize> {
        self.placement.get(slot as usize).copied().flatten()
    }
}

/// One pool, connected.
#[derive(Debug)]
pub struct Pool {
    name: String,
    slots: u32,
    lanes: u32,
    shards: Vec<Shard>,
    /// The config each shard was built from (same order as `shards`), to
    /// reuse connections across reloads.
    specs: Vec<ShardConfig>,
    /// The current ring first, then earlier rings whose moved slots still
    /// drain: writes go to the current ring's shard; reads, queue-wide
    /// operations and pumps also cover the earlier rings' shards.
    rings: Vec<PlacedRing>,
    /// Per shard (same order as `shards`): the slots it may hold, in the
    /// current layout or one that drains; sorted.
    held: Vec<Arc<[u32]>>,
    /// What each namespace is held to unless the quota table says otherwise.
    quota: Quota,
    /// The ring (index in `rings`) that writes go to: the current one (0),
    /// or, while some live gateway does not know the current layout yet, a
    /// layout that every gateway reads (`crate::writes::choose` decides).
    write: AtomicUsize,
}

impl Pool {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its namespaces' quota (the config's), under the quota table's.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Slots of the pool.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Lanes per queue.
    pub fn lanes(&self) -> u32 {
        self.lanes
    }

    /// The slot of lane `lane` of `queue` of `ns`.
    pub fn slot_of(&self, ns: &str, queue: &str, lane: u32) -> u32 {
        keys::slot_of(ns, queue, lane, self.slots)
    }

    /// The distinct slots that hold a queue's jobs, in lane order (two lanes
    /// may share a slot).
    pub fn queue_slots(&self, ns: &str, queue: &str) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::with_capacity(self.lanes as usize);
        for lane in 0..self.lanes {
            let s = self.slot_of(ns, queue, lane);
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// The shard where `slot` is written now: by the current layout, or by
    /// the layout writes are held on while some gateway does not know the
    /// current one yet (see [`Pool::write_layout`]).
    pub fn shard_for(&self, slot: u32) -> &Shard {
        let ring = &self.rings[self.write.load(Ordering::Acquire).min(self.rings.len() - 1)];
        match ring.shard_of(slot) {
            Some(i) => &self.shards[i],
            None => self.current_shard(slot),
        }
    }

    /// The shard the current layout gives `slot`, where it is written once
    /// every gateway knows that layout.
    pub fn current_shard(&self, slot: u32) -> &Shard {
        // Validation guarantees a shard with weight, so the ring answers.
        &self.shards[self.rings[0].shard_of(slot).unwrap_or(0)]
    }

    /// The layout writes go to: the current one, unless they are held on
    /// an earlier one (still draining) that every live gateway reads.
    pub fn write_layout(&self) -> &Layout {
        &self.rings[self.write.load(Ordering::Acquire).min(self.rings.len() - 1)].layout
    }

    /// Writes go to `layout` from now on, if it is one of this pool's
    /// (current or draining); returns whether that changed anything.
    pub fn set_write_layout(&self, layout: &Layout) -> bool {
        match self.rings.iter().position(|r| r.layout == *layout) {
            Some(i) => self.write.swap(i, Ordering::AcqRel) != i,
            None => false,
        }
    }

    /// The shard `layout` (one of this pool's) places `slot` on: `None`
    /// when the pool does not know that layout, `Some(None)` when the
    /// layout gives the slot no shard.
    pub fn placed(&self, layout: &Layout, slot: u32) -> Option<Option<&Shard>> {
        let ring = self.rings.iter().find(|r| r.layout == *layout)?;
        Some(ring.shard_of(slot).map(|i| &self.shards[i]))
    }

    /// Every layout this pool reads: the current one first, then those that
    /// drain.
    pub fn layouts(&self) -> impl Iterator<Item = &Layout> {
        self.rings.iter().map(|r| &r.layout)
    }

    /// Every shard a layout of the pool places `slot` on, each once: the
    /// current layout's first, then the draining ones' in the order they
    /// are pinned. [`crate::placement::slot_places`] is where callers ask.
    pub(crate) fn ring_places(&self, slot: u32) -> Vec<&Shard> {
        let mut idx: Vec<usize> = Vec::with_capacity(self.rings.len());
        for r in &self.rings {
            if let Some(i) = r.shard_of(slot)
                && !idx.contains(&i)
            {
                idx.push(i);
            }
        }
        idx.into_iter().map(|i| &self.shards[i]).collect()
    }

    /// Each shard with the slots it may hold (in the current layout or one
    /// that drains): what a pump or a listing visits. Shards that hold no
    /// slot are left out.
    pub fn groups(&self) -> impl Iterator<Item = (&Shard, &Arc<[u32]>)> {
        self.shards
            .iter()
            .zip(&self.held)
            .filter(|(_, slots)| !slots.is_empty())
    }

    /// The slots `shard` may hold (empty if it is not this pool's).
    pub fn slots_on(&self, shard: &Shard) -> Arc<[u32]> {
        self.shards
            .iter()
            .position(|s| s.same(shard))
            .map_or_else(|| Arc::from(Vec::new()), |i| self.held[i].clone())
    }

    /// The slots that earlier layouts placed elsewhere than the current one:
    /// (shard where they drain, slot, that layout).
    pub fn moved(&self) -> Vec<(&Shard, u32, &Layout)> {
        let mut out = Vec::new();
        for slot in 0..self.slots {
            let now = self.rings[0].shard_of(slot);
            for r in &self.rings[1..] {
                if let Some(i) = r.shard_of(slot)
                    && Some(i) != now
                {
                    out.push((&self.shards[i], slot, &r.layout));
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
                    opts.wait = sc.wait.as_ref().map(|w| ReplicaWait {
                        replicas: w.replicas,
                        timeout: std::time::Duration::from_millis(w.timeout_ms),
                    });
                    opts.tls = sc.tls.as_ref().map(|t| t.files());
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
                vec![PlacedRing::new(&current, &pc.shards, pc.slots).map_err(RouterError::Config)?];
            for layout in draining.get(name).into_iter().flatten() {
                if *layout != current {
                    rings.push(
                        PlacedRing::new(layout, &pc.shards, pc.slots)
                            .map_err(|e| RouterError::Config(format!("pool {name}: {e}")))?,
                    );
                }
            }
            let mut held: Vec<Vec<u32>> = vec![Vec::new(); shards.len()];
            for slot in 0..pc.slots {
                for r in &rings {
                    if let Some(i) = r.shard_of(slot)
                        && held[i].last() != Some(&slot)
                    {
                        held[i].push(slot);
                    }
                }
            }
            let pool = Pool {
                name: name.clone(),
                slots: pc.slots,
                lanes: pc.lanes,
                shards,
                specs: pc.shards.clone(),
                rings,
                held: held.into_iter().map(Arc::from).collect(),
                quota: pc.quotas,
                write: AtomicUsize::new(0),
            };
            pools.insert(name.clone(), Arc::new(pool));
        }
        Ok(Self { pools })
    }

    /// Each pool keeps writing to the layout its predecessor in `previous`
    /// wrote to, if it still reads that layout: a reload to a new layout
    /// holds writes on the one every gateway knew until
    /// `crate::writes::choose` finds that every live gateway knows the new
    /// one too.
    /// Returns the pools where that layout is gone (they write to the
    /// current one until chosen again).
    pub fn keep_writes_of(&self, previous: &Topology) -> Vec<&Arc<Pool>> {
        let mut lost = Vec::new();
        for pool in self.pools() {
            if let Some(before) = previous.pool(pool.name()) {
                let kept = before.write_layout();
                if pool.layouts().any(|l| l == kept) {
                    pool.set_write_layout(kept);
                } else {
                    lost.push(pool);
                }
            }
        }
        lost
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
            cluster: None,
            weight,
            connections: 1,
            timeout_ms: crate::config::DEFAULT_TIMEOUT_MS,
            wait: None,
            tls: None,
            password: None,
        }
    }

    /// A topology needs a runtime for its (lazy) connections; nothing here
    /// talks to Redis.
    fn topology(shards: Vec<ShardConfig>, draining: &str) -> Result<Topology, RouterError> {
        let pools = BTreeMap::from([(
            "default".to_owned(),
            PoolConfig {
                quotas: Default::default(),
                slots: 64,
                lanes: 1,
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
        let plain = topology(grown.clone(), "").expect("topology");
        let before: Vec<String> = (0..64)
            .map(|s| {
                plain
                    .pool("default")
                    .expect("pool")
                    .shard_for(s)
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
        for s in 0..64 {
            assert_eq!(
                p.shard_for(s).name(),
                before[s as usize],
                "writes follow the current ring"
            );
            let locs: Vec<&str> = crate::placement::slot_places(p, s)
                .iter()
                .map(|s| s.name())
                .collect();
            let was = ["default/a", "default/b"][old.shard_of(s).expect("old")];
            assert_eq!(locs[0], before[s as usize]);
            if locs[0] == was {
                assert_eq!(locs.len(), 1);
            } else {
                assert_eq!(locs, [before[s as usize].as_str(), was]);
                moved += 1;
            }
        }
        assert!(moved > 0);
        assert_eq!(
            p.moved().len(),
            moved,
            "every moved slot drains from its old shard"
        );
        for (shard, s, sig) in p.moved() {
            assert_ne!(shard.name(), p.shard_for(s).name());
            assert_eq!(sig, &old_layout);
        }
        let covered: usize = p.groups().map(|(_, s)| s.len()).sum();
        assert_eq!(
            covered,
            64 + moved,
            "pumps and listings cover both locations of a moved slot"
        );
    }

    #[test]
    fn a_queue_spans_the_distinct_slots_of_its_lanes() {
        let pools = |lanes| {
            BTreeMap::from([(
                "default".to_owned(),
                PoolConfig {
                    quotas: Default::default(),
                    slots: 4,
                    lanes,
                    shards: vec![spec("a", 1, 1)],
                },
            )])
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        for lanes in [1, 2, 8] {
            let cfg = pools(lanes);
            let t = Topology::new(
                &cfg,
                connect(&cfg, None).expect("connect"),
                &BTreeMap::new(),
            )
            .expect("topology");
            let p = t.pool("default").expect("pool");
            let slots = p.queue_slots("ns", "q");
            let mut distinct = slots.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), slots.len(), "no slot twice");
            assert!(slots.len() <= lanes as usize && slots.len() <= 4);
            for lane in 0..lanes {
                assert!(slots.contains(&p.slot_of("ns", "q", lane)));
            }
        }
    }

    #[tokio::test]
    async fn a_shard_that_drains_must_stay_in_the_config() {
        let shards = || vec![spec("a", 1, 1), spec("b", 2, 1)];
        let err = topology(shards(), "a:1,b:1,c:1").expect_err("c is gone");
        assert!(err.to_string().contains("keep it in the config"), "{err}");
        // A shard that had no weight in that layout held none of its slots.
        topology(shards(), "a:1,b:1,c:0").expect("c held nothing");
    }
}
