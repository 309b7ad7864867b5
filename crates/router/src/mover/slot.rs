//! One slot's move, as a phase and one step function.
//!
//! A move walks the slot's jobs at the old shard with a cursor: first what
//! an earlier mover left in transit ([`Phase::Recover`]), then (unless it
//! is a sweep) every job it carries ([`Phase::Take`]), walk after walk
//! until a whole walk takes nothing ([`Phase::Finish`]). Each take starts a
//! batch through the four steps of `sundial_core`'s `engine::mover`,
//! `settle` apart so that what each step wrote is on disk (and replicas)
//! before the next relies on it ([`Pipeline`]): take out at the old shard,
//! read again and copy where the jobs are bound, let the transit entries
//! go, remove the copies' marks. A few batches are in flight at once.

use std::{collections::VecDeque, time::Instant};

use sundial_core::{EngineError, InTransit, MoveMode, PageSize};
use tokio_util::sync::CancellationToken;

use super::{
    MoverOptions, Status,
    copy::{Marks, copy, finish},
    task::{Ended, Move},
};
use crate::view::INSTANCE;

/// Batches of one slot in flight at once (each waits `settle` between
/// steps, so several keep the slot moving).
const IN_FLIGHT: usize = 4;

/// Where a slot's walk is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Reading back what an earlier mover (or this one) left in transit at
    /// the old shard, from `cursor`.
    Recover { cursor: String },
    /// Taking jobs out, from `cursor`; `took`: whether this walk (from
    /// cursor 0) took any.
    Take { cursor: String, took: bool },
    /// The walk found nothing more to take: the batches in flight finish.
    Finish,
}

/// The batches of a slot's move in flight, each queue in the order they
/// were started, with when their last step was done.
#[derive(Debug, Default)]
struct Pipeline {
    /// Step 1 done: ids whose entries settle at the old shard.
    taken: VecDeque<(Instant, Vec<String>)>,
    /// Step 2 done: ids to let go, and the marks they left.
    copied: VecDeque<(Instant, Vec<String>, Marks)>,
    /// Step 3 done: marks to remove.
    letgo: VecDeque<(Instant, Marks)>,
}

impl Pipeline {
    fn is_empty(&self) -> bool {
        self.taken.is_empty() && self.copied.is_empty() && self.letgo.is_empty()
    }

    /// How long until the next batch is due for its next step.
    fn next_due(&self, settle: std::time::Duration) -> std::time::Duration {
        [
            self.taken.front().map(|(at, _)| *at),
            self.copied.front().map(|(at, _, _)| *at),
            self.letgo.front().map(|(at, _)| *at),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(settle, |at| settle.saturating_sub(at.elapsed()))
    }
}

/// What a step leaves to do.
enum Next {
    /// Step again at once.
    Again,
    /// Nothing is due for this long.
    Wait(std::time::Duration),
    Done(Ended),
}

/// One slot's move in progress.
struct SlotMove<'a> {
    m: Move,
    opts: &'a MoverOptions,
    status: &'a Status,
    phase: Phase,
    batches: Pipeline,
    /// Entries in transit at the old shard, as the last take counted them.
    in_transit: u64,
    /// Times this move read back entries it found in transit after a walk.
    rereads: u32,
    /// Jobs per take: `batch`, fewer when their bodies are large.
    page: PageSize,
}

/// Moves one slot until it is clear at its old shard (or holds none of
/// the namespace's jobs, for a namespace's move; or, for a sweep, nothing
/// in transit), another gateway holds it, or `stop`.
pub(super) async fn run(
    m: Move,
    opts: &MoverOptions,
    status: &Status,
    stop: &CancellationToken,
) -> Result<Ended, EngineError> {
    let mut slot = SlotMove {
        m,
        opts,
        status,
        // Entries left by an earlier mover are read back first.
        phase: Phase::Recover {
            cursor: "0".to_owned(),
        },
        batches: Pipeline::default(),
        in_transit: 0,
        rereads: 0,
        page: PageSize::new(opts.batch),
    };
    loop {
        if stop.is_cancelled() {
            return Ok(Ended::Stopped);
        }
        match slot.step().await? {
            Next::Again => {}
            Next::Wait(d) => tokio::select! {
                () = tokio::time::sleep(d) => {}
                () = stop.cancelled() => return Ok(Ended::Stopped),
            },
            Next::Done(ended) => return Ok(ended),
        }
    }
}

impl SlotMove<'_> {
    /// Takes every due batch one step on (the latest steps first), then
    /// starts a batch if there is room and the walk goes on, or ends the
    /// move once the walk is over and no batch is in flight.
    async fn step(&mut self) -> Result<Next, EngineError> {
        if let Some(ended) = self.advance_batches().await? {
            return Ok(Next::Done(ended));
        }
        let walking = match &self.phase {
            Phase::Recover { cursor } => Some((MoveMode::Pending, cursor.clone())),
            Phase::Take { cursor, .. } => Some((MoveMode::Take, cursor.clone())),
            Phase::Finish => None,
        };
        match walking {
            Some((mode, cursor)) if self.batches.taken.len() < IN_FLIGHT => {
                self.take(mode, &cursor).await
            }
            None if self.batches.is_empty() => self.walked().await,
            _ => Ok(Next::Wait(self.batches.next_due(self.opts.settle))),
        }
    }

    /// Steps 4, 3 and 2 of every batch due for them.
    async fn advance_batches(&mut self) -> Result<Option<Ended>, EngineError> {
        let settle = self.opts.settle;
        let due = |at: &Instant| at.elapsed() >= settle;
        while let Some((_, marks)) = self.batches.letgo.pop_front_if(|(at, _)| due(at)) {
            for (shard, slot, marks) in &marks {
                shard.mover().unmark(*slot, marks).await?;
            }
        }
        while let Some((_, ids, marks)) = self.batches.copied.pop_front_if(|(at, _, _)| due(at)) {
            let n = finish(&self.m, &ids).await?;
            self.status.moved(self.m.pool.name(), self.m.namespace(), n);
            self.batches.letgo.push_back((Instant::now(), marks));
        }
        while let Some((_, ids)) = self.batches.taken.pop_front_if(|(at, _)| due(at)) {
            if let Some(ended) = self.read_and_copy(&ids).await? {
                return Ok(Some(ended));
            }
        }
        Ok(None)
    }

    /// Step 2 of one batch: reads its jobs back at the old shard and copies
    /// them where they are bound.
    async fn read_and_copy(&mut self, ids: &[String]) -> Result<Option<Ended>, EngineError> {
        let (m, opts) = (&self.m, self.opts);
        let sent = Instant::now();
        let read = match m
            .from
            .mover()
            .read(m.slot, &INSTANCE, opts.lease, ids)
            .await?
        {
            Ok(t) => t,
            Err(holder) => return Ok(Some(Ended::Held(holder))),
        };
        // A copy sent long after its read may race another mover's steps 3
        // and 4 (the lease may have passed, each step waits `settle`):
        // leave it in transit for whoever holds the lease.
        if sent.elapsed() > (opts.lease / 2).min(opts.settle / 2) {
            tracing::warn!(
                pool = m.pool.name(),
                shard = m.from.name(),
                slot = m.slot,
                took_ms = sent.elapsed().as_millis() as u64,
                "a batch's read took too long to copy it safely; it stays in transit for the next try"
            );
            return Ok(Some(Ended::Stopped));
        }
        let (done, marks) = copy(m, &read).await?;
        self.batches.copied.push_back((Instant::now(), done, marks));
        Ok(None)
    }

    /// Step 1: takes a batch out at the old shard (or reads back one left
    /// in transit), and moves the walk on.
    async fn take(&mut self, mode: MoveMode, cursor: &str) -> Result<Next, EngineError> {
        let (m, opts) = (&self.m, self.opts);
        let dest = m.dest.to_string();
        let t = match m
            .from
            .mover()
            .take(
                m.slot,
                &INSTANCE,
                opts.lease,
                mode,
                self.page.get(),
                &dest,
                cursor,
                &m.queue_prefix(),
            )
            .await?
        {
            Ok(t) => t,
            Err(holder) => return Ok(Next::Done(Ended::Held(holder))),
        };
        if t.cleared {
            self.carry_totals(&t.totals).await;
            return Ok(Next::Done(Ended::Cleared));
        }
        self.in_transit = t.in_transit;
        self.page
            .saw(t.jobs.len(), t.jobs.iter().map(InTransit::size).sum());
        let took = !t.jobs.is_empty();
        if took {
            let ids = t.jobs.into_iter().map(|j| j.id).collect();
            self.batches.taken.push_back((Instant::now(), ids));
        }
        self.phase = self.walk_on(t.cursor, took);
        Ok(Next::Again)
    }

    /// The phase after a take that returned `cursor` and `took` jobs or not.
    fn walk_on(&self, cursor: String, took: bool) -> Phase {
        let over = cursor == "0";
        match &self.phase {
            Phase::Recover { .. } if !over => Phase::Recover { cursor },
            Phase::Recover { .. } if self.m.takes() => Phase::Take {
                cursor,
                took: false,
            },
            Phase::Recover { .. } | Phase::Finish => Phase::Finish,
            Phase::Take { took: before, .. } if !over => Phase::Take {
                cursor,
                took: *before || took,
            },
            Phase::Take { took: before, .. } if *before || took => Phase::Take {
                cursor,
                took: false,
            },
            Phase::Take { .. } => Phase::Finish,
        }
    }

    /// The walk is over and every batch through. A namespace's move (or a
    /// sweep) ends here once nothing of its is left; a slot's move takes
    /// again, to clear the slot.
    async fn walked(&mut self) -> Result<Next, EngineError> {
        let (m, owner) = (&self.m, INSTANCE.as_str());
        if self.in_transit > 0 {
            if self.rereads >= 2 {
                // What is left cannot be placed from here (bound to a pool
                // this gateway's config lacks): leave it, and the lease, to
                // a gateway that can.
                m.from.mover().release(m.slot, owner).await?;
                return Ok(Next::Done(Ended::Stopped));
            }
            // Entries this mover did not make (a mover that lost its lease,
            // marks of jobs acked in transit): read them back.
            self.rereads += 1;
            self.in_transit = 0;
            self.phase = Phase::Recover {
                cursor: "0".to_owned(),
            };
            return Ok(Next::Again);
        }
        if m.what != super::task::What::Slot {
            // The slot stays (others' jobs); its lease goes at once, so that
            // a drain waiting on it need not wait for it to expire.
            m.from.mover().release(m.slot, owner).await?;
            return Ok(Next::Done(Ended::Cleared));
        }
        self.phase = Phase::Take {
            cursor: "0".to_owned(),
            took: false,
        };
        Ok(Next::Again)
    }

    /// The running totals the slot's queues counted at the old shard go on
    /// where the slot is now (statistics: lost, not doubled, should this
    /// fail or the gateway die first).
    async fn carry_totals(&self, totals: &[(String, u64)]) {
        let m = &self.m;
        let to = m.pool.current_shard(m.slot);
        if !to.same(&m.from)
            && let Err(e) = to.mover().add_totals(m.slot, totals).await
        {
            tracing::warn!(pool = m.pool.name(), shard = to.name(), slot = m.slot, error = %e, "a moved slot's running totals were lost");
        }
    }
}
