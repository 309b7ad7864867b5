//! The API contract, checked on every answer a test receives through
//! [`crate::Api`]: the operation that the OpenAPI document gives for the
//! method and path must list the answer's status (or a `default`), and a
//! JSON answer must match that response's schema. The document is the one
//! the binary under test serves (`sundial openapi`), read once per test
//! process. A path no operation matches (a test of the 404 fallback) is
//! not checked.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use serde_json::{Value, json};

/// One operation of the document: its path template split into segments,
/// `None` where the template has a parameter.
struct Operation {
    method: String,
    template: String,
    segments: Vec<Option<String>>,
    responses: Value,
}

struct Contract {
    text: Vec<u8>,
    doc: Value,
    operations: Vec<Operation>,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let out = std::process::Command::new(crate::sundial::binary())
            .arg("openapi")
            .output()
            .expect("run `sundial openapi`");
        assert!(out.status.success(), "`sundial openapi` failed: {out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("the document is JSON");
        let operations = operations(&doc);
        assert!(!operations.is_empty(), "the document has no operation");
        Contract {
            text: out.stdout,
            doc,
            operations,
            validators: Mutex::new(HashMap::new()),
        }
    })
}

/// The document, as `sundial openapi` prints it.
pub fn document_text() -> &'static [u8] {
    &contract().text
}

/// The document, parsed.
pub fn document() -> &'static Value {
    &contract().doc
}

fn operations(doc: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        let segments: Vec<_> = template
            .split('/')
            .map(|s| (!s.starts_with('{')).then(|| s.to_owned()))
            .collect();
        for method in ["get", "put", "post", "delete", "patch"] {
            if let Some(op) = item.get(method) {
                out.push(Operation {
                    method: method.to_owned(),
                    template: template.clone(),
                    segments: segments.clone(),
                    responses: op["responses"].clone(),
                });
            }
        }
    }
    out
}

/// The operation for `method path`: among the templates that match, the
/// one with the most literal segments (`/x/{a}/peek` before `/x/{a}/{b}`).
fn find<'c>(c: &'c Contract, method: &str, path: &str) -> Option<&'c Operation> {
    let parts: Vec<_> = path.split('/').collect();
    c.operations
        .iter()
        .filter(|op| op.method == method && op.segments.len() == parts.len())
        .filter(|op| {
            op.segments.iter().zip(&parts).all(|(seg, part)| match seg {
                Some(lit) => lit == part,
                None => !part.is_empty(),
            })
        })
        .max_by_key(|op| op.segments.iter().filter(|s| s.is_some()).count())
}

/// Follows a local `$ref` (`#/components/…`) to what it names.
fn resolve<'d>(doc: &'d Value, v: &'d Value) -> &'d Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            resolve(
                doc,
                doc.pointer(pointer)
                    .unwrap_or_else(|| panic!("{r} names nothing")),
            )
        }
        None => v,
    }
}

fn validator(c: &Contract, key: &str, schema: &Value) -> Arc<jsonschema::Validator> {
    let mut cache = c.validators.lock().expect("validators");
    if let Some(v) = cache.get(key) {
        return v.clone();
    }
    // The schema beside the document's components, so that its
    // `#/components/schemas/…` references resolve.
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": c.doc["components"],
        "allOf": [schema],
    });
    let v = Arc::new(
        jsonschema::draft202012::new(&root)
            .unwrap_or_else(|e| panic!("the schema of {key} does not compile: {e}")),
    );
    cache.insert(key.to_owned(), v.clone());
    v
}

/// Checks one answer against the document; panics with what differs.
pub fn check(method: &str, url_path: &str, status: u16, content_type: &str, body: &[u8]) {
    let c = contract();
    let path = url_path.split(['?', '#']).next().unwrap_or(url_path);
    let method = method.to_ascii_lowercase();
    let Some(op) = find(c, &method, path) else {
        return;
    };
    let at = format!("{} {} ({})", method.to_uppercase(), path, op.template);
    let listed = op
        .responses
        .get(status.to_string())
        .or_else(|| op.responses.get(format!("{}XX", status / 100)))
        .or_else(|| op.responses.get("default"));
    let Some(response) = listed else {
        panic!(
            "{at} answered {status}, which the OpenAPI document does not list: {}",
            String::from_utf8_lossy(body)
        );
    };
    let response = resolve(&c.doc, response);
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        return;
    };
    let media = content_type.split(';').next().unwrap_or("").trim();
    let Some(json_media) = content.get("application/json") else {
        return;
    };
    if body.is_empty() && status == 204 {
        return;
    }
    assert_eq!(
        media, "application/json",
        "{at} answered {status} as {content_type:?}, the document says JSON"
    );
    let value: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{at} answered {status} with invalid JSON: {e}"));
    let Some(schema) = json_media.get("schema") else {
        return;
    };
    let key = format!("{} {} {status}", method, op.template);
    let v = validator(c, &key, schema);
    let errors: Vec<String> = v
        .iter_errors(&value)
        .map(|e| format!("at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{at} answered {status} outside the OpenAPI document:\n{}\nthe answer: {value}",
        errors.join("\n")
    );
}
