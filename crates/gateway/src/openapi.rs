//! `GET /openapi.json`: the OpenAPI 3.1 document of both listeners, the
//! same on each. Written by hand in `openapi.json` and embedded at build
//! time; the end-to-end test `openapi::` holds it to the routers (every
//! route documented with its methods, every documented operation answered
//! by its route), and `tests/run` validates it.

use axum::{
    http::header,
    response::{IntoResponse, Response},
};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}
