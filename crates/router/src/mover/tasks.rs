//! The slot moves of one topology as the mover's loop supervises them:
//! each a task, started while there is room and not twice for one place,
//! and what each one's end means for the next check.

use std::collections::{HashMap, HashSet};

use sundial_core::EngineError;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::{
    MoverOptions, Status, slot,
    task::{Ended, Move, MoveKey},
};

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
    use crate::mover::task::What;

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
