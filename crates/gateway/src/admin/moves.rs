//! Moving a namespace to another pool while its producers and workers go
//! on (`sundial_router::homes` has the states; the mover in every gateway
//! carries its jobs): start a move, and follow it.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::{StatusCode, Uri},
    response::IntoResponse,
};
use serde_json::json;
use sundial_router::homes::{Home, MoveState};

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

fn unix_ms() -> u64 {
    crate::api::queue::unix_ms()
}

/// `POST /namespaces/{ns}/move?pool=` with `{"to":"<pool>"}`: starts moving
/// the namespace (its tokens of `pool`, and its jobs wherever they are
/// served from now) to another pool. 202 with the move.
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
    if state.live.topology().pool(&to.to).is_none() {
        return Err(ApiError::NotFound("pool not found"));
    }
    let owners = state
        .tokens
        .namespaces(token_pool.name())
        .ok_or_else(ApiError::tokens_not_loaded)?;
    if !owners.contains(&ns) {
        return Err(ApiError::NotFound("namespace not found"));
    }
    let current = state.tokens.home(token_pool.name(), &ns);
    if let Some(h) = current.as_ref().filter(|h| h.state != MoveState::Moved) {
        return Err(ApiError::Conflict(format!(
            "namespace {ns} is moving already, to pool {} ({})",
            h.to,
            h.state.as_str()
        )));
    }
    let from = current
        .as_ref()
        .map_or_else(|| token_pool.name().to_owned(), |h| h.to.clone());
    if from == to.to {
        return Err(ApiError::bad(format!(
            "namespace {ns} is in pool {from} already"
        )));
    }
    // Another tenant may have the same name in that pool.
    if to.to != token_pool.name()
        && state
            .tokens
            .namespaces(&to.to)
            .is_some_and(|n| n.contains(&ns))
    {
        return Err(ApiError::Conflict(format!(
            "pool {} has a namespace {ns} of its own (tokens of that pool): moving would mix two tenants",
            to.to
        )));
    }
    let home = Home {
        to: to.to.clone(),
        from,
        state: MoveState::Announced,
        since_ms: unix_ms(),
    };
    if !state
        .tokens
        .set_home(token_pool.name(), &ns, Some(&home), current.as_ref())
        .await?
    {
        return Err(ApiError::Conflict(
            "the namespace's home changed meanwhile: look again".to_owned(),
        ));
    }
    tracing::info!(
        pool = token_pool.name(),
        namespace = ns,
        from = home.from,
        to = home.to,
        "namespace move started"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(report(token_pool.name(), &ns, &home, None)),
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
        .tokens
        .home(token_pool.name(), &ns)
        .ok_or(ApiError::NotFound("namespace has no move"))?;
    // Jobs still in the pool it leaves: the counts of its queues there.
    let left = match (home.state, state.live.topology().pool(&home.from).cloned()) {
        (MoveState::Moved, _) | (_, None) => 0,
        (_, Some(from)) => {
            let mut left = 0;
            for q in sundial_router::mover::namespace_queues(&from, &state.tokens, &ns).await? {
                left += counts_of(&from, &ns, &q).await?.live();
            }
            left
        }
    };
    Ok(Json(report(token_pool.name(), &ns, &home, Some(left))))
}

fn report(pool: &str, ns: &str, home: &Home, left: Option<u64>) -> serde_json::Value {
    json!({
        "pool": pool,
        "namespace": ns,
        "from": home.from,
        "to": home.to,
        "state": home.state.as_str(),
        "since_ms": home.since_ms,
        "jobs_left": left,
        "jobs_moved": sundial_router::mover::namespace_moved(&home.from, ns),
    })
}
