//! A namespace's backlog quota (`max_jobs`, `max_bytes`) on the job API:
//! a publication's jobs and bytes admitted on the admin Redis before they
//! are stored (`sundial_core::engine::backlog`, which says how the
//! estimate is kept, never under what the slots hold), and the end of the
//! write reported after.
//!
//! The estimate starts from a snapshot of the namespace's usage, which
//! this gateway takes (reading the slots of its pools) when there is none,
//! in the background when the one there is older than [`REFRESH`], and
//! before a refusal when it is older than [`FRESH`], so that room freed
//! by consumers shows within a second. A namespace over a bound gets 429
//! with `Retry-After`, nothing stored, a bulk all or nothing. As with the
//! other quotas, a publish is let through (and a warning logged) when the
//! admin Redis cannot count.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use axum::http::StatusCode;
use sundial_core::{Admission, BacklogAsk, EngineError, NewJob, Shard, Usage};
use sundial_router::{
    placement::NamespacePools,
    quota::{Bound, Quota},
};

use super::{error::ApiError, quota, tenant::Tenant};
use crate::state::AppState;

/// A snapshot older than this is taken again in the background.
const REFRESH: Duration = Duration::from_secs(1);
/// A refusal on a snapshot older than this takes a new one first.
const FRESH: Duration = Duration::from_millis(250);
/// A pending admission whose gateway never said how its write ended is
/// let go after this long (its jobs are in the slots by then, if stored).
const STALE_MS: u64 = 60_000;
/// The record header of a stored job (see `lua/lib/record.lua`).
const RECORD_HEAD: u64 = 26;

/// The bytes a job holds once stored: its id and record (`job_bytes` in
/// `lua/lib/counts.lua`).
pub(super) fn job_bytes(job: &NewJob) -> u64 {
    (job.id.as_str().len() + job.attrs.len() + job.body.len()) as u64 + RECORD_HEAD
}

/// An admission, to report how its write ended.
#[derive(Debug)]
pub(super) struct Admitted {
    pool: String,
    ns: String,
    entry: String,
}

impl Admitted {
    /// Reports the write's outcome, in the background: a write that
    /// surely stored nothing gives its jobs back at once.
    pub(super) fn ended<T>(self, state: &AppState, result: &Result<T, ApiError>) {
        let stored = match result {
            Ok(_) => true,
            // Maybe stored: unanswered, or stored on a master that lost it.
            Err(ApiError::Unavailable(e)) => !matches!(e, EngineError::OutOfMemory { .. }),
            Err(ApiError::Internal(_)) => true,
            Err(_) => false,
        };
        let redis = state.admin.redis();
        tokio::spawn(async move {
            let admin = redis.admin();
            if let Err(e) = admin
                .backlog_done(&self.pool, &self.ns, &self.entry, stored)
                .await
            {
                tracing::debug!(error = %e, "cannot say how a write admitted by a backlog quota ended");
            }
        });
    }
}

/// Admits `jobs` under the namespace's backlog bounds; `None` when it has
/// none (or the admin Redis cannot count).
pub(super) async fn admit(
    state: &AppState,
    tenant: &Tenant,
    quota: &Quota,
    jobs: &[NewJob],
) -> Result<Option<Admitted>, ApiError> {
    let (max_jobs, max_bytes) = (quota.limit(Bound::MaxJobs), quota.limit(Bound::MaxBytes));
    if max_jobs.is_none() && max_bytes.is_none() {
        return Ok(None);
    }
    let ask = BacklogAsk {
        add: Usage {
            jobs: jobs.len() as u64,
            bytes: jobs.iter().map(job_bytes).sum(),
        },
        max_jobs: max_jobs.unwrap_or(0),
        max_bytes: max_bytes.unwrap_or(0),
        stale_ms: STALE_MS,
    };
    // Boxed: see `quota::take_rate`.
    Box::pin(admit_within(state, tenant, ask)).await
}

async fn admit_within(
    state: &AppState,
    tenant: &Tenant,
    ask: BacklogAsk,
) -> Result<Option<Admitted>, ApiError> {
    let (pool, ns) = (tenant.token.pool.as_str(), tenant.ns.as_str());
    let entry = format!("{:016x}", rand::random::<u64>());
    let redis = state.admin.redis();
    for first in [true, false] {
        let found = match redis.admin().backlog_admit(pool, ns, &entry, ask).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count against a backlog quota; letting the publish through");
                return Ok(None);
            }
        };
        match found {
            Admission::Admitted { age_ms, .. } => {
                if age_ms > REFRESH.as_millis() as u64 {
                    snapshot_in_background(state, tenant);
                }
                let (pool, ns) = (pool.to_owned(), ns.to_owned());
                return Ok(Some(Admitted { pool, ns, entry }));
            }
            Admission::Unknown | Admission::Refused { .. } if first => {
                let age = match found {
                    Admission::Refused { age_ms, .. } => Duration::from_millis(age_ms),
                    _ => Duration::MAX,
                };
                if age > FRESH {
                    snapshot(redis.clone(), pool, ns, &tenant.pools).await;
                }
            }
            Admission::Unknown => return Ok(None),
            Admission::Refused { bound, held, .. } => {
                return Err(refused(tenant, &ask, &bound, held));
            }
        }
    }
    Ok(None)
}

fn refused(tenant: &Tenant, ask: &BacklogAsk, bound: &str, held: Usage) -> ApiError {
    let (bound, limit, usage, adding, unit) = if bound == "max_bytes" {
        (
            Bound::MaxBytes,
            ask.max_bytes,
            held.bytes,
            ask.add.bytes,
            " bytes",
        )
    } else {
        (
            Bound::MaxJobs,
            ask.max_jobs,
            held.jobs,
            ask.add.jobs,
            " jobs",
        )
    };
    let message = format!(
        "the namespace holds {usage}{unit}: {adding}{unit} more would go over its quota {} of \
         {limit}{unit}; retry once consumers have made room",
        bound.name()
    );
    let mut r = quota::refusal(
        tenant,
        StatusCode::TOO_MANY_REQUESTS,
        bound.name(),
        limit,
        usage,
        message,
    );
    r.retry_after_ms = Some(REFRESH.as_millis() as u64);
    ApiError::Quota(Box::new(r))
}

/// Per namespace (`<pool>/<ns>`): when this gateway last took its
/// snapshot, under a lock that one snapshot holds at a time.
type Snapshots = Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>;
static SNAPSHOTS: LazyLock<Snapshots> = LazyLock::new(Snapshots::default);

fn snapshot_lock(pool: &str, ns: &str) -> Arc<tokio::sync::Mutex<Option<Instant>>> {
    let mut all = SNAPSHOTS.lock().unwrap_or_else(|p| p.into_inner());
    all.entry(format!("{pool}/{ns}")).or_default().clone()
}

/// Takes the namespace's snapshot unless this gateway took one within
/// [`FRESH`] (a request that waited for another's gets that one).
async fn snapshot(redis: Arc<Shard>, pool: &str, ns: &str, pools: &NamespacePools) {
    let lock = snapshot_lock(pool, ns);
    let mut last = lock.lock().await;
    if last.is_some_and(|t| t.elapsed() < FRESH) {
        return;
    }
    let taken = async {
        let began = redis.admin().backlog_begin(pool, ns).await?;
        let usage = sundial_router::usage::namespace(pools, ns).await?;
        redis.admin().backlog_snapshot(pool, ns, began, usage).await
    };
    match taken.await {
        Ok(_) => *last = Some(Instant::now()),
        Err(e) => {
            tracing::warn!(pool, ns, error = %e, "cannot take a snapshot of a namespace's usage")
        }
    }
}

/// [`snapshot`], in the background, unless one is under way.
fn snapshot_in_background(state: &AppState, tenant: &Tenant) {
    let lock = snapshot_lock(&tenant.token.pool, &tenant.ns);
    if lock.try_lock().is_err() {
        return;
    }
    let redis = state.admin.redis();
    let (pool, ns, pools) = (
        tenant.token.pool.clone(),
        tenant.ns.clone(),
        tenant.pools.clone(),
    );
    tokio::spawn(async move { snapshot(redis, &pool, &ns, &pools).await });
}
