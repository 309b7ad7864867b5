//! Republish: a job replaced by a new one, in one atomic step.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    response::IntoResponse,
};
use sundial_core::{JobId, job::MAX_BODY_BYTES, keys};
use sundial_router::{placement::NamespacePools, quota::Bound};

use super::{
    answers::{Published, PublishedMsg},
    body,
    error::ApiError,
    publish::{Publication, admit, published},
    quota, rate_quota,
    tenant::Tenant,
};
use crate::openapi::doc;
use crate::state::AppState;

/// Deletes the job `old` where else it may be than at `written` (the
/// pools `now`: the one written to as the topology is now, and the one the
/// namespace moves from, while it moves); missed everywhere, at `written`
/// after all, where the mover may have carried it meanwhile (see
/// `Tenant::job_places`).
async fn delete_elsewhere(
    now: &NamespacePools,
    ns: &str,
    queue: &str,
    old: &JobId,
    (written, slot): (&sundial_core::Shard, u32),
) -> Result<(), ApiError> {
    let qualified = keys::qualified(ns, queue);
    let others: Vec<(&sundial_core::Shard, u32)> = now
        .job_places_once(ns, queue, old)
        .into_iter()
        .filter(|(s, n)| !(s.same(written) && *n == slot))
        .collect();
    let mut deleted = others.is_empty();
    for (other, s) in others {
        if other.jobs().delete(s, &qualified, old).await? {
            deleted = true;
            break;
        }
    }
    if !deleted {
        written.jobs().delete(slot, &qualified, old).await?;
    }
    Ok(())
}

/// Republish a job
///
/// Deletes the job (if it still exists in that queue) and publishes the body as
/// a new job with a new id, in one atomic step. Same query, headers and body as
/// publish. Needs scopes `publish` and `consume`. Not rate-limited.
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}/job/{job_id}",
    operation_id = "republishJob",
    tag = "jobs",
    params(doc::PublishQuery),
    request_body(content = Option<doc::JobBytes>, content_type = "application/octet-stream", description = "The new job's bytes, at most 1 MiB."),
    responses(
        (status = 201, description = "Published; `job_id` is the new id.", body = crate::api::answers::Published<'_>),
        (status = 400, description = "A parameter, header or the id was refused. Over the namespace's quota `max_delay`, `max_ttl` or `max_tries`: `{\"error\",\"quota\",\"limit\",\"usage\"}` (see the quota conventions). Messages: `invalid policy: <why>` (the retry policy that the publish's fields make over its queue's, e.g. `invalid policy: a backoff needs initial_delay_ms`), `invalid backoff: fixed or exponential`, `invalid multiplier`, `invalid initial_delay_ms`, `invalid max_delay_ms`, `invalid jitter_percent`, `invalid max_retry_ms`, `a republish takes no idempotency key` (an `Idempotency-Key` or `dedup`; a bad one is refused as at publish), `invalid job id`, `invalid delay`, `invalid delay_ms`, `invalid ttl`, `invalid tries`, `invalid priority`, `tries shouldn't be zero`, `ttl is shorter than delay`, `too many attributes, cannot exceed 16`.", body = inline(doc::ErrorOrQuota)),
        (status = 403, response = doc::PublishForbidden),
        (status = 404, description = "`pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 1 MiB. Over the namespace's quota `max_body`: `{\"error\",\"quota\":\"max_body\",\"limit\",\"usage\"}`. Messages: `body too large`.", body = inline(doc::ErrorOrQuota)),
        (status = 429, response = doc::TooManyRequests),
    ),
    extensions(("x-sundial-scopes" = json!(["publish", "consume"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn republish(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<impl IntoResponse, ApiError> {
    if super::dedup::single(&tenant.params, req.headers())?.is_some() {
        return Err(ApiError::bad("a republish takes no idempotency key"));
    }
    let (p, body) = Publication::parse(&state, &tenant, req)?;
    let old = super::jobs::job_id(&tenant)?;
    let body = body::read(&state.bodies, body, MAX_BODY_BYTES, "body too large").await?;
    quota::check_body(&tenant, &p.quota, body.bytes.len())?;
    let lanes = tenant.pool().lanes();
    let (lane, job) = p.job(Some(old.lane(lanes)), lanes, body.bytes.clone());
    let pool = tenant.write_pool(&state)?;
    let slot = pool.slot_of(&tenant.ns, p.queue, lane);
    let qualified = keys::qualified(&tenant.ns, p.queue);
    let written = pool.shard_for(slot);
    quota::headroom(&state, &tenant, written)?;
    quota::admit_queue(&state, &tenant, &p.quota, p.queue).await?;
    let taken = rate_quota::take_rate(&state, &tenant, &p.quota, Bound::PublishRate, 1).await?;
    let one = std::slice::from_ref(&job);
    let admitted = admit(&state, &tenant, &p.quota, one, taken.as_ref()).await?;
    let republished = written
        .jobs()
        .republish(slot, &qualified, &old, &p.schedule, &job)
        .await
        .map_err(ApiError::from);
    rate_quota::give_back_if_failed(taken.as_ref(), &republished).await;
    if let Some(a) = admitted {
        a.ended(&state, &republished);
    }
    // While the slot moves, the old job may be at its other location: it
    // goes after the new one is stored (a crash in between leaves both,
    // never neither).
    if !republished? {
        let now = NamespacePools {
            writes: pool.clone(),
            also: tenant.pools.also.clone(),
        };
        delete_elsewhere(&now, &tenant.ns, p.queue, &old, (written, slot)).await?;
    }
    Ok(published(
        &state,
        &tenant,
        p.queue,
        1,
        Published {
            msg: PublishedMsg::Published,
            job_id: job.id.as_str(),
            duplicate: false,
            replaced: false,
        },
    ))
}
