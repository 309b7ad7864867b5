//! Draining of moved slots: progress, and retiring a layout once drained.
//!
//! When a pool's shards change, slots whose shard changed keep their jobs
//! at the old shard until those are consumed, acknowledged, expire or are
//! deleted; meanwhile reads and pumps cover both shards (see the router's
//! `Pool::locations`). This module
//!
//! - reports, per draining layout, how many moved slots still hold jobs and
//!   how many jobs (`GET /drains`, gauges `sundial_drain_*`);
//! - announces in every shard which layouts this gateway may write to (the
//!   one it writes to, its current one, and for [`WRITE_GRACE`] after a
//!   change the one it wrote to before: a publish re-reads the topology
//!   after its body, so its write lands within a command timeout of
//!   choosing its layout), and which layouts it knows (reads);
//! - holds writes on a layout every live gateway knows ([`settle_writes`]):
//!   after a reload to a new layout, writes stay where they went until every
//!   other live gateway announces that it knows the new layout too, so a
//!   gateway whose config is behind still finds every job (by id, for a
//!   peek or an ack) where it looks;
//! - retires a draining layout (removes it from the shards' pins, then
//!   reloads) once no live gateway may write to it, its moved slots are
//!   empty and no mover works on them (a mover clears a slot's keys at its
//!   old shard, then gives up its lease), checked in that order so a late
//!   write cannot slip in between.
//!   Other processes notice the pins changed and reload too.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;
use sundial_core::{EngineError, Shard};
use tokio_util::sync::CancellationToken;

use crate::{Layout, LiveTopology, Pins, Pool, reload::Reloader};

/// How long after a reload a gateway still counts as a writer of its
/// previous layout.
pub const WRITE_GRACE: Duration = Duration::from_secs(10);
/// How long an announced view lives unless renewed: this, or three rounds
/// of announcements if that is longer.
const VIEW_TTL: Duration = Duration::from_secs(20);

/// This process's name in the views: one per process, so that a topology
/// built on a reload can leave this gateway's own (older) view out.
pub static INSTANCE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| ulid::Ulid::new().to_string());
/// What marks a view entry as a layout the gateway knows (reads), rather
/// than one it may write to. Layout names never hold a space, and earlier
/// versions read such an entry as a layout no pool has.
pub(crate) const KNOWS: &str = "knows ";
/// What marks a view entry as a namespace's move this gateway knows
/// (`home <pool>/<ns> <to> <state>`, see [`crate::homes`]).
pub(crate) const HOME: &str = "home ";

#[derive(Debug, Clone, Serialize)]
pub struct LayoutReport {
    pub layout: Layout,
    /// Slots that this layout placed elsewhere than the current one.
    pub slots_moved: u64,
    /// Moved slots whose old shard still holds jobs.
    pub slots_pending: u64,
    /// Jobs still at the old shards of moved slots, with the jobs in
    /// transit at those slots' other places (any of which may be bound to
    /// an old shard).
    pub jobs_left: u64,
    /// Moved slots a mover works on (it holds their lease: it has not
    /// cleared them yet).
    pub slots_moving: u64,
    /// Live gateways that may still write to this layout.
    pub writers: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PoolReport {
    pub pool: String,
    pub current: Layout,
    /// The layout this gateway writes to: `current`, unless writes are held
    /// on an earlier one until every gateway knows the current one.
    pub writes: Layout,
    pub draining: Vec<LayoutReport>,
    /// What this gateway's mover does in the pool.
    pub mover: crate::mover::MoverStatus,
}

/// The drain progress of one pool. Views are read before jobs are counted.
pub async fn report(pool: &Pool) -> Result<PoolReport, EngineError> {
    let mut writers = Vec::new();
    for shard in pool.shards() {
        // A view that does not parse names no layout of ours.
        writers.extend(
            shard
                .layouts()
                .live_views()
                .await?
                .iter()
                .filter(|v| !v.starts_with(KNOWS))
                .filter_map(|v| v.parse::<Layout>().ok()),
        );
    }
    let moved = pool.moved();
    let mut draining = Vec::new();
    for layout in pool.draining() {
        let (mut moved_here, mut pending, mut left, mut moving) = (0, 0, 0, 0);
        let mut per_shard: BTreeMap<&str, (&Shard, Vec<u32>)> = BTreeMap::new();
        for (shard, slot, _) in moved.iter().filter(|(_, _, l)| *l == layout) {
            moved_here += 1;
            per_shard
                .entry(shard.name())
                .or_insert((shard, Vec::new()))
                .1
                .push(*slot);
        }
        // The moved slots' other places (where they are now, and other
        // old shards): jobs in transit there, taken out by a move that a
        // mover left half-done, may be bound to this layout's shard, and
        // count as its own. Read first: a sweep copies them to the old
        // shard before it lets them go, so each job is seen in one place
        // or the other.
        let mut elsewhere: BTreeMap<&str, (&Shard, BTreeSet<u32>)> = BTreeMap::new();
        for (old, slots) in per_shard.values() {
            for &slot in slots {
                for place in pool.locations(slot).into_iter().filter(|s| !s.same(old)) {
                    elsewhere
                        .entry(place.name())
                        .or_insert((place, BTreeSet::new()))
                        .1
                        .insert(slot);
                }
            }
        }
        for (place, slots) in elsewhere.into_values() {
            let slots: Vec<u32> = slots.into_iter().collect();
            left += place.slots().transit(&slots).await?.iter().sum::<u64>();
        }
        for (shard, slots) in per_shard.into_values() {
            for n in shard.slots().jobs(&slots).await? {
                pending += u64::from(n > 0);
                left += n;
            }
            moving += shard
                .slots()
                .movers(&slots)
                .await?
                .into_iter()
                .filter(|held| *held)
                .count() as u64;
        }
        draining.push(LayoutReport {
            layout: layout.clone(),
            slots_moved: moved_here,
            slots_pending: pending,
            jobs_left: left,
            slots_moving: moving,
            writers: writers.iter().filter(|w| *w == layout).count() as u64,
        });
    }
    Ok(PoolReport {
        pool: pool.name().to_owned(),
        current: pool.layout().clone(),
        writes: pool.write_layout().clone(),
        draining,
        mover: crate::mover::status(pool.name()),
    })
}

/// Points `pool`'s writes at a layout every other live gateway knows, by
/// the views announced in the pool's shards (`me`: this gateway's own
/// view, left out: it knows all of the pool's layouts), in this order: the
/// current layout; else the layout written to now; else, among those all
/// know, the one the most other gateways write to (their views keep it
/// from being retired). A view of an earlier version lists no known
/// layouts; the layouts it may write to stand for them. The shards that
/// answer are enough (every gateway announces in each of the pool's).
pub async fn settle_writes(pool: &Pool, me: Option<&str>) -> Result<(), EngineError> {
    if pool.draining().next().is_none() {
        pool.set_write_layout(pool.layout());
        return Ok(());
    }
    let mut views: HashMap<String, Vec<String>> = HashMap::new();
    let mut failed = None;
    let mut answered = false;
    for shard in pool.shards() {
        match shard.layouts().live_view_sets().await {
            Ok(sets) => {
                answered = true;
                for (instance, entries) in sets {
                    if Some(instance.as_str()) != me {
                        views.entry(instance).or_default().extend(entries);
                    }
                }
            }
            Err(e) => failed = Some(e),
        }
    }
    if !answered && let Some(e) = failed {
        return Err(e);
    }
    let known: Vec<Vec<Layout>> = views.values().map(|v| known_by(v)).collect();
    let all_know = |l: &Layout| known.iter().all(|k| k.contains(l));
    let (current, writes) = (pool.layout(), pool.write_layout());
    let chosen = if all_know(current) {
        current
    } else if all_know(writes) {
        writes
    } else {
        let written: Vec<Layout> = views
            .values()
            .flatten()
            .filter(|e| !e.starts_with(KNOWS))
            .filter_map(|e| e.parse().ok())
            .collect();
        match pool
            .layouts()
            .filter(|l| all_know(l))
            .max_by_key(|l| written.iter().filter(|w| w == l).count())
            .filter(|l| written.contains(l))
        {
            Some(l) => l,
            None => {
                tracing::warn!(pool = pool.name(), writes = %writes, "no layout is known to every live gateway; writes stay where they go");
                writes
            }
        }
    }
    .clone();
    if pool.set_write_layout(&chosen) {
        if chosen == *pool.layout() {
            tracing::info!(pool = pool.name(), layout = %chosen, "every gateway knows the current layout: writes follow it");
        } else {
            tracing::info!(
                pool = pool.name(),
                writes = %chosen,
                current = %pool.layout(),
                "writes stay on a layout every gateway knows until each knows the current one"
            );
        }
    }
    Ok(())
}

/// The layouts a view says its gateway knows.
pub(crate) fn known_by(entries: &[String]) -> Vec<Layout> {
    let marked: Vec<Layout> = entries
        .iter()
        .filter_map(|e| e.strip_prefix(KNOWS))
        .filter_map(|l| l.parse().ok())
        .collect();
    if marked.is_empty() {
        entries.iter().filter_map(|l| l.parse().ok()).collect()
    } else {
        marked
    }
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

/// Announces views and retires drained layouts every `every`, until
/// `shutdown`; then withdraws this gateway's views.
pub async fn run(
    live: Arc<LiveTopology>,
    reloader: Arc<Reloader>,
    tokens: Arc<crate::tokens::TokenStore>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut views = Views::new(VIEW_TTL.max(every * 3));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A reload announces what this gateway now knows at once, rather than
    // at the next tick: the others may be holding their writes for it.
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
        let mut homes = tokens.homes();
        homes
            .retain(|(_, _, h)| topology.pool(&h.from).is_some() && topology.pool(&h.to).is_some());
        for pool in topology.pools() {
            views.announce(pool, &homes).await;
            if let Err(e) = settle_writes(pool, Some(&views.instance)).await {
                tracing::warn!(pool = pool.name(), error = %e, "cannot read the gateways' views; writes stay where they go");
            }
            retired |= retire_drained(pool).await;
        }
        // After announcing in the shards it has: a shard that is still a
        // member under a new connection (its weight or timeout changed)
        // keeps the view just renewed.
        for gone in announced
            .iter()
            .filter(|s| !topology.shards().any(|t| t.name() == s.name()))
        {
            if let Err(e) = gone.layouts().withdraw_view(&views.instance).await {
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
        let _ = shard.layouts().withdraw_view(&views.instance).await;
    }
}

/// What this gateway announces of the layouts it may write to and knows.
struct Views {
    instance: String,
    /// How long an announcement lives unless renewed.
    ttl: Duration,
    /// Per pool: the layout written to, and the previous one with when it
    /// stopped being written to.
    layouts: HashMap<String, (Layout, Option<(Layout, Instant)>)>,
}

impl Views {
    fn new(ttl: Duration) -> Self {
        Self {
            instance: INSTANCE.clone(),
            ttl,
            layouts: HashMap::new(),
        }
    }

    /// Announces in every shard of `pool` the layouts this gateway may
    /// write to (the one it writes to, the current one, and the one it
    /// wrote to before for [`WRITE_GRACE`]) and those it knows.
    async fn announce(&mut self, pool: &Pool, homes: &[(String, String, crate::homes::Home)]) {
        let writes = pool.write_layout();
        let entry = self
            .layouts
            .entry(pool.name().to_owned())
            .or_insert_with(|| (writes.clone(), None));
        if entry.0 != *writes {
            let previous = std::mem::replace(&mut entry.0, writes.clone());
            entry.1 = Some((previous, Instant::now()));
        }
        let mut mine = vec![entry.0.to_string()];
        if *pool.layout() != entry.0 {
            mine.push(pool.layout().to_string());
        }
        if let Some((prev, since)) = &entry.1
            && since.elapsed() < WRITE_GRACE
            && !mine.contains(&prev.to_string())
        {
            mine.push(prev.to_string());
        }
        mine.extend(pool.layouts().map(|l| format!("{KNOWS}{l}")));
        // The moves of namespaces out of or into this pool, in the state
        // known here: a gateway that serves either pool holds a move until
        // it knows it.
        mine.extend(
            homes
                .iter()
                .filter(|(_, _, h)| h.from == pool.name() || h.to == pool.name())
                .filter(|(_, _, h)| h.state != crate::homes::MoveState::Moved)
                .map(|(p, ns, h)| h.view_entry(p, ns)),
        );
        for shard in pool.shards() {
            if let Err(e) = shard
                .layouts()
                .announce_view(&self.instance, &mine, self.ttl)
                .await
            {
                tracing::warn!(shard = shard.name(), error = %e, "cannot announce this gateway's layouts");
            }
        }
    }
}

/// Measures `pool`'s drains (gauges) and retires every layout that no live
/// gateway writes to and whose moved slots are empty. Returns whether it
/// retired one.
async fn retire_drained(pool: &Pool) -> bool {
    if pool.draining().next().is_none() {
        gauges(pool.name(), 0, 0);
        return false;
    }
    let r = match report(pool).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(s: &str) -> Layout {
        s.parse().expect("layout")
    }

    #[test]
    fn a_view_knows_what_it_marks_or_else_what_it_writes() {
        // This version: known layouts are marked; the written ones are not
        // all of them.
        let view = [
            "a:1,b:1".to_owned(),
            format!("{KNOWS}a:1,b:1"),
            format!("{KNOWS}a:1,b:1,c:1"),
        ];
        assert_eq!(known_by(&view), [layout("a:1,b:1"), layout("a:1,b:1,c:1")]);
        // An earlier version's view lists only what it may write to.
        assert_eq!(known_by(&["a:1,b:1".to_owned()]), [layout("a:1,b:1")]);
        // A marked entry is never read as a layout that writers hold.
        assert!(
            format!("{KNOWS}a:1")
                .parse::<Layout>()
                .is_ok_and(|l| l != layout("a:1"))
        );
    }
}
