//! A slot's fires held to their namespaces' quotas, as a publish is. A
//! namespace over its share of a shard near its `maxmemory`
//! (`sundial_router::headroom`) gets no fire. One with `max_jobs` or
//! `max_bytes` gets, in each fire call, what the admin Redis admits of its
//! due fires (`rooms.rs`, through `sundial_router::backlog`, which a
//! gateway's publish goes through too): all of them, or what fits of them,
//! or none while it holds its bound. The fire script stores no more than
//! was admitted (a schedule whose fire does not fit waits 25 ms for the
//! next admission), and the admission keeps only what the call stored. A
//! fire refused is not published: it counts as `refused`, and the
//! schedule's next fire asks again.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use sundial_core::{EngineError, FIRE_AHEAD_MS, FireDef, Room, Shard, Usage};
use sundial_router::{
    LiveTopology, admin::AdminStore, headroom::Headroom, placement::NamespacePools, quota::Bound,
};

use super::rooms::{self, Ask, Rooms, Waiting};

/// The bytes a fire's job may hold once stored, over its attributes,
/// body and key: its id, record header, fire time and key window, with
/// room to spare (the estimate is never to be under what is stored).
const FIRE_BYTES_OVER: u64 = 128;
/// How far ahead of now a fire call's admission counts fires: those the
/// call writes ahead ([`FIRE_AHEAD_MS`]), and those that come due between
/// the read of what is due and the call too (what the call does not store
/// is given back when it ends).
const DUE_AHEAD_MS: u64 = FIRE_AHEAD_MS + 50;
/// A due schedule that the book does not list (it is leaving the slot, or
/// this process's copy is behind): counted as the largest fire a
/// definition allows (149 KiB, the gateway's bound on one).
const UNLISTED_BYTES: u64 = 149 * 1024 + FIRE_BYTES_OVER;

/// The admin tables and the shards' headroom, which the fires of every
/// slot of this process are held to.
#[derive(Debug)]
pub(crate) struct FireQuotas {
    admin: Arc<AdminStore>,
    live: Arc<LiveTopology>,
    headroom: Headroom,
    /// Namespaces whose fires wait for a snapshot of their usage.
    waiting: Waiting,
}

/// The namespaces of a slot held to a quota, by name ([`FireQuotas::held`]).
pub(crate) type HeldNamespaces = BTreeMap<String, Held>;

/// A namespace of a slot held to a quota, and its due fires.
pub(crate) struct Held {
    space: Arc<PageNamespace>,
    over_share: bool,
    max_jobs: Option<u64>,
    max_bytes: Option<u64>,
    due: Usage,
    /// The smallest and the largest due fire's bytes.
    least: u64,
    most: u64,
}

/// A namespace's schedules on a slot's page: the pool its quota is set
/// under and, per member, the bytes a fire may add. Made with the book,
/// so that a fire call looks at each namespace of its slot, not at each
/// schedule.
#[derive(Debug)]
pub(crate) struct PageNamespace {
    pub(crate) ns: String,
    pub(crate) quota_pool: Arc<str>,
    pub(crate) bytes: HashMap<String, u64>,
}

/// The namespaces of a slot's page.
pub(crate) type PageNamespaces = Vec<Arc<PageNamespace>>;

/// The namespaces of `page` (member, the pool its quota is set under,
/// definition).
pub(crate) fn page_namespaces<'a>(
    page: impl Iterator<Item = (&'a str, &'a Arc<str>, &'a FireDef)>,
) -> PageNamespaces {
    let mut by_ns: BTreeMap<&str, PageNamespace> = BTreeMap::new();
    for (member, quota_pool, def) in page {
        let ns = member.split('/').next().unwrap_or_default();
        let space = by_ns.entry(ns).or_insert_with(|| PageNamespace {
            ns: ns.to_owned(),
            quota_pool: quota_pool.clone(),
            bytes: HashMap::new(),
        });
        space.bytes.insert(member.to_owned(), fire_bytes(def));
    }
    by_ns.into_values().map(Arc::new).collect()
}

/// The bytes fire `def` may add.
fn fire_bytes(def: &FireDef) -> u64 {
    (def.attrs.len() + def.body.len() + def.key.len()) as u64 + FIRE_BYTES_OVER
}

impl FireQuotas {
    pub(crate) fn new(admin: Arc<AdminStore>, live: Arc<LiveTopology>, headroom: Headroom) -> Self {
        Self {
            admin,
            live,
            headroom,
            waiting: Waiting::default(),
        }
    }

    pub(crate) fn admin(&self) -> &Arc<AdminStore> {
        &self.admin
    }

    /// The namespaces of a slot's page (`spaces`, on `shard`, of `pool`)
    /// held to a quota now: a backlog bound, or a shard over its headroom.
    pub(crate) fn held(
        &self,
        shard: &Shard,
        pool: &str,
        spaces: &PageNamespaces,
    ) -> HeldNamespaces {
        let topology = self.live.topology();
        let pool_quota = topology.pool(pool).map(|p| *p.quota()).unwrap_or_default();
        let mut held = HeldNamespaces::new();
        for space in spaces {
            let q = self
                .admin
                .quotas()
                .effective(&space.quota_pool, &space.ns, &pool_quota);
            let (max_jobs, max_bytes) = (q.limit(Bound::MaxJobs), q.limit(Bound::MaxBytes));
            let over_share = self.headroom.check(shard.name(), &space.ns).is_some();
            if over_share || max_jobs.is_some() || max_bytes.is_some() {
                let h = Held {
                    space: space.clone(),
                    over_share,
                    max_jobs,
                    max_bytes,
                    due: Usage::default(),
                    least: u64::MAX,
                    most: 0,
                };
                held.insert(space.ns.clone(), h);
            }
        }
        held
    }

    /// The rooms for a fire call of up to `limit` fires of `slot` on
    /// `shard`, whose `held` namespaces are held to a quota: refused over
    /// a headroom share; for a backlog bound, after a read of which
    /// schedules are due, what the admin Redis admits of their fires (the
    /// namespaces together).
    pub(crate) async fn rooms(
        &self,
        shard: &Shard,
        slot: u32,
        mut held: HeldNamespaces,
        limit: u32,
    ) -> Result<Rooms, EngineError> {
        let mut out = Rooms::new(self.admin.clone());
        held.retain(|ns, h| {
            if h.over_share {
                out.rooms.push((ns.clone(), Room::Refused));
            }
            !h.over_share
        });
        if held.is_empty() {
            return Ok(out);
        }
        for member in shard.fires().due(slot, limit, DUE_AHEAD_MS).await? {
            let ns = member.split('/').next().unwrap_or_default();
            if let Some(h) = held.get_mut(ns) {
                let bytes = h
                    .space
                    .bytes
                    .get(&member)
                    .copied()
                    .unwrap_or(UNLISTED_BYTES);
                h.due.add(Usage { jobs: 1, bytes });
                (h.least, h.most) = (h.least.min(bytes), h.most.max(bytes));
            }
        }
        let asks = self.asks(held, &mut out);
        let mut each: Vec<Rooms> = asks.iter().map(|_| Rooms::default()).collect();
        let admits = asks
            .iter()
            .zip(each.iter_mut())
            .map(|((ask, pools), o)| rooms::admit(&self.admin, &self.waiting, ask, pools, o));
        futures::future::join_all(admits).await;
        for o in each {
            out.merge(o);
        }
        Ok(out)
    }

    /// What to admit of the `held` namespaces' due fires; a namespace with
    /// none seen due gets no room for now (what comes due meanwhile waits).
    fn asks(&self, held: HeldNamespaces, out: &mut Rooms) -> Vec<(Ask, NamespacePools)> {
        let topology = self.live.topology();
        let mut asks = Vec::new();
        for (ns, h) in held {
            if h.due.jobs == 0 {
                out.rooms.push((ns, Room::Admitted(Usage::default())));
                continue;
            }
            let pool = h.space.quota_pool.clone();
            let home = self.admin.homes().get(&pool, &ns);
            match NamespacePools::resolve(&topology, &pool, home.as_ref()) {
                Ok(pools) => {
                    let (due, least, most) = (h.due, h.least, h.most);
                    let (max_jobs, max_bytes) = (h.max_jobs, h.max_bytes);
                    let ask = Ask {
                        ns,
                        pool,
                        due,
                        least,
                        most,
                        max_jobs,
                        max_bytes,
                    };
                    asks.push((ask, pools));
                }
                Err(e) => {
                    tracing::warn!(ns, error = %e, "cannot place a namespace to count its fires against its backlog quota; letting them through");
                }
            }
        }
        asks
    }
}
