//! `/namespaces/{ns}/queues/{queue}/pause` and `/namespaces/{ns}/pause`
//! (`?pool=`): a queue, or a whole namespace, paused and resumed
//! (`sundial_router::admin::pauses`). While paused, consumers get no job
//! (long polls wait on, and are answered once it resumes within their
//! timeout); publishes, timers, TTRs and expiry go on.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};

use super::answers::pauses::PauseAnswer;
use super::queues::{namespace_route, queue_route};
use crate::openapi::doc;
use crate::{api::error::ApiError, state::AppState};

/// The answer for `queue` of `ns` (or the namespace itself) as this
/// gateway's copy of the table has it, or as a change just made it.
fn answer(state: &AppState, pool: &str, ns: &str, queue: Option<&str>) -> Response {
    let pauses = state.admin.pauses();
    let own = pauses.get(pool, ns, queue);
    Json(PauseAnswer {
        pool,
        namespace: ns,
        queue,
        paused: own.is_some(),
        since_ms: own.map(|p| p.since_ms),
        namespace_paused: queue.map(|_| pauses.get(pool, ns, None).is_some()),
    })
    .into_response()
}

/// Pauses `queue` (or the namespace) and waits until this gateway's copy
/// holds the change, so that the answer, and this gateway's consumers,
/// see it at once.
async fn set(
    state: &AppState,
    pool: &str,
    ns: &str,
    queue: Option<&str>,
    paused: bool,
) -> Result<Response, ApiError> {
    let pauses = state.admin.pauses();
    let changed = if paused {
        pauses
            .pause(pool, ns, queue, crate::api::queue::unix_ms())
            .await?
    } else {
        pauses.resume(pool, ns, queue).await?
    };
    if changed {
        state.admin.reload().await?;
        let what = if paused { "paused" } else { "resumed" };
        tracing::info!(pool, ns, queue, "{what}");
    }
    Ok(answer(state, pool, ns, queue))
}

/// Whether a queue is paused
///
/// The queue's own pause, and its namespace's (either holds its
/// consumers), from this gateway's copy of the pause table.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/pause",
    operation_id = "getQueuePause",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "Whether the queue is paused, and its namespace.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn get_queue(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    Ok(answer(&state, pool.name(), &ns, Some(&queue)))
}

/// Pause a queue
///
/// Its consumers get no job until it resumes: a long poll waits on, and is
/// answered once the queue resumes within its timeout. Publishes are
/// accepted; delayed jobs become ready and reservations run out on time.
/// In force on every gateway within about 0.5 s (on this one at once).
/// Pausing a paused queue changes nothing. See docs/OPERATIONS.md,
/// "Pausing".
#[utoipa::path(
    put,
    path = "/namespaces/{ns}/queues/{queue}/pause",
    operation_id = "pauseQueue",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The queue's pause as it is now.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn pause_queue(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    set(&state, pool.name(), &ns, Some(&queue), true).await
}

/// Resume a queue
///
/// Its consumers get jobs again (unless its namespace is paused); long
/// polls that wait on it are answered. Resuming a queue that is not
/// paused changes nothing.
#[utoipa::path(
    delete,
    path = "/namespaces/{ns}/queues/{queue}/pause",
    operation_id = "resumeQueue",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The queue's pause as it is now.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn resume_queue(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    set(&state, pool.name(), &ns, Some(&queue), false).await
}

/// Whether a namespace is paused
///
/// The namespace's own pause (its queues may be paused one by one too:
/// see each queue's), from this gateway's copy of the pause table.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/pause",
    operation_id = "getNamespacePause",
    tag = "namespaces",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "Whether the namespace is paused.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn get_namespace(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    Ok(answer(&state, pool.name(), &ns, None))
}

/// Pause a namespace
///
/// Every queue of the namespace, as if each were paused (see `pauseQueue`),
/// until the namespace resumes; a queue paused itself stays paused then.
#[utoipa::path(
    put,
    path = "/namespaces/{ns}/pause",
    operation_id = "pauseNamespace",
    tag = "namespaces",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The namespace's pause as it is now.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn pause_namespace(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    set(&state, pool.name(), &ns, None, true).await
}

/// Resume a namespace
///
/// Its queues' consumers get jobs again, but for queues paused one by one,
/// which stay paused until they resume; long polls that wait on the others
/// are answered. Resuming a namespace that is not paused changes nothing.
#[utoipa::path(
    delete,
    path = "/namespaces/{ns}/pause",
    operation_id = "resumeNamespace",
    tag = "namespaces",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The namespace's pause as it is now.", body = PauseAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn resume_namespace(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    set(&state, pool.name(), &ns, None, false).await
}
