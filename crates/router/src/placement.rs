//! Where a job, a slot or a namespace's jobs may be, and in which order to
//! look. Every caller that looks for jobs asks here: the job API, export
//! and import, the mover and drains.
//!
//! ## The read order
//!
//! 1. **Pools.** A namespace's jobs are in the pool its tokens name, unless
//!    the namespace has a home ([`crate::admin::homes`]): then they are in the pool
//!    its writes go to, and, while it moves, in the other pool too, read
//!    second ([`route`]). A gateway whose config lacks a pool that may hold
//!    them serves none of the namespace's requests ([`Unplaced::Missing`]:
//!    503, retry).
//! 2. **Shards, within a pool.** A slot's jobs are at the shard the current
//!    layout gives it first, then at the shards that the layouts still
//!    draining gave it, in the order they are pinned ([`slot_places`]); a
//!    queue's, at each slot of its lanes in turn ([`queue_places`]).
//! 3. **By id, a second look.** The places of a job are looked at in that
//!    order, then all but the last once more ([`NamespacePools::job_places`]).
//!    The mover stores a job's copy at the newer place before the job leaves
//!    the older one (a `settle` later), so a job missed at a newer place
//!    and then gone from the older one is at the newer one by the second
//!    look: an ack of a job that exists never does nothing.
//! 4. **An export** walks the other way within a slot, oldest place first
//!    ([`export_places`]): a job the mover carries meanwhile is read before
//!    it leaves or after it arrives.
//!
//! A job the mover took out of a slot is *in transit* at the old place and
//! bound to a [`Dest`]; [`transit_place`] says where its copy goes, and
//! [`copy_places`] where a copy may be once it was acknowledged in transit.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    str::FromStr,
    sync::Arc,
};

use sundial_core::{EngineError, JobId, Shard, keys};

use crate::{
    Pool, Topology,
    admin::{
        AdminStore,
        homes::{Home, MoveState},
    },
};

/// The pools that may hold a namespace's jobs, in the order to look.
#[derive(Debug, Clone)]
pub struct NamespacePools {
    /// Where its writes go, looked at first.
    pub writes: Arc<Pool>,
    /// While it moves between pools: the other one, looked at second.
    pub also: Option<Arc<Pool>>,
}

/// Why a namespace's jobs cannot be placed by this gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    /// It moves between pools, and this gateway's config lacks one of
    /// those that may hold its jobs (named): a lookup here would miss them.
    #[error("the namespace is moving, and this gateway's config lacks pool {0}")]
    Missing(String),
    /// The pool its writes go to is not in this gateway's config.
    #[error("pool not found")]
    NoPool,
}

/// Every shard that may hold jobs of `slot` of `pool`, in the order to
/// look: the current layout's first, then the draining layouts' in the
/// order they are pinned.
pub fn slot_places(pool: &Pool, slot: u32) -> Vec<&Shard> {
    pool.ring_places(slot)
}

/// Every (shard, slot) of `pool` that may hold jobs of `queue` of
/// namespace `ns`, in the order to look: each slot of its lanes in turn,
/// and each slot's places in order. What a queue-wide operation (size,
/// peek, destroy, dead letter) visits.
pub fn queue_places<'a>(pool: &'a Pool, ns: &str, queue: &str) -> Vec<(&'a Shard, u32)> {
    let mut out = Vec::new();
    for slot in pool.queue_slots(ns, queue) {
        out.extend(slot_places(pool, slot).into_iter().map(|s| (s, slot)));
    }
    out
}

/// The pool a namespace's writes go to and, while it moves, the other pool
/// reads cover, by name: from its tokens' pool and its home, if it has one.
pub fn route<'a>(token_pool: &'a str, home: Option<&'a Home>) -> (&'a str, Option<&'a str>) {
    match home {
        Some(h) => (h.writes(), h.also_reads()),
        None => (token_pool, None),
    }
}

impl NamespacePools {
    /// The pools of the namespace whose tokens name `token_pool` and whose
    /// home is `home`, in `topology`. Announced, a gateway whose config lacks
    /// the new pool reads only the old one, where every gateway writes (it
    /// holds the move at `announced`: see [`crate::admin::homes`]).
    pub fn resolve(
        topology: &Topology,
        token_pool: &str,
        home: Option<&Home>,
    ) -> Result<Self, Unplaced> {
        let missing = home
            .filter(|h| h.state != MoveState::Moved)
            .and_then(|h| h.holding().into_iter().find(|p| topology.pool(p).is_none()));
        if let Some(missing) = missing {
            return Err(Unplaced::Missing(missing.to_owned()));
        }
        let (writes, also) = route(token_pool, home);
        Ok(Self {
            writes: topology.pool(writes).cloned().ok_or(Unplaced::NoPool)?,
            also: also.and_then(|p| topology.pool(p).cloned()),
        })
    }

    /// The pools, in the order to look.
    pub fn pools(&self) -> impl Iterator<Item = &Arc<Pool>> {
        std::iter::once(&self.writes).chain(self.also.as_ref())
    }

    /// Every (shard, slot) that may hold the job `id` of `queue` in
    /// namespace `ns`, in the order to look: each place once, then all but
    /// the last once more (see the module's read order). The second look
    /// costs only lookups that missed.
    pub fn job_places(&self, ns: &str, queue: &str, id: &JobId) -> Vec<(&Shard, u32)> {
        let mut out = self.job_places_once(ns, queue, id);
        let again = out.len().saturating_sub(1);
        out.extend_from_within(..again);
        out
    }

    /// Every (shard, slot) that may hold the job `id` of `queue` in
    /// namespace `ns`, each once, in the order to look (the first look of
    /// [`Self::job_places`]).
    pub fn job_places_once(&self, ns: &str, queue: &str, id: &JobId) -> Vec<(&Shard, u32)> {
        let mut out = Vec::new();
        for pool in self.pools() {
            let slot = pool.slot_of(ns, queue, id.lane(pool.lanes()));
            out.extend(slot_places(pool, slot).into_iter().map(|s| (s, slot)));
        }
        out
    }

    /// Every (shard, slot) that may hold jobs of `queue` in namespace `ns`,
    /// in the order to look.
    pub fn queue_places(&self, ns: &str, queue: &str) -> Vec<(&Shard, u32)> {
        self.pools()
            .flat_map(|p| queue_places(p, ns, queue))
            .collect()
    }

    /// [`Self::queue_places`], each pool's slots starting at the one
    /// `start` picks among as many as the queue spans there (a consume
    /// spreads its first lookups over the lanes).
    pub fn queue_places_from(
        &self,
        ns: &str,
        queue: &str,
        mut start: impl FnMut(usize) -> usize,
    ) -> Vec<(&Shard, u32)> {
        let mut out = Vec::new();
        for pool in self.pools() {
            let mut slots = pool.queue_slots(ns, queue);
            let first = match slots.len() {
                0 | 1 => 0,
                n => start(n) % n,
            };
            slots.rotate_left(first);
            for slot in slots {
                out.extend(slot_places(pool, slot).into_iter().map(|s| (s, slot)));
            }
        }
        out
    }
}

/// The pools a namespace's requests go to now, by name: (written to, the
/// other one read while it moves, if this gateway's config has it). A long
/// poll compares it with its request's.
pub fn route_names(
    topology: &Topology,
    token_pool: &str,
    home: Option<&Home>,
) -> (String, Option<String>) {
    let (writes, also) = route(token_pool, home);
    (
        writes.to_owned(),
        also.filter(|p| topology.pool(p).is_some())
            .map(str::to_owned),
    )
}

/// Refuses (with why) to treat `pool` as the whole of namespace `ns`
/// unless its jobs are all there and served from there: not while it moves
/// into or out of `pool`, nor once its tokens of `pool` are served from
/// elsewhere (an import there would store jobs nobody is served). `homes`:
/// every (token pool, namespace, home).
pub fn wholly_in(homes: &[(String, String, Home)], pool: &str, ns: &str) -> Result<(), String> {
    for (token_pool, _, home) in homes.iter().filter(|(_, n, _)| n == ns) {
        if home.state != MoveState::Moved && (home.from == pool || home.to == pool) {
            return Err(format!(
                "namespace {ns} is moving from pool {} to pool {} ({}): export or import it once it is moved",
                home.from,
                home.to,
                home.state.as_str()
            ));
        }
        // Its tokens of this pool are served from elsewhere (moved away,
        // or moving on between two other pools).
        if token_pool == pool && home.to != pool {
            return Err(format!(
                "namespace {ns} of pool {pool} moved to pool {}: its jobs are there (pool={})",
                home.to, home.to
            ));
        }
    }
    Ok(())
}

/// Every queue of namespace `ns` in `pool`: those whose jobs any slot of
/// the pool (or an old shard of a moved slot) has held, by the slots'
/// queue tables, and those of the pool's queue index (an index entry is
/// added in the background, and can be missing).
pub async fn namespace_queues(
    pool: &Pool,
    admin: &AdminStore,
    ns: &str,
) -> Result<BTreeSet<String>, EngineError> {
    let prefix = format!("{ns}/");
    let mut queues = BTreeSet::new();
    let mut add = |names: BTreeSet<String>| {
        queues.extend(
            names
                .into_iter()
                .filter_map(|q| q.strip_prefix(&prefix).map(str::to_owned)),
        );
    };
    for (shard, slots) in pool.groups() {
        add(shard.slots().queue_names(slots).await?);
    }
    for (shard, slot, _) in pool.moved() {
        add(shard.slots().queue_names(&[slot]).await?);
    }
    queues.extend(admin.queues().all(pool.name(), ns).await?);
    Ok(queues)
}

/// Every place (shard, slot) of `pool` that may hold jobs of namespace
/// `ns`'s `queues`, with the qualified queues each may hold; by slot, and
/// within a slot oldest place first (see the module's read order).
pub fn export_places(pool: &Pool, ns: &str, queues: &[String]) -> Vec<(Shard, u32, Vec<String>)> {
    // (slot, the shard's place among the slot's locations, reversed).
    let mut at: BTreeMap<(u32, usize, String), (Shard, Vec<String>)> = BTreeMap::new();
    for q in queues {
        for slot in pool.queue_slots(ns, q) {
            let locations = slot_places(pool, slot);
            let last = locations.len();
            for (i, shard) in locations.into_iter().enumerate() {
                at.entry((slot, last - i, shard.name().to_owned()))
                    .or_insert_with(|| (shard.clone(), Vec::new()))
                    .1
                    .push(keys::qualified(ns, q));
            }
        }
    }
    at.into_iter()
        .map(|((slot, _, _), (shard, queues))| (shard, slot, queues))
        .collect()
}

/// Every place (shard, slot) of `pool` that may hold jobs of namespace
/// `ns`'s `queues`, each once, by shard name and slot.
pub fn namespace_places<'a>(pool: &'a Pool, ns: &str, queues: &[String]) -> Vec<(&'a Shard, u32)> {
    let mut at: BTreeMap<(&str, u32), &Shard> = BTreeMap::new();
    for q in queues {
        for (shard, slot) in queue_places(pool, ns, q) {
            at.entry((shard.name(), slot)).or_insert(shard);
        }
    }
    at.into_iter().map(|((_, slot), s)| (s, slot)).collect()
}

/// The places of `slot` in `pool` other than `except`: where jobs in
/// transit at `except`'s may be bound, or their copies may be.
pub fn other_places<'a>(pool: &'a Pool, slot: u32, except: &Shard) -> Vec<&'a Shard> {
    slot_places(pool, slot)
        .into_iter()
        .filter(|s| !s.same(except))
        .collect()
}

/// Where the jobs a mover takes out of a slot are bound; its text form is
/// what transit entries hold: a shard's name, or `@<pool>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dest {
    /// A shard of the slot's own pool (a moved slot).
    Shard(String),
    /// Another pool (a namespace moving there).
    Pool(String),
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shard(name) => f.write_str(name),
            Self::Pool(pool) => write!(f, "@{pool}"),
        }
    }
}

impl FromStr for Dest {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.strip_prefix('@') {
            Some(pool) => Self::Pool(pool.to_owned()),
            None => Self::Shard(s.to_owned()),
        })
    }
}

/// Where the copy of job `id` of the qualified `queue`, in transit at
/// `slot` of `pool` and bound to `dest`, goes: the shard `dest` names if it
/// still holds the slot in some layout, else (the shard left, or the slot
/// moved back) the shard that holds the slot now; for a pool, the shard and
/// slot that pool gives the job's queue and lane. `None`: that pool is not
/// in `topology` (this gateway's config), or the job is unreadable.
pub fn transit_place<'a>(
    topology: &'a Topology,
    pool: &'a Pool,
    slot: u32,
    dest: &Dest,
    queue: &str,
    id: &str,
) -> Option<(&'a Shard, u32)> {
    match dest {
        Dest::Pool(to) => {
            let to = topology.pool(to)?;
            let (ns, queue) = keys::parse_qualified(queue)?;
            let id = JobId::parse(id).ok()?;
            let slot = to.slot_of(ns, queue, id.lane(to.lanes()));
            Some((to.shard_for(slot), slot))
        }
        Dest::Shard(name) => {
            let shard = slot_places(pool, slot)
                .into_iter()
                .find(|s| s.name() == name)
                .unwrap_or_else(|| pool.current_shard(slot));
            Some((shard, slot))
        }
    }
}

/// Every place where a copy of job `id` of the qualified `queue`, taken out
/// of `slot` of `pool` at `from` and bound to `dest`, may be: the slot's
/// other places in its pool and, bound to another pool, every place that
/// pool gives the job. `None` when that pool is not in `topology`, or
/// the queue's name cannot be read.
pub fn copy_places<'a>(
    topology: &'a Topology,
    pool: &'a Pool,
    slot: u32,
    from: &Shard,
    dest: &Dest,
    queue: &str,
    id: &JobId,
) -> Option<Vec<(&'a Shard, u32)>> {
    let mut places: Vec<(&Shard, u32)> = other_places(pool, slot, from)
        .into_iter()
        .map(|s| (s, slot))
        .collect();
    if let Dest::Pool(to) = dest {
        let (Some(to), Some((ns, q))) = (topology.pool(to), keys::parse_qualified(queue)) else {
            return None;
        };
        let slot = to.slot_of(ns, q, id.lane(to.lanes()));
        places.extend(slot_places(to, slot).into_iter().map(|s| (s, slot)));
    }
    Some(places)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::{
        Layout,
        config::{DEFAULT_TIMEOUT_MS, PoolConfig, ShardConfig},
        topology::connect,
    };

    /// Weights of a pool's shards: the current layout's, then those of up to
    /// two layouts that still drain, and which of them writes go to.
    #[derive(Debug, Clone)]
    struct PoolShape {
        current: Vec<u32>,
        draining: Vec<Vec<u32>>,
        writes: usize,
        lanes: u32,
    }

    fn weights(n: usize) -> impl Strategy<Value = Vec<u32>> {
        proptest::collection::vec(0u32..3, n)
            .prop_filter("a shard holds slots", |w| w.iter().any(|w| *w > 0))
    }

    fn pool_shape() -> impl Strategy<Value = PoolShape> {
        (2usize..5).prop_flat_map(|n| {
            (
                weights(n),
                proptest::collection::vec(weights(n), 0..3),
                0usize..3,
                1u32..4,
            )
                .prop_map(|(current, draining, writes, lanes)| PoolShape {
                    current,
                    draining,
                    writes,
                    lanes,
                })
        })
    }

    fn home() -> impl Strategy<Value = Option<Home>> {
        let state = prop_oneof![
            Just(MoveState::Announced),
            Just(MoveState::Moving),
            Just(MoveState::Moved)
        ];
        proptest::option::of((state, any::<bool>()).prop_map(|(state, back)| {
            let (from, to) = if back {
                ("b", "default")
            } else {
                ("default", "b")
            };
            Home {
                to: to.into(),
                from: from.into(),
                state,
                since_ms: 1,
            }
        }))
    }

    fn layout(shape: &[u32]) -> Layout {
        let names: Vec<String> = (0..shape.len()).map(|i| format!("s{i}")).collect();
        Layout::new(names.iter().map(String::as_str).zip(shape.iter().copied()))
    }

    /// A topology of pools `default` and `b` of these shapes (connections
    /// are made lazily: nothing here talks to Redis).
    fn topology(shapes: &[PoolShape; 2]) -> Topology {
        let mut pools = BTreeMap::new();
        let mut draining = BTreeMap::new();
        for (name, shape) in ["default", "b"].into_iter().zip(shapes) {
            let shards = shape
                .current
                .iter()
                .enumerate()
                .map(|(i, weight)| ShardConfig {
                    name: Some(format!("s{i}")),
                    url: Some(format!("redis://127.0.0.1:{}", 1 + i)),
                    sentinel: None,
                    cluster: None,
                    weight: *weight,
                    connections: 1,
                    timeout_ms: DEFAULT_TIMEOUT_MS,
                    wait: None,
                    tls: None,
                    password: None,
                })
                .collect();
            let config = PoolConfig {
                quotas: Default::default(),
                slots: 16,
                lanes: shape.lanes,
                shards,
            };
            pools.insert(name.to_owned(), config);
            draining.insert(
                name.to_owned(),
                shape.draining.iter().map(|w| layout(w)).collect(),
            );
        }
        let t = Topology::new(&pools, connect(&pools, None).expect("connect"), &draining)
            .expect("topology");
        for (name, shape) in ["default", "b"].into_iter().zip(shapes) {
            let pool = t.pool(name).expect("pool");
            let chosen = pool.layouts().nth(shape.writes).cloned();
            if let Some(l) = chosen {
                pool.set_write_layout(&l);
            }
        }
        t
    }

    fn named(places: &[(&Shard, u32)]) -> Vec<(String, u32)> {
        places
            .iter()
            .map(|(s, n)| (s.name().to_owned(), *n))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A job is found wherever any gateway may have written it: at
        /// every layout's place of its slot, in every pool that may hold
        /// the namespace's jobs; each place once in the first look, the
        /// place the current layout gives it in the pool written to first,
        /// and a second look at all but the last.
        #[test]
        fn a_job_is_looked_for_wherever_it_may_have_been_written(
            shapes in (pool_shape(), pool_shape()),
            home in home(),
            lane_seed in any::<u64>(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let _guard = rt.enter();
            let t = topology(&[shapes.0, shapes.1]);
            let pools = NamespacePools::resolve(&t, "default", home.as_ref()).expect("both pools are known");
            let ulid = ulid::Ulid::from_parts(lane_seed >> 16, u128::from(lane_seed));
            let id = JobId::parse(&ulid.to_string()).expect("an id");
            let places = named(&pools.job_places("ns", "q", &id));
            let first = places.len() / 2 + 1;
            let (once, again) = places.split_at(first.min(places.len()));
            prop_assert_eq!(again, &once[..once.len() - 1], "the second look is the first but its last");
            let mut distinct = once.to_vec();
            distinct.sort();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), once.len(), "the first look visits each place once");
            let holding = home.as_ref().map_or(vec!["default"], |h| h.holding());
            for name in holding {
                let pool = t.pool(name).expect("pool");
                let slot = pool.slot_of("ns", "q", id.lane(pool.lanes()));
                for l in pool.layouts() {
                    if let Some(Some(shard)) = pool.placed(l, slot) {
                        prop_assert!(once.contains(&(shard.name().to_owned(), slot)), "{} of {} in {}", shard.name(), l, name);
                    }
                }
            }
            let writes = &pools.writes;
            let slot = writes.slot_of("ns", "q", id.lane(writes.lanes()));
            prop_assert_eq!(&once[0], &(writes.current_shard(slot).name().to_owned(), slot));
            // A queue-wide lookup covers every place of every lane.
            let queue = named(&pools.queue_places("ns", "q"));
            prop_assert!(once.iter().all(|p| queue.contains(p)));
        }

        /// An export reads each place of a slot once, oldest first.
        #[test]
        fn an_export_reads_each_slot_oldest_place_first(shapes in (pool_shape(), pool_shape())) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let _guard = rt.enter();
            let t = topology(&[shapes.0, shapes.1]);
            let pool = t.pool("default").expect("pool");
            let queues = ["q".to_owned(), "r".to_owned()];
            let places = export_places(pool, "ns", &queues);
            for slot in places.iter().map(|(_, s, _)| *s) {
                let read: Vec<&str> = places.iter().filter(|(_, s, _)| *s == slot).map(|(sh, _, _)| sh.name()).collect();
                let mut oldest_first: Vec<&str> = slot_places(pool, slot).iter().map(|s| s.name()).collect();
                oldest_first.reverse();
                prop_assert_eq!(read, oldest_first);
            }
            let covered: Vec<(String, u32)> = places.iter().map(|(s, n, _)| (s.name().to_owned(), *n)).collect();
            for (shard, slot) in namespace_places(pool, "ns", &queues) {
                prop_assert!(covered.contains(&(shard.name().to_owned(), slot)));
            }
        }
    }

    #[test]
    fn a_destination_round_trips_through_its_text() {
        for (dest, text) in [
            (Dest::Shard("a".into()), "a"),
            (Dest::Pool("b".into()), "@b"),
        ] {
            assert_eq!(dest.to_string(), text);
            assert_eq!(text.parse::<Dest>(), Ok(dest));
        }
    }

    #[test]
    fn a_move_to_a_pool_this_gateway_lacks_leaves_its_namespace_unplaced() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let shape = PoolShape {
            current: vec![1, 1],
            draining: vec![],
            writes: 0,
            lanes: 1,
        };
        let t = topology(&[shape.clone(), shape]);
        let home = |to: &str, state| Home {
            to: to.into(),
            from: "default".into(),
            state,
            since_ms: 1,
        };
        let moving = home("gone", MoveState::Moving);
        assert_eq!(
            NamespacePools::resolve(&t, "default", Some(&moving)).map(|_| ()),
            Err(Unplaced::Missing("gone".into()))
        );
        // Announced, the old pool holds every job: it is read alone.
        let announced = home("gone", MoveState::Announced);
        let pools = NamespacePools::resolve(&t, "default", Some(&announced)).expect("placed");
        assert_eq!(pools.writes.name(), "default");
        assert!(pools.also.is_none());
        assert_eq!(
            route_names(&t, "default", Some(&announced)),
            ("default".to_owned(), None)
        );
    }
}
