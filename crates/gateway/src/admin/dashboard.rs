//! The web dashboard, on the admin listener behind the same basic auth:
//! one page and its scripts and style, embedded at build time, that read
//! the admin API (namespaces, queues, history, dead letters, quotas,
//! retry policies, schedules, pools, drains). Nothing is fetched from elsewhere: the page's
//! `Content-Security-Policy` allows only this origin.

use axum::{
    extract::Path,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use crate::api::error::ApiError;
use crate::openapi::doc;

const INDEX: &str = include_str!("dashboard/index.html");
const LIB: &str = include_str!("dashboard/lib.js");
const QUOTA: &str = include_str!("dashboard/quota.js");
const RETRY: &str = include_str!("dashboard/policy.js");
const SCHEDULES: &str = include_str!("dashboard/schedules.js");
const JOBS: &str = include_str!("dashboard/jobs.js");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");

/// Same origin only, no framing, no inline script.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; \
                      base-uri 'none'; form-action 'none'";

/// Web dashboard
///
/// The web dashboard (HTML); it reads the admin API with the same credentials,
/// by addresses relative to where it sits (so it works behind a proxy's path
/// prefix).
#[utoipa::path(
    get,
    path = "/dashboard/",
    operation_id = "getDashboard",
    tag = "dashboard",
    responses(
        (status = 200, description = "The page.", body = String, content_type = "text/html"),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// To the dashboard's page
///
/// Leads to `dashboard/`, the page.
#[utoipa::path(
    get,
    path = "/dashboard",
    operation_id = "getDashboardRedirect",
    tag = "dashboard",
    responses(
        (status = 308, description = "To the dashboard's page, `dashboard/`: a relative address, so that a proxy's path prefix stays.", headers(("Location" = String, description = "`dashboard/`"))),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn to_dashboard() -> Response {
    to_page()
}

/// The admin listener's root: to the dashboard
///
/// Leads a browser to the dashboard.
#[utoipa::path(
    get,
    path = "/",
    operation_id = "getAdminRoot",
    tag = "dashboard",
    responses(
        (status = 308, description = "To the dashboard's page, `dashboard/`: a relative address, so that a proxy's path prefix stays.", headers(("Location" = String, description = "`dashboard/`"))),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn root() -> Response {
    to_page()
}

fn to_page() -> Response {
    (
        axum::http::StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, "dashboard/")],
    )
        .into_response()
}

/// Dashboard asset
///
/// The dashboard's embedded static assets.
#[utoipa::path(
    get,
    path = "/dashboard/{file}",
    operation_id = "getDashboardAsset",
    tag = "dashboard",
    responses(
        (status = 200, description = "The asset.", content((String = "text/javascript"), (String = "text/css"))),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "No such asset. Messages: `api not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn file(Path(file): Path<String>) -> Result<Response, ApiError> {
    const JS: &str = "text/javascript; charset=utf-8";
    match file.as_str() {
        "lib.js" => Ok(asset(JS, LIB)),
        "quota.js" => Ok(asset(JS, QUOTA)),
        "policy.js" => Ok(asset(JS, RETRY)),
        "schedules.js" => Ok(asset(JS, SCHEDULES)),
        "jobs.js" => Ok(asset(JS, JOBS)),
        "app.js" => Ok(asset(JS, SCRIPT)),
        "app.css" => Ok(asset("text/css; charset=utf-8", STYLE)),
        _ => Err(ApiError::NotFound("api not found")),
    }
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, kind)], body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    // A new build's page and script go together: ask again each time.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}
