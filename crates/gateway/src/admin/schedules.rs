//! A queue's schedules on the admin API, for operators and the dashboard:
//! `GET /namespaces/{ns}/queues/{queue}/schedules` lists them as the job
//! API does, and `POST …/schedules/{name}/pause` and `…/resume` hold them
//! and let them go (`?pool=`: the pool of the namespace's tokens). Making
//! and deleting schedules is the tenant's, on the job API.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_router::{Pool, admin::schedules::ScheduleId, placement, schedule::spec::check_name};

use super::queues::queue_route;
use crate::{
    api::{
        answers::schedules::ScheduleList,
        error::ApiError,
        schedules::view::{answer, fires, set_paused},
    },
    openapi::doc,
    state::AppState,
};

/// The pool `ns` of `pool`'s tokens writes to (its home, once moved).
fn writes(state: &AppState, pool: &Pool, ns: &str) -> Result<Arc<Pool>, ApiError> {
    let home = state.admin.homes().get(pool.name(), ns);
    let (name, _) = placement::route(pool.name(), home.as_ref());
    state
        .current_pool(name)
        .ok_or(ApiError::NotFound("pool not found"))
}

/// A queue's schedules
///
/// The queue's schedules by name, each with its next fires and what its
/// slot counts (fires, missed fires, the last fire), as the job API's
/// `GET /api/{ns}/{queue}/schedules` answers them.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/schedules",
    operation_id = "listQueueSchedules",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The queue's schedules.", body = ScheduleList),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let data = writes(&state, &pool, &ns)?;
    let rows = state.admin.schedules().list(pool.name(), &ns, &queue);
    let mut schedules = Vec::with_capacity(rows.len());
    for (name, def) in &rows {
        let id = ScheduleId {
            pool: pool.name(),
            ns: &ns,
            queue: &queue,
            name,
        };
        schedules.push(answer(id, def, fires(&data, id, def).await?));
    }
    Ok(Json(ScheduleList { schedules }).into_response())
}

/// Pauses or resumes schedule `name`, and answers it.
async fn set(
    state: &AppState,
    (ns, queue, name): (String, String, String),
    uri: &Uri,
    paused: bool,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(state, &ns, &queue, uri)?;
    check_name(&name).map_err(|e| ApiError::bad(e.to_string()))?;
    let id = ScheduleId {
        pool: pool.name(),
        ns: &ns,
        queue: &queue,
        name: &name,
    };
    let data = writes(state, &pool, &ns)?;
    let answer = set_paused(state, id, &data, paused).await?;
    Ok(Json(answer).into_response())
}

/// Pause a schedule
///
/// It fires nothing until resumed; its fires meanwhile are skipped, not
/// caught up. In force on the pumps within about 0.5 s.
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/queues/{queue}/schedules/{name}/pause",
    operation_id = "pauseQueueSchedule",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The schedule as it is now.", body = crate::api::answers::schedules::ScheduleAnswer),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn pause(
    State(state): State<Arc<AppState>>,
    Path(path): Path<(String, String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    set(&state, path, &uri, true).await
}

/// Resume a schedule
///
/// It fires again from its next time after now.
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/queues/{queue}/schedules/{name}/resume",
    operation_id = "resumeQueueSchedule",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The schedule as it is now.", body = crate::api::answers::schedules::ScheduleAnswer),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn resume(
    State(state): State<Arc<AppState>>,
    Path(path): Path<(String, String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    set(&state, path, &uri, false).await
}
