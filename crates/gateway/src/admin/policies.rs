//! `/namespaces/{ns}/queues/{queue}/policy?pool=`: a queue's retry policy
//! (`sundial_router::policy`), read, replaced and cleared. A publish packs
//! its queue's policy into each job it stores: a change holds for jobs
//! published after it.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_router::policy::RetryPolicy;

use super::answers::policies::PolicyAnswer;
use super::queues::queue_route;
use crate::openapi::doc;
use crate::{api::error::ApiError, state::AppState};

fn answer(pool: &str, ns: &str, queue: &str, policy: RetryPolicy) -> Response {
    Json(PolicyAnswer {
        pool,
        namespace: ns,
        queue,
        policy,
    })
    .into_response()
}

/// A queue's retry policy
///
/// How the queue's failed jobs are retried: the backoff after a TTR runs
/// out or a release names no delay, the tries a publish without `tries`
/// gets, and how long after its publish a job may still be retried. Read
/// from this gateway's copy of the table.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/policy",
    operation_id = "getQueuePolicy",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The policy (`{}` when none is set).", body = PolicyAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let policy = state.admin.policies().get(pool.name(), &ns, &queue);
    Ok(answer(pool.name(), &ns, &queue, policy))
}

/// Set a queue's retry policy
///
/// Replaces the queue's policy (`{}` clears it). In force on every gateway
/// within about 0.5 s, for jobs published from then on. See
/// docs/OPERATIONS.md, "Retries".
#[utoipa::path(
    put,
    path = "/namespaces/{ns}/queues/{queue}/policy",
    operation_id = "setQueuePolicy",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = RetryPolicy),
    responses(
        (status = 200, description = "The policy as it is now.", body = PolicyAnswer<'_>),
        (status = 400, description = "The body is not a policy (an unknown field, a value out of its range, a backoff without `initial_delay_ms`), or a bad name. Nothing changed. Messages: `invalid policy: unknown field `backof`, expected one of …`, `invalid policy: multiplier: 1 to 10`, `invalid policy: a backoff needs initial_delay_ms`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, response = doc::NotFound),
        (status = 413, response = doc::PayloadTooLarge),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn set(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let body = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    let text =
        std::str::from_utf8(&body.bytes).map_err(|_| ApiError::bad("invalid policy: not UTF-8"))?;
    let policy = RetryPolicy::from_json(text).map_err(|e| {
        ApiError::bad(if e.starts_with("invalid policy") {
            e
        } else {
            format!("invalid policy: {e}")
        })
    })?;
    state
        .admin
        .policies()
        .set(pool.name(), &ns, &queue, &policy)
        .await?;
    tracing::info!(pool = pool.name(), ns, queue, policy = ?policy, "queue retry policy set");
    Ok(answer(pool.name(), &ns, &queue, policy))
}

/// Clear a queue's retry policy
///
/// Removes the queue's policy: its jobs published from then on are retried
/// as in lmstfy (ready again at once, `limits.default_tries` tries).
#[utoipa::path(
    delete,
    path = "/namespaces/{ns}/queues/{queue}/policy",
    operation_id = "clearQueuePolicy",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The policy as it is now: `{}`.", body = PolicyAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn clear(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    if state
        .admin
        .policies()
        .clear(pool.name(), &ns, &queue)
        .await?
    {
        tracing::info!(pool = pool.name(), ns, queue, "queue retry policy cleared");
    }
    Ok(answer(pool.name(), &ns, &queue, RetryPolicy::default()))
}
