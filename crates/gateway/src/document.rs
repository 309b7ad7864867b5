//! The OpenAPI document of `sundial serve` (see [`crate::openapi`]): the
//! operations of both listeners' routes, and those the binary adds to the
//! admin listener (its probes and metrics).

use utoipa::openapi::OpenApi;

use crate::{
    admin,
    openapi::{self, Exposure},
};

/// The document, with `extra`: the binary's own routes, by exposure.
pub fn text(extra: Vec<(Exposure, OpenApi)>) -> String {
    let mut parts = vec![
        (Exposure::Jobs, crate::api::routes().into_openapi()),
        (Exposure::Both, openapi::routes::<()>().into_openapi()),
        (Exposure::Open, admin::open_routes().into_openapi()),
        (Exposure::Guarded, admin::guarded_routes().into_openapi()),
    ];
    parts.extend(extra);
    openapi::assemble(parts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_the_same_text_every_time() {
        let first = super::text(Vec::new());
        assert_eq!(first, super::text(Vec::new()), "hash-map order leaked");
        let doc: serde_json::Value = serde_json::from_str(&first).expect("JSON");
        assert!(doc["paths"]["/api/{ns}/{queue}"]["put"].is_object());
    }
}
