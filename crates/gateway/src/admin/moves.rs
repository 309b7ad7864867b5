//! Moving a namespace to another pool while its producers and workers go
//! on (`sundial_router::admin::homes` has the states; the mover in every gateway
//! carries its jobs): start a move, and follow it.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
};
use sundial_router::{
    admin::homes::{Home, MoveState},
    mover::namespace::{self, StartError},
    placement,
};

use super::answers::namespaces::NamespaceMove;
use super::queues::namespace_route;
use crate::{
    api::{error::ApiError, queue::counts_of},
    state::AppState,
};

/// The body of a move: the pool to move to.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveTo {
    to: String,
}

/// `POST /namespaces/{ns}/move?pool=` with `{"to":"<pool>"}`: starts moving
/// the namespace (its tokens of `pool`, and its jobs wherever they are
/// served from now) to another pool (`sundial_router::mover::namespace`).
/// 202 with the move.
pub(super) async fn start(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let (_, token_pool) = namespace_route(&state, &ns, &uri)?;
    let read = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    let to: MoveTo = serde_json::from_slice(&read.bytes)
        .map_err(|_| ApiError::bad("invalid body: expected {\"to\":\"<pool>\"}"))?;
    let topology = state.live.topology();
    refuse_leftovers(&state, &topology, token_pool.name(), &ns, &to.to).await?;
    let home = namespace::start(&topology, &state.admin, token_pool.name(), &ns, &to.to)
        .await
        .map_err(|e| match e {
            StartError::NoPool => ApiError::NotFound("pool not found"),
            StartError::TokensUnknown => ApiError::tokens_not_loaded(),
            StartError::NoNamespace => ApiError::NotFound("namespace not found"),
            StartError::Pointless(why) => ApiError::bad(why),
            StartError::Conflict(why) => ApiError::Conflict(why),
            StartError::Engine(e) => e.into(),
        })?;
    Ok((
        StatusCode::ACCEPTED,
        report(&state, token_pool.name(), &ns, &home, None),
    ))
}

/// `GET /namespaces/{ns}/move?pool=`: where the namespace's tokens of
/// `pool` are served from, and how far its move has come; 404 when it
/// never moved.
pub(super) async fn status(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (_, token_pool) = namespace_route(&state, &ns, &uri)?;
    let home = state
        .admin
        .homes()
        .get(token_pool.name(), &ns)
        .ok_or(ApiError::NotFound("namespace has no move"))?;
    // Jobs still in the pool it leaves.
    let left = match (home.state, state.live.topology().pool(&home.from).cloned()) {
        (MoveState::Moved, _) | (_, None) => 0,
        (_, Some(from)) => jobs_in(&state, &from, &ns).await?,
    };
    Ok(report(&state, token_pool.name(), &ns, &home, Some(left)))
}

/// The live jobs of namespace `ns` in `pool`: the counts of its queues
/// there.
async fn jobs_in(state: &AppState, pool: &sundial_router::Pool, ns: &str) -> Result<u64, ApiError> {
    let mut jobs = 0;
    for q in placement::namespace_queues(pool, &state.admin, ns).await? {
        jobs += counts_of(pool, ns, &q).await?.live();
    }
    Ok(jobs)
}

/// 409 when pool `to` holds jobs of a namespace named `ns` that no token
/// of its own owns (left by an earlier tenant of that name, whose tokens
/// were revoked): the move would mix them with this tenant's. Asked only
/// of a move the start would otherwise let begin.
async fn refuse_leftovers(
    state: &AppState,
    topology: &sundial_router::Topology,
    token_pool: &str,
    ns: &str,
    to: &str,
) -> Result<(), ApiError> {
    // Every other refusal is the start's to make, with its own words: an
    // unknown namespace, a move under way or pointless, a same-named
    // tenant with tokens in `to`.
    let tokens = state.admin.tokens();
    let owns = |pool: &str| {
        tokens
            .namespaces(pool)
            .is_some_and(|n| n.iter().any(|n| n == ns))
    };
    let home = state.admin.homes().get(token_pool, ns);
    let settled = home.as_ref().is_none_or(|h| h.state == MoveState::Moved);
    let now_in = home.as_ref().map_or(token_pool, |h| h.to.as_str());
    let asked = owns(token_pool) && !owns(to) && settled && now_in != to && to != token_pool;
    let Some(target) = topology.pool(to).filter(|_| asked) else {
        return Ok(());
    };
    match jobs_in(state, target, ns).await? {
        0 => Ok(()),
        held => Err(ApiError::Conflict(format!(
            "pool {to} holds {held} jobs of a namespace {ns} that no token of its owns (left \
             by an earlier tenant of that name): moving would mix them with this one's; \
             delete them or choose another pool"
        ))),
    }
}

fn report<'a>(
    state: &AppState,
    pool: &'a str,
    ns: &'a str,
    home: &'a Home,
    left: Option<u64>,
) -> Response {
    let answer = NamespaceMove {
        jobs_left: left,
        jobs_moved: state.mover.namespace_moved(&home.from, ns),
        ..NamespaceMove::new(pool, ns, home)
    };
    Json(answer).into_response()
}
