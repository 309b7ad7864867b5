//! A slot's fires held to their namespaces' quotas, as a publish is: a
//! namespace with `max_jobs` or `max_bytes` gets, in each fire call, the
//! fires of its due schedules that the admin Redis admits
//! (`sundial_router::backlog`, which a gateway's publish goes through
//! too), and none while it is over a bound; a namespace over its share of
//! a shard near its `maxmemory` (`sundial_router::headroom`) gets none. A
//! fire refused is not published: it counts as `refused`, and the
//! schedule's next fire asks again. As for a publish, fires go uncounted
//! while the admin Redis cannot count.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use sundial_core::{BacklogAsk, EngineError, FireDef, Room, Shard, Usage};
use sundial_router::{
    LiveTopology,
    admin::AdminStore,
    backlog::{self, Admitted},
    headroom::Headroom,
    placement::NamespacePools,
    quota::Bound,
};

/// The bytes a fire's job may hold once stored, over its attributes,
/// body and key: its id, record header, fire time and key window, with
/// room to spare (the estimate is never to be under what is stored).
const FIRE_BYTES_OVER: u64 = 128;
/// A due schedule that the book does not list (it is leaving the slot):
/// counted as a fire of this many bytes.
const UNLISTED_BYTES: u64 = 4096;

/// The admin tables and the shards' headroom, which the fires of every
/// slot of this process are held to.
#[derive(Debug)]
pub(crate) struct FireQuotas {
    admin: Arc<AdminStore>,
    live: Arc<LiveTopology>,
    headroom: Headroom,
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

/// The rooms of one fire call, and the admissions to end after it.
#[derive(Default)]
pub(crate) struct Rooms {
    pub(crate) rooms: Vec<(String, Room)>,
    admitted: Vec<(Arc<str>, String, String)>,
    admin: Option<Arc<AdminStore>>,
}

impl Rooms {
    /// Ends the call's admissions: `stored` unless it surely stored
    /// nothing (its lease was not held).
    pub(crate) fn ended(self, stored: bool) {
        let Some(admin) = self.admin else {
            return;
        };
        for (pool, ns, entry) in self.admitted {
            backlog::done(admin.redis(), pool.to_string(), ns, entry, stored);
        }
    }
}

/// The bytes fire `def` may add.
fn fire_bytes(def: &FireDef) -> u64 {
    (def.attrs.len() + def.body.len() + def.key.len()) as u64 + FIRE_BYTES_OVER
}

impl FireQuotas {
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
                };
                held.insert(space.ns.clone(), h);
            }
        }
        held
    }

    /// The rooms for a fire call of up to `limit` fires of `slot` on
    /// `shard`, whose `held` namespaces are held to a quota: none when it
    /// has none; else, after a read of which schedules are due, one per
    /// held namespace.
    pub(crate) async fn rooms(
        &self,
        shard: &Shard,
        slot: u32,
        mut held: HeldNamespaces,
        limit: u32,
    ) -> Result<Rooms, EngineError> {
        if held.is_empty() {
            return Ok(Rooms::default());
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
            }
        }
        let mut out = Rooms {
            admin: Some(self.admin.clone()),
            ..Rooms::default()
        };
        for (ns, h) in held {
            let room = if h.over_share {
                Some(Room::Refused)
            } else if h.max_jobs.is_none() && h.max_bytes.is_none() {
                None
            } else if h.due.jobs == 0 {
                Some(Room::Admitted(0))
            } else {
                self.admit(&ns, &h, &mut out).await
            };
            out.rooms.extend(room.map(|r| (ns, r)));
        }
        Ok(out)
    }

    /// Admits the due fires of `ns` under its backlog bounds: `None` (not
    /// held) when the admin Redis cannot count them.
    async fn admit(&self, ns: &str, h: &Held, out: &mut Rooms) -> Option<Room> {
        let quota_pool = &h.space.quota_pool;
        let home = self.admin.homes().get(quota_pool, ns);
        let pools =
            NamespacePools::resolve(&self.live.topology(), quota_pool, home.as_ref()).ok()?;
        let ask = BacklogAsk {
            add: h.due,
            max_jobs: h.max_jobs.unwrap_or(0),
            max_bytes: h.max_bytes.unwrap_or(0),
            stale_ms: backlog::STALE_MS,
        };
        let redis = self.admin.redis();
        match backlog::admit(&redis, quota_pool, ns, &pools, ask).await {
            Ok(Admitted::Yes { entry }) => {
                out.admitted
                    .push((quota_pool.clone(), ns.to_owned(), entry));
                Some(Room::Admitted(h.due.jobs))
            }
            Ok(Admitted::Refused { .. }) => Some(Room::Refused),
            Ok(Admitted::Uncounted) => None,
            Err(e) => {
                tracing::warn!(ns, error = %e, "cannot count fires against a backlog quota; letting them through");
                None
            }
        }
    }
}
