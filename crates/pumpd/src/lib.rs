//! Pumps: the timer loops that move due jobs of every bucket.
//!
//! For each shard of each pool, [`run`] keeps one task per (namespace,
//! bucket) held by that shard. A bucket's task calls the pump script, then
//! sleeps until the bucket's next deadline (as the script reports it, on the
//! shard's clock). It wakes early when a script announces on
//! [`sundial_core::keys::TIMER_CHANNEL`] that the bucket became due sooner,
//! so a job is moved within milliseconds of its due time and an idle bucket
//! costs one call per [`PumpOptions::idle_check`].
//!
//! Which buckets exist comes from the shard's registry of namespaces (kept
//! by publish), read every [`PumpOptions::registry_refresh`], and from timer
//! announcements for buckets not yet known.
//!
//! Any number of processes may run pumps: each bucket is pumped by one at a
//! time, the holder of its lease (see `supervisor.rs` for the scheme). The pump
//! script itself checks the lease, so a process that lost one moves nothing.
//! On shutdown a process releases its leases at once.

mod announcements;
mod backlog;
mod bucket;
mod status;
mod supervisor;

use std::{sync::Arc, time::Duration};

use sundial_router::LiveTopology;
use tokio_util::sync::CancellationToken;

pub use status::{PumpStatus, ShardStatus};

/// How the pumps behave.
#[derive(Debug, Clone)]
pub struct PumpOptions {
    /// Timer entries one pump call handles at most.
    pub batch: u32,
    /// How long an idle bucket sleeps before it checks again anyway.
    pub idle_check: Duration,
    /// How often the namespace registry is read for new buckets.
    pub registry_refresh: Duration,
    /// How long to wait after a failed pump call.
    pub retry_after: Duration,
    /// How long a bucket lease lasts unless renewed (renewed every quarter
    /// of it); a dead process's buckets are taken over about this long after
    /// its last renewal.
    pub lease_ttl: Duration,
    /// How often the backlog gauges of the held buckets are refreshed.
    pub metrics_interval: Duration,
}

impl Default for PumpOptions {
    fn default() -> Self {
        Self {
            batch: 500,
            idle_check: Duration::from_secs(30),
            registry_refresh: Duration::from_secs(5),
            retry_after: Duration::from_millis(500),
            lease_ttl: Duration::from_secs(3),
            metrics_interval: Duration::from_secs(5),
        }
    }
}

/// Pumps every bucket of every pool of the live topology until
/// `shutdown` is cancelled. When the topology is swapped (a reload), the
/// pumps of the old one stop and those of the new one start: each pump call
/// is atomic, so the handover needs no coordination. A shard's loop that
/// ends before then (it can only panic) is started again. `status` is kept
/// up to date for health checks.
pub async fn run(
    live: Arc<LiveTopology>,
    opts: PumpOptions,
    status: PumpStatus,
    shutdown: CancellationToken,
) {
    let mut changes = live.changes();
    // One identity per process, kept across topology changes so that its
    // leases stay its own.
    let owner = format!("pump-{}", ulid::Ulid::new());
    tracing::info!(owner, "pumps running");
    loop {
        changes.mark_unchanged();
        let generation = shutdown.child_token();
        let topology = live.topology();
        let mut tasks = tokio::task::JoinSet::new();
        let mut shards = std::collections::HashMap::new();
        status.reset(topology.pools().flat_map(|p| {
            p.shards()
                .map(|s| (p.name().to_owned(), s.name().to_owned()))
        }));
        let spawn = |tasks: &mut tokio::task::JoinSet<()>,
                     pool: &Arc<sundial_router::Pool>,
                     shard: &sundial_core::Shard| {
            let pumps = supervisor::ShardPumps::new(
                pool.clone(),
                shard.clone(),
                opts.clone(),
                owner.clone(),
                status.clone(),
                generation.clone(),
            );
            tasks.spawn(pumps.run()).id()
        };
        for pool in topology.pools() {
            for shard in pool.shards() {
                let id = spawn(&mut tasks, pool, shard);
                shards.insert(id, (pool.clone(), shard.clone()));
            }
        }
        drop(topology);
        let more = loop {
            tokio::select! {
                r = changes.changed() => break r.is_ok(),
                () = shutdown.cancelled() => break false,
                Some(ended) = tasks.join_next_with_id() => {
                    let id = match &ended {
                        Ok((id, ())) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some((pool, shard)) = shards.remove(&id) {
                        tracing::error!(shard = shard.name(), error = ?ended.err(), "a shard's pump loop ended; starting it again");
                        let id = spawn(&mut tasks, &pool, &shard);
                        shards.insert(id, (pool, shard));
                    }
                }
            }
        };
        generation.cancel();
        while tasks.join_next().await.is_some() {}
        if !more {
            return;
        }
        tracing::info!("topology changed; pumps restarted on it");
    }
}
