//! `GET /openapi.json`: the OpenAPI 3.1 document of both listeners, the
//! same on each, and `sundial openapi`. Its operations, parameters and
//! shared responses are written in `manual.json`; the answers' schemas are
//! derived from the types the handlers send ([`schemas`]). The
//! end-to-end test `openapi::` holds it to the routers (every route
//! documented with its methods, every documented operation answered by its
//! route), every answer the end-to-end tests receive is checked against
//! it, and `tests/run` validates it.

mod schemas;

use std::sync::LazyLock;

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use serde_json::Value;

/// The document, as served.
pub static DOCUMENT: LazyLock<String> = LazyLock::new(build);

fn build() -> String {
    let mut doc: Value =
        serde_json::from_str(include_str!("manual.json")).expect("manual.json is JSON");
    let written = doc["components"]["schemas"]
        .as_object_mut()
        .expect("manual.json has components.schemas");
    for (name, schema) in schemas::all() {
        assert!(
            written.insert(name.clone(), schema).is_none(),
            "schema {name} is both derived from its type and written in manual.json"
        );
    }
    let mut text = serde_json::to_string_pretty(&doc).expect("the document serialises");
    text.push('\n');
    text
}

pub async fn document() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}
