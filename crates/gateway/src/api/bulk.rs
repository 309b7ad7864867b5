//! Bulk publish: one job per element of a JSON array, all or nothing.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    response::Response,
};
use serde_json::value::RawValue;
use sundial_core::{
    NewJob,
    job::{MAX_BODY_BYTES, MAX_BULK_JOBS},
};

use super::{
    answers::{BulkPublished, PublishedMsg},
    body,
    error::ApiError,
    publish::{Publication, published, store_within_quota},
    quota,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::openapi::doc;
use crate::state::AppState;

/// Publish many jobs
///
/// Publishes one job per element of a JSON array, all or none, in one atomic
/// step. Same query and headers as a publish. Needs scope `publish`; counts one
/// write against the token's rate limit. The body is bounded by
/// `http.max_bulk_bytes` (8 MiB by default; lmstfy bounds only the elements).
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}/bulk",
    operation_id = "publishJobsBulk",
    tag = "jobs",
    params(doc::PublishQuery),
    request_body(content = doc::BulkBody, description = "A JSON array of 1 to 64 elements (the content type is not checked)."),
    responses(
        (status = 201, description = "Published.", body = crate::api::answers::BulkPublished<'_>),
        (status = 400, description = "A parameter, header or the body was refused. Over the namespace's quota `max_delay`, `max_ttl` or `max_tries`: `{\"error\",\"quota\",\"limit\",\"usage\"}` (see the quota conventions). Messages: `invalid policy: <why>` (the retry policy that the publish's fields make over its queue's, e.g. `invalid policy: a backoff needs initial_delay_ms`), `invalid backoff: fixed or exponential`, `invalid multiplier`, `invalid initial_delay_ms`, `invalid max_delay_ms`, `invalid jitter_percent`, `invalid max_retry_ms`, `request body should be an array of objects`, `no jobs`, `too many jobs`, `invalid delay`, `invalid ttl`, `tries shouldn't be zero`, `ttl is shorter than delay`, `too many attributes, cannot exceed 16`.", body = inline(doc::ErrorOrQuota)),
        (status = 403, response = doc::PublishForbidden),
        (status = 404, description = "`pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "`bulk body too large` (the body over `http.max_bulk_bytes`) or `job too large` (an element over 1 MiB). Over the namespace's quota `max_body`: `{\"error\",\"quota\":\"max_body\",\"limit\",\"usage\"}`.", body = inline(doc::ErrorOrQuota)),
        (status = 429, response = doc::TooManyRequests),
    ),
    extensions(("x-sundial-scopes" = json!(["publish"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn bulk(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let work = publish_bulk(&state, &tenant, req);
    throttle::limited(&state, &tenant, Action::Write, work).await
}

async fn publish_bulk(
    state: &AppState,
    tenant: &Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let (p, body) = Publication::parse(state, tenant, req)?;
    // At most 64 bodies of up to 1 MiB each, and at most `http.max_bulk_bytes`
    // in all.
    let limit = state.bodies.max_bulk;
    let read = body::read(&state.bodies, body, limit, "bulk body too large").await?;
    let raw = &read.bytes;
    let items: Vec<&RawValue> = serde_json::from_slice(raw)
        .map_err(|_| ApiError::bad("request body should be an array of objects"))?;
    if items.is_empty() {
        return Err(ApiError::bad("no jobs"));
    }
    if items.len() > MAX_BULK_JOBS {
        return Err(ApiError::bad("too many jobs"));
    }
    if items.iter().any(|i| i.get().len() > MAX_BODY_BYTES) {
        return Err(ApiError::TooLarge("job too large"));
    }
    let largest = items.iter().map(|i| i.get().len()).max().unwrap_or(0);
    quota::check_body(tenant, &p.quota, largest)?;
    let lanes = tenant.pool().lanes();
    let lane = rand::random_range(0..lanes);
    let jobs: Vec<NewJob> = items
        .iter()
        .map(|i| {
            // A view into the request's buffer: no copy per job.
            let body = raw.slice_ref(i.get().as_bytes());
            p.job(Some(lane), lanes, body).1
        })
        .collect();
    store_within_quota(state, tenant, &p, lane, &jobs).await?;
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    Ok(published(
        state,
        tenant,
        p.queue,
        jobs.len(),
        BulkPublished {
            msg: PublishedMsg::Published,
            job_ids: ids,
        },
    ))
}
