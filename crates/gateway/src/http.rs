//! Middleware for both listeners: a request id on every response, request
//! metrics labelled by matched route (never the raw path), one log line per
//! request, and the refusal of `HEAD`.

use std::time::Instant;

use http_body_util::BodyExt;

use axum::{
    extract::{MatchedPath, Request},
    http::HeaderValue,
    middleware::Next,
    response::{IntoResponse, Response},
};

/// Namespace and queue of a job-API path (`/api/{ns}/{queue}/...`), for
/// logs. Only the path is read: a token may be in the query, never here.
fn ns_and_queue(path: &str) -> (String, String) {
    let mut parts = path.split('/').skip(1);
    if parts.next() != Some("api") {
        return (String::new(), String::new());
    }
    let ns = parts.next().unwrap_or_default().to_owned();
    let queue = parts.next().unwrap_or_default().to_owned();
    (ns, queue)
}

/// The middleware every listener gets, as one layer (each `from_fn` layer
/// boxes the whole request future again, handler included: with three,
/// perf showed about 5% of the gateway's CPU in those copies): `HEAD` refused,
/// JSON errors, and (with `access`: whether request lines are logged at
/// info) request ids, metrics and logs.
pub fn layered(router: axum::Router, access: Option<bool>) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(access, front))
}

/// What [`layered`] does to each request.
async fn front(
    axum::extract::State(access): axum::extract::State<Option<bool>>,
    req: Request,
    next: Next,
) -> Response {
    match access {
        Some(access_log) => observe(access_log, req, next).await,
        None => answer(req, next).await,
    }
}

/// The answer to a request: 405 for `HEAD`, else the router's, with a JSON
/// body if it is an error.
async fn answer(req: Request, next: Next) -> Response {
    if req.method() == axum::http::Method::HEAD {
        return refuse_head();
    }
    json_errors(next.run(req).await).await
}

/// Answers `HEAD` with 405 before any handler runs. axum would otherwise
/// run the `GET` handler and drop its body, and a consume would reserve a
/// job, spend a try and deliver it to nobody.
fn refuse_head() -> Response {
    crate::api::error::ApiError::MethodNotAllowed.into_response()
}

/// Gives every error a JSON body, `{"error": …}`: the answers of axum's own
/// extractors (a path that is not valid UTF-8, a malformed query) are plain
/// text otherwise. Our handlers' errors are JSON already and pass untouched.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // Rejection texts are short; a long one is cut, not buffered whole.
    let text = match http_body_util::Limited::new(body, 4096).collect().await {
        Ok(c) => String::from_utf8_lossy(&c.to_bytes()).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::json!({ "error": message }).to_string();
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// Sets `X-Request-ID` (a fresh ULID), records the request's metrics, and
/// logs it (at info with `log.access = true`, else at debug).
async fn observe(access_log: bool, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = ulid::Ulid::new().to_string();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let (namespace, queue) = ns_and_queue(req.uri().path());
    let span = tracing::info_span!("request", request_id = %id, %method, route, namespace, queue);
    let mut resp = tracing::Instrument::instrument(answer(req, next), span.clone()).await;
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
        let elapsed_ms = elapsed.as_millis() as u64;
        if access_log {
            tracing::info!(status = status.as_u16(), elapsed_ms, "request");
        } else {
            tracing::debug!(status = status.as_u16(), elapsed_ms, "request");
        }
    });
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_and_queue_come_from_the_path_only() {
        assert_eq!(
            ns_and_queue("/api/shop/emails/job/01X"),
            ("shop".to_owned(), "emails".to_owned())
        );
        assert_eq!(
            ns_and_queue("/api/shop/a,b"),
            ("shop".to_owned(), "a,b".to_owned())
        );
        assert_eq!(ns_and_queue("/token/shop"), (String::new(), String::new()));
    }
}
