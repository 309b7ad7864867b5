//! One job by id: peek and delete (acknowledge).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use sundial_core::{JobId, job::check_queue, keys};

use super::{error::ApiError, render, tenant::Tenant};
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

/// `GET /api/{ns}/{queue}/job/{job_id}`
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

/// `DELETE /api/{ns}/{queue}/job/{job_id}`: 204 whether or not it existed.
/// Acks and consumes of one queue that arrive together share a call
/// (`crate::batch`).
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
