//! What the pumps of one shard report: the backlog gauges
//! (`sundial_queue_jobs`) and each namespace's usage
//! (`sundial_namespace_jobs`, `sundial_namespace_bytes`) of the slots this
//! process holds (each slot has one holder, so summing a gauge over all
//! processes and shards gives the pool's true number), and the lease
//! metrics.

use std::collections::{BTreeMap, HashMap, HashSet};

use metrics::{Counter, Gauge};
use sundial_core::{Shard, Usage};

use crate::slot::Lags;

/// The lease metrics of one shard, made once.
#[derive(Debug)]
pub(crate) struct Leases {
    pub(crate) acquired: Counter,
    held: Gauge,
    lag: Gauge,
}

impl Leases {
    pub(crate) fn new(pool: &str, shard: &str) -> Self {
        let labels = [("pool", pool.to_owned()), ("shard", shard.to_owned())];
        // At 0 from the start, so that an alert on its increase sees the
        // first lease lost.
        metrics::counter!("sundial_pump_leases_lost_total", &labels[..1]).increment(0);
        Self {
            acquired: metrics::counter!("sundial_pump_leases_acquired_total", &labels[..1]),
            held: metrics::gauge!("sundial_pump_leases_held", &labels),
            lag: metrics::gauge!("sundial_pump_lag_seconds", &labels),
        }
    }

    /// `sundial_pump_leases_held`, and `sundial_pump_lag_seconds`: the
    /// worst lag among the held slots.
    pub(crate) fn set(&self, held: usize, lags: &Lags) {
        self.held.set(held as f64);
        let worst = lags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .copied()
            .max()
            .unwrap_or(0);
        self.lag.set(worst as f64 / 1000.0);
    }
}

/// The series this process reported last time, per (namespace, queue):
/// [delayed, ready, reserved, dead].
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    reported: HashMap<(String, String), [u64; 4]>,
    /// The queues whose oldest-ready gauge was above 0 last time.
    aged: HashSet<(String, String)>,
    /// Per namespace: its usage as last reported.
    usage: HashMap<String, Usage>,
}

/// A backlog read of the held slots: counts per (namespace, queue), and
/// each slot's queues that have ready jobs there.
type Read = (HashMap<(String, String), [u64; 4]>, Vec<(u32, Vec<String>)>);

impl Backlog {
    /// Sets the gauges from the counters of the `held` slots on `shard`
    /// (one pipelined read), and the age of each queue's next ready job
    /// (one read-only script call per slot with ready jobs). Series of
    /// queues no longer held here, or now empty, drop to 0. On a Redis
    /// error nothing changes (the next round tries again).
    pub(crate) async fn report(&mut self, pool: &str, shard: &Shard, held: &[u32]) {
        let Some((now, lists)) = read(shard, held).await else {
            return;
        };
        self.report_counts(pool, shard.name(), now);
        match shard.slots().ready_ages(&lists).await {
            Ok(ages) => self.report_ages(pool, shard.name(), ages),
            Err(e) => tracing::warn!(shard = shard.name(), error = %e, "cannot read ready ages"),
        }
        self.report_usage(pool, shard, held).await;
    }

    fn report_counts(&mut self, pool: &str, shard: &str, now: HashMap<(String, String), [u64; 4]>) {
        // A series is set while its count is above 0, and once more at 0
        // when it drops there; a queue state that never held a job here has
        // no series (with thousands of tenants, most states are 0).
        let zero = [0; 4];
        let mut set: Vec<(&(String, String), usize, u64)> = Vec::new();
        for (key, before) in &self.reported {
            let c = now.get(key).unwrap_or(&zero);
            for i in 0..4 {
                if before[i] > 0 && c[i] == 0 {
                    set.push((key, i, 0));
                }
            }
        }
        for (key, c) in &now {
            for (i, n) in c.iter().enumerate() {
                if *n > 0 {
                    set.push((key, i, *n));
                }
            }
        }
        const STATES: [&str; 4] = ["delayed", "ready", "reserved", "dead"];
        for ((ns, queue), i, n) in set {
            let labels = [
                ("pool", pool.to_owned()),
                ("shard", shard.to_owned()),
                ("namespace", ns.clone()),
                ("queue", queue.clone()),
                ("state", STATES[i].to_owned()),
            ];
            let kind = sundial_core::series::Kind::Gauge;
            sundial_core::series::Handle::new("sundial_queue_jobs", &labels, kind).set(n as f64);
        }
        self.reported = now;
    }

    /// `sundial_queue_oldest_ready_seconds`, as the counts: a series while
    /// the queue has a ready job here, and once more at 0.
    fn report_ages(&mut self, pool: &str, shard: &str, ages: BTreeMap<String, u64>) {
        let mut aged = HashSet::new();
        let mut set: Vec<((String, String), f64)> = Vec::new();
        for (qualified, ms) in ages {
            if let Some((ns, queue)) = sundial_core::keys::parse_qualified(&qualified) {
                let key = (ns.to_owned(), queue.to_owned());
                aged.insert(key.clone());
                set.push((key, ms as f64 / 1000.0));
            }
        }
        for gone in self.aged.difference(&aged) {
            set.push((gone.clone(), 0.0));
        }
        for ((ns, queue), seconds) in set {
            let labels = [
                ("pool", pool.to_owned()),
                ("shard", shard.to_owned()),
                ("namespace", ns),
                ("queue", queue),
            ];
            let kind = sundial_core::series::Kind::Gauge;
            sundial_core::series::Handle::new("sundial_queue_oldest_ready_seconds", &labels, kind)
                .set(seconds);
        }
        self.aged = aged;
    }

    /// Sets each namespace's usage gauges from the usage hashes of the
    /// `held` slots, as [`Self::report`] sets the backlog: a series while
    /// its namespace holds jobs here, and once more at 0.
    async fn report_usage(&mut self, pool: &str, shard: &Shard, held: &[u32]) {
        let now: HashMap<String, Usage> = match shard.slots().usage(held).await {
            Ok(u) => u.into_iter().collect(),
            Err(e) => {
                tracing::warn!(shard = shard.name(), error = %e, "cannot read namespace usage");
                return;
            }
        };
        let gone = self.usage.keys().filter(|ns| !now.contains_key(*ns));
        let zero = Usage::default();
        let all = gone.map(|ns| (ns, &zero)).chain(now.iter());
        for (ns, u) in all {
            let labels = [
                ("pool", pool.to_owned()),
                ("shard", shard.name().to_owned()),
                ("namespace", ns.clone()),
            ];
            metrics::gauge!("sundial_namespace_jobs", &labels).set(u.jobs as f64);
            metrics::gauge!("sundial_namespace_bytes", &labels).set(u.bytes as f64);
        }
        self.usage = now;
    }
}

/// The counters of the `held` slots on `shard`, per queue and per slot;
/// `None` (logged) on a Redis error.
async fn read(shard: &Shard, held: &[u32]) -> Option<Read> {
    let backlog = match shard.slots().backlog(held).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(shard = shard.name(), error = %e, "cannot read backlog counts");
            return None;
        }
    };
    let now = backlog
        .counts
        .into_iter()
        .filter_map(|(qualified, c)| {
            let (ns, queue) = sundial_core::keys::parse_qualified(&qualified)?;
            Some(((ns.to_owned(), queue.to_owned()), c))
        })
        .collect();
    Some((now, backlog.ready))
}
