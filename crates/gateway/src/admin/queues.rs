//! A namespace's queues, for operators: the namespaces of a pool, a
//! namespace's queues with their backlog and rates, one queue, and its
//! recent history; and the opening every admin route on a namespace or a
//! queue shares (its checked names, its query, the pool it names).
//!
//! The queue list reads the namespace's queue index in the admin Redis
//! (`sd:queues:<pool>/<ns>`, see `sundial_core::keys`), one page at a time,
//! then each listed queue's counters: its cost grows with the queues
//! listed, not with the pool's keyspace.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::IntoResponse,
};
use sundial_core::job::{check_namespace, check_queue};
use sundial_router::Pool;

use super::answers::queues::{AdminQueue, MoveSummary, NamespaceList, QueueHistory, QueueList};
use crate::openapi::doc;
use crate::{
    api::{
        error::ApiError,
        params::Params,
        queue::{counts_of, stats_of},
    },
    state::AppState,
};

/// Page sizes: default and most.
const PAGE: u64 = 50;
const MAX_PAGE: u64 = 500;

/// The pool named by `?pool=` (default `default`).
pub(super) fn pool(state: &AppState, params: &Params) -> Result<Arc<Pool>, ApiError> {
    let name = params.get("pool").filter(|p| !p.is_empty()).map_or_else(
        || sundial_router::token::DEFAULT_POOL.to_owned(),
        |p| p.into_owned(),
    );
    state
        .live
        .topology()
        .pool(&name)
        .cloned()
        .ok_or(ApiError::NotFound("pool not found"))
}

pub(super) fn names(ns: &str, queue: Option<&str>) -> Result<(), ApiError> {
    check_namespace(ns).map_err(|e| ApiError::bad(e.to_string()))?;
    if let Some(q) = queue {
        check_queue(q).map_err(|e| ApiError::bad(e.to_string()))?;
    }
    Ok(())
}

/// The opening of every route on one namespace: its query, its checked
/// name, and the pool it names.
pub(super) fn namespace_route(
    state: &AppState,
    ns: &str,
    uri: &Uri,
) -> Result<(Params, Arc<Pool>), ApiError> {
    let params = Params::new(uri);
    names(ns, None)?;
    let pool = pool(state, &params)?;
    Ok((params, pool))
}

/// The opening of every route on one queue: its query, checked names,
/// and the pool it names.
pub(super) fn queue_route(
    state: &AppState,
    ns: &str,
    queue: &str,
    uri: &Uri,
) -> Result<(Params, Arc<Pool>), ApiError> {
    let params = Params::new(uri);
    names(ns, Some(queue))?;
    let pool = pool(state, &params)?;
    Ok((params, pool))
}

pub(super) fn page_size(params: &Params) -> Result<u64, ApiError> {
    match params.uint("limit", PAGE)? {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(ApiError::bad(format!("invalid limit: 1 to {MAX_PAGE}"))),
    }
}

/// A namespace's queues
///
/// The namespace's queues in name order, a page at a time, each as `GET
/// /api/{ns}/{queue}/stats` shows it (reading them takes a rate and history
/// sample). A queue is listed once it has been published to, and while it holds
/// jobs: one that holds none leaves the list within about ten minutes (the
/// index's sweep).
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues",
    operation_id = "listQueues",
    tag = "queues",
    params(doc::PoolQuery, doc::ListQueuesParams),
    responses(
        (status = 200, description = "A page of queues.", body = crate::admin::answers::queues::QueueList<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace name contains forbidden characters`, `invalid limit`, `invalid limit: 1 to 500`, `invalid cursor`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (params, pool) = namespace_route(&state, &ns, &uri)?;
    let limit = page_size(&params)?;
    let cursor = params.get("cursor").filter(|c| !c.is_empty());
    if let Some(c) = &cursor {
        check_queue(c).map_err(|_| ApiError::bad("invalid cursor"))?;
    }
    // One more than the page, to know whether another page follows.
    let mut queues = state
        .admin
        .queues()
        .page(pool.name(), &ns, cursor.as_deref(), limit + 1)
        .await?;
    let more = queues.len() as u64 > limit;
    queues.truncate(limit as usize);
    let counted =
        futures::future::try_join_all(queues.iter().map(|q| counts_of(&pool, &ns, q))).await?;
    let mut out = Vec::with_capacity(queues.len());
    for (queue, c) in queues.iter().zip(counted) {
        out.push(stats_of(&state, pool.name(), &ns, queue, &c, true));
    }
    let next = more.then(|| queues.last().cloned());
    // The namespace's move to another pool, if it has one (the dashboard
    // shows it above the queues).
    let next = next.flatten();
    let home = state.admin.homes().get(pool.name(), &ns);
    Ok(Json(QueueList {
        pool: pool.name(),
        namespace: &ns,
        queues: out,
        next_cursor: next.as_deref(),
        moved: home.as_ref().map(MoveSummary::from),
    })
    .into_response())
}

/// One queue
///
/// One queue as the listing shows it, with `pool`; a queue never published to
/// shows zeros.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}",
    operation_id = "getQueue",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The queue.", body = crate::admin::answers::queues::AdminQueue<'_>),
        (status = 400, description = "A bad name. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn one(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let c = counts_of(&pool, &ns, &queue).await?;
    let stats = stats_of(&state, pool.name(), &ns, &queue, &c, true);
    Ok(Json(AdminQueue {
        pool: pool.name(),
        stats,
    })
    .into_response())
}

/// Namespaces of a pool
///
/// The namespaces that have at least one token in the pool, sorted.
#[utoipa::path(
    get,
    path = "/namespaces",
    operation_id = "listNamespaces",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The namespaces.", body = crate::admin::answers::queues::NamespaceList<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn namespaces(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let pool = pool(&state, &Params::new(&uri))?;
    let namespaces = state
        .admin
        .tokens()
        .namespaces(pool.name())
        .ok_or_else(ApiError::tokens_not_loaded)?;
    Ok(Json(NamespaceList {
        pool: pool.name(),
        namespaces,
    })
    .into_response())
}

/// A queue's recent stats
///
/// Samples this gateway took whenever the queue's stats were read (by the
/// dashboard, the CLI or the queue list), at most one per 5 s, kept 10 minutes,
/// in memory (so per gateway, and empty after a restart).
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/history",
    operation_id = "getQueueHistory",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The samples.", body = crate::admin::answers::queues::QueueHistory<'_>),
        (status = 400, description = "A bad name. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn history(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    use crate::history::{INTERVAL_MS, WINDOW_MS};
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let key = format!("{}/{ns}/{queue}", pool.name());
    let points = state.history.points(&key, crate::api::queue::unix_ms());
    Ok(Json(QueueHistory {
        pool: pool.name(),
        namespace: &ns,
        queue: &queue,
        interval_s: INTERVAL_MS / 1000,
        window_s: WINDOW_MS / 1000,
        points,
    })
    .into_response())
}
