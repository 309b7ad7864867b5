//! A namespace's backlog quota (`max_jobs`, `max_bytes`) on the job API:
//! a publication's jobs and bytes admitted on the admin Redis before they
//! are stored (`sundial_router::backlog`, which takes the snapshots the
//! estimate starts from), and the end of the write reported after. A
//! namespace over a bound gets 429 with `Retry-After`, nothing stored, a
//! bulk all or nothing. As with the other quotas, a publish is let
//! through (and a warning logged) when the admin Redis cannot count.

use axum::http::StatusCode;
use sundial_core::{BacklogAsk, EngineError, NewJob, Usage};
use sundial_router::{
    backlog::{self, REFRESH},
    quota::{Bound, Quota},
};

use super::{error::ApiError, quota, tenant::Tenant};
use crate::state::AppState;

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
        backlog::done(state.admin.redis(), self.pool, self.ns, self.entry, stored);
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
        stale_ms: backlog::STALE_MS,
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
    let redis = state.admin.redis();
    match backlog::admit(&redis, pool, ns, &tenant.pools, ask).await {
        Ok(backlog::Admitted::Yes { entry }) => Ok(Some(Admitted {
            pool: pool.to_owned(),
            ns: ns.to_owned(),
            entry,
        })),
        Ok(backlog::Admitted::Refused { bound, held }) => Err(refused(tenant, &ask, &bound, held)),
        Ok(backlog::Admitted::Uncounted) => Ok(None),
        Err(e) => {
            tracing::warn!(error = %e, "cannot count against a backlog quota; letting the publish through");
            Ok(None)
        }
    }
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
