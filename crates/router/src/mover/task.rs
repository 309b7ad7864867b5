//! One move of one slot: what it moves ([`Move`], named by a [`MoveKey`])
//! and how it ended ([`Ended`]).

use std::sync::Arc;

use sundial_core::Shard;

use crate::{Pool, Topology, placement::Dest};

/// What a move of a slot carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum What {
    /// Every job of a moved slot, to the shard that holds the slot now.
    Slot,
    /// Only what is in transit (entries no move will finish: a move cut
    /// short by a reload that moved the slot back, say).
    Sweep,
    /// The jobs of one namespace, to the pool it moves to; `epoch`: when
    /// that move began `moving` (a later move of the same namespace walks
    /// every place again).
    Namespace { ns: String, epoch: u64 },
}

/// A slot to move: where, and what goes where.
#[derive(Debug, Clone)]
pub(super) struct Move {
    pub(super) topology: Arc<Topology>,
    pub(super) pool: Arc<Pool>,
    /// The shard the jobs leave.
    pub(super) from: Shard,
    pub(super) slot: u32,
    /// Where the jobs taken out are bound.
    pub(super) dest: Dest,
    pub(super) what: What,
}

/// A slot's move, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct MoveKey {
    pub(super) pool: String,
    /// The shard the jobs leave.
    pub(super) shard: String,
    pub(super) slot: u32,
    pub(super) what: What,
}

impl MoveKey {
    /// Whether both move jobs of one slot at one shard (they share the
    /// slot's lease and transit entries there).
    pub(super) fn same_place(&self, other: &Self) -> bool {
        (&self.pool, &self.shard, self.slot) == (&other.pool, &other.shard, other.slot)
    }
}

impl Move {
    pub(super) fn key(&self) -> MoveKey {
        MoveKey {
            pool: self.pool.name().to_owned(),
            shard: self.from.name().to_owned(),
            slot: self.slot,
            what: self.what.clone(),
        }
    }

    /// Whether it takes jobs out (a sweep only finishes what is in transit).
    pub(super) fn takes(&self) -> bool {
        self.what != What::Sweep
    }

    /// The namespace it carries, if that is what it carries.
    pub(super) fn namespace(&self) -> Option<&str> {
        match &self.what {
            What::Namespace { ns, .. } => Some(ns),
            What::Slot | What::Sweep => None,
        }
    }

    /// The prefix of the queues whose jobs it carries (every queue: empty).
    pub(super) fn queue_prefix(&self) -> String {
        self.namespace()
            .map_or_else(String::new, |ns| format!("{ns}/"))
    }
}

/// How a slot's move ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// The slot held nothing more at the old shard (of what this move
    /// carries), and was cleared there.
    Cleared,
    /// Another gateway holds the slot's mover lease.
    Held(String),
    /// Stopped (topology change, shutdown, or a batch that took so long
    /// that the lease may have passed): what is in transit is picked up by
    /// the next holder of the lease.
    Stopped,
}
