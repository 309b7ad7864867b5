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

/// `GET /namespaces/{ns}/queues?pool=&cursor=&limit=`: the namespace's
/// queues in name order, each with its backlog per state, running totals
/// and rates; `next_cursor` continues the list (`null` at its end).
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

/// `GET /namespaces/{ns}/queues/{queue}?pool=`: one queue, as the listing
/// shows it (a queue that was never published to shows zeros).
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

/// `GET /namespaces?pool=`: the namespaces of the pool that have a token,
/// sorted (a namespace is made by its first token). From this gateway's
/// copy of the token table: no Redis call.
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

/// `GET /namespaces/{ns}/queues/{queue}/history?pool=`: the readings of
/// the queue's backlog and rates this gateway kept (see
/// [`crate::history`]), oldest first.
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
