//! `/live`, `/ready` and `/metrics`: the same three routes on the admin
//! listener of `sundial serve` and of `sundial pumpd`. Each command says
//! what "ready" means for it.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::Query,
    http::{StatusCode, header::CONTENT_TYPE},
    routing::get,
};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

/// Whether the process can serve: a status code and a JSON body. The flag
/// is `?strict=true`: every shard must answer.
pub type Readiness = Arc<dyn Fn(bool) -> (StatusCode, serde_json::Value) + Send + Sync>;

#[derive(Debug, serde::Deserialize)]
struct ReadyQuery {
    strict: Option<String>,
}

/// The health routes, with `metrics` rendered at `/metrics`.
pub fn router(metrics: PrometheusHandle, ready: Readiness) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let text = metrics.render();
                async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
            }),
        )
        // The pid tells a supervisor or a test which process holds the port.
        .route(
            "/live",
            get(|| async { Json(json!({ "status": "ok", "pid": std::process::id() })) }),
        )
        .route(
            "/ready",
            get(move |Query(q): Query<ReadyQuery>| {
                let strict = q.strict.is_some_and(|v| v == "true" || v == "1");
                let (code, body) = ready(strict);
                async move { (code, Json(body)) }
            }),
        )
}
