//! The active mover: copies the jobs that moved slots still hold at their
//! old shard to the shard that holds them now, so that a drain finishes in
//! time proportional to its data rather than to its jobs' delays (or never,
//! for jobs nobody consumes); and carries the jobs of a namespace that
//! moves to another pool.
//!
//! Every gateway runs [`run`]; a slot is moved by one at a time, the holder
//! of the slot's mover lease on the old shard (`sd:{<slot>}:mover`, taken
//! and renewed by each batch, expiring [`MoverOptions::lease`] after the
//! last). A slot moves only once nothing can write to it at the old shard
//! any more ([`movable`]). A slot moves in batches of four steps
//! ([`slot`]), [`MoverOptions::settle`] apart so that each step's writes are
//! on the shards' disks (and replicas) before the next relies on them. A
//! mover that crashes, loses its lease or whose Redis restarts leaves
//! transit entries behind; the next holder of the lease reads them back
//! and copies them again first (copies already made are skipped by their
//! marks), so every job ends up at its new place once. A namespace that
//! moves to another pool is carried the same way ([`namespace`]), and a
//! sweep finishes transit entries that no move would ([`sweep`]).
//!
//! Rooms: [`options`] and [`status`] (what it is told and what it says);
//! [`task`] (what a slot's move carries, and how it ended); [`tasks`]
//! (the running moves of one topology);
//! [`slot`] (one slot's move: phase and step); [`copy`] (a batch's copy
//! and let-go); [`movable`], [`sweep`] and [`namespace`] (what to move).

mod copy;
mod movable;
pub mod namespace;
mod options;
mod slot;
mod status;
mod sweep;
mod task;
mod tasks;

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use sundial_core::{EngineError, Shard};
use tokio::task::{Id, JoinError};
use tokio_util::sync::CancellationToken;

pub use options::MoverOptions;
pub use status::{MoverState, MoverStatus, Status};
use task::{Ended, MoveKey, What};
use tasks::Tasks;

use crate::{
    LiveTopology, Topology,
    admin::{AdminStore, homes::MoveState},
    view::INSTANCE,
};

/// Moves the jobs of moved slots and moving namespaces, checking every
/// `every` (and at every topology change) what may move, until
/// `shutdown`; reports in `status`.
pub async fn run(
    live: Arc<LiveTopology>,
    admin: Arc<AdminStore>,
    opts: MoverOptions,
    status: Status,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut changes = live.changes();
    // Counted across topology changes: sweeps stay `SWEEP_EVERY` checks
    // apart however often the config reloads.
    let mut checks = Checks::default();
    loop {
        changes.mark_unchanged();
        let stop = shutdown.child_token();
        let mut round = Round {
            topology: live.topology(),
            admin: &admin,
            opts: &opts,
            status: &status,
            tasks: Tasks::new(&opts, &status, &stop),
            all_writing: HashMap::new(),
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let more = loop {
            tokio::select! {
                _ = tick.tick() => {
                    checks.ticks += 1;
                    round.tasks.resting.clear();
                }
                Some(done) = round.tasks.set.join_next_with_id() => round.ended(done),
                Ok(()) = changes.changed() => break true,
                () = shutdown.cancelled() => break false,
            }
            round.check(&mut checks).await;
        };
        stop.cancel();
        let held = round.wind_down().await;
        if !more {
            release(&held).await;
            return;
        }
    }
}

/// Checks counted across topologies.
#[derive(Debug, Default)]
struct Checks {
    ticks: u64,
    /// The tick of the last sweep.
    swept: u64,
}

/// The mover's work under one topology.
struct Round<'a> {
    topology: Arc<Topology>,
    admin: &'a AdminStore,
    opts: &'a MoverOptions,
    status: &'a Status,
    tasks: Tasks,
    /// Per namespace move: when this gateway first saw every gateway write
    /// to the new pool (its own clock).
    all_writing: HashMap<(String, String, u64), Instant>,
}

impl Round<'_> {
    /// Slots moved at once: `slots_at_once`, at least one.
    fn room(&self) -> usize {
        self.opts.slots_at_once.max(1)
    }

    /// Starts what may move now: moved slots, every `SWEEP_EVERY` ticks
    /// (not again when a task ends) a sweep, and moving namespaces.
    async fn check(&mut self, checks: &mut Checks) {
        for pool in self.topology.clone().pools() {
            self.check_pool(pool).await;
        }
        // With one place beyond `slots_at_once`: moves keep the others busy
        // through a drain, and a slot held back for its transit entries
        // waits for a sweep.
        if checks.ticks % sweep::SWEEP_EVERY == 1 && checks.swept != checks.ticks {
            checks.swept = checks.ticks;
            let sweeps = sweep::sweeps(&self.topology).await;
            self.tasks.start(sweeps, self.room() + 1);
        }
        self.check_namespaces().await;
    }

    /// Starts the slots of `pool` that may move, and says why others wait.
    async fn check_pool(&mut self, pool: &Arc<crate::Pool>) {
        let name = pool.name();
        if pool.draining().next().is_none() {
            self.status.set(name, |s| {
                s.state = MoverState::Idle;
                s.reason = None;
            });
            return;
        }
        let (moves, held_back) = match movable::movable(&self.topology, pool).await {
            Ok(m) => m,
            Err(reason) => {
                self.status.set(name, |s| {
                    s.state = MoverState::Waiting;
                    s.reason = Some(reason);
                });
                return;
            }
        };
        self.status.set(name, |s| {
            s.state = if moves.is_empty() && held_back > 0 {
                MoverState::Waiting
            } else {
                MoverState::Moving
            };
            s.reason = (held_back > 0).then(|| {
                format!(
                    "{held_back} moved slot(s) wait until their new shard answers and holds \
                     none of their jobs in transit from an earlier move (a sweep finishes \
                     those once the lease of the mover that left them expires)"
                )
            });
        });
        self.tasks.start(moves, self.room());
    }

    /// Takes each namespace's move a step on, starts its slots' moves, and
    /// marks it moved once its old pool holds none of its jobs.
    async fn check_namespaces(&mut self) {
        for (token_pool, ns, home) in self.admin.homes().all() {
            if home.state == MoveState::Moved {
                continue;
            }
            let step = namespace::Step {
                topology: &self.topology,
                admin: self.admin,
                token_pool: &token_pool,
                ns: &ns,
                home: &home,
            };
            let moves = match step.advance(&mut self.all_writing).await {
                Ok(Some(moves)) => moves,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(pool = token_pool, namespace = ns, error = %e, "a namespace's move cannot go on now; tried again at the next check");
                    continue;
                }
            };
            if !moves.iter().all(|m| self.tasks.cleared.contains(&m.key())) {
                self.tasks.start(moves, self.room());
                continue;
            }
            match namespace::left(&moves, &ns).await {
                Ok(false) => {}
                Ok(true) => {
                    // Walk them all again.
                    self.tasks
                        .cleared
                        .retain(|k| !moves.iter().any(|m| m.key() == *k));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(pool = token_pool, namespace = ns, error = %e, "cannot count what a namespace's move left");
                    continue;
                }
            }
            if let Err(e) = step
                .set(
                    MoveState::Moved,
                    "namespace moved: its jobs are all in its new pool",
                )
                .await
            {
                tracing::warn!(pool = token_pool, namespace = ns, error = %e, "cannot mark a namespace moved");
            }
        }
    }

    /// A task that ended: a move's cleared slot is not looked at again
    /// under this topology; any other ending rests until the next tick.
    fn ended(&mut self, done: Result<(Id, Result<Ended, EngineError>), JoinError>) {
        let Some((key, ended)) = self.tasks.finished(done) else {
            return;
        };
        let (pool, shard, slot) = (&key.pool, &key.shard, key.slot);
        match ended {
            // A sweep's slot is swept again whenever it holds entries (a
            // gateway on an older config may add some); a move's, not
            // under this topology.
            Some(Ok(Ended::Cleared)) if key.what == What::Sweep => {}
            Some(Ok(Ended::Cleared)) => {
                tracing::info!(pool, shard, slot, "moved slot cleared at its old shard");
                self.tasks.cleared.insert(key);
            }
            Some(Ok(Ended::Held(by))) => {
                tracing::debug!(pool, shard, slot, by, "another gateway moves this slot");
                self.tasks.resting.insert(key);
            }
            Some(Ok(Ended::Stopped)) => {
                self.tasks.resting.insert(key);
            }
            Some(Err(e)) => {
                tracing::warn!(pool, shard, slot, error = %e, "moving a slot failed; tried again at the next check");
                self.tasks.resting.insert(key);
            }
            None => {
                tracing::error!(
                    pool,
                    shard,
                    slot,
                    "moving a slot panicked; tried again at the next check"
                );
                self.tasks.resting.insert(key);
            }
        }
    }

    /// Waits for the stopped tasks; returns the slots whose lease they may
    /// hold.
    async fn wind_down(mut self) -> Vec<(Shard, u32)> {
        let mut held = Vec::new();
        while let Some(done) = self.tasks.set.join_next_with_id().await {
            if let Some((key, _)) = self.tasks.finished(done)
                && let Some(shard) = shard_of(&self.topology, &key)
            {
                held.push((shard.clone(), key.slot));
            }
        }
        held
    }
}

fn shard_of<'a>(topology: &'a Topology, key: &MoveKey) -> Option<&'a Shard> {
    topology
        .pool(&key.pool)
        .and_then(|p| p.shards().find(|s| s.name() == key.shard))
}

/// Leaves the leases to the other gateways at once (bounded: a shard that
/// is down lets them expire).
async fn release(held: &[(Shard, u32)]) {
    let release = async {
        for (shard, slot) in held {
            let _ = shard.mover().release(*slot, &INSTANCE).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), release).await;
}
