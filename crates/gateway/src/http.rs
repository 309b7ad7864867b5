//! Middleware for both listeners: a request id on every response, request
//! metrics labelled by matched route (never the raw path), one log line per
//! request, the refusal of `HEAD`, and `X-Content-Type-Options: nosniff`;
//! `Retry-After` on every 429, and `Connection: close` on an error answered
//! to a request that sent a body (which may not have been read).

use std::{
    collections::HashMap,
    sync::{LazyLock, RwLock},
    time::Instant,
};

use http_body_util::BodyExt;

use axum::{
    extract::{MatchedPath, Request},
    http::{HeaderValue, Method},
    middleware::Next,
    response::{IntoResponse, Response},
};
use metrics::{Counter, Histogram};

/// Namespace and queue of a job-API path (`/api/{ns}/{queue}/...`), for
/// logs. Only the path is read: a token may be in the query, never here.
fn ns_and_queue(path: &str) -> (&str, &str) {
    let mut parts = path.split('/').skip(1);
    if parts.next() != Some("api") {
        return ("", "");
    }
    let ns = parts.next().unwrap_or_default();
    let queue = parts.next().unwrap_or_default();
    (ns, queue)
}

/// The request metrics of one route, method and status.
#[derive(Debug, Clone)]
struct RequestMetrics {
    total: Counter,
    seconds: Histogram,
}

/// Route → (method, status) → handles: made once per series and then read
/// under a shared lock, so that a request builds no labels.
static REQUEST_METRICS: LazyLock<RwLock<ByRoute>> = LazyLock::new(RwLock::default);

/// Route → (method, or `None` for a non-standard one; status) → handles.
type ByRoute = HashMap<String, HashMap<(Option<Method>, u16), RequestMetrics>>;

/// The handles of a route, method and status. Methods outside the standard
/// set are labelled `other`, so that a client cannot make series without
/// bound.
fn request_metrics(route: &str, method: &Method, status: u16) -> RequestMetrics {
    let method = STANDARD_METHODS.contains(method).then(|| method.clone());
    let key = (method, status);
    if let Some(m) = REQUEST_METRICS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(route)
        .and_then(|r| r.get(&key))
    {
        return m.clone();
    }
    let labels = [
        ("route", route.to_owned()),
        (
            "method",
            key.0.as_ref().map_or("OTHER", Method::as_str).to_owned(),
        ),
        ("status", status.to_string()),
    ];
    let m = RequestMetrics {
        total: metrics::counter!("sundial_http_requests_total", &labels),
        seconds: metrics::histogram!("sundial_http_request_duration_seconds", &labels),
    };
    REQUEST_METRICS
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(route.to_owned())
        .or_default()
        .insert(key, m.clone());
    m
}

const STANDARD_METHODS: [Method; 9] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::PATCH,
    Method::TRACE,
    Method::CONNECT,
];

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
/// body if it is an error; every one says its type is the one it names
/// (`nosniff`), so that no browser takes a job body for a page or script.
/// Every 429 says when to retry (1 s unless the refusal said otherwise).
/// An error answered to a request with a body says `Connection: close`:
/// a refusal (401, 403, 413, 429…) may come before the body was read,
/// and then the connection cannot carry another request; a client told
/// so opens a new one instead of failing its next request on this one.
async fn answer(req: Request, next: Next) -> Response {
    use axum::http::header;
    let sent_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    let mut resp = if req.method() == axum::http::Method::HEAD {
        refuse_head()
    } else {
        json_errors(next.run(req).await).await
    };
    let status = resp.status();
    let headers = resp.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if status == axum::http::StatusCode::TOO_MANY_REQUESTS
        && !headers.contains_key(header::RETRY_AFTER)
    {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if sent_body && (status.is_client_error() || status.is_server_error()) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
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
    let body = serde_json::to_string(&crate::api::answers::ErrorBody { error: &message })
        .expect("an error serialises");
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// Sets `X-Request-ID` (a fresh ULID), records the request's metrics, and
/// logs it (at info with `log.access = true`, else at debug).
async fn observe(access_log: bool, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = ulid::Ulid::new();
    let method = req.method().clone();
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    // Shares the request's bytes: nothing copied for the span.
    let uri = req.uri().clone();
    let (namespace, queue) = ns_and_queue(uri.path());
    let span = tracing::info_span!("request", request_id = %id, %method, route, namespace, queue);
    let mut resp = tracing::Instrument::instrument(answer(req, next), span.clone()).await;
    let status = resp.status();
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let elapsed = start.elapsed();
    let m = request_metrics(route, &method, status.as_u16());
    m.total.increment(1);
    m.seconds.record(elapsed.as_secs_f64());
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
        assert_eq!(ns_and_queue("/api/shop/emails/job/01X"), ("shop", "emails"));
        assert_eq!(ns_and_queue("/api/shop/a,b"), ("shop", "a,b"));
        assert_eq!(ns_and_queue("/token/shop"), ("", ""));
    }
}
