//! Namespace quotas on the job API (`sundial_router::quota`): a job's body,
//! delay, TTL and tries checked before anything is stored, `max_queues`,
//! the headroom of shards near their `maxmemory`, and the refusal every
//! bound answers with (counted per namespace). The rates are in
//! `super::rate_quota`, the backlog in `super::backlog`.

use axum::http::StatusCode;
use sundial_core::{Schedule, Shard};
use sundial_router::quota::{Bound, Quota};

use super::{
    error::{ApiError, QuotaRefusal},
    params::Params,
    tenant::Tenant,
};
use crate::state::AppState;

/// The quota the tenant's namespace is held to now: its own fields (set
/// under its tokens' pool) over the config's quota of the pool it writes
/// to.
pub(super) fn of(state: &AppState, tenant: &Tenant) -> Quota {
    state
        .admin
        .quotas()
        .effective(&tenant.token.pool, &tenant.ns, tenant.pool().quota())
}

/// The schedule a publish asked for, held to the quota: a delay, TTL or
/// tries the client left to the configured default is lowered to the
/// namespace's bound (a TTL of 0, "never", included); one it gave over
/// the bound is refused (400), before the body is read.
pub(super) fn schedule(
    tenant: &Tenant,
    quota: &Quota,
    params: &Params,
    mut s: Schedule,
) -> Result<Schedule, ApiError> {
    let given = |name: &str| params.get(name).is_some();
    if let Some(max) = quota.limit(Bound::MaxDelay)
        && !given("delay")
        && !given("delay_ms")
    {
        s.delay_ms = s.delay_ms.min(max.saturating_mul(1000));
    }
    if let Some(max) = quota.limit(Bound::MaxTtl)
        && !given("ttl")
        && (s.ttl_ms == 0 || s.ttl_ms > max.saturating_mul(1000))
    {
        s.ttl_ms = max.saturating_mul(1000);
    }
    if let Some(max) = quota.limit(Bound::MaxTries)
        && !given("tries")
    {
        s.tries = s.tries.min(u16::try_from(max).unwrap_or(u16::MAX));
    }
    check_schedule(tenant, quota, &s)?;
    if let Some(max) = quota.limit(Bound::MaxTtl)
        && s.ttl_ms < s.delay_ms
    {
        let delay = s.delay_ms.div_ceil(1000);
        return Err(refuse(
            tenant,
            StatusCode::BAD_REQUEST,
            Bound::MaxTtl,
            max,
            delay,
            format!(
                "a delay of {delay} s outlives the namespace's quota max_ttl of {max} s: the job \
                 would expire before it is due"
            ),
        ));
    }
    Ok(s)
}

/// Refuses a schedule over the quota's delay, TTL or tries (400).
pub(super) fn check_schedule(tenant: &Tenant, quota: &Quota, s: &Schedule) -> Result<(), ApiError> {
    let over = |bound: Bound, value: u64, unit: &str| -> Result<(), ApiError> {
        match quota.limit(bound) {
            Some(limit) if value > limit => Err(refuse(
                tenant,
                StatusCode::BAD_REQUEST,
                bound,
                limit,
                value,
                format!(
                    "{} of {value}{unit} is over the namespace's quota {} of {limit}{unit}",
                    &bound.name()[4..],
                    bound.name()
                ),
            )),
            _ => Ok(()),
        }
    };
    over(Bound::MaxDelay, s.delay_ms.div_ceil(1000), " s")?;
    // A TTL of 0 never expires: longer than any bound.
    let ttl = if s.ttl_ms == 0 {
        u64::MAX
    } else {
        s.ttl_ms.div_ceil(1000)
    };
    if let Some(limit) = quota.limit(Bound::MaxTtl)
        && ttl > limit
    {
        let said = if s.ttl_ms == 0 {
            "a ttl of 0 (never expires)".to_owned()
        } else {
            format!("ttl of {ttl} s")
        };
        return Err(refuse(
            tenant,
            StatusCode::BAD_REQUEST,
            Bound::MaxTtl,
            limit,
            ttl.min(u64::from(u32::MAX)),
            format!("{said} is over the namespace's quota max_ttl of {limit} s"),
        ));
    }
    over(Bound::MaxTries, u64::from(s.tries), "")
}

/// Refuses a body over the quota's `max_body` (413).
pub(super) fn check_body(tenant: &Tenant, quota: &Quota, len: usize) -> Result<(), ApiError> {
    match quota.limit(Bound::MaxBody) {
        Some(limit) if len as u64 > limit => Err(refuse(
            tenant,
            StatusCode::PAYLOAD_TOO_LARGE,
            Bound::MaxBody,
            limit,
            len as u64,
            format!(
                "a body of {len} bytes is over the namespace's quota max_body of {limit} bytes"
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a publish to a queue that the namespace's index lacks when it
/// holds `max_queues` queues already (403: the bound holds until queues
/// empty and leave the index; see `sundial_router::admin::queue_sweep`).
pub(super) async fn admit_queue(
    state: &AppState,
    tenant: &Tenant,
    quota: &Quota,
    queue: &str,
) -> Result<(), ApiError> {
    let Some(max) = quota.limit(Bound::MaxQueues) else {
        return Ok(());
    };
    let (pool, ns) = (tenant.pool().name(), tenant.ns.as_str());
    let listed = super::queue_metrics::listed(pool, ns, queue);
    let index = state.admin.queues();
    let admitted = Box::pin(index.admit(&listed, (pool, ns, queue), max)).await;
    admitted.map_err(|held| {
        refuse(
            tenant,
            StatusCode::FORBIDDEN,
            Bound::MaxQueues,
            max,
            held,
            format!(
                "the namespace uses {held} queues: a new queue would go over its quota \
                 max_queues of {max} (a queue that holds no job leaves the count within ten \
                 minutes)"
            ),
        )
    })
}

/// The name a headroom refusal gives as its `quota`.
use super::answers::errors::MEMORY_SHARE;

/// Refuses a publish to a shard over its headroom bound when the namespace
/// holds more than its share of it (429 `memory_share`; see
/// `sundial_router::headroom`).
pub(super) fn headroom(state: &AppState, tenant: &Tenant, shard: &Shard) -> Result<(), ApiError> {
    let Some(over) = state.headroom.check(shard.name(), &tenant.ns) else {
        return Ok(());
    };
    let message = format!(
        "shard {} is over {}% of its maxmemory and the namespace holds {} bytes there, more than \
         its share of {} bytes: nothing was stored; retry once consumers have made room",
        shard.name(),
        over.percent,
        over.held,
        over.share
    );
    let mut r = refusal(
        tenant,
        StatusCode::TOO_MANY_REQUESTS,
        MEMORY_SHARE,
        over.share,
        over.held,
        message,
    );
    r.retry_after_ms = Some(1000);
    Err(ApiError::Quota(Box::new(r)))
}

pub(super) fn refuse(
    tenant: &Tenant,
    status: StatusCode,
    bound: Bound,
    limit: u64,
    usage: u64,
    message: String,
) -> ApiError {
    ApiError::Quota(Box::new(refusal(
        tenant,
        status,
        bound.name(),
        limit,
        usage,
        message,
    )))
}

/// A refusal, counted in `sundial_quota_refusals_total`.
pub(super) fn refusal(
    tenant: &Tenant,
    status: StatusCode,
    quota: &'static str,
    limit: u64,
    usage: u64,
    message: String,
) -> QuotaRefusal {
    metrics::counter!(
        "sundial_quota_refusals_total",
        "pool" => tenant.token.pool.clone(),
        "namespace" => tenant.ns.clone(),
        "quota" => quota,
    )
    .increment(1);
    crate::refusals::note(&tenant.token.pool, &tenant.ns, quota);
    QuotaRefusal {
        status,
        quota,
        limit,
        usage,
        retry_after_ms: None,
        message,
    }
}
