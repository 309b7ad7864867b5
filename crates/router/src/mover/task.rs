//! One move of one slot, as the mover's loop starts and supervises it: what
//! it moves ([`Move`], named by a [`MoveKey`]), how it ended ([`Ended`]),
//! and the running tasks of one topology ([`Tasks`]).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use sundial_core::{EngineError, Shard};
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::{MoverOptions, Status, slot};
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
    fn same_place(&self, other: &Self) -> bool {
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

/// The slot moves of one topology: those running, and those not to start
/// again yet.
pub(super) struct Tasks {
    pub(super) set: JoinSet<Result<Ended, EngineError>>,
    /// The slot each running task moves.
    pub(super) running: HashMap<Id, MoveKey>,
    /// Cleared under this topology: not looked at again until it changes.
    pub(super) cleared: HashSet<MoveKey>,
    /// Another gateway moves them, or their move failed or stopped: not
    /// started again before the next tick (else a gateway without the lease
    /// would ask for it again as fast as Redis answers).
    pub(super) resting: HashSet<MoveKey>,
    opts: MoverOptions,
    status: Status,
    stop: CancellationToken,
}

/// A task that ended: its key, and how its move ended (`None`: it panicked).
pub(super) type Finished = (MoveKey, Option<Result<Ended, EngineError>>);

impl Tasks {
    pub(super) fn new(opts: &MoverOptions, status: &Status, stop: &CancellationToken) -> Self {
        Self {
            set: JoinSet::new(),
            running: HashMap::new(),
            cleared: HashSet::new(),
            resting: HashSet::new(),
            opts: opts.clone(),
            status: status.clone(),
            stop: stop.clone(),
        }
    }

    /// Starts moving each of `moves` in turn while fewer than `room` run,
    /// but not a slot that moves already (as a slot's, a namespace's or a
    /// sweep's move: they share the slot's lease and transit entries), nor
    /// one cleared or resting.
    pub(super) fn start(&mut self, moves: Vec<Move>, room: usize) {
        for m in moves {
            if self.running.len() >= room {
                return;
            }
            let key = m.key();
            let busy = self.running.values().any(|k| k.same_place(&key));
            if busy || self.cleared.contains(&key) || self.resting.contains(&key) {
                continue;
            }
            self.status.set(&key.pool, |s| s.slots_moving += 1);
            let (opts, status, stop) = (self.opts.clone(), self.status.clone(), self.stop.clone());
            let task = self
                .set
                .spawn(async move { slot::run(m, &opts, &status, &stop).await });
            self.running.insert(task.id(), key);
        }
    }

    /// A task that ended: its slot, no longer running, and how its move
    /// ended (`None`: it panicked). `None` for a task this does not know.
    pub(super) fn finished(
        &mut self,
        done: Result<(Id, Result<Ended, EngineError>), JoinError>,
    ) -> Option<Finished> {
        let (id, ended) = match done {
            Ok((id, ended)) => (id, Some(ended)),
            Err(e) => (e.id(), None),
        };
        let key = self.running.remove(&id)?;
        self.status.set(&key.pool, |s| {
            s.slots_moving = s.slots_moving.saturating_sub(1)
        });
        Some((key, ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_move_that_panics_frees_its_place_and_rests() {
        let status = Status::default();
        let mut tasks = Tasks::new(&MoverOptions::default(), &status, &CancellationToken::new());
        let key = MoveKey {
            pool: "p".into(),
            shard: "a".into(),
            slot: 7,
            what: What::Slot,
        };
        let task = tasks.set.spawn(async { panic!("a bug in a move") });
        tasks.running.insert(task.id(), key.clone());
        status.set("p", |s| s.slots_moving += 1);
        let done = tasks.set.join_next_with_id().await.expect("a task");
        let (ended, outcome) = tasks.finished(done).expect("its slot");
        assert_eq!(ended, key);
        assert!(outcome.is_none(), "a panic has no outcome");
        assert!(tasks.running.is_empty());
        assert_eq!(status.of("p").slots_moving, 0);
    }
}
