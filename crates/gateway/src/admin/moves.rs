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
use crate::openapi::doc;
use crate::{
    api::{error::ApiError, queue::counts_of},
    state::AppState,
};

/// The body of a move: the pool to move to.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct MoveTo {
    /// The pool to move to.
    to: String,
}

/// Move a namespace to another pool
///
/// Starts moving the namespace whose tokens are in `pool` to the pool `to`,
/// while its producers and workers go on with the same tokens. The move goes
/// through `announced`, `moving` and `moved` by itself (see the GET). Every
/// gateway's config must list both pools (a gateway that lacks either holds the
/// move at `announced`). A publish whose request straddles the moment its
/// gateway switches writes to the new pool is refused with 503 `server busy,
/// retry later`, nothing stored. A long poll that began before a switch ends
/// with no job as soon as its gateway switches. A namespace may move again once
/// `moved` (also back); see docs/OPERATIONS.md, "Moving a namespace to another
/// pool", for its limits.
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/move",
    operation_id = "startNamespaceMove",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = inline(MoveTo)),
    responses(
        (status = 202, description = "The move has begun (`state` `announced`).", body = crate::admin::answers::namespaces::NamespaceMove<'_>),
        (status = 400, description = "A bad body or name, or a move to the pool the namespace is in. Messages: `invalid body: expected {\"to\":\"<pool>\"}`, `namespace shop is in pool b already`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool (either), or no token of the namespace in `pool`. Messages: `pool not found`, `namespace not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 409, description = "A move of the namespace is under way, the other pool has a namespace of that name with tokens of its own or holds jobs an earlier tenant of that name left, or the home changed meanwhile. Nothing is started. Messages: `namespace shop is moving already, to pool b (moving)`, `pool b has a namespace shop of its own (tokens of that pool): moving would mix two tenants`, `pool b holds 3 jobs of a namespace shop that no token of its owns (left by an earlier tenant of that name): moving would mix them with this one's; delete them or choose another pool`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, response = doc::PayloadTooLarge),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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

/// A namespace's move to another pool
///
/// Where the namespace's tokens of `pool` are served from, and how far its move
/// has come: `state` `announced` (every gateway learns of it; reads cover both
/// pools), `moving` (writes go to `to`; once every gateway writes there, the
/// mover carries the jobs), `moved` (all of them in `to`). `jobs_left`: the
/// namespace's jobs still in `from` (its queues' counts there; 0 once moved);
/// `jobs_moved`: jobs this gateway's mover carried (each gateway counts its
/// own).
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/move",
    operation_id = "getNamespaceMove",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The move.", body = crate::admin::answers::namespaces::NamespaceMove<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "Unknown pool, or the namespace never moved. Messages: `pool not found`, `namespace has no move`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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
