//! What namespaces hold in a pool: their jobs and bytes, summed over the
//! slots of every shard that may hold them (`sundial_core::engine::usage`).
//! A job the mover copies to another shard counts at both until its copy
//! is safe, so a sum is never under what is held. O(slots) reads per
//! shard, pipelined: for quotas' snapshots, `sundial usage` and gauges,
//! never per request.

use std::collections::BTreeMap;

use sundial_core::{EngineError, Totals, Usage};

use crate::{Pool, placement::NamespacePools};

/// What one namespace holds in the pools that may hold its jobs.
pub async fn namespace(pools: &NamespacePools, ns: &str) -> Result<Usage, EngineError> {
    let mut out = Usage::default();
    for pool in std::iter::once(&pools.writes).chain(pools.also.as_ref()) {
        for (shard, slots) in pool.groups() {
            out.add(shard.slots().namespace_usage(slots, ns).await?);
        }
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
