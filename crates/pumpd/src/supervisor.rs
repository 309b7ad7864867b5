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

mod leases;

use std::{collections::HashMap, sync::Arc};

use sundial_core::Shard;
use sundial_router::{Pool, topology::Topology};
use tokio::{
    sync::Notify,
    task::{Id as TaskId, JoinSet},
};
use tokio_util::sync::CancellationToken;

use crate::{
    PumpStatus,
    announcements::{self, Heard},
    gauges::{self, Backlog},
    options::PumpOptions,
    permits::CallPermits,
    schedules::{Book, SlotSchedules, keeper::PoolPlaces},
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
    /// Bounds the slot tasks' pump calls in flight on each of this
    /// shard's servers.
    calls: Arc<CallPermits>,
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
    /// The schedules each slot should hold, and the topology they live
    /// in; `None` without a schedule table.
    book: Option<(tokio::sync::watch::Receiver<Arc<Book>>, Arc<Topology>)>,
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
            calls: CallPermits::new(opts.in_flight.max(1)),
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
            book: None,
        }
    }

    /// Its slots' loops keep and fire the schedules of `book`, in
    /// `topology`.
    pub(crate) fn with_book(
        mut self,
        book: Option<(tokio::sync::watch::Receiver<Arc<Book>>, Arc<Topology>)>,
    ) -> Self {
        self.book = book;
        self
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
            written_ahead: 0,
            schedules: self.book.clone().map(|(book, topology)| {
                let places = PoolPlaces {
                    topology,
                    pool: self.pool.clone(),
                    shard: self.shard.clone(),
                    slot,
                };
                let (name, lanes) = (self.pool.name().to_owned(), self.pool.lanes());
                SlotSchedules::new(
                    name,
                    slot,
                    lanes,
                    self.owner.clone(),
                    book,
                    Box::new(places),
                )
            }),
        };
        let task = self.tasks.spawn(slot::run(job, stop.clone())).id();
        self.running.insert(task, slot);
        self.held.insert(slot, Held { wake, stop, task });
    }

    fn wake_all(&self) {
        for h in self.held.values() {
            h.wake.notify_one();
        }
    }
}
