//! What every operation behind a layer shares, added to the operations
//! their handlers document: the layers (the job API's token check, the
//! admin listener's host check and accounts) answer for every route behind
//! them, so their answers are written here once, by where a route is
//! mounted, and not on each handler.

use serde_json::{Value, json};

/// Where an operation is served, and behind which layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// The job API listener, behind the token check.
    Jobs,
    /// The admin listener, open (no account asked).
    Open,
    /// The admin listener, behind its accounts when it has any.
    Guarded,
    /// Both listeners, open.
    Both,
}

const JOB_LISTENER: &str = "http://127.0.0.1:7777";
const ADMIN_LISTENER: &str = "http://127.0.0.1:7778";

/// The shared definition of each path parameter, by its name in a route.
const PATH_PARAMETERS: [(&str, &str); 7] = [
    ("ns", "Namespace"),
    ("queue", "Queue"),
    ("job_id", "JobIdPath"),
    ("name", "ScheduleName"),
    ("token", "AdminToken"),
    ("pool", "PoolPath"),
    ("file", "DashboardFile"),
];

/// Adds to `item`, the operations of `path`, what `exposure` gives them.
pub(super) fn apply(exposure: Exposure, path: &str, item: &mut Value) {
    let item = item.as_object_mut().expect("a path item is an object");
    let parameters: Vec<Value> = path_parameters(path)
        .map(|name| json!({"$ref": format!("#/components/parameters/{name}")}))
        .collect();
    if !parameters.is_empty() {
        item.insert("parameters".into(), Value::Array(parameters));
    }
    if let Some(servers) = servers(exposure) {
        item.insert("servers".into(), servers);
    }
    for (method, operation) in item.iter_mut() {
        if matches!(method.as_str(), "parameters" | "servers") {
            continue;
        }
        operation_layers(exposure, operation);
    }
}

/// The shared parameters of each `{name}` in `path`.
fn path_parameters(path: &str) -> impl Iterator<Item = &'static str> + '_ {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            PATH_PARAMETERS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, shared)| *shared)
                .unwrap_or_else(|| panic!("no shared definition of the path parameter {{{name}}}"))
        })
}

/// The listeners of an operation, when they are not the document's
/// default (the job API's).
fn servers(exposure: Exposure) -> Option<Value> {
    let admin = json!({
        "url": ADMIN_LISTENER,
        "description": "Admin API listener (`admin_listen`, default 127.0.0.1:7778)"
    });
    let jobs = json!({
        "url": JOB_LISTENER,
        "description": "Job API listener (`listen`, default 127.0.0.1:7777)"
    });
    match exposure {
        Exposure::Jobs => None,
        Exposure::Open | Exposure::Guarded => Some(json!([admin])),
        Exposure::Both => Some(json!([jobs, admin])),
    }
}

/// The answers that the layers in front of every operation can give, and
/// the accounts it needs.
fn operation_layers(exposure: Exposure, operation: &mut Value) {
    let mut shared = vec![("414", "UriTooLong"), ("431", "HeaderTooLarge")];
    match exposure {
        Exposure::Jobs => shared.extend([
            ("401", "Unauthorized"),
            ("500", "Internal"),
            ("503", "Unavailable"),
        ]),
        Exposure::Open | Exposure::Both => shared.push(("421", "Misdirected")),
        Exposure::Guarded => shared.extend([
            ("421", "Misdirected"),
            ("401", "AdminUnauthorized"),
            ("403", "CrossSite"),
            ("429", "LoginLockout"),
        ]),
    }
    let responses = operation["responses"]
        .as_object_mut()
        .expect("an operation has responses");
    for answer in responses.values_mut() {
        tag_request_id(answer);
    }
    for (status, name) in shared {
        let reference = json!({"$ref": format!("#/components/responses/{name}")});
        assert!(
            responses.insert(status.into(), reference).is_none(),
            "an operation documents {status}, which a layer answers"
        );
    }
    responses.sort_keys();
    match exposure {
        Exposure::Jobs => {}
        Exposure::Open | Exposure::Both => {
            operation["security"] = json!([]);
        }
        Exposure::Guarded => operation["security"] = json!([{"adminBasic": []}]),
    }
}

/// Every answer the router makes carries `X-Request-ID`.
fn tag_request_id(answer: &mut Value) {
    if answer.get("$ref").is_some() {
        return;
    }
    let headers = answer
        .as_object_mut()
        .expect("a response is an object")
        .entry("headers")
        .or_insert_with(|| json!({}));
    let mut tagged = serde_json::Map::new();
    tagged.insert(
        "X-Request-ID".into(),
        json!({"$ref": "#/components/headers/X-Request-ID"}),
    );
    tagged.extend(std::mem::take(headers.as_object_mut().expect("headers")));
    *headers = Value::Object(tagged);
}
