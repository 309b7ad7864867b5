//! The pumps of one shard: which of its slots this process holds leases
//! for, their wake-ups, and their tasks.
//!
//! Every `lease_ttl / 4` the process sends one heartbeat to the shard and
//! reads the live pump processes back. The slots a process wants are those
//! it ranks first by rendezvous hashing (XXH3 of `owner/slot`) among them,
//! so with P processes each wants about S/P of the shard's S slots, a
//! process that joins takes its share at its first round, and no
//! coordinator decides. It takes every slot it ranks first for and does
//! not pump yet, whoever holds the lease (a dead process, a lower-ranked
//! one, or one that does not know it holds it: a lost reply, a failover
//! that restored an old value), and hands a slot it
//! pumps but no longer ranks first for to the process that does. A slot task runs only while its
//! lease is held; the pump script checks the lease itself, so a process
//! that lost a lease (paused, cut off, or a slot taken by the process that
//! ranks first) moves nothing even if its task runs once more. Every
//! process reads the same heartbeats, so views of the live set agree
//! within a round, and two processes stop taking a slot from each other
//! within a round.
//!
//! The set of slots is fixed by the topology: the work here does not grow
//! with tenants. A steady process costs one heartbeat per shard per round;
//! lease calls happen only when a slot changes hands.

use std::{collections::HashMap, sync::Arc};

use sundial_core::Shard;
use sundial_router::Pool;
use tokio::{
    sync::{Notify, Semaphore},
    task::{Id as TaskId, JoinSet},
};
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64;

use crate::{
    PumpStatus,
    announcements::{self, Heard},
    gauges::{self, Backlog},
    options::PumpOptions,
    slot::{self, Ended, Lags},
};

/// A held slot: its wake-up, its task's cancellation, and which task pumps
/// it.
struct Held {
    wake: Arc<Notify>,
    stop: CancellationToken,
    task: TaskId,
}

pub(crate) struct ShardPumps {
    pool: Arc<Pool>,
    shard: Shard,
    opts: PumpOptions,
    owner: String,
    /// The slots this shard may hold (current layout and those that drain).
    slots: Arc<[u32]>,
    held: HashMap<u32, Held>,
    /// Live pump processes, as of the last heartbeat.
    live: Vec<String>,
    lags: Lags,
    /// Bounds the slot tasks' pump calls in flight on this shard.
    calls: Arc<Semaphore>,
    /// The backlog gauges of the held slots.
    backlog: Backlog,
    leases: gauges::Leases,
    /// The slot tasks, each returning why it ended.
    tasks: JoinSet<Ended>,
    /// Which slot each task pumps.
    running: HashMap<TaskId, u32>,
    /// Stops everything this value started.
    shutdown: CancellationToken,
    /// The process's shutdown: only then does it leave the live set.
    process: CancellationToken,
    status: PumpStatus,
    /// Whether timer announcements are heard (for `status`).
    subscribed: bool,
}

impl ShardPumps {
    pub(crate) fn new(
        pool: Arc<Pool>,
        shard: Shard,
        opts: PumpOptions,
        owner: String,
        status: PumpStatus,
        shutdown: CancellationToken,
        process: CancellationToken,
    ) -> Self {
        Self {
            calls: Arc::new(Semaphore::new(opts.in_flight.max(1))),
            leases: gauges::Leases::new(pool.name(), shard.name()),
            slots: pool.slots_on(&shard),
            pool,
            shard,
            opts,
            live: vec![owner.clone()],
            owner,
            held: HashMap::new(),
            lags: Lags::default(),
            backlog: Backlog::default(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            shutdown,
            process,
            status,
            subscribed: false,
        }
    }

    /// The shard's lease loop and the supervisor of its slot tasks, until
    /// `shutdown`. A slot task that ends is handled here: fenced (its lease
    /// passed, or Redis lost it) makes this process drop the slot and claim
    /// it again at once if it still ranks first; a panic restarts the task.
    /// So every slot whose lease this process holds has a running pump,
    /// whatever happened before.
    pub(crate) async fn run(mut self) {
        let shutdown = self.shutdown.clone();
        let mut announcements = announcements::start(
            self.shard.clone(),
            self.slots.clone(),
            shutdown.clone(),
            std::time::Duration::ZERO,
        );
        let mut backlog = tokio::time::interval(self.opts.metrics_interval);
        backlog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lease = tokio::time::interval(self.opts.lease_ttl / 4);
        lease.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = lease.tick() => self.lease_round().await,
                _ = backlog.tick() => self.report_backlog().await,
                heard = announcements.recv() => match heard {
                    Some(heard) => self.on_heard(heard).await,
                    None if shutdown.is_cancelled() => break,
                    // The task ended while this loop runs: start it again,
                    // after a pause; until it subscribes, pumps run on
                    // their timers.
                    None => {
                        tracing::warn!(shard = self.shard.name(), "timer announcements stopped; subscribing again");
                        self.subscribed = false;
                        announcements = announcements::start(
                            self.shard.clone(),
                            self.slots.clone(),
                            shutdown.clone(),
                            announcements::RESUBSCRIBE,
                        );
                    }
                },
                Some(done) = self.tasks.join_next_with_id() => {
                    if self.on_task_end(done) {
                        self.lease_round().await;
                    }
                }
                () = shutdown.cancelled() => break,
            }
        }
        self.stop_all().await;
    }

    /// Refreshes the backlog gauges of the held slots. Bounded by a lease
    /// round's period, so that a shard that hangs never holds up the
    /// heartbeat (the gauges then keep their values until the next try).
    async fn report_backlog(&mut self) {
        let mut held: Vec<u32> = self.held.keys().copied().collect();
        held.sort_unstable();
        let report = self.backlog.report(self.pool.name(), &self.shard, &held);
        if tokio::time::timeout(self.opts.lease_ttl / 4, report)
            .await
            .is_err()
        {
            tracing::warn!(
                shard = self.shard.name(),
                "backlog counts took too long; skipped"
            );
        }
    }

    async fn on_heard(&mut self, heard: Heard) {
        match heard {
            Heard::Due(slot) => {
                if let Some(h) = self.held.get(&slot) {
                    h.wake.notify_one();
                }
            }
            Heard::Subscribed | Heard::MaybeLost => {
                if matches!(heard, Heard::Subscribed) {
                    self.subscribed = true;
                }
                // Announcements may have been missed (before the
                // subscription, or while it reconnected): every held slot
                // looks at its timer again.
                self.lease_round().await;
                self.wake_all();
            }
        }
    }

    /// Stops every slot task, gives the leases back, and zeroes the backlog
    /// gauges this process reported (it no longer holds them).
    async fn stop_all(&mut self) {
        for held in self.held.values() {
            held.stop.cancel();
        }
        while self.tasks.join_next().await.is_some() {}
        self.release_all().await;
        self.backlog
            .report(self.pool.name(), &self.shard, &[])
            .await;
    }

    /// A slot task ended. Returns whether a lease round should run now.
    fn on_task_end(&mut self, done: Result<(TaskId, Ended), tokio::task::JoinError>) -> bool {
        let (id, ended) = match done {
            Ok((id, ended)) => (id, Ok(ended)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(slot) = self.running.remove(&id) else {
            return false;
        };
        // A task that was stopped on purpose is no longer the slot's.
        if self.held.get(&slot).is_none_or(|h| h.task != id) {
            return false;
        }
        match ended {
            Ok(Ended::Stopped) => false,
            Ok(Ended::Fenced) => {
                self.held.remove(&slot);
                self.lease_lost(slot, "the pump script found the lease gone");
                true
            }
            Err(e) => {
                tracing::error!(
                    shard = self.shard.name(),
                    slot,
                    error = %e,
                    "slot pump panicked; restarting it"
                );
                self.held.remove(&slot);
                self.start(slot);
                false
            }
        }
    }

    /// Counts and logs a lease this process held and lost without giving
    /// it up.
    fn lease_lost(&self, slot: u32, why: &str) {
        tracing::info!(
            shard = self.shard.name(),
            slot,
            why,
            "pump lease lost; the slot is pumped again as soon as its lease is held"
        );
        metrics::counter!("sundial_pump_leases_lost_total", "pool" => self.pool.name().to_owned())
            .increment(1);
    }

    /// The live process that ranks first for `slot`.
    fn first_for(&self, slot: u32) -> &str {
        let score = |owner: &str| xxh3_64(format!("{owner}/{slot}").as_bytes());
        self.live
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(self.owner.as_str()))
            .max_by_key(|o| (score(o), *o))
            .unwrap_or(self.owner.as_str())
    }

    /// One heartbeat; then claim the wanted slots not held, and give up
    /// the held ones another live process ranks first for; start and stop
    /// slot tasks to match.
    async fn lease_round(&mut self) {
        let ttl = self.opts.lease_ttl.as_millis() as u64;
        // A process drops out of the live set after 0.7 of the lease TTL
        // without a heartbeat (it beats every quarter, so it may miss two):
        // short enough that a dead process's slots pass within about that
        // long, long enough not to flap on a busy machine.
        let member_ttl = (ttl * 7 / 10).max(1);
        // A heartbeat that answers after its own TTL proves nothing: bound it
        // by that, so a hung shard shows as an error, not as a stuck loop.
        let beat = tokio::time::timeout(
            std::time::Duration::from_millis(member_ttl),
            self.shard.leases().heartbeat(&self.owner, member_ttl),
        )
        .await
        .map_err(|_| "the heartbeat timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()));
        match beat {
            Ok((live, rejoined)) => {
                self.live = live;
                if rejoined && !self.held.is_empty() {
                    // This process was gone from the live set (paused, cut
                    // off): others may have taken its slots. Each held slot
                    // pumps now, and one that passed finds itself fenced.
                    self.wake_all();
                }
            }
            Err(e) => {
                tracing::warn!(shard = self.shard.name(), error = %e, "heartbeat failed; keeping what is held");
                self.status
                    .round(self.shard.name(), Err(e), self.subscribed);
                return;
            }
        }
        let slots = self.slots.clone();
        let round = std::time::Instant::now();
        let mut failed = Vec::new();
        for &slot in slots.iter() {
            let first = self.first_for(slot).to_owned();
            let mine = first == self.owner;
            let held = self.held.contains_key(&slot);
            let call = if mine && !held {
                match self.shard.leases().claim(slot, &self.owner).await {
                    Ok(taken) => {
                        if taken {
                            self.leases.acquired.increment(1);
                        }
                        self.start(slot);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            } else if !mine && held {
                if let Some(h) = self.held.remove(&slot) {
                    h.stop.cancel();
                }
                // Given up or not (a failed call), the process that ranks
                // first takes it.
                // To the process that ranks first, which believes it should
                // hold it: a lease deleted instead could sit unpumped under
                // a process that thinks it holds it already.
                self.shard
                    .leases()
                    .give(slot, &self.owner, Some(&first))
                    .await
            } else {
                Ok(())
            };
            if let Err(e) = call {
                // A call refused at once (on a cluster, a dead master
                // refuses only its own slots'): go on with the other slots
                // while the round is young. One that took long (a hung
                // shard) would be followed by as slow ones: try again next
                // round rather than hold up the heartbeat.
                failed.push((slot, e));
                if round.elapsed() < std::time::Duration::from_millis(member_ttl / 2) {
                    continue;
                }
                break;
            }
        }
        if let Some((slot, e)) = failed.last() {
            tracing::warn!(shard = self.shard.name(), slots = failed.len(), last_slot = slot, error = %e, "lease calls failed; trying again next round");
        }
        self.status
            .round(self.shard.name(), Ok(self.held.len()), self.subscribed);
        self.leases.set(self.held.len(), &self.lags);
    }

    fn start(&mut self, slot: u32) {
        let wake = Arc::new(Notify::new());
        let stop = self.shutdown.child_token();
        let job = slot::SlotPump {
            pool: self.pool.name().to_owned(),
            shard: self.shard.clone(),
            slot,
            owner: self.owner.clone(),
            wake: wake.clone(),
            opts: self.opts.clone(),
            lag: self.lags.clone(),
            calls: self.calls.clone(),
        };
        let task = self.tasks.spawn(slot::run(job, stop.clone())).id();
        self.running.insert(task, slot);
        self.held.insert(slot, Held { wake, stop, task });
    }

    /// Gives back every lease (the topology changed, or the process stops).
    /// When the process stops it also leaves the live set, so others take
    /// over at once rather than when its heartbeat lapses; on a topology
    /// change it stays, so nobody else claims its slots meanwhile.
    async fn release_all(&mut self) {
        let held: Vec<u32> = self.held.keys().copied().collect();
        let mut released = 0;
        for slot in held {
            match self.shard.leases().give(slot, &self.owner, None).await {
                Ok(()) => released += 1,
                Err(e) => {
                    tracing::warn!(shard = self.shard.name(), error = %e, "cannot release pump leases; others take them once this process's heartbeat lapses");
                    break;
                }
            }
        }
        if self.process.is_cancelled() {
            let _ = self.shard.leases().leave(&self.owner).await;
        }
        tracing::info!(shard = self.shard.name(), released, "pump leases released");
        self.held.clear();
    }

    fn wake_all(&self) {
        for h in self.held.values() {
            h.wake.notify_one();
        }
    }
}
