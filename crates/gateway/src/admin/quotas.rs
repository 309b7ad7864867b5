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
use crate::openapi::doc;
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

/// A namespace's quota
///
/// What the namespace is held to (`quota`: every bound, `null` where none),
/// what it sets itself (`set`, the quota table) and its pool's (`pool_quota`,
/// from the config). A namespace's own fields lie over its pool's; 0 lifts a
/// bound. Read from this gateway's copy of the table.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/quota",
    operation_id = "getNamespaceQuota",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The quota.", body = crate::admin::answers::quotas::QuotaAnswer<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "404: the pool is not in this gateway's config, or the namespace has no token in it. Messages: `namespace not found`, `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let pool = named(&state, &ns, &uri, false)?;
    Ok(answer(&state, &pool, &ns))
}

/// Set a namespace's quota
///
/// Replaces what the namespace sets (`{}` sets nothing). In force on every
/// gateway within about 0.5 s (each polls the tables' version every 200 ms).
/// See docs/OPERATIONS.md, "Multi-tenancy".
#[utoipa::path(
    put,
    path = "/namespaces/{ns}/quota",
    operation_id = "setNamespaceQuota",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = sundial_router::quota::Quota),
    responses(
        (status = 200, description = "The quota as it is now.", body = crate::admin::answers::quotas::QuotaAnswer<'_>),
        (status = 400, description = "400: the body is not a quota, names an unknown field, or a value that is not a whole number from 0 up or is out of bounds; the pool is not in this gateway's config; or the namespace has no token in the pool. Nothing changed. Messages: `invalid quota: unknown field `max_jobz``, `invalid quota: publish_rate must be a whole number from 0 up, not -1`, `pool not found`, `namespace nobody has no token in pool default`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, response = doc::PayloadTooLarge),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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

/// Change some of a namespace's quota
///
/// Changes the fields the body names (a number sets one, `null` removes it: the
/// pool's bound holds again) and keeps the others as the admin Redis holds them
/// at that moment, so that two changes made at once, on any gateways, both hold
/// (`sundial quota set` sends this). In force on every gateway within about 0.5
/// s. See docs/OPERATIONS.md, "Multi-tenancy".
#[utoipa::path(
    patch,
    path = "/namespaces/{ns}/quota",
    operation_id = "changeNamespaceQuota",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = doc::QuotaPatch),
    responses(
        (status = 200, description = "The quota as it is now.", body = crate::admin::answers::quotas::QuotaAnswer<'_>),
        (status = 400, description = "400: the body is not a quota, names an unknown field, or a value that is not a whole number from 0 up or is out of bounds; the pool is not in this gateway's config; or the namespace has no token in the pool. Nothing changed. Messages: `invalid quota: unknown field `max_jobz``, `invalid quota: publish_rate must be a whole number from 0 up, not -1`, `pool not found`, `namespace nobody has no token in pool default`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, response = doc::PayloadTooLarge),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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

/// Clear a namespace's quota
///
/// Removes what the namespace sets: its pool's quota holds again. 200 whether
/// or not it set anything.
#[utoipa::path(
    delete,
    path = "/namespaces/{ns}/quota",
    operation_id = "clearNamespaceQuota",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The quota as it is now.", body = crate::admin::answers::quotas::QuotaAnswer<'_>),
        (status = 400, description = "400: the body is not a quota, names an unknown field, or a value that is not a whole number from 0 up or is out of bounds; the pool is not in this gateway's config; or the namespace has no token in the pool. Nothing changed. Messages: `invalid quota: unknown field `max_jobz``, `invalid quota: publish_rate must be a whole number from 0 up, not -1`, `pool not found`, `namespace nobody has no token in pool default`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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
