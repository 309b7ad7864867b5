//! `/live`, `/ready` and `/metrics`: the same three routes on the admin
//! listener of `sundial serve` and of `sundial pumpd`. Each command says
//! what "ready" means for it.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{RawQuery, State},
    http::{StatusCode, header::CONTENT_TYPE},
    response::IntoResponse,
};
use metrics_exporter_prometheus::PrometheusHandle;
use sundial_gateway::{
    admin::answers::info::{Live, LiveStatus, Ready},
    openapi::{Document, Exposure, doc},
};
use utoipa_axum::{router::OpenApiRouter, routes};

/// Whether the process can serve: a status code and a JSON body. The flag
/// is `?strict=true`: every shard must answer.
pub type Readiness = Arc<dyn Fn(bool) -> (StatusCode, serde_json::Value) + Send + Sync>;

/// Whether a query asks `strict=true` (or `1`); like every query here,
/// read leniently: the last value counts, anything else is not strict.
fn strict(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "strict")
        .last()
        .is_some_and(|(_, v)| v == "true" || v == "1")
}

/// `/metrics`'s route, with its document.
pub fn metric_routes() -> OpenApiRouter<PrometheusHandle> {
    OpenApiRouter::default().routes(routes!(metrics_text))
}

/// `/metrics`, rendered from `metrics` (it names namespaces and queues:
/// the admin listeners put it behind their accounts).
pub fn metrics(metrics: PrometheusHandle) -> Router {
    metric_routes().split_for_parts().0.with_state(metrics)
}

/// Prometheus metrics
///
/// Prometheus text format (shared with `sundial pumpd`'s admin listener).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "getMetrics",
    tag = "health",
    responses(
        (status = 200, description = "The metrics.", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
async fn metrics_text(State(metrics): State<PrometheusHandle>) -> impl IntoResponse {
    let mut text = metrics.render();
    text.push_str(&sundial_core::series::render(crate::telemetry::help));
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// `sundial pumpd`'s admin listener: the probes, and `/metrics` behind the
/// config's accounts, answering only to the names `access` knows.
pub fn pumpd_router(
    handle: PrometheusHandle,
    ready: Readiness,
    access: Arc<sundial_gateway::access::AdminAccess>,
) -> Router {
    use axum::middleware::from_fn_with_state;
    use sundial_gateway::access::{basic_auth, known_host};
    probes(ready)
        .merge(metrics(handle).route_layer(from_fn_with_state(access.clone(), basic_auth)))
        .layer(from_fn_with_state(access, known_host))
}

/// The OpenAPI document that both listeners of `sundial serve` serve: the
/// gateway's routes, and the probes and metrics this binary adds.
pub fn document() -> Document {
    let text = sundial_gateway::document::text(vec![
        (Exposure::Open, probe_routes().into_openapi()),
        (Exposure::Guarded, metric_routes().into_openapi()),
    ]);
    Document(text.into())
}

/// `/live` and `/ready`'s routes, with their documents.
pub fn probe_routes() -> OpenApiRouter<Readiness> {
    OpenApiRouter::default()
        .routes(routes!(live))
        .routes(routes!(ready))
}

/// `/live` and `/ready`: open, and naming no tenant.
pub fn probes(ready: Readiness) -> Router {
    probe_routes().split_for_parts().0.with_state(ready)
}

/// Liveness
///
/// 200 while the process runs; the pid tells a supervisor which process
/// holds the port.
#[utoipa::path(
    get,
    path = "/live",
    operation_id = "live",
    tag = "health",
    responses(
        (status = 200, description = "Alive.", body = Live, example = json!({"status": "ok", "pid": 4242})),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
async fn live() -> Json<Live> {
    Json(Live {
        status: LiveStatus::Ok,
        pid: std::process::id(),
    })
}

/// Readiness
///
/// 200 while the gateway serves, also with a shard down (`degraded`); 503
/// while starting (`starting`), shutting down (`draining`), when no shard
/// answers at all (`unavailable`), and with `strict` while any shard is
/// down (`degraded`). The body gives each pool's shards.
#[utoipa::path(
    get,
    path = "/ready",
    operation_id = "ready",
    tag = "health",
    params(doc::ReadyParams),
    responses(
        (status = 200, description = "Serving: `ready`, or `degraded` with a shard down.", body = Ready),
        (status = 400, response = doc::BadRequest),
        (status = 503, description = "Not serving: `starting`, `draining`, `unavailable`, or `degraded` with `strict`.", body = Ready),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
async fn ready(
    State(ready): State<Readiness>,
    RawQuery(q): RawQuery,
) -> (StatusCode, Json<serde_json::Value>) {
    let (code, body) = ready(strict(q.as_deref()));
    (code, Json(body))
}

#[cfg(test)]
mod tests {
    use super::strict;

    #[test]
    fn strict_is_read_leniently() {
        assert!(strict(Some("strict=true")));
        assert!(strict(Some("strict=1")));
        assert!(
            strict(Some("strict=0&strict=true")),
            "the last value counts"
        );
        assert!(!strict(Some("strict=yes")));
        assert!(!strict(Some("other=1")));
        assert!(!strict(None));
    }
}
