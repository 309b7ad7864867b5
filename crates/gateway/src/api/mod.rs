//! The public job API, lmstfy-compatible; `docs/API.md` documents it.

pub mod answers;
mod backlog;
pub mod body;
mod bulk;
mod consume;
mod deadletter;
mod dedup;
pub mod error;
mod hold;
mod jobs;
pub(crate) mod params;
mod publish;
pub(crate) mod queue;
mod queue_metrics;
mod quota;
mod rate_quota;
mod render;
mod republish;
mod retry;
pub(crate) mod schedules;
pub mod tenant;
mod throttle;

use std::sync::Arc;

use axum::Router;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{openapi::Document, state::AppState};

/// The public API's operations: each route is registered from its
/// handler's `#[utoipa::path]`, so the document lists exactly these.
pub fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::default()
        .routes(routes!(publish::publish, consume::consume, queue::destroy))
        .routes(routes!(bulk::bulk))
        .routes(routes!(jobs::peek, jobs::delete, republish::republish))
        .routes(routes!(hold::touch))
        .routes(routes!(hold::release))
        .routes(routes!(queue::peek))
        .routes(routes!(queue::size))
        .routes(routes!(queue::stats))
        .routes(routes!(
            deadletter::peek,
            deadletter::respawn,
            deadletter::delete
        ))
        .routes(routes!(deadletter::size))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::put, schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
}

/// The public API's routes (no listener, so tests can call it in process),
/// with the OpenAPI document.
pub fn router(state: Arc<AppState>, document: Document) -> Router {
    let (routes, _) = routes().merge(crate::openapi::routes()).split_for_parts();
    routes
        .layer(axum::Extension(document))
        .fallback(not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
}

async fn not_found() -> error::ApiError {
    error::ApiError::NotFound("api not found")
}
