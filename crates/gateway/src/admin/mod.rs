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
mod pauses;
mod policies;
pub(crate) mod portable;
mod queues;
mod quotas;
mod reload;
mod schedules;
mod tokens;
mod usage;

pub use info::readiness;

use std::sync::Arc;

use axum::{Router, middleware};
use utoipa_axum::{router::OpenApiRouter, routes};

use sundial_router::reload::Reloader;

use crate::{access, api::error::ApiError, openapi::Document, state::AppState};

/// The admin API's routes, with the binary's `probes` (`/live`, `/ready`)
/// and `metrics` (`/metrics`) merged in, so that one fallback covers them
/// all.
pub fn router(
    state: Arc<AppState>,
    reloader: Arc<Reloader>,
    probes: Router,
    metrics: Router,
    document: Document,
) -> Router {
    let access = state.access.clone();
    let guarded = guarded_routes()
        .split_for_parts()
        .0
        .layer(axum::Extension(reloader))
        .with_state(state.clone())
        .merge(metrics)
        .route_layer(middleware::from_fn_with_state(
            access.clone(),
            access::basic_auth,
        ));
    open_routes()
        .merge(crate::openapi::routes())
        .split_for_parts()
        .0
        .layer(axum::Extension(document))
        .with_state(state)
        .merge(guarded)
        .merge(probes)
        .fallback(not_found)
        .method_not_allowed_fallback(crate::api::error::method_not_allowed)
        .layer(middleware::from_fn_with_state(access, access::known_host))
}

/// The admin routes open to anyone who reaches the listener: the build.
pub fn open_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default().routes(routes!(info::version))
}

/// The admin routes behind the accounts, each registered from its
/// handler's `#[utoipa::path]`.
pub fn guarded_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default()
        .merge(token_routes())
        .merge(namespace_routes())
        .merge(queue_routes())
        .routes(routes!(reload::reload))
        // One read per slot and shard per call: not for anyone who can
        // reach the listener.
        .routes(routes!(info::pool_status))
        // Every tenant's name (`/info` reads every slot for them), and
        // the pools' state.
        .routes(routes!(info::pools))
        .routes(routes!(info::drains))
        .routes(routes!(info::info))
        .routes(routes!(dashboard::root))
        .routes(routes!(dashboard::to_dashboard))
        .routes(routes!(dashboard::index))
        .routes(routes!(dashboard::file))
}

/// Tokens, their scopes and their rate limits.
fn token_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default()
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::delete))
        .routes(routes!(tokens::get_scope, tokens::set_scope))
        .routes(routes!(tokens::migrate))
        .routes(routes!(
            limits::get,
            limits::create,
            limits::update,
            limits::delete
        ))
        .routes(routes!(limits::list))
}

/// Namespaces: their export, import and move, quota and usage.
fn namespace_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default()
        .routes(routes!(queues::namespaces))
        .routes(routes!(portable::export::export))
        .routes(routes!(portable::import::import))
        .routes(routes!(moves::status, moves::start))
        .routes(routes!(
            quotas::get,
            quotas::set,
            quotas::patch,
            quotas::clear
        ))
        .routes(routes!(usage::one))
        .routes(routes!(usage::all))
        .routes(routes!(attention::list))
        .routes(routes!(
            pauses::get_namespace,
            pauses::pause_namespace,
            pauses::resume_namespace
        ))
}

/// A namespace's queues, their jobs and dead letters.
fn queue_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default()
        .routes(routes!(queues::list))
        .routes(routes!(queues::one))
        .routes(routes!(queues::history))
        .routes(routes!(jobs::list))
        .routes(routes!(jobs::one))
        .routes(routes!(deadletter::dead_list))
        .routes(routes!(deadletter::dead_respawn))
        .routes(routes!(deadletter::dead_delete))
        .routes(routes!(policies::get, policies::set, policies::clear))
        .routes(routes!(
            pauses::get_queue,
            pauses::pause_queue,
            pauses::resume_queue
        ))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
}

async fn not_found() -> ApiError {
    ApiError::NotFound("api not found")
}
