//! Middleware for both listeners: a request id on every response, request
//! metrics labelled by matched route (never the raw path), and one log line
//! per request.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request},
    http::HeaderValue,
    middleware::Next,
    response::Response,
};

/// Sets `X-Request-ID` (a fresh ULID) and records the request.
pub(crate) async fn observe(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = ulid::Ulid::new().to_string();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let span = tracing::info_span!("request", request_id = %id, %method, route);
    let mut resp = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    let status = resp.status();
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let elapsed = start.elapsed();
    let labels = [
        ("route", route.clone()),
        ("method", method.to_string()),
        ("status", status.as_u16().to_string()),
    ];
    metrics::counter!("sundial_http_requests_total", &labels).increment(1);
    metrics::histogram!("sundial_http_request_duration_seconds", &labels)
        .record(elapsed.as_secs_f64());
    span.in_scope(|| {
        tracing::debug!(
            status = status.as_u16(),
            elapsed_ms = elapsed.as_millis() as u64,
            "request"
        );
    });
    resp
}
