//! What the pumps of one shard report: the backlog gauges
//! (`sundial_queue_jobs`) of the buckets this process holds (each bucket
//! has one holder, so summing a gauge over all processes and shards gives
//! the pool's true number), and the lease metrics.

use std::collections::HashMap;

use metrics::{Counter, Gauge};
use sundial_core::Shard;

use crate::bucket::{Bucket, Lags};

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
    /// worst lag among the held buckets.
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
}

impl Backlog {
    /// Sets the gauges from the counters of `held` on `shard`. Series of
    /// queues no longer held here drop to 0. On a Redis error nothing
    /// changes (the next round tries again).
    pub(crate) async fn report<'a>(
        &mut self,
        pool: &str,
        shard: &Shard,
        held: impl Iterator<Item = &'a Bucket>,
    ) {
        let mut per_ns: HashMap<&str, Vec<u32>> = HashMap::new();
        for (ns, b) in held {
            per_ns.entry(ns.as_str()).or_default().push(*b);
        }
        let mut now: HashMap<(String, String), [u64; 4]> = HashMap::new();
        for (ns, buckets) in per_ns {
            match shard.queue_counts(ns, &buckets).await {
                Ok(counts) => {
                    for (queue, c) in counts {
                        now.insert((ns.to_owned(), queue), c);
                    }
                }
                Err(e) => {
                    tracing::warn!(shard = shard.name(), ns, error = %e, "cannot read backlog counts");
                    return;
                }
            }
        }
        for key in self.reported.keys() {
            now.entry(key.clone()).or_insert([0; 4]);
        }
        for ((ns, queue), c) in &now {
            for (state, n) in ["delayed", "ready", "reserved", "dead"].iter().zip(c) {
                metrics::gauge!(
                    "sundial_queue_jobs",
                    "pool" => pool.to_owned(),
                    "shard" => shard.name().to_owned(),
                    "namespace" => ns.clone(),
                    "queue" => queue.clone(),
                    "state" => *state
                )
                .set(*n as f64);
            }
        }
        self.reported = now;
    }
}
