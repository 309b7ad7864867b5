//! One job by id: peek and delete (acknowledge).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use sundial_core::{Ack, Acked, JobId, job::check_queue, keys};

use super::{error::ApiError, render, tenant::Tenant};
use crate::openapi::doc;
use crate::state::AppState;

/// The request's `{job_id}`, parsed.
pub(super) fn job_id(tenant: &Tenant) -> Result<JobId, ApiError> {
    JobId::parse(tenant.job_id.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::bad(e.to_string()))
}

/// The request's `{queue}`, checked to be one valid name.
pub(super) fn queue(tenant: &Tenant) -> Result<&str, ApiError> {
    check_queue(&tenant.queue).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(&tenant.queue)
}

/// A job addressed by path: its queue (plain and qualified) and id.
pub(super) struct Target<'a> {
    pub(super) queue: &'a str,
    pub(super) qualified: String,
    pub(super) id: JobId,
}

impl<'a> Target<'a> {
    pub(super) fn parse(tenant: &'a Tenant) -> Result<Self, ApiError> {
        let queue = queue(tenant)?;
        let id = job_id(tenant)?;
        Ok(Self {
            queue,
            qualified: keys::qualified(&tenant.ns, queue),
            id,
        })
    }
}

/// Peek a job
///
/// The job in whatever state it is, not taken. Needs scope `read`. An expired
/// job is 404; `remain_tries` is the real count.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/job/{job_id}",
    operation_id = "peekJob",
    tag = "jobs",
    responses(
        (status = 200, description = "The job.", body = crate::api::answers::Job<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`job not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn peek(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant)?;
    // Where the slot is written now, then where it drains from (and in
    // the other pool while the namespace moves).
    for (shard, slot) in tenant.job_places(t.queue, &t.id) {
        if let Some(j) = shard.jobs().peek(slot, &t.qualified, &t.id).await? {
            return Ok(Json(render::job(&tenant.ns, &j)).into_response());
        }
    }
    Err(ApiError::NotFound("job not found"))
}

/// Acknowledge or cancel a job
///
/// Deletes the job in whatever state it is (delayed, ready, reserved, dead).
/// With `delivery=N` (Sundial's extension) the ack is fenced: it deletes the
/// job only while delivery N holds it (reserved, and not delivered again
/// since); else 409 and nothing changes. Needs scope `consume`.
#[utoipa::path(
    delete,
    path = "/api/{ns}/{queue}/job/{job_id}",
    operation_id = "deleteJob",
    tag = "jobs",
    params(doc::DeliveryQuery),
    responses(
        (status = 204, description = "Done: without `delivery`, whether or not the job existed; with it, the job was reserved by that delivery and is deleted."),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid job id`, `invalid delivery`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`job not found` (only with `delivery`: no such job, so nothing to ack), or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 409, description = "With `delivery`: the job exists but that delivery no longer holds it (it was delivered again, or its TTR ran out and it went back to ready, delayed or dead). Nothing changed. Message: `job is not reserved by delivery 3: it was delivered again, or its reservation ended`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["consume"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant)?;
    let delivery = super::params::delivery(&tenant.params)?;
    let weight = super::quota::of(&state, &tenant).weight();
    for (shard, slot) in tenant.job_places(t.queue, &t.id) {
        let ack = Ack {
            id: t.id.clone(),
            delivery,
        };
        match state
            .workers
            .ack(shard, slot, &t.qualified, weight, ack)
            .await?
        {
            Acked::Deleted => {
                super::queue_metrics::count(
                    super::queue_metrics::Event::Acked,
                    &tenant,
                    t.queue,
                    1,
                );
                return Ok(StatusCode::NO_CONTENT);
            }
            Acked::Fenced => return Err(fenced(delivery)),
            Acked::Missing => {}
        }
    }
    match delivery {
        Some(_) => Err(ApiError::NotFound("job not found")),
        None => Ok(StatusCode::NO_CONTENT),
    }
}

/// 409 for a worker's call fenced on a delivery that no longer holds the job.
pub(super) fn fenced(delivery: Option<u32>) -> ApiError {
    ApiError::Conflict(format!(
        "job is not reserved by delivery {}: it was delivered again, or its reservation ended",
        delivery.unwrap_or(0)
    ))
}
