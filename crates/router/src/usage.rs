//! What namespaces hold in a pool: their jobs and bytes, summed over the
//! slots of every shard that may hold them (`sundial_core::engine::usage`).
//! A job the mover copies to another shard counts at both until its copy
//! is safe, so a sum is never under what is held. O(slots) reads per
//! shard, pipelined: for quotas' snapshots, `sundial usage` and gauges,
//! never per request.

use std::collections::BTreeMap;

use sundial_core::{EngineError, Totals, Usage};

use crate::{Pool, placement::NamespacePools};

/// What one namespace holds in the pools that may hold its jobs. Where a
/// job may be moving, the place it moves from is read before the place it
/// moves to (the pool it leaves before the one it moves to; a slot's
/// draining layouts' shards before its current one), so that a job the
/// mover copies and then lets go is seen at one of them at least: a sum
/// is never under what is held.
pub async fn namespace(pools: &NamespacePools, ns: &str) -> Result<Usage, EngineError> {
    let mut out = Usage::default();
    for pool in pools.also.iter().chain(std::iter::once(&pools.writes)) {
        out.add(in_pool(pool, ns).await?);
    }
    Ok(out)
}

/// What `ns` holds in `pool`: each slot's places read oldest first, the
/// slots all at once.
async fn in_pool(pool: &Pool, ns: &str) -> Result<Usage, EngineError> {
    let per_slot = (0..pool.slots()).map(|slot| async move {
        let mut u = Usage::default();
        for shard in crate::placement::slot_places(pool, slot).into_iter().rev() {
            u.add(shard.slots().namespace_usage(&[slot], ns).await?);
        }
        Ok::<_, EngineError>(u)
    });
    let mut out = Usage::default();
    for u in futures::future::try_join_all(per_slot).await? {
        out.add(u);
    }
    Ok(out)
}

/// What every namespace holds in `pool`.
pub async fn pool(pool: &Pool) -> Result<BTreeMap<String, Usage>, EngineError> {
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    for (shard, slots) in pool.groups() {
        for (ns, u) in shard.slots().usage(slots).await? {
            out.entry(ns).or_default().add(u);
        }
    }
    Ok(out)
}

/// What every namespace holds in `pool`, and its running totals
/// (published, consumed, acked): the totals read every queue's counters
/// (O(queues) per slot), so this is for the admin API, not a loop.
pub async fn report(pool: &Pool) -> Result<BTreeMap<String, (Usage, Totals)>, EngineError> {
    let mut out: BTreeMap<String, (Usage, Totals)> = BTreeMap::new();
    for (shard, slots) in pool.groups() {
        for (ns, u) in shard.slots().usage(slots).await? {
            out.entry(ns).or_default().0.add(u);
        }
        for (ns, t) in shard.slots().totals(slots).await? {
            out.entry(ns).or_default().1.add(t);
        }
    }
    Ok(out)
}
