//! Headroom: a shard whose Redis uses more than a share of its `maxmemory`
//! (`[headroom] share_above_percent`, 90 by default) takes publishes only
//! from namespaces that hold no more than their share of it, so that a
//! namespace that fills a shard is refused before the shard refuses
//! everyone (a Redis at its `maxmemory` refuses every publish: 503). The
//! pumps hold a namespace's schedules' fires to the same share.
//!
//! A namespace's share is what the namespaces holding jobs on the shard
//! hold there in all (bytes of ids and records, from the slots' usage
//! hashes), split by their quotas' `weight` (equal unless set): one that
//! holds more than its share is refused; one that holds less, or nothing
//! yet, is not. Every gateway (and `sundial pumpd`) reads each shard's
//! `INFO memory` every [`EVERY`] (for a cluster shard, its fullest
//! primary), and, while a shard is over the bound, what each namespace
//! holds there (one `HGETALL` per slot it holds); every [`NEAR_EVERY`]
//! while any shard is within ten points of its bound, and sooner than a
//! quarter of the time a shard filling fast would take to reach it. A shard without a
//! `maxmemory` gets no headroom (the gateway warns at start).

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use sundial_core::Shard;
use tokio_util::sync::CancellationToken;

use crate::LiveTopology;

/// How often each shard's memory is read.
pub const EVERY: Duration = Duration::from_secs(1);
/// How often, while a shard is within [`NEAR`] points of its bound or
/// over it: a shard filling fast reaches its bound between two reads.
pub const NEAR_EVERY: Duration = Duration::from_millis(100);
/// Percentage points under the bound from which a shard is read often.
const NEAR: u8 = 10;

/// A shard over its bound: what a namespace may hold there, and what each
/// holds.
#[derive(Debug, Clone, Default)]
struct Room {
    total: u64,
    /// Each namespace holding jobs on the shard: bytes, weight.
    held: HashMap<String, (u64, u64)>,
    /// Their weights' sum.
    weights: u64,
    percent: u8,
}

/// A namespace's weight in a pool (`pool`, `ns`): its quota's `weight`.
pub type Weight = Arc<dyn Fn(&str, &str) -> u64 + Send + Sync>;

/// Each namespace's weight in a pool, as its quota sets it over the
/// pool's, from `admin`'s copy of the quota table.
pub fn weights(live: Arc<LiveTopology>, admin: Arc<crate::admin::AdminStore>) -> Weight {
    Arc::new(move |pool: &str, ns: &str| {
        let topology = live.topology();
        let pool_quota = topology.pool(pool).map(|p| *p.quota()).unwrap_or_default();
        admin.quotas().effective(pool, ns, &pool_quota).weight()
    })
}

/// Why a publish is refused: the namespace holds `held` bytes on a shard
/// over `percent`% of its `maxmemory`, more than its `share`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverShare {
    pub share: u64,
    pub held: u64,
    pub percent: u8,
}

/// The shards over their bound, by name, as this gateway last read them.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Headroom {
    over: Arc<RwLock<HashMap<String, Room>>>,
}

impl Headroom {
    /// `Some` when a publish of namespace `ns` to `shard` is to be refused.
    pub fn check(&self, shard: &str, ns: &str) -> Option<OverShare> {
        let over = self.over.read().unwrap_or_else(|p| p.into_inner());
        let room = over.get(shard)?;
        let &(held, weight) = room.held.get(ns)?;
        let share = u128::from(room.total) * u128::from(weight) / u128::from(room.weights.max(1));
        let share = u64::try_from(share).unwrap_or(u64::MAX);
        (held > share).then_some(OverShare {
            share,
            held,
            percent: room.percent,
        })
    }
}

/// When to read the shards again: every [`EVERY`], every [`NEAR_EVERY`]
/// while one is within [`NEAR`] points of its bound, and sooner than a
/// quarter of the time a shard filling fast would take to reach it.
#[derive(Debug, Default)]
struct Pace {
    /// Per shard, its last fill (percent) and when it was read.
    seen: HashMap<String, (f64, Instant)>,
    wait: Option<Duration>,
}

impl Pace {
    fn saw(&mut self, shard: &str, fill: f64, bound: f64) {
        let now = Instant::now();
        let wait = if fill >= bound - f64::from(NEAR) {
            NEAR_EVERY
        } else {
            match self.seen.get(shard) {
                Some((before, at)) if fill > *before => {
                    let per_s = (fill - before) / at.elapsed().as_secs_f64().max(1e-3);
                    Duration::from_secs_f64((bound - fill) / per_s / 4.0).clamp(NEAR_EVERY, EVERY)
                }
                _ => EVERY,
            }
        };
        self.wait = Some(self.wait.map_or(wait, |w| w.min(wait)));
        self.seen.insert(shard.to_owned(), (fill, now));
    }

    /// The wait before the next round, reset for it.
    fn next(&mut self) -> Duration {
        self.wait.take().unwrap_or(EVERY)
    }
}

/// What `shard` (holding `slots` of `pool`) leaves of its headroom: `None`
/// while it is under `percent`% of its `maxmemory`, or has none. Tells
/// `pace` how full it is.
async fn room(
    (pool, shard, slots): (&str, &Shard, &[u32]),
    percent: u8,
    weight: &Weight,
    pace: &mut Pace,
) -> Result<Option<Room>, sundial_core::EngineError> {
    let memory = shard.memory().await?;
    let fill = memory.fill().unwrap_or(0.0) * 100.0;
    if memory.max > 0 {
        pace.saw(shard.name(), fill, f64::from(percent));
    }
    if memory.max == 0 || fill < f64::from(percent) {
        return Ok(None);
    }
    let held: HashMap<String, (u64, u64)> = shard
        .slots()
        .usage(slots)
        .await?
        .into_iter()
        .map(|(ns, u)| {
            let w = weight(pool, &ns).max(1);
            (ns, (u.bytes, w))
        })
        .collect();
    Ok(Some(Room {
        total: held.values().map(|&(b, _)| b).sum(),
        weights: held.values().map(|&(_, w)| w).sum(),
        held,
        percent,
    }))
}

/// Reads every shard's memory every [`EVERY`] and keeps `headroom` current,
/// until `stop`; `percent` 0 turns headroom off. A shard that cannot be
/// read is taken as under its bound (its publishes fail on their own).
pub async fn run(
    live: Arc<LiveTopology>,
    (headroom, weight): (Headroom, Weight),
    percent: u8,
    stop: CancellationToken,
) {
    if percent == 0 {
        return stop.cancelled().await;
    }
    let (mut wait, mut pace) = (Duration::ZERO, Pace::default());
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
        let topology = live.topology();
        let mut over = HashMap::new();

        for pool in topology.pools() {
            for (shard, slots) in pool.groups() {
                match room((pool.name(), shard, slots), percent, &weight, &mut pace).await {
                    Ok(Some(r)) => {
                        tracing::debug!(
                            shard = shard.name(),
                            held = r.total,
                            "shard over its headroom bound"
                        );
                        over.insert(shard.name().to_owned(), r);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(shard = shard.name(), error = %e, "cannot read the shard's memory")
                    }
                }
            }
        }
        *headroom.over.write().unwrap_or_else(|p| p.into_inner()) = over;
        wait = pace.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_refused_over_its_weighted_share_only() {
        let headroom = Headroom::default();
        let room = |held: &[(&str, u64, u64)]| Room {
            total: held.iter().map(|h| h.1).sum(),
            weights: held.iter().map(|h| h.2).sum(),
            held: held
                .iter()
                .map(|&(n, b, w)| (n.to_owned(), (b, w)))
                .collect(),
            percent: 90,
        };
        let set = |r: Room| {
            let mut over = headroom.over.write().expect("lock");
            over.insert("s".to_owned(), r);
        };
        // Equal weights: the mean, 150 bytes.
        set(room(&[("a", 200, 1), ("b", 100, 1)]));
        let refused = headroom.check("s", "a").expect("a over the mean");
        assert_eq!((refused.share, refused.held), (150, 200));
        assert_eq!(headroom.check("s", "b"), None);
        assert_eq!(headroom.check("s", "c"), None, "holds nothing");
        assert_eq!(headroom.check("t", "a"), None, "a shard under its bound");
        // b weighs 3: a's share is a quarter, b's three quarters.
        set(room(&[("a", 200, 1), ("b", 600, 3)]));
        assert_eq!(headroom.check("s", "a"), None, "a holds its share");
        set(room(&[("a", 250, 1), ("b", 550, 3)]));
        assert_eq!(headroom.check("s", "a").map(|o| o.share), Some(200));
        assert_eq!(headroom.check("s", "b"), None);
    }
}
