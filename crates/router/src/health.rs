//! Shard health, as this process sees it: every shard of the topology is
//! probed every [`EVERY`] (all at once, each bounded by its command
//! timeout, so a hung shard holds up none of the others), and the outcome
//! is kept for `/ready` and set in `sundial_shard_up` (and, for a cluster
//! shard, `sundial_shard_primaries_down`).
//!
//! Health feeds reports, never routing: a request that needs a shard that is
//! down fails on its own with a 503, and the others go on.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::{LiveTopology, Pins, Pool};
use serde::Serialize;
use sundial_core::Probe;
use tokio_util::sync::CancellationToken;

/// How often every shard is checked.
pub const EVERY: Duration = Duration::from_secs(1);

/// This gateway's last probe of a shard.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ShardHealth {
    pub pool: String,
    /// Whether the shard answers; a Redis Cluster shard answers while one
    /// of its primaries does.
    pub up: bool,
    /// How long it has been up (or down), in ms.
    pub for_ms: u64,
    /// The round trip of the last probe that succeeded, in ms.
    #[schema(required = true)]
    pub ping_ms: Option<f64>,
    /// Why the last check failed.
    #[schema(required = true)]
    pub error: Option<String>,
    /// The addresses of a Redis Cluster shard's primaries that did not
    /// answer the last probe: their hash slots fail while the others
    /// serve. Empty on other shards.
    pub primaries_down: Vec<String>,
}

#[derive(Debug, Clone)]
struct Entry {
    pool: String,
    up: bool,
    since: Instant,
    ping: Option<Duration>,
    error: Option<String>,
    primaries_down: Vec<String>,
}

/// The last check of every shard, by shard name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Health {
    shards: Arc<Mutex<BTreeMap<String, Entry>>>,
}

impl Health {
    /// Every shard's last check; a shard not checked yet reads as down.
    pub fn shards(&self) -> BTreeMap<String, ShardHealth> {
        self.lock()
            .iter()
            .map(|(name, e)| {
                let h = ShardHealth {
                    pool: e.pool.clone(),
                    up: e.up,
                    for_ms: e.since.elapsed().as_millis() as u64,
                    ping_ms: e.ping.map(|d| d.as_secs_f64() * 1000.0),
                    error: e.error.clone(),
                    primaries_down: e.primaries_down.clone(),
                };
                (name.clone(), h)
            })
            .collect()
    }

    fn record(&self, pool: &str, shard: &str, result: Result<Probe, String>) {
        let up = result.is_ok();
        let labels = [("pool", pool.to_owned()), ("shard", shard.to_owned())];
        metrics::gauge!("sundial_shard_up", &labels).set(if up { 1.0 } else { 0.0 });
        let (ping, error, down) = match result {
            Ok(p) => (Some(p.took), None, p.primaries_down),
            Err(e) => (None, Some(e), Vec::new()),
        };
        metrics::gauge!("sundial_shard_primaries_down", &labels).set(down.len() as f64);
        let mut map = self.lock();
        let before = map.get(shard);
        let changed = before.is_none_or(|e| e.up != up);
        if changed {
            if up {
                tracing::info!(pool, shard, "shard is up");
            } else {
                tracing::warn!(
                    pool,
                    shard,
                    error = error.as_deref().unwrap_or_default(),
                    "shard is down"
                );
            }
        }
        let was_down = before.map_or(&[][..], |e| &e.primaries_down[..]);
        if was_down != down.as_slice() {
            if down.is_empty() {
                tracing::info!(pool, shard, "every cluster primary answers");
            } else {
                tracing::warn!(pool, shard, primaries = ?down, "cluster primaries down: their hash slots fail, the others serve");
            }
        }
        let since = match before {
            Some(e) if !changed => e.since,
            _ => Instant::now(),
        };
        map.insert(
            shard.to_owned(),
            Entry {
                pool: pool.to_owned(),
                up,
                since,
                ping,
                error,
                primaries_down: down,
            },
        );
    }

    /// Forgets shards that left the topology.
    fn retain(&self, names: &[String]) {
        self.lock().retain(|k, _| names.contains(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Checks every shard of the current topology every [`EVERY`] until
/// `shutdown`.
pub async fn run(live: Arc<LiveTopology>, health: Health, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let shards: Vec<(Arc<Pool>, sundial_core::Shard)> = {
            let topology = live.topology();
            topology
                .pools()
                .flat_map(|p| p.shards().map(|s| (p.clone(), s.clone())))
                .collect()
        };
        let checks = shards.iter().map(|(pool, shard)| async {
            data_lost(pool, shard).increment(0);
            let result = match shard.probe().await {
                Ok(probe) => {
                    if !probe.has_metadata {
                        found_empty(pool, shard).await;
                    }
                    Ok(probe)
                }
                Err(e) => Err(e.to_string()),
            };
            health.record(pool.name(), shard.name(), result);
        });
        futures::future::join_all(checks).await;
        let names: Vec<String> = shards.iter().map(|(_, s)| s.name().to_owned()).collect();
        health.retain(&names);
    }
}

/// `sundial_shard_data_lost_total` of a shard. Every health round adds 0
/// to it, so that its series is there at 0 before a loss: an alert on its
/// increase then sees a process's first loss.
fn data_lost(pool: &Pool, shard: &sundial_core::Shard) -> metrics::Counter {
    metrics::counter!(
        "sundial_shard_data_lost_total",
        "pool" => pool.name().to_owned(),
        "shard" => shard.name().to_owned()
    )
}

/// A shard in use always holds `sd:meta` (its pinned slot and lane counts and
/// layouts). One that answers without it lost its data: says so, and pins
/// the pool's slot and lane counts and layouts again so that it goes on serving.
async fn found_empty(pool: &Pool, shard: &sundial_core::Shard) {
    tracing::error!(
        pool = pool.name(),
        shard = shard.name(),
        "shard answers without Sundial's metadata: it was restarted without its data \
         (no AOF or RDB) or flushed, and the jobs it held are lost; pinning the pool \
         layout again and serving on"
    );
    data_lost(pool, shard).increment(1);
    let draining: Vec<_> = pool.draining().cloned().collect();
    let pinned = async {
        shard.check(pool.slots(), pool.lanes()).await?;
        Pins::write(shard, pool.layout(), &draining).await
    };
    if let Err(e) = pinned.await {
        tracing::warn!(shard = shard.name(), error = %e, "cannot pin the layout again; retrying");
    }
}
