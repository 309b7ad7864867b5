//! What the pumps of one shard report: the backlog gauges
//! (`sundial_queue_jobs`) and each namespace's usage
//! (`sundial_namespace_jobs`, `sundial_namespace_bytes`) of the slots this
//! process holds (each slot has one holder, so summing a gauge over all
//! processes and shards gives the pool's true number), and the lease
//! metrics.

use std::collections::HashMap;

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
    /// Per namespace: its usage as last reported.
    usage: HashMap<String, Usage>,
}

impl Backlog {
    /// Sets the gauges from the counters of the `held` slots on `shard`
    /// (one pipelined read). Series of queues no longer held here, or now
    /// empty, drop to 0. On a Redis error nothing changes (the next round
    /// tries again).
    pub(crate) async fn report(&mut self, pool: &str, shard: &Shard, held: &[u32]) {
        let mut now: HashMap<(String, String), [u64; 4]> = HashMap::new();
        match shard.slots().counts(held).await {
            Ok(counts) => {
                for (qualified, c) in counts {
                    if let Some((ns, queue)) = sundial_core::keys::parse_qualified(&qualified) {
                        *now.entry((ns.to_owned(), queue.to_owned())).or_default() = c;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(shard = shard.name(), error = %e, "cannot read backlog counts");
                return;
            }
        }
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
                ("shard", shard.name().to_owned()),
                ("namespace", ns.clone()),
                ("queue", queue.clone()),
                ("state", STATES[i].to_owned()),
            ];
            let kind = sundial_core::series::Kind::Gauge;
            sundial_core::series::Handle::new("sundial_queue_jobs", &labels, kind).set(n as f64);
        }
        self.reported = now;
        self.report_usage(pool, shard, held).await;
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
