//! The admin API, on its own listener: tokens, limits, reload, namespaces,
//! queues and dead letters, pools, info, drains, version, the OpenAPI
//! document, and the web dashboard. When accounts are configured, every
//! route needs HTTP basic auth but `/version`, `/openapi.json` (routes, not
//! data) and the probes `/live` and `/ready` (the binary's, shared with
//! `sundial pumpd`, as is `/metrics`: see [`readiness`]). Every route
//! answers only to the names of `crate::access`: IP addresses, `localhost`
//! and `admin_hosts`.

pub mod answers;
mod attention;
mod dashboard;
mod deadletter;
mod info;
mod jobs;
mod limits;
mod moves;
pub(crate) mod portable;
mod queues;
mod quotas;
mod tokens;
mod usage;

pub use info::readiness;

use std::sync::Arc;

use axum::{
    Router, middleware,
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};

use sundial_router::reload::Reloader;

use crate::{access, api::error::ApiError, state::AppState};

/// The admin API's routes, with the binary's `probes` (`/live`, `/ready`)
/// and `metrics` (`/metrics`) merged in, so that one fallback covers them
/// all.
pub fn router(
    state: Arc<AppState>,
    reloader: Arc<Reloader>,
    probes: Router,
    metrics: Router,
    document: crate::openapi::Document,
) -> Router {
    let access = state.access.clone();
    let guarded = Router::new()
        .merge(token_routes())
        .merge(namespace_routes())
        .route("/reload", post(reload))
        // One read per slot and shard per call: not for anyone who can
        // reach the listener.
        .route("/pools/{pool}", get(info::pool_status))
        // Every tenant's name (`/info` reads every slot for them), and
        // the pools' state.
        .route("/pools", get(info::pools))
        .route("/drains", get(info::drains))
        .route("/info", get(info::info))
        .route("/", get(dashboard::to_dashboard))
        .route("/dashboard", get(dashboard::to_dashboard))
        .route("/dashboard/", get(dashboard::index))
        .route("/dashboard/{file}", get(dashboard::file))
        .layer(axum::Extension(reloader))
        .with_state(state.clone())
        .merge(metrics)
        .route_layer(middleware::from_fn_with_state(
            access.clone(),
            access::basic_auth,
        ));
    Router::new()
        .route("/version", get(info::version))
        .merge(crate::openapi::routes().split_for_parts().0)
        .layer(axum::Extension(document))
        .with_state(state)
        .merge(guarded)
        .merge(probes)
        .fallback(not_found)
        .method_not_allowed_fallback(crate::api::error::method_not_allowed)
        .layer(middleware::from_fn_with_state(access, access::known_host))
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
            get(quotas::get)
                .put(quotas::set)
                .patch(quotas::patch)
                .delete(quotas::clear),
        )
        .route("/namespaces/{ns}/usage", get(usage::one))
        .route("/usage", get(usage::all))
        .route("/attention", get(attention::list))
        .route("/namespaces/{ns}/queues", get(queues::list))
        .route("/namespaces/{ns}/queues/{queue}", get(queues::one))
        .route(
            "/namespaces/{ns}/queues/{queue}/history",
            get(queues::history),
        )
        .route("/namespaces/{ns}/queues/{queue}/jobs", get(jobs::list))
        .route(
            "/namespaces/{ns}/queues/{queue}/jobs/{job_id}",
            get(jobs::one),
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
            let answer = answers::info::Reloaded {
                msg: answers::info::ReloadedMsg::Reloaded,
                changes: summary,
            };
            axum::Json(answer).into_response()
        }
        Err(e) => ApiError::bad(format!("reload failed, pools unchanged: {e:#}")).into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("api not found")
}
