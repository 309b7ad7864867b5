//! The pumps of one shard: which buckets this process holds leases for,
//! their wake-ups, and their tasks.
//!
//! Leases: every `lease_ttl / 4` one lease call per shard renews the leases
//! this process wants, takes free ones it wants, releases those another
//! live process should have, and records this process as alive. The buckets
//! a process wants are those it ranks first by rendezvous hashing (XXH3 of
//! `owner/ns/bucket`) among the live pump processes, so with P processes each
//! wants about N/P of the N buckets, a process that joins is handed its share
//! within a round or two, and no coordinator decides. A bucket task runs
//! only while its lease is held; the pump script checks the lease itself, so
//! a process that lost a lease (paused, partitioned) moves nothing even if
//! its task runs once more.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use sundial_core::{LeaseOp, Shard, job::check_namespace, keys};
use sundial_router::Pool;
use tokio::{
    sync::Notify,
    task::{Id as TaskId, JoinSet},
};
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64;

use crate::{
    PumpStatus,
    announcements::{self, Heard},
    bucket::{self, Bucket, Ended, Lags},
    gauges::{self, Backlog},
    options::PumpOptions,
};

/// A held bucket: its wake-up, its task's cancellation, and which task
/// pumps it.
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
    /// Buckets known to exist on this shard (registry and announcements).
    known: BTreeSet<Bucket>,
    held: HashMap<Bucket, Held>,
    /// Live pump processes, as of the last lease call.
    live: Vec<String>,
    lags: Lags,
    /// The backlog gauges of the held buckets.
    backlog: Backlog,
    leases: gauges::Leases,
    /// The bucket tasks, each returning why it ended.
    tasks: JoinSet<Ended>,
    /// Which bucket each task pumps.
    running: HashMap<TaskId, Bucket>,
    /// Stops everything this value started.
    shutdown: CancellationToken,
    status: PumpStatus,
    /// Whether timer announcements are heard (for `status`).
    subscribed: bool,
    /// The last registry read failed.
    rediscover: bool,
}

impl ShardPumps {
    pub(crate) fn new(
        pool: Arc<Pool>,
        shard: Shard,
        opts: PumpOptions,
        owner: String,
        status: PumpStatus,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            leases: gauges::Leases::new(pool.name(), shard.name()),
            pool,
            shard,
            opts,
            live: vec![owner.clone()],
            owner,
            known: BTreeSet::new(),
            held: HashMap::new(),
            lags: Lags::default(),
            backlog: Backlog::default(),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            shutdown,
            status,
            subscribed: false,
            rediscover: false,
        }
    }

    /// The shard's lease loop and the supervisor of its bucket tasks, until
    /// `shutdown`. A bucket task that ends is handled here: fenced (its
    /// lease was lost, e.g. it expired during a Redis outage) makes this
    /// process drop the bucket and take the lease again at once if it still
    /// ranks first; a panic restarts the task. So every bucket whose lease
    /// this process holds has a running pump, whatever happened before.
    pub(crate) async fn run(mut self) {
        let shutdown = self.shutdown.clone();
        let mut announcements = announcements::start(
            self.shard.clone(),
            shutdown.clone(),
            std::time::Duration::ZERO,
        );
        let mut refresh = tokio::time::interval(self.opts.registry_refresh);
        let mut backlog = tokio::time::interval(self.opts.metrics_interval);
        backlog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lease = tokio::time::interval(self.opts.lease_ttl / 4);
        lease.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = refresh.tick() => {
                    self.discover().await;
                    self.lease_round().await;
                }
                _ = lease.tick() => {
                    if self.rediscover {
                        self.discover().await;
                    }
                    self.lease_round().await;
                }
                _ = backlog.tick() => self.backlog
                    .report(self.pool.name(), &self.shard, self.held.keys())
                    .await,
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

    async fn on_heard(&mut self, heard: Heard) {
        match heard {
            Heard::Due(tag) => {
                if self.announce(&tag) {
                    // A bucket we did not know: claim it now, not at the
                    // next round.
                    self.lease_round().await;
                }
            }
            Heard::Subscribed => {
                self.subscribed = true;
                self.resync().await;
            }
            Heard::MaybeLost => self.resync().await,
        }
    }

    /// Stops every bucket task, gives the leases back, and zeroes the
    /// backlog gauges this process reported (it no longer holds them).
    async fn stop_all(&mut self) {
        for held in self.held.values() {
            held.stop.cancel();
        }
        while self.tasks.join_next().await.is_some() {}
        self.release_all().await;
        self.backlog
            .report(self.pool.name(), &self.shard, self.held.keys())
            .await;
    }

    /// Announcements may have been missed (before the subscription, or
    /// while it reconnected): look for buckets that appeared meanwhile, and
    /// have every held bucket look at its timer again.
    async fn resync(&mut self) {
        self.discover().await;
        self.lease_round().await;
        self.wake_all();
    }

    /// A bucket task ended. Returns whether a lease round should run now.
    fn on_task_end(&mut self, done: Result<(TaskId, Ended), tokio::task::JoinError>) -> bool {
        let (id, ended) = match done {
            Ok((id, ended)) => (id, Ok(ended)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(bucket) = self.running.remove(&id) else {
            return false;
        };
        // A task that was stopped on purpose is no longer the bucket's.
        if self.held.get(&bucket).is_none_or(|h| h.task != id) {
            return false;
        }
        match ended {
            Ok(Ended::Stopped) => false,
            Ok(Ended::Fenced) => {
                self.held.remove(&bucket);
                self.lease_lost(&bucket, "the pump script found the lease gone");
                true
            }
            Err(e) => {
                tracing::error!(
                    shard = self.shard.name(),
                    ns = bucket.0,
                    bucket = bucket.1,
                    error = %e,
                    "bucket pump panicked; restarting it"
                );
                self.held.remove(&bucket);
                self.start(bucket);
                false
            }
        }
    }

    /// Counts and logs a lease this process held and lost without giving
    /// it up.
    fn lease_lost(&self, (ns, b): &Bucket, why: &str) {
        tracing::info!(
            shard = self.shard.name(),
            ns,
            bucket = b,
            why,
            "pump lease lost; the bucket is pumped again as soon as its lease is held"
        );
        metrics::counter!("sundial_pump_leases_lost_total", "pool" => self.pool.name().to_owned())
            .increment(1);
    }

    /// Reads the registry for buckets this shard holds.
    /// A failed read is tried again at the next lease round, not only at
    /// the next refresh: buckets announced while this process could not
    /// hear are found that way.
    async fn discover(&mut self) {
        match self.shard.namespaces().await {
            Ok(namespaces) => {
                self.rediscover = false;
                for ns in namespaces {
                    for b in self.my_buckets(&ns) {
                        self.known.insert((ns.clone(), b));
                    }
                }
            }
            Err(e) => {
                self.rediscover = true;
                tracing::warn!(shard = self.shard.name(), error = %e, "cannot read the namespace registry")
            }
        }
    }

    fn my_buckets(&self, ns: &str) -> Vec<u32> {
        self.pool
            .groups(ns)
            .iter()
            .filter(|(s, _)| s.name() == self.shard.name())
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }

    /// A script said bucket `tag` is due sooner: wake its task. Returns
    /// whether the bucket was unknown.
    fn announce(&mut self, tag: &str) -> bool {
        let Some((ns, b)) = keys::parse_bucket_tag(tag) else {
            return false;
        };
        if check_namespace(ns).is_err() || b >= self.pool.buckets() {
            return false;
        }
        let key = (ns.to_owned(), b);
        if let Some(h) = self.held.get(&key) {
            h.wake.notify_one();
            return false;
        }
        self.known.insert(key)
    }

    /// Whether this process ranks first for `bucket` among the live pumps.
    fn wants(&self, (ns, b): &Bucket) -> bool {
        let score = |owner: &str| xxh3_64(format!("{owner}/{ns}/{b}").as_bytes());
        self.live
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(self.owner.as_str()))
            .max_by_key(|o| (score(o), *o))
            == Some(self.owner.as_str())
    }

    /// One lease call: renew or take what this process wants, release what
    /// another live process should have; start and stop bucket tasks to match.
    async fn lease_round(&mut self) {
        let mut ops: Vec<(Bucket, LeaseOp)> = Vec::new();
        for b in &self.known {
            if self.wants(b) {
                ops.push((b.clone(), LeaseOp::Acquire));
            } else if self.held.contains_key(b) {
                ops.push((b.clone(), LeaseOp::Release));
            }
        }
        let args: Vec<(&str, u32, LeaseOp)> = ops
            .iter()
            .map(|((ns, b), op)| (ns.as_str(), *b, *op))
            .collect();
        let ttl = self.opts.lease_ttl.as_millis() as u64;
        let (flags, live) = match self.shard.leases(&self.owner, ttl, &args).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(shard = self.shard.name(), error = %e, "lease call failed; keeping what is held until it expires");
                self.status
                    .round(self.shard.name(), Err(e.to_string()), self.subscribed);
                return;
            }
        };
        self.live = live;
        for ((bucket, _), held) in ops.into_iter().zip(flags) {
            match (held, self.held.contains_key(&bucket)) {
                (true, false) => {
                    self.leases.acquired.increment(1);
                    self.start(bucket);
                }
                (false, true) => {
                    if let Some(h) = self.held.remove(&bucket) {
                        h.stop.cancel();
                    }
                    if self.wants(&bucket) {
                        // Wanted but not held: it passed to another process
                        // (this one was paused or cut off).
                        self.lease_lost(&bucket, "another process holds it");
                    }
                }
                _ => {}
            }
        }
        self.status
            .round(self.shard.name(), Ok(self.held.len()), self.subscribed);
        self.leases.set(self.held.len(), &self.lags);
    }

    fn start(&mut self, bucket: Bucket) {
        let wake = Arc::new(Notify::new());
        let stop = self.shutdown.child_token();
        let job = bucket::BucketPump {
            pool: self.pool.name().to_owned(),
            shard: self.shard.clone(),
            ns: bucket.0.clone(),
            bucket: bucket.1,
            owner: self.owner.clone(),
            wake: wake.clone(),
            opts: self.opts.clone(),
            lag: self.lags.clone(),
        };
        let task = self.tasks.spawn(bucket::run(job, stop.clone())).id();
        self.running.insert(task, bucket.clone());
        self.held.insert(bucket, Held { wake, stop, task });
    }

    /// Gives back every lease at once (shutdown), so others take over
    /// without waiting for expiry.
    async fn release_all(&mut self) {
        let buckets: Vec<(&str, u32)> =
            self.known.iter().map(|(ns, b)| (ns.as_str(), *b)).collect();
        match self.shard.drop_leases(&self.owner, &buckets).await {
            Ok(n) => tracing::info!(
                shard = self.shard.name(),
                released = n,
                "pump leases released"
            ),
            Err(e) => {
                tracing::warn!(shard = self.shard.name(), error = %e, "cannot release pump leases; they expire by themselves")
            }
        }
        self.held.clear();
    }

    fn wake_all(&self) {
        for h in self.held.values() {
            h.wake.notify_one();
        }
    }
}
