//! `/namespaces/{ns}/quota?pool=`: a namespace's quota, what it sets over
//! its pool's (`sundial_router::quota`), read, replaced, changed in part
//! and cleared.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_router::{
    Pool,
    quota::{Bound, Quota, QuotaPatch},
};

use super::answers::quotas::{Bounds, QuotaAnswer};
use super::queues::{names, pool};
use crate::{
    api::{error::ApiError, params::Params},
    state::AppState,
};

/// The answer of every quota route: what the namespace is held to (each
/// bound, `null` where none), what it sets itself, and its pool's.
fn answer(state: &AppState, pool: &Pool, ns: &str) -> Response {
    let own = state.admin.quotas().get(pool.name(), ns);
    // A namespace that moved (or moves) to another pool is held to the
    // quota of the pool its jobs are written to, as its requests are.
    let written = state
        .admin
        .homes()
        .get(pool.name(), ns)
        .and_then(|h| state.live.topology().pool(h.writes()).cloned());
    let pool_quota = *written.as_deref().unwrap_or(pool).quota();
    let held = own.over(&pool_quota);
    Json(QuotaAnswer {
        pool: pool.name(),
        namespace: ns,
        quota: Bounds::of(&held, &Bound::ALL),
        set: own,
        pool_quota,
    })
    .into_response()
}

/// The pool and namespace a quota route names: the pool must be in this
/// gateway's config, and the namespace must have a token in it. A read
/// of one that is not there is 404; a change, 400 (nothing changed).
fn named(state: &AppState, ns: &str, uri: &Uri, change: bool) -> Result<Arc<Pool>, ApiError> {
    names(ns, None)?;
    let not_there = |what: String| {
        if change {
            ApiError::bad(what)
        } else {
            ApiError::NotFound("namespace not found")
        }
    };
    let pool = pool(state, &Params::new(uri)).map_err(|e| match e {
        ApiError::NotFound(_) if change => ApiError::bad("pool not found"),
        e => e,
    })?;
    let namespaces = state
        .admin
        .tokens()
        .namespaces(pool.name())
        .ok_or_else(ApiError::tokens_not_loaded)?;
    if namespaces.binary_search_by(|n| n.as_str().cmp(ns)).is_err() {
        return Err(not_there(format!(
            "namespace {ns} has no token in pool {}",
            pool.name()
        )));
    }
    Ok(pool)
}

/// A quota route's body as text: at most 64 KiB of UTF-8.
async fn text(state: &AppState, body: axum::body::Body) -> Result<String, ApiError> {
    let body = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    String::from_utf8(body.bytes.to_vec()).map_err(|_| ApiError::bad("invalid quota: not UTF-8"))
}

/// The 400 of a body that is not a quota (or a patch of one).
fn invalid(e: String) -> ApiError {
    ApiError::bad(format!("invalid quota: {e}"))
}

/// `GET /namespaces/{ns}/quota?pool=`
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let pool = named(&state, &ns, &uri, false)?;
    Ok(answer(&state, &pool, &ns))
}

/// `PUT /namespaces/{ns}/quota?pool=`: body, a JSON object of the fields
/// the namespace sets (replacing what it set; `{}` sets none).
pub(super) async fn set(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let pool = named(&state, &ns, &uri, true)?;
    let quota = Quota::from_json(&text(&state, body).await?).map_err(invalid)?;
    state.admin.quotas().set(pool.name(), &ns, &quota).await?;
    tracing::info!(pool = pool.name(), ns, quota = ?quota, "namespace quota set");
    Ok(answer(&state, &pool, &ns))
}

/// `PATCH /namespaces/{ns}/quota?pool=`: body, a JSON object of the fields
/// to change (a number sets one, `null` removes it); the others stay as
/// the admin Redis holds them, whoever changed them last.
pub(super) async fn patch(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let pool = named(&state, &ns, &uri, true)?;
    let patch = QuotaPatch::from_json(&text(&state, body).await?).map_err(invalid)?;
    if state.admin.quotas().patch(pool.name(), &ns, &patch).await? {
        tracing::info!(pool = pool.name(), ns, patch = ?patch, "namespace quota changed");
    } else {
        // Nothing changed here, but another gateway's change may not have
        // reached this copy yet: answer what Redis holds.
        state.admin.reload().await?;
    }
    Ok(answer(&state, &pool, &ns))
}

/// `DELETE /namespaces/{ns}/quota?pool=`: the namespace sets nothing; its
/// pool's quota holds.
pub(super) async fn clear(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let pool = named(&state, &ns, &uri, true)?;
    if state.admin.quotas().clear(pool.name(), &ns).await? {
        tracing::info!(pool = pool.name(), ns, "namespace quota cleared");
    }
    Ok(answer(&state, &pool, &ns))
}
