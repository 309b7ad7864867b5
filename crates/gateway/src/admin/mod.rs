//! The admin API, on its own listener: tokens, limits, reload, queues and
//! dead letters, pools, info, drains and version. Token routes need HTTP
//! basic auth when accounts are configured (so do the rate-limit, reload,
//! queue, dead-letter and pool-status routes); the rest are read-only and
//! open, as in lmstfy. (`/live`, `/ready` and `/metrics` are
//! the binary's, shared with `sundial pumpd`: see [`readiness`].)

mod info;
mod limits;
mod queues;
mod tokens;

pub use info::readiness;
pub use queues::index_existing;

use std::sync::Arc;

use axum::{
    Router,
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};

use sundial_router::reload::Reloader;

use crate::{api::error::ApiError, state::AppState};

/// The admin API's routes, with `health` (the binary's `/live`, `/ready`
/// and `/metrics`) merged in, so that one fallback covers them all.
pub fn router(state: Arc<AppState>, reloader: Arc<Reloader>, health: Router) -> Router {
    let guarded = Router::new()
        .route("/token/{ns}", get(tokens::list).post(tokens::create))
        .route("/token/{ns}/{token}", delete(tokens::delete))
        .route(
            "/token/{ns}/{token}/scope",
            get(tokens::get_scope).put(tokens::set_scope),
        )
        .route("/tokens/migrate", post(tokens::migrate))
        .route(
            "/token/{ns}/{token}/limit",
            get(limits::get)
                .post(limits::create)
                .put(limits::update)
                .delete(limits::delete),
        )
        .route("/limits", get(limits::list))
        .route("/namespaces/{ns}/queues", get(queues::list))
        .route("/namespaces/{ns}/queues/{queue}", get(queues::one))
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter",
            get(queues::dead_list),
        )
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter/respawn",
            post(queues::dead_respawn),
        )
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter/delete",
            post(queues::dead_delete),
        )
        .route("/reload", post(reload))
        // One read per slot and shard per call: not for anyone who can
        // reach the listener.
        .route("/pools/{pool}", get(info::pool_status))
        .route_layer(middleware::from_fn_with_state(state.clone(), basic_auth));
    Router::new()
        .merge(guarded)
        .route("/pools", get(info::pools))
        .route("/drains", get(info::drains))
        .route("/info", get(info::info))
        .route("/version", get(info::version))
        .layer(axum::Extension(reloader))
        .with_state(state)
        .merge(health)
        .fallback(not_found)
        .method_not_allowed_fallback(crate::api::error::method_not_allowed)
}

/// `POST /reload`: reloads the pools now; 200 with what changed, or 400 with
/// why the new config was refused (the old one stays).
async fn reload(axum::Extension(reloader): axum::Extension<Arc<Reloader>>) -> Response {
    match reloader.reload("admin API").await {
        Ok(summary) => {
            axum::Json(serde_json::json!({ "msg": "reloaded", "changes": summary })).into_response()
        }
        Err(e) => ApiError::bad(format!("reload failed, pools unchanged: {e:#}")).into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("api not found")
}

async fn basic_auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if state.accounts.is_empty() || authorized(&state, &req) {
        return next.run(req).await;
    }
    let mut resp = ApiError::Unauthorized("unauthorized").into_response();
    resp.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Basic realm=\"sundial\""),
    );
    resp
}

fn authorized(state: &AppState, req: &Request) -> bool {
    use headers::{Authorization, Header, authorization::Basic};
    // The scheme is case-insensitive (RFC 9110); so is this decoder.
    let mut values = req
        .headers()
        .get_all(axum::http::header::AUTHORIZATION)
        .iter();
    let Ok(Authorization(creds)) = Authorization::<Basic>::decode(&mut values) else {
        return false;
    };
    password_matches(
        state.accounts.get(creds.username()).map(String::as_str),
        creds.password(),
    )
}

/// Compares the SHA-256 digests in constant time, so that neither the
/// password's length nor its first wrong byte shows in the time taken, and
/// takes as long for an unknown user as for a known one.
fn password_matches(expected: Option<&str>, given: &str) -> bool {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let digest = |s: &str| Sha256::digest(s.as_bytes());
    let (known, expected) = match expected {
        Some(e) => (true, digest(e)),
        None => (false, digest(given)),
    };
    let same: bool = expected.as_slice().ct_eq(digest(given).as_slice()).into();
    known && same
}

#[cfg(test)]
mod tests {
    use super::password_matches;

    #[test]
    fn passwords_match_exactly() {
        assert!(password_matches(Some("s3cret"), "s3cret"));
        assert!(!password_matches(Some("s3cret"), "s3cre"));
        assert!(!password_matches(Some("s3cret"), "s3creT"));
        assert!(!password_matches(None, "anything"));
    }
}
