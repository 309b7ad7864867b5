//! One job by id: peek and delete (acknowledge).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use sundial_core::{JobId, job::check_queue, keys};

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
struct Target<'a> {
    queue: &'a str,
    qualified: String,
    id: JobId,
}

impl<'a> Target<'a> {
    fn parse(tenant: &'a Tenant) -> Result<Self, ApiError> {
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
/// Needs scope `consume`.
#[utoipa::path(
    delete,
    path = "/api/{ns}/{queue}/job/{job_id}",
    operation_id = "deleteJob",
    tag = "jobs",
    responses(
        (status = 204, description = "Done, whether or not the job existed."),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["consume"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant)?;
    let weight = super::quota::of(&state, &tenant).weight();
    for (shard, slot) in tenant.job_places(t.queue, &t.id) {
        if state
            .workers
            .ack(shard, slot, &t.qualified, weight, t.id.clone())
            .await?
        {
            super::queue_metrics::count(super::queue_metrics::Event::Acked, &tenant, t.queue, 1);
            break;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
