//! The book: which schedules each slot should hold, made from this
//! process's copy of the schedule table (and of the queues' retry
//! policies, which a fire's job takes as a publish does, and of the
//! namespaces' homes: a schedule lives in the pool its namespace writes
//! to), and made again when one of them changes or the topology does.
//! Each slot's loop compares its slot with its page of the book
//! (`holding.rs`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use sundial_core::{FireDef, keys};
use sundial_router::{
    LiveTopology, admin::AdminStore, placement, policy::RetryPolicy, schedule::placed,
    topology::Topology,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::quotas::{FireQuotas, PageNamespaces, page_namespaces};

/// A schedule on a page: its definition as the slot holds it and, while
/// its namespace moves between pools, the pool and slot it lived in.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) def: Arc<FireDef>,
    pub(crate) also: Option<(String, u32)>,
    /// The pool its namespace's tokens name, which its quota is set under.
    pub(crate) quota_pool: Arc<str>,
}

/// A slot's schedules, by member.
pub(crate) type Page = BTreeMap<String, Entry>;

/// How old the copy of the tables may be (since a reload last found it
/// current) for the book to change what slots hold: 25 polls.
pub(crate) const STALE: std::time::Duration = std::time::Duration::from_secs(5);

/// Which schedules each slot of each pool should hold.
#[derive(Debug, Default)]
pub(crate) struct Book {
    slots: HashMap<(String, u32), Page>,
    /// Every schedule's member, wherever it lives: one a slot holds that
    /// is not on its page moved (it is parked), else it was deleted.
    all: HashSet<String>,
    /// Made from a loaded copy of the table: a book made before the first
    /// load is empty, and removes nothing from a slot.
    loaded: bool,
    /// The copy it was made from, asked whether it is still current.
    admin: Option<Arc<AdminStore>>,
    /// What holds fires to their namespaces' quotas.
    quotas: Option<Arc<FireQuotas>>,
    /// Each page's namespaces, for the quotas.
    spaces: HashMap<(String, u32), Arc<PageNamespaces>>,
}

impl Book {
    /// The schedules slot `slot` of `pool` should hold; `None` before the
    /// table was first loaded, and while the copy it was made from is not
    /// known to be current (its admin Redis unreachable for [`STALE`]):
    /// a slot then keeps what it holds, rather than drop schedules made
    /// since or bring back deleted ones.
    pub(crate) fn page(&self, pool: &str, slot: u32) -> Option<Page> {
        self.page_ref(pool, slot)
            .map(|p| p.cloned().unwrap_or_default())
    }

    /// [`Book::page`], borrowed: `Some(None)` for an empty page.
    pub(crate) fn page_ref(&self, pool: &str, slot: u32) -> Option<Option<&Page>> {
        if !self.loaded
            || self
                .admin
                .as_ref()
                .is_some_and(|a| !a.confirmed_within(STALE))
        {
            return None;
        }
        Some(self.slots.get(&(pool.to_owned(), slot)))
    }

    /// What holds fires to their namespaces' quotas (none in tests), and
    /// the namespaces of slot `slot` of `pool` (none while the book is not
    /// current, as [`Book::page`]).
    pub(crate) fn quotas(
        &self,
        pool: &str,
        slot: u32,
    ) -> Option<(Arc<FireQuotas>, Arc<PageNamespaces>)> {
        let spaces = self
            .page_ref(pool, slot)?
            .and(self.spaces.get(&(pool.to_owned(), slot)))?;
        Some((self.quotas.clone()?, spaces.clone()))
    }

    /// Whether schedule `member` is in the table, wherever it lives.
    pub(crate) fn exists(&self, member: &str) -> bool {
        self.all.contains(member)
    }

    #[cfg(test)]
    pub(crate) fn of(pages: Vec<((String, u32), Page)>) -> Self {
        let all = pages.iter().flat_map(|(_, p)| p.keys().cloned()).collect();
        Self {
            slots: pages.into_iter().collect(),
            all,
            loaded: true,
            admin: None,
            quotas: None,
            spaces: HashMap::new(),
        }
    }
}

/// A definition made for a slot, kept while its row and its queue's
/// policy stay the same, so that a new book remakes only what changed.
type Made = HashMap<String, (u64, RetryPolicy, Arc<FireDef>)>;

/// Makes the book from the admin's copy for `topology`'s pools.
fn make(quotas: &Arc<FireQuotas>, topology: &Topology, made: &mut Made) -> Book {
    let admin = quotas.admin();
    let mut book = Book {
        admin: Some(admin.clone()),
        quotas: Some(quotas.clone()),
        ..Book::default()
    };
    let mut now_made = Made::with_capacity(made.len());
    book.loaded = admin.schedules().for_each(|id, def| {
        // The pool the namespace writes to: its tokens' pool, or the one
        // it moved (or moves) to.
        let home = admin.homes().get(id.pool, id.ns);
        let (writes, _) = placement::route(id.pool, home.as_ref());
        // The pool it moved from, or moves to, even once its jobs moved:
        // a schedule parked there is taken over from there.
        let also = home
            .as_ref()
            .map(|h| if h.writes() == h.to { h.from.as_str() } else { h.to.as_str() })
            .filter(|other| *other != writes);
        let Some(pool) = topology.pool(writes) else {
            return;
        };
        let field = format!("{}/{}/{}/{}", id.pool, id.ns, id.queue, id.name);
        let policy = admin.policies().get(id.pool, id.ns, id.queue);
        let fire = match made.remove(&field) {
            Some((rev, p, fire)) if rev == def.rev && p == policy => fire,
            _ => match placed::fire_def(def, id.name, &policy) {
                Ok(fire) => Arc::new(fire),
                Err(e) => {
                    tracing::warn!(schedule = field, error = %e, "a schedule that cannot fire; left out");
                    return;
                }
            },
        };
        let at = (id.name, def.job.dedup.as_deref());
        let slot = placed::slot_of(id.ns, id.queue, at, pool.slots(), pool.lanes());
        let also = also.and_then(|name| {
            let p = topology.pool(name)?;
            let slot = placed::slot_of(id.ns, id.queue, at, p.slots(), p.lanes());
            Some((name.to_owned(), slot))
        });
        let member = keys::schedule_member(id.ns, id.queue, id.name);
        book.all.insert(member.clone());
        let entry = Entry {
            def: fire.clone(),
            also,
            quota_pool: id.pool.into(),
        };
        book.slots
            .entry((writes.to_owned(), slot))
            .or_default()
            .insert(member, entry);
        now_made.insert(field, (def.rev, policy, fire));
    });
    *made = now_made;
    index_namespaces(&mut book);
    book
}

/// Notes each page's namespaces in `book`.
fn index_namespaces(book: &mut Book) {
    for (at, page) in &book.slots {
        let page = page
            .iter()
            .map(|(m, e)| (m.as_str(), &e.quota_pool, &*e.def));
        book.spaces
            .insert(at.clone(), Arc::new(page_namespaces(page)));
    }
}

/// Keeps `book` made from `admin`'s copy and `live`'s topology until
/// `stop`; its fires held to their quotas by `quotas`.
pub(crate) async fn keep(
    quotas: Arc<FireQuotas>,
    live: Arc<LiveTopology>,
    book: watch::Sender<Arc<Book>>,
    stop: CancellationToken,
) {
    let admin = quotas.admin();
    let mut schedules = admin.schedules().changes();
    let mut policies = admin.policies().changes();
    let mut homes = admin.homes().changes();
    let mut topology = live.changes();
    let mut made = Made::new();
    loop {
        schedules.mark_unchanged();
        policies.mark_unchanged();
        homes.mark_unchanged();
        topology.mark_unchanged();
        book.send_replace(Arc::new(make(&quotas, &live.topology(), &mut made)));
        tokio::select! {
            Ok(()) = schedules.changed() => {}
            Ok(()) = policies.changed() => {}
            Ok(()) = homes.changed() => {}
            Ok(()) = topology.changed() => {}
            () = stop.cancelled() => return,
        }
    }
}
