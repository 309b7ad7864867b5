//! The public job API, lmstfy-compatible; `docs/API.md` documents it.

pub mod answers;
mod backlog;
pub mod body;
mod consume;
mod deadletter;
pub mod error;
mod jobs;
pub(crate) mod params;
mod publish;
pub(crate) mod queue;
mod queue_metrics;
mod quota;
mod rate_quota;
mod render;
pub mod tenant;
mod throttle;

use std::sync::Arc;

use axum::{
    Router,
    routing::{get, put},
};

use crate::state::AppState;

/// The public API's routes (no listener, so tests can call it in process).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/api/{ns}/{queue}",
            put(publish::publish)
                .get(consume::consume)
                .delete(queue::destroy),
        )
        .route("/api/{ns}/{queue}/bulk", put(publish::bulk))
        .route(
            "/api/{ns}/{queue}/job/{job_id}",
            get(jobs::peek).delete(jobs::delete).put(publish::republish),
        )
        .route("/api/{ns}/{queue}/peek", get(queue::peek))
        .route("/api/{ns}/{queue}/size", get(queue::size))
        .route("/api/{ns}/{queue}/stats", get(queue::stats))
        .route(
            "/api/{ns}/{queue}/deadletter",
            get(deadletter::peek)
                .put(deadletter::respawn)
                .delete(deadletter::delete),
        )
        .route("/api/{ns}/{queue}/deadletter/size", get(deadletter::size))
        .route("/openapi.json", get(crate::openapi::document))
        .fallback(not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
}

async fn not_found() -> error::ApiError {
    error::ApiError::NotFound("api not found")
}
