//! A whole queue: peek at its head, its size, destroy it.

use axum::{Json, http::StatusCode, response::IntoResponse};
use sundial_core::{Counts, keys};

use super::{
    answers::{JobQueueStats, QueueSize, Stats},
    error::ApiError,
    jobs::queue,
    render,
    tenant::Tenant,
};
use crate::openapi::doc;

/// A queue's counts summed over its slots (and where they drain from).
pub(super) async fn counts(tenant: &Tenant, queue: &str) -> Result<Counts, ApiError> {
    let mut total = Counts::default();
    for pool in tenant.pools() {
        total.add(&counts_of(pool, &tenant.ns, queue).await?);
    }
    Ok(total)
}

/// [`counts`] of a queue of `ns` in `pool`, for the admin listing.
pub(crate) async fn counts_of(
    pool: &sundial_router::Pool,
    ns: &str,
    queue: &str,
) -> Result<Counts, ApiError> {
    let qualified = keys::qualified(ns, queue);
    let mut total = Counts::default();
    for (shard, slot) in sundial_router::placement::queue_places(pool, ns, queue) {
        total.add(&shard.queues().counts(slot, &qualified).await?);
    }
    Ok(total)
}

/// Peek the queue
///
/// The next ready job, not taken (expired and deleted entries are skipped).
/// Needs scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/peek",
    operation_id = "peekQueue",
    tag = "jobs",
    responses(
        (status = 200, description = "The job.", body = crate::api::answers::Job<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`the queue is empty`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn peek(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let qualified = keys::qualified(&tenant.ns, queue);
    let mut best: Option<sundial_core::JobView> = None;
    for (shard, slot) in tenant.queue_places(queue) {
        if let Some(j) = shard.queues().peek(slot, &qualified).await?
            && best.as_ref().is_none_or(|b| j.elapsed_ms > b.elapsed_ms)
        {
            best = Some(j);
        }
    }
    match best {
        Some(j) => Ok(Json(render::job(&tenant.ns, &j)).into_response()),
        None => Err(ApiError::NotFound("the queue is empty")),
    }
}

/// Ready jobs in the queue
///
/// Ready jobs that still exist. Needs the namespace's token (lmstfy needs none)
/// and scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/size",
    operation_id = "queueSize",
    tag = "jobs",
    responses(
        (status = 200, description = "The size.", body = crate::api::answers::QueueSize<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn size(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let c = counts(&tenant, queue).await?;
    Ok(Json(QueueSize {
        namespace: &tenant.ns,
        queue,
        size: c.ready,
    })
    .into_response())
}

/// Backlog and rates
///
/// Live jobs per state, the queue's running totals, and per-second rates since
/// this gateway's previous sample of those totals (taken at least a second
/// earlier; `null` on the first call). Made for KEDA's metrics-api scaler
/// (`valueLocation: ready`) and scripts. Needs scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/stats",
    operation_id = "queueStats",
    tag = "jobs",
    responses(
        (status = 200, description = "The stats.", body = crate::api::answers::JobQueueStats<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn stats(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::state::AppState>>,
    tenant: Tenant,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let c = counts(&tenant, queue).await?;
    let stats = stats_of(&state, tenant.pool().name(), &tenant.ns, queue, &c, false);
    Ok(Json(JobQueueStats {
        namespace: &tenant.ns,
        stats,
    })
    .into_response())
}

/// A queue's stats as `GET …/stats` and the admin queue listing show them:
/// `queue`, the counts per state, the running totals, and the rates since
/// this gateway's previous sample. With `keep`, the reading is also kept
/// for the dashboard's charts ([`crate::history`]): the admin API's reads
/// are, a tenant's `stats` are not (so that a tenant cannot push other
/// queues' history out).
pub(crate) fn stats_of<'a>(
    state: &crate::state::AppState,
    pool: &str,
    ns: &str,
    queue: &'a str,
    c: &Counts,
    keep: bool,
) -> Stats<'a> {
    let key = format!("{pool}/{ns}/{queue}");
    let rates = state.rates.observe(&key, c.published, c.delivered);
    if keep {
        state
            .history
            .record(&key, crate::history::Point::new(unix_ms(), c, rates));
    }
    Stats {
        queue,
        ready: c.ready,
        delayed: c.delayed,
        reserved: c.reserved,
        dead: c.dead,
        published_total: c.published,
        consumed_total: c.delivered,
        publish_rate: rates.map(|r| r.0),
        consume_rate: rates.map(|r| r.1),
        paused: state.admin.pauses().holds(pool, ns, queue),
    }
}

/// This gateway's clock, Unix ms.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Destroy a queue
///
/// Deletes the queue's ready jobs (as lmstfy: delayed, reserved and dead jobs
/// stay). Needs scope `manage`.
#[utoipa::path(
    delete,
    path = "/api/{ns}/{queue}",
    operation_id = "destroyQueue",
    tag = "jobs",
    responses(
        (status = 204, description = "Done (whether or not there were jobs)."),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn destroy(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let qualified = keys::qualified(&tenant.ns, queue);
    let mut n = 0;
    for (shard, slot) in tenant.queue_places(queue) {
        n += shard.queues().destroy(slot, &qualified).await?;
    }
    super::queue_metrics::count(super::queue_metrics::Event::Deleted, &tenant, queue, n);
    Ok(StatusCode::NO_CONTENT)
}
