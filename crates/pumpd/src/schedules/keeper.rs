//! A slot's schedules as its loop holds them: what it knows the slot
//! holds, where else they may live, and whether the slot may differ from
//! its page of the book. `holding.rs` makes the slot hold its page,
//! `firing.rs` fires and plans.

use std::{collections::HashMap, sync::Arc};

use sundial_core::{FireDef, Shard, ToPlan};
use sundial_router::{Pool, placement, topology::Topology};
use tokio::sync::watch;

use super::book::Book;

/// Where a slot's schedules may live.
pub(crate) trait Places: Send + Sync {
    /// Whether the slot's place for writes is the shard its loop pumps.
    fn home(&self) -> bool;
    /// The other places where a schedule of the slot may have lived: the
    /// slot's other places in its pool (layouts that drain, or the one
    /// before), and the places of `also` (the pool and slot its namespace
    /// lived in, while it moves between pools).
    fn others(&self, also: Option<&(String, u32)>) -> Vec<(Shard, u32)>;
}

/// A slot that has no other place (tests).
#[cfg(test)]
pub(crate) struct Here;

#[cfg(test)]
impl Places for Here {
    fn home(&self) -> bool {
        true
    }

    fn others(&self, _: Option<&(String, u32)>) -> Vec<(Shard, u32)> {
        Vec::new()
    }
}

/// What the slot holds of a schedule, as far as its loop knows.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(super) rev: u64,
    pub(super) parked: bool,
    /// It had no fire left when read.
    pub(super) ended: bool,
    /// The definition this loop applied, when it did.
    pub(super) def: Option<Arc<FireDef>>,
}

/// A slot's schedules: see the module's docs.
pub(crate) struct SlotSchedules {
    pub(super) pool: String,
    pub(super) slot: u32,
    pub(super) lanes: u32,
    pub(super) owner: String,
    /// Where the slot's schedules may live (`holding.rs`).
    pub(super) places: Box<dyn Places>,
    /// `places.home()` at the last keep.
    pub(super) was_home: bool,
    pub(super) book: watch::Receiver<Arc<Book>>,
    /// What the slot holds, as far as this loop knows: `None` until it
    /// read the slot, and after a failed write (read again).
    pub(super) known: Option<HashMap<String, Known>>,
    /// The slot may differ from its page: the book changed, a write
    /// failed, or a schedule waits for the place it moved from.
    pub(super) stale: bool,
    /// A schedule waits for the place it moves from to park it.
    pub(super) waiting: bool,
    /// The plans that fire steps which wrote jobs ahead asked for, by
    /// schedule (its latest ask), stored once the timer made those jobs
    /// ready (`firing.rs`), and when the first of those jobs is due (the
    /// shard's clock; 0 with none).
    pub(super) deferred: HashMap<String, ToPlan>,
    pub(super) deferred_until_ms: u64,
}

/// The lease was not held: the slot's loop ends.
#[derive(Debug)]
pub(crate) struct Fenced;

impl SlotSchedules {
    pub(crate) fn new(
        pool: String,
        slot: u32,
        lanes: u32,
        owner: String,
        book: watch::Receiver<Arc<Book>>,
        places: Box<dyn Places>,
    ) -> Self {
        Self {
            pool,
            slot,
            lanes,
            owner,
            places,
            was_home: true,
            book,
            known: None,
            stale: true,
            waiting: false,
            deferred: HashMap::new(),
            deferred_until_ms: 0,
        }
    }

    /// Whether the slot should have a next fire: it holds a schedule,
    /// as this loop applied it, that is neither paused nor parked.
    pub(crate) fn expects_fires(&self) -> bool {
        self.known.as_ref().is_some_and(|known| {
            known
                .values()
                .any(|k| !k.parked && !k.ended && k.def.as_ref().is_some_and(|d| !d.paused))
        })
    }

    /// Forgets what the slot holds, to read it again and write what it
    /// lacks (a Redis that lost the slot's schedules: a failover, the last
    /// second of an AOF).
    pub(crate) fn forget(&mut self) {
        self.known = None;
        self.stale = true;
    }

    /// Whether a schedule waits for the place it moves from: the slot's
    /// loop comes back soon rather than at its next deadline.
    pub(crate) fn waits(&self) -> bool {
        self.waiting
    }

    /// Waits until the book changes (forever once it no longer can).
    pub(crate) async fn changed(&mut self) {
        if self.book.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.stale = true;
    }
}

/// A slot's places in a topology: in its pool, and in the pool its
/// schedules' namespaces move from.
pub(crate) struct PoolPlaces {
    pub(crate) topology: Arc<Topology>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) shard: Shard,
    pub(crate) slot: u32,
}

impl Places for PoolPlaces {
    fn home(&self) -> bool {
        self.pool
            .placed(self.pool.write_layout(), self.slot)
            .flatten()
            .is_some_and(|s| s.same(&self.shard))
    }

    fn others(&self, also: Option<&(String, u32)>) -> Vec<(Shard, u32)> {
        let mut out: Vec<(Shard, u32)> = placement::slot_places(&self.pool, self.slot)
            .into_iter()
            .filter(|s| !s.same(&self.shard))
            .map(|s| (s.clone(), self.slot))
            .collect();
        if let Some((name, slot)) = also
            && let Some(pool) = self.topology.pool(name)
        {
            let there = placement::slot_places(pool, *slot);
            out.extend(there.into_iter().map(|s| (s.clone(), *slot)));
        }
        out
    }
}
