//! `GET /openapi.json`: the OpenAPI 3.1 document of both listeners, the
//! same on each, and `sundial openapi`.
//!
//! Operations come from the routes: each handler carries its
//! `#[utoipa::path]` (method, path, parameters, body, answers), and the
//! routers register handlers from those (`utoipa_axum::routes!`), so a route
//! and its operation are written once. Answers' schemas derive from the
//! types the handlers send ([`schemas`], and the ones the operations name).
//! What every operation behind a layer shares (path parameters, the errors
//! of the token check or of the admin accounts, the listener) is added by
//! [`layers`]. `shared.json` holds what no type or route says: the
//! document's info, the shared responses, path parameters, headers and
//! security schemes; the query parameters are in [`params`]. [`crate::document`] puts the parts together.

mod bodies;
mod layers;
mod params;
mod responses;
mod schemas;

use axum::{
    Extension,
    body::Bytes,
    http::header,
    response::{IntoResponse, Response},
};
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

pub use layers::Exposure;

/// What the handlers' `#[utoipa::path]` attributes name: parameters,
/// shared responses and the bodies no type gives.
pub mod doc {
    pub use super::{bodies::*, params::*, responses::*};
}

/// The document's text, as served.
#[derive(Debug, Clone)]
pub struct Document(pub Bytes);

/// The document made of `parts`: each operation with what its exposure
/// adds, over `shared.json`.
pub fn assemble(parts: Vec<(Exposure, utoipa::openapi::OpenApi)>) -> String {
    let mut doc: Value =
        serde_json::from_str(include_str!("shared.json")).expect("shared.json is JSON");
    let mut derived = schemas::all();
    for (exposure, part) in parts {
        let part = serde_json::to_value(part).expect("an operation serialises");
        if let Some(Value::Object(schemas)) = part.pointer("/components/schemas") {
            derived.extend(schemas.clone());
        }
        let Value::Object(paths) = part["paths"].clone() else {
            continue;
        };
        for (path, mut item) in paths {
            layers::apply(exposure, &path, &mut item);
            unwrap_prose(&mut item);
            optional_bodies(&mut item);
            let entry = doc["paths"]
                .as_object_mut()
                .expect("shared.json has paths")
                .entry(path.clone())
                .or_insert_with(|| Value::Object(Default::default()));
            merge_item(entry, item, &path);
        }
    }
    let written = doc["components"]["schemas"]
        .as_object_mut()
        .expect("shared.json has components.schemas");
    for (name, schema) in derived {
        assert!(
            written.insert(name.clone(), schema).is_none(),
            "schema {name} is both derived from its type and written in shared.json"
        );
    }
    settle_extensions(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc).expect("the document serialises");
    text.push('\n');
    text
}

/// Puts every object's `x-` extensions last, in name order: utoipa keeps
/// them in a hash map, and the document must be the same text every time.
fn settle_extensions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let mut extensions: Vec<(String, Value)> = Vec::new();
            for key in map
                .keys()
                .filter(|k| k.starts_with("x-"))
                .cloned()
                .collect::<Vec<_>>()
            {
                let value = map.shift_remove(&key).expect("the key is there");
                extensions.push((key, value));
            }
            extensions.sort_by(|a, b| a.0.cmp(&b.0));
            map.extend(extensions);
            map.values_mut().for_each(settle_extensions);
        }
        Value::Array(items) => items.iter_mut().for_each(settle_extensions),
        _ => {}
    }
}

/// utoipa writes an optional request body (`content = Option<T>`) as a
/// body that may be `null`; OpenAPI says it with `required: false`, and
/// no body is `null`.
fn optional_bodies(item: &mut Value) {
    for operation in item
        .as_object_mut()
        .into_iter()
        .flat_map(|o| o.values_mut())
    {
        let Some(body) = operation.get_mut("requestBody") else {
            continue;
        };
        let mut optional = false;
        for media in body["content"]
            .as_object_mut()
            .into_iter()
            .flat_map(|c| c.values_mut())
        {
            let Some(Value::Array(one_of)) = media["schema"].get("oneOf") else {
                continue;
            };
            if let [schema, null] = &one_of[..]
                && null == &serde_json::json!({"type": "null"})
            {
                media["schema"] = schema.clone();
                optional = true;
            }
        }
        if optional {
            body["required"] = Value::Bool(false);
        }
    }
}

/// Joins the lines of each operation's summary and description, which
/// come from doc comments wrapped for the source; paragraphs stay apart.
fn unwrap_prose(item: &mut Value) {
    for operation in item
        .as_object_mut()
        .into_iter()
        .flat_map(|o| o.values_mut())
    {
        for key in ["summary", "description"] {
            if let Some(Value::String(text)) = operation.get_mut(key) {
                *text = text
                    .split("\n\n")
                    .map(|paragraph| paragraph.replace('\n', " "))
                    .collect::<Vec<_>>()
                    .join("\n\n");
            }
        }
    }
}

/// Adds `item`'s operations to the path's, refusing one written twice.
fn merge_item(entry: &mut Value, item: Value, path: &str) {
    let Value::Object(item) = item else { return };
    let entry = entry.as_object_mut().expect("a path item is an object");
    for (key, value) in item {
        let twice = entry.insert(key.clone(), value.clone());
        assert!(
            twice.is_none() || twice == Some(value),
            "{key} {path} is documented twice"
        );
    }
}

/// The route of this document, for either listener's router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> OpenApiRouter<S> {
    OpenApiRouter::default().routes(routes!(serve))
}

/// This document
///
/// This OpenAPI document, served on both listeners (job API and admin API)
/// without auth.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "getOpenApi",
    tag = "meta",
    responses(
        (status = 200, description = "The document.", body = doc::OpenApiDocument),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
async fn serve(Extension(Document(text)): Extension<Document>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}
