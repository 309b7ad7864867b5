//! Draining of moved slots: progress, and retiring a layout once drained.
//!
//! When a pool's shards change, slots whose shard changed keep their jobs
//! at the old shard until those are consumed, acknowledged, expire or are
//! deleted, or the mover carries them; meanwhile reads and pumps cover both
//! shards ([`crate::placement`]). The drain loop ([`run`]), at each round:
//!
//! - announces in every shard this gateway's view ([`crate::announce`]):
//!   the layouts it may write to and knows, and the namespace moves it knows;
//! - points each pool's writes at a layout every live gateway knows
//!   ([`crate::writes`]);
//! - reports, per draining layout, how many moved slots still hold jobs and
//!   how many jobs ([`report`]: `GET /drains`, gauges `sundial_drain_*`);
//! - retires a draining layout (removes it from the shards' pins, then
//!   reloads) once no live gateway may write to it, its moved slots are
//!   empty and no mover works on them (a mover clears a slot's keys at its
//!   old shard, then gives up its lease), checked in that order so a late
//!   write cannot slip in between. Other processes notice the pins changed
//!   and reload too.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use serde::Serialize;
use sundial_core::{EngineError, Shard};
use tokio_util::sync::CancellationToken;

use crate::{
    Layout, LiveTopology, Pins, Pool, admin::AdminStore, announce::Announcer, mover::MoverStatus,
    placement, reload::Reloader, view, writes,
};

/// One earlier layout whose moved slots still drain.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = LayoutDrain)]
pub struct LayoutReport {
    pub layout: Layout,
    /// Slots this layout placed elsewhere than the current one.
    pub slots_moved: u64,
    /// Moved slots whose old shard still holds jobs.
    pub slots_pending: u64,
    /// Jobs still at the old shards of moved slots, with the jobs in
    /// transit at those slots' other places (any of which may be bound to
    /// an old shard).
    pub jobs_left: u64,
    /// Moved slots a mover works on (it holds their lease at the old shard
    /// until it has cleared them); the layout is retired once this,
    /// `jobs_left` and `writers` are 0.
    pub slots_moving: u64,
    /// Live gateways that may still write to this layout.
    pub writers: u64,
}

/// A pool's layouts: the current one, the one written to, and those that
/// drain.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = PoolDrains)]
pub struct PoolReport {
    pub pool: String,
    pub current: Layout,
    /// The layout this gateway writes to: `current`, unless writes are
    /// held on an earlier layout (still draining) until every live gateway
    /// announces that it knows `current` (a gateway whose config is behind
    /// then still finds every job where it looks).
    pub writes: Layout,
    pub draining: Vec<LayoutReport>,
    pub mover: MoverStatus,
}

/// The drain progress of one pool, with what this gateway's mover does
/// there (`mover`). Views are read before jobs are counted.
pub async fn report(pool: &Pool, mover: MoverStatus) -> Result<PoolReport, EngineError> {
    let mut writers: Vec<Layout> = Vec::new();
    for shard in pool.shards() {
        // A view entry that does not parse names no layout of ours.
        for v in view::read(shard).await? {
            writers.extend(v.writes().cloned());
        }
    }
    let moved = pool.moved();
    let mut draining = Vec::new();
    for layout in pool.draining() {
        let mut per_shard: BTreeMap<&str, (&Shard, Vec<u32>)> = BTreeMap::new();
        for (shard, slot, _) in moved.iter().filter(|(_, _, l)| *l == layout) {
            per_shard
                .entry(shard.name())
                .or_insert((shard, Vec::new()))
                .1
                .push(*slot);
        }
        let mut r = LayoutReport {
            layout: layout.clone(),
            slots_moved: per_shard.values().map(|(_, s)| s.len() as u64).sum(),
            slots_pending: 0,
            jobs_left: in_transit_elsewhere(pool, &per_shard).await?,
            slots_moving: 0,
            writers: writers.iter().filter(|w| *w == layout).count() as u64,
        };
        for (shard, slots) in per_shard.into_values() {
            for n in shard.slots().jobs(&slots).await? {
                r.slots_pending += u64::from(n > 0);
                r.jobs_left += n;
            }
            r.slots_moving += shard
                .slots()
                .movers(&slots)
                .await?
                .into_iter()
                .filter(|held| *held)
                .count() as u64;
        }
        draining.push(r);
    }
    Ok(PoolReport {
        pool: pool.name().to_owned(),
        current: pool.layout().clone(),
        writes: pool.write_layout().clone(),
        draining,
        mover,
    })
}

/// The jobs in transit at the other places of moved slots (where they are
/// now, and other old shards): taken out by a move that a mover left
/// half-done, they may be bound to an old shard, and count as its own.
/// Read before the old shards: a sweep copies them to the old shard
/// before it lets them go, so each job is seen in one place or the other.
async fn in_transit_elsewhere(
    pool: &Pool,
    moved: &BTreeMap<&str, (&Shard, Vec<u32>)>,
) -> Result<u64, EngineError> {
    let mut elsewhere: BTreeMap<&str, (&Shard, BTreeSet<u32>)> = BTreeMap::new();
    for (old, slots) in moved.values() {
        for &slot in slots {
            for place in placement::other_places(pool, slot, old) {
                elsewhere
                    .entry(place.name())
                    .or_insert((place, BTreeSet::new()))
                    .1
                    .insert(slot);
            }
        }
    }
    let mut left = 0;
    for (place, slots) in elsewhere.into_values() {
        let slots: Vec<u32> = slots.into_iter().collect();
        left += place.slots().transit(&slots).await?.iter().sum::<u64>();
    }
    Ok(left)
}

/// Removes a drained layout from every shard's pins.
async fn retire(pool: &Pool, layout: &Layout) -> Result<(), EngineError> {
    for shard in pool.shards() {
        let Pins {
            current,
            mut draining,
        } = Pins::read(shard).await?;
        draining.retain(|l| l != layout);
        let current = current
            .filter(|r| r != layout)
            .unwrap_or_else(|| pool.layout().clone());
        Pins::write(shard, &current, &draining).await?;
    }
    Ok(())
}

/// Announces views, chooses where writes go and retires drained layouts
/// every `every`, and at once after a reload (the others may be holding
/// their writes for what this gateway now knows), until `shutdown`; then
/// withdraws this gateway's views. `mover`: what this gateway's mover
/// reports per pool.
pub async fn run(
    live: Arc<LiveTopology>,
    reloader: Arc<Reloader>,
    admin: Arc<AdminStore>,
    mover: crate::mover::Status,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut announcer = Announcer::new(every);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut changes = live.changes();
    // The shards this gateway announced in: one that leaves the topology
    // gets its view withdrawn, so that it can be wiped at once.
    let mut announced: Vec<Shard> = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Ok(()) = changes.changed() => {}
            () = shutdown.cancelled() => break,
        }
        let topology = live.topology();
        let mut retired = false;
        // A move is announced only by a gateway whose config has both of
        // its pools: one that lacks either holds it at `announced` (its
        // view in the pool it has names no such move).
        let mut homes = admin.homes().all();
        homes
            .retain(|(_, _, h)| topology.pool(&h.from).is_some() && topology.pool(&h.to).is_some());
        for pool in topology.pools() {
            announcer.announce(pool, &homes).await;
            if let Err(e) = writes::choose(pool, Some(&view::INSTANCE)).await {
                tracing::warn!(pool = pool.name(), error = %e, "cannot read the gateways' views; writes stay where they go");
            }
            retired |= retire_drained(pool, mover.of(pool.name())).await;
        }
        // After announcing in the shards it has: a shard that is still a
        // member under a new connection (its weight or timeout changed)
        // keeps the view just renewed.
        for gone in announced
            .iter()
            .filter(|s| !topology.shards().any(|t| t.name() == s.name()))
        {
            if let Err(e) = view::withdraw(gone).await {
                tracing::warn!(shard = gone.name(), error = %e, "cannot withdraw this gateway's view from a shard it left; it expires by itself");
            }
        }
        announced = topology.shards().cloned().collect();
        drop(topology);
        if retired {
            let _ = reloader.reload("a drain completed").await;
        }
    }
    for shard in live.topology().shards() {
        let _ = view::withdraw(shard).await;
    }
}

/// Measures `pool`'s drains (gauges) and retires every layout that no live
/// gateway writes to and whose moved slots are empty. Returns whether it
/// retired one.
async fn retire_drained(pool: &Pool, mover: MoverStatus) -> bool {
    if pool.draining().next().is_none() {
        gauges(pool.name(), 0, 0);
        return false;
    }
    let r = match report(pool, mover).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(pool = pool.name(), error = %e, "cannot measure a drain");
            return false;
        }
    };
    gauges(
        pool.name(),
        r.draining.iter().map(|l| l.slots_pending).sum(),
        r.draining.iter().map(|l| l.jobs_left).sum(),
    );
    let mut retired = false;
    for l in r
        .draining
        .iter()
        .filter(|l| l.writers == 0 && l.jobs_left == 0 && l.slots_moving == 0)
    {
        match retire(pool, &l.layout).await {
            Ok(()) => {
                tracing::info!(pool = pool.name(), layout = %l.layout, "layout drained and retired");
                retired = true;
            }
            Err(e) => {
                tracing::warn!(pool = pool.name(), error = %e, "cannot retire a drained layout")
            }
        }
    }
    retired
}

fn gauges(pool: &str, slots: u64, jobs: u64) {
    metrics::gauge!("sundial_drain_slots_pending", "pool" => pool.to_owned()).set(slots as f64);
    metrics::gauge!("sundial_drain_jobs_left", "pool" => pool.to_owned()).set(jobs as f64);
}
