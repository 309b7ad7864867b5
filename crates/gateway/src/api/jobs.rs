//! One job by id: peek and delete (acknowledge).

use std::collections::BTreeMap;

use axum::{Json, extract::Path, http::StatusCode, response::IntoResponse};
use sundial_core::{JobId, job::check_queue};

use super::{error::ApiError, render, tenant::Tenant};

pub(super) fn job_id(path: &BTreeMap<String, String>) -> Result<JobId, ApiError> {
    JobId::parse(path.get("job_id").map(String::as_str).unwrap_or_default())
        .map_err(|e| ApiError::bad(e.to_string()))
}

pub(super) fn queue(path: &BTreeMap<String, String>) -> Result<String, ApiError> {
    let q = path.get("queue").cloned().unwrap_or_default();
    check_queue(&q).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(q)
}

/// A job addressed by path: its queue, id and bucket.
struct Target {
    queue: String,
    id: JobId,
    bucket: u32,
}

impl Target {
    fn parse(tenant: &Tenant, path: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let queue = queue(path)?;
        let id = job_id(path)?;
        let bucket = id.bucket(tenant.pool.buckets());
        Ok(Self { queue, id, bucket })
    }
}

/// `GET /api/{ns}/{queue}/job/{job_id}`
pub(super) async fn peek(
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant, &path)?;
    // Where the bucket is written now, then where it drains from.
    for shard in tenant.pool.locations(&tenant.ns, t.bucket) {
        if let Some(j) = shard
            .peek_job(&tenant.ns, t.bucket, &t.queue, &t.id)
            .await?
        {
            return Ok(Json(render::job(&tenant.ns, &j)));
        }
    }
    Err(ApiError::NotFound("job not found"))
}

/// `DELETE /api/{ns}/{queue}/job/{job_id}`: 204 whether or not it existed.
pub(super) async fn delete(
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant, &path)?;
    for shard in tenant.pool.locations(&tenant.ns, t.bucket) {
        if shard.delete(&tenant.ns, t.bucket, &t.queue, &t.id).await? {
            super::count_jobs(super::queue_metrics::Event::Acked, &tenant, &t.queue, 1);
            break;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
