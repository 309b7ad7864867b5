//! Rate-limit administration (lmstfy's `/token/{ns}/{token}/limit` and
//! `/limits`). A path names a token by the token itself or by its id.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::IntoResponse,
};
use sundial_router::admin::records::{Limit, TokenRef};

use super::answers::limits::{LimitEntry, LimitList, Limiter};
use crate::openapi::doc;
use crate::{api::answers::Msg, api::error::ApiError, state::AppState};

/// Reads and checks a limit body: `{"read":N,"write":N,"interval":seconds}`.
fn parse(body: &[u8]) -> Result<Limit, ApiError> {
    let limit: Limit = serde_json::from_slice(body).map_err(|_| {
        ApiError::bad("invalid limit: expected {\"read\":N,\"write\":N,\"interval\":seconds}")
    })?;
    if limit.interval == 0 {
        return Err(ApiError::bad("invalid limit: interval should be above 0"));
    }
    if limit.read == 0 && limit.write == 0 {
        return Err(ApiError::bad(
            "invalid limit: read or write should be above 0",
        ));
    }
    Ok(limit)
}

/// Create a token's rate limit
///
/// At most `read` consumes and `write` publishes per window of `interval`
/// seconds, counted across gateways; every gateway applies it within about 0.5
/// s.
#[utoipa::path(
    post,
    path = "/token/{ns}/{token}/limit",
    operation_id = "createLimit",
    tag = "limits",
    params(doc::LimitNamespace),
    request_body(content = sundial_router::admin::records::Limit),
    responses(
        (status = 201, description = "Created.", body = crate::admin::answers::limits::Limiter),
        (status = 400, description = "The body was refused, or the token already has a limit (lmstfy answers 500). Messages: `invalid limit: expected {\"read\":N,\"write\":N,\"interval\":seconds}`, `invalid limit: interval should be above 0`, `invalid limit: read or write should be above 0`, `the limit already exists; use PUT to change it`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "No such token. Messages: `token not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 64 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn create(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
    body: axum::body::Body,
) -> Result<impl IntoResponse, ApiError> {
    let token = TokenRef::parse(&token);
    let body = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    let limit = parse(&body.bytes)?;
    match state.admin.limits().set(&token, &ns, limit, true).await? {
        None => return Err(ApiError::NotFound("token not found")),
        Some(false) => {
            return Err(ApiError::bad(
                "the limit already exists; use PUT to change it",
            ));
        }
        Some(true) => {}
    }
    tracing::info!(ns, ?limit, "rate limit created");
    Ok((StatusCode::CREATED, Json(Limiter { limiter: limit })))
}

/// Create or replace a token's rate limit
///
/// Same body and checks as create.
#[utoipa::path(
    put,
    path = "/token/{ns}/{token}/limit",
    operation_id = "setLimit",
    tag = "limits",
    params(doc::LimitNamespace),
    request_body(content = sundial_router::admin::records::Limit),
    responses(
        (status = 200, description = "Set.", body = crate::admin::answers::limits::Limiter),
        (status = 400, description = "The body was refused. Messages: `invalid limit: expected {\"read\":N,\"write\":N,\"interval\":seconds}`, `invalid limit: interval should be above 0`, `invalid limit: read or write should be above 0`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "No such token. Messages: `token not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 64 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn update(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
    body: axum::body::Body,
) -> Result<impl IntoResponse, ApiError> {
    let token = TokenRef::parse(&token);
    let body = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    let limit = parse(&body.bytes)?;
    if state
        .admin
        .limits()
        .set(&token, &ns, limit, false)
        .await?
        .is_none()
    {
        return Err(ApiError::NotFound("token not found"));
    }
    tracing::info!(ns, ?limit, "rate limit set");
    Ok(Json(Limiter { limiter: limit }))
}

/// A token's rate limit
///
/// From this gateway's copy of the tables (refreshed every 0.5 s).
#[utoipa::path(
    get,
    path = "/token/{ns}/{token}/limit",
    operation_id = "getLimit",
    tag = "limits",
    params(doc::LimitNamespace),
    responses(
        (status = 200, description = "The limit.", body = sundial_router::admin::records::Limit),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "The token has no limit, or there is no such token. Messages: `limit not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let token = TokenRef::parse(&token);
    match state.admin.limits().get(&token, &ns) {
        Some(limit) => Ok(Json(limit)),
        None => Err(ApiError::NotFound("limit not found")),
    }
}

/// Delete a token's rate limit
///
/// Removes the limit; `success` whether or not there was one (or such a token).
#[utoipa::path(
    delete,
    path = "/token/{ns}/{token}/limit",
    operation_id = "deleteLimit",
    tag = "limits",
    params(doc::LimitNamespace),
    responses(
        (status = 200, description = "Done.", body = crate::api::answers::Msg<'_>, example = json!({"msg": "success"})),
        (status = 400, response = doc::BadRequest),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let token = TokenRef::parse(&token);
    state.admin.limits().delete(&token, &ns).await?;
    Ok(Json(Msg { msg: "success" }))
}

/// Every rate limit
///
/// Every token that has a limit, with it, from this gateway's copy; `token` is
/// the token's id.
#[utoipa::path(
    get,
    path = "/limits",
    operation_id = "listLimits",
    tag = "limits",
    responses(
        (status = 200, description = "The limits.", body = crate::admin::answers::limits::LimitList<'_>),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn list(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let all = state.admin.limits().all();
    let entries = all
        .iter()
        .map(|(token, limit)| LimitEntry {
            namespace: &token.ns,
            token: token.id(),
            limiter: *limit,
        })
        .collect();
    Json(LimitList(entries)).into_response()
}
