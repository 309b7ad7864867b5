//! `/live`, `/ready` and `/metrics`: the same three routes on the admin
//! listener of `sundial serve` and of `sundial pumpd`. Each command says
//! what "ready" means for it.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::RawQuery,
    http::{StatusCode, header::CONTENT_TYPE},
    routing::get,
};
use metrics_exporter_prometheus::PrometheusHandle;

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

/// `/metrics`, rendered from `metrics` (it names namespaces and queues:
/// the admin listeners put it behind their accounts).
pub fn metrics(metrics: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let mut text = metrics.render();
            text.push_str(&sundial_core::series::render(crate::telemetry::help));
            async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }),
    )
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

/// The OpenAPI document that both listeners of `sundial serve` serve.
pub fn document() -> sundial_gateway::openapi::Document {
    let text = sundial_gateway::document::text(Vec::new());
    sundial_gateway::openapi::Document(text.into())
}

/// `/live` and `/ready`: open, and naming no tenant.
pub fn probes(ready: Readiness) -> Router {
    Router::new()
        // The pid tells a supervisor or a test which process holds the port.
        .route(
            "/live",
            get(|| async {
                Json(sundial_gateway::admin::answers::info::Live {
                    status: sundial_gateway::admin::answers::info::LiveStatus::Ok,
                    pid: std::process::id(),
                })
            }),
        )
        .route(
            "/ready",
            get(move |RawQuery(q): RawQuery| {
                let (code, body) = ready(strict(q.as_deref()));
                async move { (code, Json(body)) }
            }),
        )
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
