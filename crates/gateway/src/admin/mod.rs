//! The admin API, on its own listener: tokens, limits, reload, namespaces,
//! queues and dead letters, pools, info, drains, version, the OpenAPI
//! document, and the web dashboard. Token routes need HTTP basic auth when
//! accounts are configured (so do the rate-limit, reload, namespace,
//! queue, dead-letter, pool-status and dashboard routes); the rest are
//! read-only and open, as in lmstfy. (`/live`, `/ready` and `/metrics` are
//! the binary's, shared with `sundial pumpd`: see [`readiness`].)

mod dashboard;
mod deadletter;
mod info;
mod limits;
mod moves;
mod portable;
mod queues;
mod quotas;
mod tokens;
mod usage;

pub use info::readiness;

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
        .merge(token_routes())
        .merge(namespace_routes())
        .route("/reload", post(reload))
        // One read per slot and shard per call: not for anyone who can
        // reach the listener.
        .route("/pools/{pool}", get(info::pool_status))
        .route("/dashboard", get(dashboard::index))
        .route("/dashboard/{file}", get(dashboard::file))
        .route_layer(middleware::from_fn_with_state(state.clone(), basic_auth));
    Router::new()
        .merge(guarded)
        .route("/pools", get(info::pools))
        .route("/drains", get(info::drains))
        .route("/info", get(info::info))
        .route("/version", get(info::version))
        .route("/openapi.json", get(crate::openapi::document))
        .layer(axum::Extension(reloader))
        .with_state(state)
        .merge(health)
        .fallback(not_found)
        .method_not_allowed_fallback(crate::api::error::method_not_allowed)
}

/// Tokens, their scopes and their rate limits (guarded).
fn token_routes() -> Router<Arc<AppState>> {
    Router::new()
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
}

/// Namespaces, their export, import and move, their queues and dead
/// letters (guarded).
fn namespace_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/namespaces", get(queues::namespaces))
        .route("/namespaces/{ns}/export", get(portable::export))
        .route("/namespaces/{ns}/import", post(portable::import))
        .route(
            "/namespaces/{ns}/move",
            get(moves::status).post(moves::start),
        )
        .route(
            "/namespaces/{ns}/quota",
            get(quotas::get).put(quotas::set).delete(quotas::clear),
        )
        .route("/namespaces/{ns}/usage", get(usage::one))
        .route("/usage", get(usage::all))
        .route("/namespaces/{ns}/queues", get(queues::list))
        .route("/namespaces/{ns}/queues/{queue}", get(queues::one))
        .route(
            "/namespaces/{ns}/queues/{queue}/history",
            get(queues::history),
        )
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter",
            get(deadletter::dead_list),
        )
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter/respawn",
            post(deadletter::dead_respawn),
        )
        .route(
            "/namespaces/{ns}/queues/{queue}/deadletter/delete",
            post(deadletter::dead_delete),
        )
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
    if cross_site(&req) {
        return ApiError::Forbidden("cross-site request refused".to_owned()).into_response();
    }
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

/// Whether a browser sent this change from a page of another site. A
/// browser that holds the admin password (the dashboard's) would send it
/// along with a form or `fetch` from any page (cross-site request
/// forgery); such requests carry `Sec-Fetch-Site` or an `Origin` that is
/// not this listener's. Reads are let through: another site cannot see
/// their answers. The CLI and curl send neither header.
fn cross_site(req: &Request) -> bool {
    use axum::http::{Method, header};
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let headers = req.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, host)| host);
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    origin_host.is_none() || origin_host != host
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
    use super::{cross_site, password_matches};

    fn req(method: &str, headers: &[(&str, &str)]) -> axum::extract::Request {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri("/reload")
            .header("host", "127.0.0.1:7778");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).expect("request")
    }

    #[test]
    fn changes_sent_from_another_site_are_told_apart() {
        // The CLI, curl, and the dashboard's own calls.
        assert!(!cross_site(&req("POST", &[])));
        assert!(!cross_site(&req(
            "POST",
            &[("sec-fetch-site", "same-origin")]
        )));
        assert!(!cross_site(&req("POST", &[("sec-fetch-site", "none")])));
        assert!(!cross_site(&req(
            "POST",
            &[("origin", "http://127.0.0.1:7778")]
        )));
        // Another site's form or fetch, as browsers mark it.
        assert!(cross_site(&req(
            "POST",
            &[("sec-fetch-site", "cross-site")]
        )));
        assert!(cross_site(&req(
            "DELETE",
            &[("sec-fetch-site", "same-site")]
        )));
        assert!(cross_site(&req(
            "PUT",
            &[("origin", "http://evil.example")]
        )));
        assert!(cross_site(&req("POST", &[("origin", "null")])));
        assert!(cross_site(&req(
            "POST",
            &[("origin", "http://127.0.0.1:7779")]
        )));
        // Reads show nothing to another site: let through.
        assert!(!cross_site(&req(
            "GET",
            &[("sec-fetch-site", "cross-site")]
        )));
    }

    #[test]
    fn passwords_match_exactly() {
        assert!(password_matches(Some("s3cret"), "s3cret"));
        assert!(!password_matches(Some("s3cret"), "s3cre"));
        assert!(!password_matches(Some("s3cret"), "s3creT"));
        assert!(!password_matches(None, "anything"));
    }
}
