//! A namespace's backlog quota (`max_jobs`, `max_bytes`), admitted on the
//! admin Redis before a write stores jobs: by a gateway for a publish, by
//! a pump for a schedule's fires. `sundial_core::engine::backlog` keeps
//! the estimate (never under what the slots hold); this takes the
//! snapshots it starts from, reading the slots of the namespace's pools:
//! when there is none, in the background when the one there is older
//! than [`REFRESH`], and before a refusal when it is older than
//! [`FRESH`], so that room freed by consumers shows within a second.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use sundial_core::{Admission, BacklogAsk, EngineError, Shard, Usage};

use crate::placement::NamespacePools;

/// A snapshot older than this is taken again in the background.
pub const REFRESH: Duration = Duration::from_secs(1);
/// A refusal on a snapshot older than this takes a new one first.
pub const FRESH: Duration = Duration::from_millis(250);
/// A pending admission whose write was never said to end is let go after
/// this long (its jobs are in the slots by then, if stored).
pub const STALE_MS: u64 = 60_000;

/// What an admission found.
#[derive(Debug, Clone)]
pub enum Admitted {
    /// Counted as entry `entry`: say how the write ended ([`done`]).
    Yes { entry: String },
    /// Over `bound` (`max_jobs` or `max_bytes`): the namespace holds
    /// `held`; nothing was counted.
    Refused { bound: String, held: Usage },
    /// No snapshot could be taken: the write goes uncounted.
    Uncounted,
}

/// Admits `ask` for namespace `ns` of `pool` (its tokens' pool), whose
/// jobs `pools` hold, on the admin Redis `redis`: asked again once a
/// snapshot was taken when the one it was checked against was missing or
/// old (a publish, which can wait for it).
pub async fn admit(
    redis: &Arc<Shard>,
    pool: &str,
    ns: &str,
    pools: &NamespacePools,
    ask: BacklogAsk,
) -> Result<Admitted, EngineError> {
    let entry = format!("{:016x}", rand::random::<u64>());
    for first in [true, false] {
        let found = admit_once(redis, (pool, ns), pools, &entry, ask).await?;
        match found {
            Admission::Admitted { .. } => return Ok(Admitted::Yes { entry }),
            // The snapshot `admit_once` started: wait for it, then ask again.
            _ if first && stale(&found) => snapshot(redis.clone(), pool, ns, pools).await,
            Admission::Refused { bound, held, .. } => return Ok(Admitted::Refused { bound, held }),
            Admission::Unknown => break,
        }
    }
    Ok(Admitted::Uncounted)
}

/// One admission of `ask` as `entry`, for a caller that does not wait for
/// a snapshot (a pump, on its slot's fire path): one is taken in the
/// background when the estimate has none, is older than [`REFRESH`], or
/// refused on one older than [`FRESH`].
pub async fn admit_once(
    redis: &Arc<Shard>,
    (pool, ns): (&str, &str),
    pools: &NamespacePools,
    entry: &str,
    ask: BacklogAsk,
) -> Result<Admission, EngineError> {
    let found = redis.admin().backlog_admit(pool, ns, entry, ask).await?;
    let old =
        matches!(found, Admission::Admitted { age_ms, .. } if age_ms > REFRESH.as_millis() as u64);
    if old || stale(&found) {
        snapshot_in_background(redis.clone(), pool, ns, pools);
    }
    Ok(found)
}

/// Whether `found` was answered without a snapshot, or refused on one
/// older than [`FRESH`]: one taken now may answer otherwise.
pub fn stale(found: &Admission) -> bool {
    match found {
        Admission::Admitted { .. } => false,
        Admission::Refused { age_ms, .. } => *age_ms > FRESH.as_millis() as u64,
        Admission::Unknown => true,
    }
}

/// Says how the write admitted as `entry` ended, in the background: one
/// that surely stored nothing gives its jobs back at once.
pub fn done(redis: Arc<Shard>, pool: String, ns: String, entry: String, stored: bool) {
    tokio::spawn(async move {
        let admin = redis.admin();
        if let Err(e) = admin.backlog_done(&pool, &ns, &entry, stored).await {
            tracing::debug!(error = %e, "cannot say how a write admitted by a backlog quota ended");
        }
    });
}

/// Per namespace (`<pool>/<ns>`): when this process last took its
/// snapshot (or tried to), under a lock that one snapshot holds at a time.
type Snapshots = Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>;
static SNAPSHOTS: LazyLock<Snapshots> = LazyLock::new(Snapshots::default);

fn snapshot_lock(pool: &str, ns: &str) -> Arc<tokio::sync::Mutex<Option<Instant>>> {
    let mut all = SNAPSHOTS.lock().unwrap_or_else(|p| p.into_inner());
    all.entry(format!("{pool}/{ns}")).or_default().clone()
}

/// Takes the namespace's snapshot unless this process took one (or tried
/// to) within [`FRESH`] (a caller that waited for another's gets that one).
async fn snapshot(redis: Arc<Shard>, pool: &str, ns: &str, pools: &NamespacePools) {
    let lock = snapshot_lock(pool, ns);
    let mut last = lock.lock().await;
    if last.is_some_and(|t| t.elapsed() < FRESH) {
        return;
    }
    let taken = async {
        let began = redis.admin().backlog_begin(pool, ns).await?;
        let usage = crate::usage::namespace(pools, ns).await?;
        redis.admin().backlog_snapshot(pool, ns, began, usage).await
    };
    if let Err(e) = taken.await {
        tracing::warn!(pool, ns, error = %e, "cannot take a snapshot of a namespace's usage");
    }
    // A failed one too: the next try waits as long, rather than read the
    // pools again at once for every caller.
    *last = Some(Instant::now());
}

/// [`snapshot`], in the background, unless one is under way.
fn snapshot_in_background(redis: Arc<Shard>, pool: &str, ns: &str, pools: &NamespacePools) {
    let lock = snapshot_lock(pool, ns);
    if lock.try_lock().is_err() {
        return;
    }
    let (pool, ns, pools) = (pool.to_owned(), ns.to_owned(), pools.clone());
    tokio::spawn(async move { snapshot(redis, &pool, &ns, &pools).await });
}
