//! A slot's fires held to their namespaces' quotas, as a publish is. A
//! namespace over its share of a shard near its `maxmemory`
//! (`sundial_router::headroom`) gets no fire. One with `max_jobs` or
//! `max_bytes` gets, in each fire call, what the admin Redis admits for
//! its due fires (`sundial_router::backlog`, which a gateway's publish
//! goes through too): all of them, or as many as its room holds, or none
//! while it holds its bound. The fire script stores no more than was
//! admitted (a fire that does not fit stays due), and the admission keeps
//! only what the call stored. A fire refused is not published: it counts
//! as `refused`, and the schedule's next fire asks again. A pump never
//! waits for a snapshot of a namespace's usage: it takes one in the
//! background, refuses on an old one (never under what the namespace
//! holds), and, while a namespace has none yet, leaves its fires due. As
//! for a publish, fires go uncounted while the admin Redis cannot count.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use sundial_core::{Admission, BacklogAsk, EngineError, FireDef, FireOutcome, Room, Shard, Usage};
use sundial_router::{
    LiveTopology, admin::AdminStore, backlog, headroom::Headroom, placement::NamespacePools,
    quota::Bound,
};

/// The bytes a fire's job may hold once stored, over its attributes,
/// body and key: its id, record header, fire time and key window, with
/// room to spare (the estimate is never to be under what is stored).
const FIRE_BYTES_OVER: u64 = 128;
/// A due schedule that the book does not list (it is leaving the slot, or
/// this process's copy is behind): counted as the largest fire a
/// definition allows (149 KiB, the gateway's bound on one).
const UNLISTED_BYTES: u64 = 149 * 1024 + FIRE_BYTES_OVER;
/// How long an admission may take: past it, the call's fires of that
/// namespace go uncounted, as when the admin Redis does not answer.
const ADMIT_WITHIN: Duration = Duration::from_millis(250);

/// The admin tables and the shards' headroom, which the fires of every
/// slot of this process are held to.
#[derive(Debug)]
pub(crate) struct FireQuotas {
    admin: Arc<AdminStore>,
    live: Arc<LiveTopology>,
    headroom: Headroom,
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
    /// The smallest due fire's bytes.
    least: u64,
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

/// An admission of one fire call: its namespace, under the pool its quota
/// is set under, and its entry.
struct Entry {
    pool: Arc<str>,
    ns: String,
    entry: String,
}

/// The rooms of one fire call, and the admissions to end after it (when
/// dropped unended, they end as stored in full).
#[derive(Default)]
pub(crate) struct Rooms {
    pub(crate) rooms: Vec<(String, Room)>,
    admitted: Vec<Entry>,
    admin: Option<Arc<AdminStore>>,
}

impl Rooms {
    /// Ends the call's admissions, each with what the call stored of it:
    /// nothing when its lease was not held or Redis refused it for memory;
    /// all it was admitted for when it may have stored without saying.
    pub(crate) fn ended(mut self, call: Result<&FireOutcome, &EngineError>) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        for e in std::mem::take(&mut self.admitted) {
            let (pool, redis) = (e.pool.to_string(), admin.redis());
            match call {
                Ok(o) if !o.fenced => {
                    let stored = o.stored.iter().find(|(ns, _)| *ns == e.ns);
                    let stored = stored.map(|(_, u)| *u).unwrap_or_default();
                    backlog::stored(redis, pool, e.ns, e.entry, stored);
                }
                Ok(_) | Err(EngineError::OutOfMemory { .. }) => {
                    backlog::done(redis, pool, e.ns, e.entry, false);
                }
                Err(_) => backlog::done(redis, pool, e.ns, e.entry, true),
            }
        }
    }
}

impl Drop for Rooms {
    fn drop(&mut self) {
        let Some(admin) = &self.admin else {
            return;
        };
        for e in std::mem::take(&mut self.admitted) {
            backlog::done(admin.redis(), e.pool.to_string(), e.ns, e.entry, true);
        }
    }
}

impl FireQuotas {
    pub(crate) fn new(admin: Arc<AdminStore>, live: Arc<LiveTopology>, headroom: Headroom) -> Self {
        Self {
            admin,
            live,
            headroom,
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
                };
                held.insert(space.ns.clone(), h);
            }
        }
        held
    }

    /// The rooms for a fire call of up to `limit` fires of `slot` on
    /// `shard`, whose `held` namespaces are held to a quota: refused over
    /// a headroom share; for a backlog bound, after a read of which
    /// schedules are due, what the admin Redis admits of their fires.
    pub(crate) async fn rooms(
        &self,
        shard: &Shard,
        slot: u32,
        mut held: HeldNamespaces,
        limit: u32,
    ) -> Result<Rooms, EngineError> {
        let mut out = Rooms {
            rooms: Vec::new(),
            admitted: Vec::new(),
            admin: Some(self.admin.clone()),
        };
        held.retain(|ns, h| {
            if h.over_share {
                out.rooms.push((ns.clone(), Room::Refused));
            }
            !h.over_share
        });
        if held.is_empty() {
            return Ok(out);
        }
        for member in shard.fires().due(slot, limit).await? {
            let ns = member.split('/').next().unwrap_or_default();
            if let Some(h) = held.get_mut(ns) {
                let bytes = h
                    .space
                    .bytes
                    .get(&member)
                    .copied()
                    .unwrap_or(UNLISTED_BYTES);
                h.due.add(Usage { jobs: 1, bytes });
                h.least = h.least.min(bytes);
            }
        }
        let asks = held.iter().map(|(ns, h)| self.admit(ns, h));
        for (room, entry) in futures::future::join_all(asks).await {
            out.rooms.extend(room);
            out.admitted.extend(entry);
        }
        Ok(out)
    }

    /// Admits what fits of the due fires of `ns` under its backlog bounds:
    /// its room (none when it has no room for its smallest fire; nothing
    /// yet while its usage is read again), and the admission to end after
    /// the call; no room (not held) when the admin Redis cannot count.
    async fn admit(&self, ns: &str, h: &Held) -> (Option<(String, Room)>, Option<Entry>) {
        let room = |r: Room| Some((ns.to_owned(), r));
        if h.due.jobs == 0 {
            return (room(Room::Admitted(Usage::default())), None);
        }
        let pool = &h.space.quota_pool;
        let home = self.admin.homes().get(pool, ns);
        let pools = match NamespacePools::resolve(&self.live.topology(), pool, home.as_ref()) {
            Ok(pools) => pools,
            Err(e) => {
                tracing::warn!(ns, error = %e, "cannot place a namespace to count its fires against its backlog quota; letting them through");
                return (None, None);
            }
        };
        let mut ask = BacklogAsk {
            add: h.due,
            max_jobs: h.max_jobs.unwrap_or(0),
            max_bytes: h.max_bytes.unwrap_or(0),
            stale_ms: backlog::STALE_MS,
        };
        let redis = self.admin.redis();
        for _ in 0..2 {
            let entry = format!("{:016x}", rand::random::<u64>());
            let found = backlog::admit_once(&redis, (pool, ns), &pools, &entry, ask);
            let found = match tokio::time::timeout(ADMIT_WITHIN, found).await {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    tracing::warn!(ns, error = %e, "cannot count fires against a backlog quota; letting them through");
                    return (None, None);
                }
                Err(_) => {
                    tracing::warn!(
                        ns,
                        "the admin Redis did not count fires against a backlog quota in time; letting them through"
                    );
                    return (None, None);
                }
            };
            let held = match found {
                Admission::Admitted { .. } => {
                    let (pool, ns) = (pool.clone(), ns.to_owned());
                    return (
                        room(Room::Admitted(ask.add)),
                        Some(Entry { pool, ns, entry }),
                    );
                }
                // No estimate yet: one is read in the background, and
                // the fires wait for it.
                Admission::Unknown => return (room(Room::Admitted(Usage::default())), None),
                // An old estimate is read again in the background; it is
                // never under what the namespace holds.
                Admission::Refused { held, .. } => held,
            };
            match fits(h, &ask, held) {
                Some(less) => ask.add = less,
                None => break,
            }
        }
        (room(Room::Refused), None)
    }
}

/// What fits of `ask` beside the `held` usage under `h`'s bounds, when it
/// is less than asked and holds `h`'s smallest due fire.
fn fits(h: &Held, ask: &BacklogAsk, held: Usage) -> Option<Usage> {
    let left = |max: Option<u64>, held: u64| max.map_or(u64::MAX, |m| m.saturating_sub(held));
    let fits = Usage {
        jobs: ask.add.jobs.min(left(h.max_jobs, held.jobs)),
        bytes: ask.add.bytes.min(left(h.max_bytes, held.bytes)),
    };
    (fits != ask.add && fits.jobs > 0 && fits.bytes >= h.least).then_some(fits)
}
