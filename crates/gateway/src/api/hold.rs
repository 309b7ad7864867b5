//! A worker's calls on the job it holds, besides its ack: touch (more time)
//! and release (give it back). Sundial's extensions; each may be fenced on
//! the delivery the worker holds (`?delivery=N`).

use std::sync::Arc;

use axum::{Json, extract::State, response::IntoResponse};
use sundial_core::{Release, Released, Touch, Touched};

use super::{
    answers,
    error::ApiError,
    jobs::{Target, fenced},
    params,
    tenant::Tenant,
};
use crate::openapi::doc;
use crate::state::AppState;

/// 503 for a job that the mover is carrying to another shard.
pub(super) fn moving() -> ApiError {
    ApiError::Unserved("the job is moving to another shard; retry shortly".to_owned())
}

/// Extend a reservation
///
/// The worker that holds a reserved job asks for more time: the job's TTR
/// runs out `ttr` seconds from now (or `ttr_ms` ms) instead of when it was
/// due, unless the job expires first. Only a reserved job can be touched.
/// With `delivery=N`, only while delivery N holds it. Needs scope
/// `consume`. Sundial's extension.
#[utoipa::path(
    post,
    path = "/api/{ns}/{queue}/job/{job_id}/touch",
    operation_id = "touchJob",
    tag = "jobs",
    params(doc::TouchJobParams, doc::DeliveryQuery),
    responses(
        (status = 200, description = "The job stays reserved for the new TTR.", body = answers::Touched<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid job id`, `invalid ttr`, `invalid ttr_ms`, `ttr over limits.max_ttr (43200 s)`, `invalid delivery`.", body = answers::ErrorBody<'_>),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`job not found`; `job is not reserved` (without `delivery`: it is delayed, ready or dead); `pool not found`.", body = answers::ErrorBody<'_>),
        (status = 409, description = "With `delivery`: that delivery no longer holds the job. Nothing changed. Message: `job is not reserved by delivery 3: it was delivered again, or its reservation ended`.", body = answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["consume"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn touch(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant)?;
    let delivery = params::delivery(&tenant.params)?;
    let ttr_ms = params::touch_ttr_ms(&tenant.params, &state.limits)?;
    let weight = super::quota::of(&state, &tenant).weight();
    for (shard, slot) in tenant.job_places(t.queue, &t.id) {
        let touch = Touch {
            id: t.id.clone(),
            delivery,
            ttr_ms,
        };
        match state
            .workers
            .touch(shard, slot, &t.qualified, weight, touch)
            .await?
        {
            Touched::Extended { left_ms, .. } => {
                let body = answers::Touched {
                    msg: answers::TouchedMsg::Touched,
                    job_id: t.id.as_str(),
                    ttr_ms: left_ms,
                };
                return Ok(Json(body).into_response());
            }
            Touched::Fenced => return Err(fenced(delivery)),
            Touched::NotReserved => return Err(ApiError::NotFound("job is not reserved")),
            Touched::Moving => return Err(moving()),
            Touched::Missing => {}
        }
    }
    Err(ApiError::NotFound("job not found"))
}

/// Give a job back (nack)
///
/// The worker that holds a reserved job gives it back: the job waits
/// `delay` seconds (or `delay_ms` ms), then is ready again, at the back of
/// its queue. Without a delay, the job's retry policy sets it (none: at
/// once). The delivery counts as a try unless `spend_try=false`; a release
/// that leaves the job no try sends it to the dead letter. `reason` is kept
/// with the job (peek, the dead letter and the export show it). With
/// `delivery=N`, only while delivery N holds the job. Needs scope
/// `consume`. Sundial's extension.
#[utoipa::path(
    post,
    path = "/api/{ns}/{queue}/job/{job_id}/release",
    operation_id = "releaseJob",
    tag = "jobs",
    params(doc::ReleaseJobParams, doc::DeliveryQuery),
    responses(
        (status = 200, description = "The job is delayed, ready again, or dead.", body = answers::Released<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid job id`, `invalid delay`, `invalid delay_ms`, `invalid spend_try: true or false`, `reason too long: at most 1024 bytes`, `invalid delivery`.", body = answers::ErrorBody<'_>),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`job not found`; `job is not reserved` (without `delivery`: it is delayed, ready or dead); `pool not found`.", body = answers::ErrorBody<'_>),
        (status = 409, description = "With `delivery`: that delivery no longer holds the job. Nothing changed. Message: `job is not reserved by delivery 3: it was delivered again, or its reservation ended`.", body = answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["consume"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn release(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let t = Target::parse(&tenant)?;
    let delivery = params::delivery(&tenant.params)?;
    let asked = params::ReleaseParams::parse(&tenant.params)?;
    let release = Release {
        id: t.id.as_str().to_owned(),
        delivery,
        delay_ms: asked.delay_ms,
        default_delay_ms: 0,
        spend_try: asked.spend_try,
        reason: Some(asked.reason),
    };
    for (shard, slot) in tenant.job_places(t.queue, &t.id) {
        let (to, delay_ms) = match shard.jobs().release(slot, &t.qualified, &release).await? {
            Released::Ready => (answers::ReleasedTo::Ready, 0),
            Released::Delayed(delay_ms) => (answers::ReleasedTo::Delayed, delay_ms),
            Released::Dead => (answers::ReleasedTo::Dead, 0),
            Released::Fenced => return Err(fenced(delivery)),
            Released::NotReserved => return Err(ApiError::NotFound("job is not reserved")),
            Released::Moving => return Err(moving()),
            Released::Missing => continue,
        };
        let body = answers::Released {
            msg: answers::ReleasedMsg::Released,
            job_id: t.id.as_str(),
            state: to,
            delay_ms,
        };
        return Ok(Json(body).into_response());
    }
    Err(ApiError::NotFound("job not found"))
}
