//! Token administration: lmstfy's create, list and delete, plus scopes and
//! the migration of tokens stored in plaintext. The admin API shows a token
//! once, when it creates it; afterwards it is named by its id.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
};
use sundial_core::job::check_namespace;
use sundial_router::{Grant, Token, admin::records::TokenRef, token::MIN_CUSTOM_SECRET};

use super::answers::tokens::{CreatedToken, Migrated, TokenList, TokenView};
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
    let pool = pool_param(&state, &params)?;
    let (token, pool) = new_token(&state, &params, pool)?;
    moved_in(&state, &ns, &pool)?;
    let grant = grant_of(&params)?;
    let Some(info) = state
        .admin
        .tokens()
        .create(&token, &ns, &description, &grant)
        .await?
    else {
        return Err(ApiError::bad("the token has already existed"));
    };
    tracing::info!(ns, pool, id = info.id(), scopes = ?grant.scope_names(), "token created");
    let secret = token.to_string();
    let body = CreatedToken {
        token: &secret,
        info: TokenView::from(&info),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The token to create, and its pool: the one `token=` gives (in `pool`
/// unless it names its own), or a new one of `pool`.
fn new_token(
    state: &AppState,
    params: &HashMap<String, String>,
    mut pool: String,
) -> Result<(Token, String), ApiError> {
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
    Ok((token, pool))
}

/// A namespace of another pool that moved (or moves) into this one
/// lives here under the other pool's tokens: a token of this pool would
/// name a second tenant of the same name beside it.
fn moved_in(state: &AppState, ns: &str, pool: &str) -> Result<(), ApiError> {
    if let Some((from, _, _)) = state
        .admin
        .homes()
        .all()
        .into_iter()
        .find(|(p, n, h)| *n == ns && *p != pool && h.to == pool)
    {
        return Err(ApiError::Conflict(format!(
            "namespace {ns} of pool {from} lives in pool {pool} (it moved there): create its \
             tokens in pool {from}"
        )));
    }
    Ok(())
}

/// What a new token may do: `scope=` (and `queues=`), or everything.
fn grant_of(params: &HashMap<String, String>) -> Result<Grant, ApiError> {
    match params.get("scope").filter(|s| !s.is_empty()) {
        Some(scopes) => {
            Grant::parse(scopes, params.get("queues").map(String::as_str)).map_err(ApiError::bad)
        }
        None if params.get("queues").is_some_and(|q| !q.is_empty()) => {
            Err(ApiError::bad("queues need a scope: give scope=… too"))
        }
        None => Ok(Grant::full()),
    }
}

/// `GET /token/{ns}?pool=` → `{"tokens": {id: description}, "details":
/// [...]}`: lmstfy's map, keyed by id since the secrets are not stored.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    let pool = pool_param(&state, &query)?;
    let found = state.admin.tokens().list(&pool, &ns).await?;
    let tokens = found
        .iter()
        .map(|t| (t.id(), t.description.as_str()))
        .collect();
    let details = found.iter().map(TokenView::from).collect();
    Ok(Json(TokenList { tokens, details }).into_response())
}

/// `DELETE /token/{ns}/{token or id}` → 204 (either may carry its `pool:`
/// prefix)
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    if state
        .admin
        .tokens()
        .delete(&TokenRef::parse(&token), &ns)
        .await?
    {
        tracing::info!(ns, "token deleted");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /token/{ns}/{token or id}/scope` → the token, described
pub(super) async fn get_scope(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    match state
        .admin
        .tokens()
        .find(&TokenRef::parse(&token), &ns)
        .await?
    {
        Some(info) => Ok(Json(TokenView::from(&info)).into_response()),
        None => Err(ApiError::NotFound("token not found")),
    }
}

/// A scope as `PUT …/scope` takes it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeBody {
    scopes: Vec<String>,
    #[serde(default)]
    queues: Option<Vec<String>>,
}

/// `PUT /token/{ns}/{token or id}/scope` with `{"scopes":[…],"queues":[…]}`
/// (`queues` left out or null: every queue) → the token, described. Every
/// gateway applies it within about 0.5 s.
pub(super) async fn set_scope(
    State(state): State<Arc<AppState>>,
    Path((ns, token)): Path<(String, String)>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    check_ns(&ns)?;
    let read = crate::api::body::read(&state.bodies, body, 64 * 1024, "body too large").await?;
    let wanted: ScopeBody = serde_json::from_slice(&read.bytes).map_err(|e| {
        ApiError::bad(format!(
            "invalid scope: expected {{\"scopes\":[\"publish\",…],\"queues\":[…]}}: {e}"
        ))
    })?;
    if wanted.queues.as_ref().is_some_and(Vec::is_empty) {
        return Err(ApiError::bad(
            "the queue list is empty; leave it out to allow every queue",
        ));
    }
    if wanted
        .queues
        .iter()
        .flatten()
        .any(|q| q.trim().is_empty() || q.contains(','))
    {
        return Err(ApiError::bad(
            "a queue name in the list is empty or has a comma",
        ));
    }
    let grant = Grant::parse(
        &wanted.scopes.join(","),
        wanted.queues.map(|q| q.join(",")).as_deref(),
    )
    .map_err(ApiError::bad)?;
    match state
        .admin
        .tokens()
        .set_grant(&TokenRef::parse(&token), &ns, &grant)
        .await?
    {
        Some(info) => {
            tracing::info!(ns, id = info.id(), scopes = ?grant.scope_names(), queues = ?grant.queues(), "token scope set");
            Ok(Json(TokenView::from(&info)).into_response())
        }
        None => Err(ApiError::NotFound("token not found")),
    }
}

/// `POST /tokens/migrate` → `{"migrated": N}`: rewrites the tokens an
/// earlier version stored in plaintext as digests. Gateways of that version
/// stop knowing them: run it once all gateways are upgraded.
pub(super) async fn migrate(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    let migrated = state.admin.tokens().migrate().await?;
    Ok(Json(Migrated { migrated }))
}
