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
use crate::openapi::doc;
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

/// Create a token
///
/// Creates a token in the namespace. Fields come from the query or a form body
/// (`application/x-www-form-urlencoded`, at most 64 KiB), the form's overriding
/// the query's. `scope` and `queues` are Sundial's extension. Every gateway
/// accepts it within about 0.5 s.
#[utoipa::path(
    post,
    path = "/token/{ns}",
    operation_id = "createToken",
    tag = "tokens",
    params(doc::TokenNamespace, doc::CreateTokenParams),
    request_body(content = Option<doc::TokenForm>, content_type = "application/x-www-form-urlencoded", description = "Optional form fields, overriding the query's; read only with this content type."),
    responses(
        (status = 201, description = "Created; the only answer that shows the token.", body = crate::admin::answers::tokens::CreatedToken<'_>),
        (status = 400, description = "A field was refused. Messages: `invalid description`, `the user token was too short`, `the pool was not exists`, `the token has already existed`, `the namespace name was too long`, `namespace name contains forbidden characters`, `queues need a scope: give scope=… too`, `unknown scope \"x\": publish, consume, read or manage`, `a token needs at least one scope`, `a queue name in \"a,,b\" is empty`, `invalid queue name or prefix: \"_x\"`, `at most 100 queues per token`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 409, description = "The namespace of another pool moved into this pool (`POST /namespaces/{ns}/move`): its tokens are that pool's; a token of this pool would name a second tenant of the same name. Sundial's extension. Messages: `namespace shop of pool default lives in pool big (it moved there): create its tokens in pool default`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, description = "The form body is over 64 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
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

/// List a namespace's tokens
///
/// The namespace's tokens in a pool, oldest first, read from Redis. lmstfy's
/// `tokens` map is keyed by id, since Redis holds digests.
#[utoipa::path(
    get,
    path = "/token/{ns}",
    operation_id = "listTokens",
    tag = "tokens",
    params(doc::TokenNamespace, doc::ListTokensParams),
    responses(
        (status = 200, description = "The tokens.", body = crate::admin::answers::tokens::TokenList<'_>),
        (status = 400, description = "A bad namespace name, or an unknown pool. Messages: `the namespace name was too long`, `namespace name contains forbidden characters`, `the pool was not exists`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
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

/// Revoke a token
///
/// Deletes the token (named by itself or its id) and its limit. Every gateway
/// stops accepting it within about 0.5 s; a long poll that waits with it
/// answers 401 when it wakes.
#[utoipa::path(
    delete,
    path = "/token/{ns}/{token}",
    operation_id = "deleteToken",
    tag = "tokens",
    params(doc::TokenNamespace),
    responses(
        (status = 204, description = "Done, whether or not it existed."),
        (status = 400, description = "A bad namespace name. Messages: `the namespace name was too long`, `namespace name contains forbidden characters`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
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

/// A token's scope
///
/// The token as the listing describes it.
#[utoipa::path(
    get,
    path = "/token/{ns}/{token}/scope",
    operation_id = "getTokenScope",
    tag = "tokens",
    params(doc::TokenNamespace),
    responses(
        (status = 200, description = "The token.", body = crate::admin::answers::tokens::TokenView<'_>),
        (status = 400, description = "A bad namespace name. Messages: `the namespace name was too long`, `namespace name contains forbidden characters`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "No such token in the namespace. Messages: `token not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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

/// Set a token's scope
///
/// Gives the token new scopes and queues, in place (a plaintext token is
/// migrated on the way). Every gateway applies it within about 0.5 s; a long
/// poll waiting with the token answers 403 when it wakes.
#[utoipa::path(
    put,
    path = "/token/{ns}/{token}/scope",
    operation_id = "setTokenScope",
    tag = "tokens",
    params(doc::TokenNamespace),
    request_body(content = doc::ScopeUpdate),
    responses(
        (status = 200, description = "The token, described.", body = crate::admin::answers::tokens::TokenView<'_>),
        (status = 400, description = "The body was refused. Messages: `the namespace name was too long`, `namespace name contains forbidden characters`, `invalid scope: expected {\"scopes\":[\"publish\",…],\"queues\":[…]}: unknown field `x``, `the queue list is empty; leave it out to allow every queue`, `a queue name in the list is empty or has a comma`, `unknown scope \"x\": publish, consume, read or manage`, `a token needs at least one scope`, `invalid queue name or prefix: \"_x\"`, `at most 100 queues per token`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "No such token in the namespace. Messages: `token not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 64 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
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

/// Hash plaintext tokens
///
/// Rewrites the tokens an earlier version stored in plaintext as digests, with
/// their limits. Gateways of that earlier version no longer accept them
/// afterwards: run it once every gateway is upgraded.
#[utoipa::path(
    post,
    path = "/tokens/migrate",
    operation_id = "migrateTokens",
    tag = "tokens",
    responses(
        (status = 200, description = "How many were rewritten.", body = crate::admin::answers::tokens::Migrated),
        (status = 400, response = doc::BadRequest),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn migrate(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    let migrated = state.admin.tokens().migrate().await?;
    Ok(Json(Migrated { migrated }))
}
