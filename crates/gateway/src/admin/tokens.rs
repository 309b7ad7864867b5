//! Token administration.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
};
use serde_json::json;
use sundial_core::job::check_namespace;
use sundial_router::{Token, token::MIN_CUSTOM_SECRET};

use crate::{api::error::ApiError, state::AppState};

/// Form fields (urlencoded body) merged over the query's. The body is read
/// within the same bounds as a publish's (at most 64 KiB here).
async fn form(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    mut query: HashMap<String, String>,
) -> Result<HashMap<String, String>, ApiError> {
    let is_form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok(query);
    }
    let read = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    query.extend(form_urlencoded::parse(&read.bytes).into_owned());
    Ok(query)
}

fn check_ns(ns: &str) -> Result<(), ApiError> {
    check_namespace(ns).map_err(|e| match e {
        sundial_core::job::NameError::TooLong => ApiError::bad("the namespace name was too long"),
        _ => ApiError::bad("namespace name contains forbidden characters"),
    })
}

fn pool_param(state: &AppState, params: &HashMap<String, String>) -> Result<String, ApiError> {
    let pool = params
        .get("pool")
        .filter(|p| !p.is_empty())
        .cloned()
        .unwrap_or_else(|| sundial_router::token::DEFAULT_POOL.to_owned());
    if state.live.topology().pool(&pool).is_none() {
        return Err(ApiError::bad("the pool was not exists"));
    }
    Ok(pool)
}

/// `POST /token/{ns}?description=…[&token=…][&pool=…]` → 201 `{"token"}`
pub(super) async fn create(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let params = form(&state, &headers, body, query).await?;
    check_ns(&ns)?;
    let description = params.get("description").cloned().unwrap_or_default();
    if description.is_empty() {
        return Err(ApiError::bad("invalid description"));
    }
    let mut pool = pool_param(&state, &params)?;
    let token = match params.get("token").filter(|t| !t.is_empty()) {
        Some(t) => {
            let mut t = Token::parse(t);
            if t.pool == sundial_router::token::DEFAULT_POOL
                && !params.get("token").is_some_and(|s| s.contains(':'))
            {
                t.pool = pool.clone();
            }
            pool = t.pool.clone();
            if t.secret.len() < MIN_CUSTOM_SECRET {
                return Err(ApiError::bad("the user token was too short"));
            }
            if state.live.topology().pool(&pool).is_none() {
                return Err(ApiError::bad("the pool was not exists"));
            }
            t
        }
        None => Token::mint(&pool),
    };
    if !state.tokens.create(&token, &ns, &description).await? {
        return Err(ApiError::bad("the token has already existed"));
    }
    tracing::info!(ns, pool, "token created");
    Ok((
        StatusCode::CREATED,
        Json(json!({ "token": token.to_string() })),
    ))
}

/// `GET /token/{ns}?pool=` → `{"tokens": {token: description}}`
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    let pool = pool_param(&state, &query)?;
    let tokens: serde_json::Map<String, serde_json::Value> = state
        .tokens
        .list(&pool, &ns)
        .await?
        .into_iter()
        .map(|(t, d)| (t.to_string(), d.into()))
        .collect();
    Ok(Json(json!({ "tokens": tokens })))
}

/// `DELETE /token/{ns}/{token}` → 204 (the token may carry its `pool:` prefix)
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    let token = Token::parse(&token);
    if state.tokens.delete(&token, &ns).await? {
        tracing::info!(ns, pool = token.pool, "token deleted");
    }
    Ok(StatusCode::NO_CONTENT)
}
