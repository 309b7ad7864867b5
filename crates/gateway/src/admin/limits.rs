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

/// `POST /token/{ns}/{token}/limit` → 201 `{"limiter": …}`
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

/// `PUT /token/{ns}/{token}/limit` → 200 `{"limiter": …}` (creates or replaces)
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

/// `GET /token/{ns}/{token}/limit` → 200 `{"read","write","interval"}`
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

/// `DELETE /token/{ns}/{token}/limit` → 200 `{"msg":"success"}`
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let token = TokenRef::parse(&token);
    state.admin.limits().delete(&token, &ns).await?;
    Ok(Json(Msg { msg: "success" }))
}

/// `GET /limits` → `[{"namespace","token","limiter"}]`, `token` being the
/// token's id (the secret is not stored).
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
