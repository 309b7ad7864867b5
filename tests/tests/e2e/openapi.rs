//! The OpenAPI document against the routers, both ways. The job API's
//! routes are registered from their handlers' `#[utoipa::path]`, so they
//! are documented by construction; every route still added by hand, in the
//! route tables, must be documented (with each of its methods); and every
//! documented operation, sent to the listener the document names, reaches
//! a handler (not the 404 or 405 fallbacks), so nothing is documented that
//! no route serves. `tests/run` also runs a validator from PyPI on the
//! file.

use std::{collections::BTreeSet, path::PathBuf};

use reqwest::Method;
use serde_json::Value;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, token_id};

/// The files that add routes by hand (`.route("…", …)`, not from a
/// handler's document): the admin API, and the health routes the binary
/// adds to the admin listener.
const TABLES: [&str; 2] = [
    "crates/gateway/src/admin/mod.rs",
    "crates/sundial/src/health.rs",
];

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (path, method) of every `.route("…", get(…).post(…))` in a source file.
fn routes_in(source: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        let open = rest.find('"').expect("a route's path");
        let close = open + 1 + rest[open + 1..].find('"').expect("the path's end");
        let path = &rest[open + 1..close];
        // The method router: up to the parenthesis that closes `.route(`.
        let mut depth = 1;
        let mut end = close + 1;
        for (i, c) in rest[close + 1..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = close + 1 + i;
                break;
            }
        }
        let router = &rest[close + 1..end];
        let mut found = false;
        for m in METHODS {
            let call = format!("{m}(");
            let mut from = 0;
            while let Some(i) = router[from..].find(&call) {
                let i = from + i;
                // `get(` as a method router, not `limits::get)` or `x_get(`.
                let before = router[..i].chars().next_back();
                if !before.is_some_and(|b| b.is_alphanumeric() || b == '_' || b == ':') {
                    out.insert((path.to_owned(), m.to_owned()));
                    found = true;
                }
                from = i + call.len();
            }
        }
        assert!(found, "no method found for route {path}: {router}");
        rest = &rest[end..];
    }
    out
}

/// The document of the binary under test (`sundial openapi`).
fn document() -> Value {
    sundial_tests::contract::document().clone()
}

fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((path.clone(), m.to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_route_added_by_hand_is_documented_with_its_methods() {
    let mut routes = BTreeSet::new();
    for file in TABLES {
        let source = std::fs::read_to_string(root().join(file)).expect("read a route table");
        let found = routes_in(&source);
        assert!(!found.is_empty(), "{file} has no route");
        routes.extend(found);
    }
    let doc = document();
    assert_eq!(doc["openapi"].as_str().map(|v| &v[..4]), Some("3.1."));
    let documented = operations(&doc);
    let missing: Vec<_> = routes.difference(&documented).collect();
    assert!(missing.is_empty(), "routes without a document: {missing:?}");
    // The job API's operations come from its handlers.
    let generated = documented.iter().filter(|(p, _)| p.starts_with("/api/"));
    assert_eq!(generated.count(), 14, "the job API's operations");
    // Every operation says what it answers, under a name of its own.
    let mut ids = BTreeSet::new();
    for (path, m) in &documented {
        let op = &doc["paths"][path][m];
        let id = op["operationId"].as_str().expect("operationId");
        assert!(ids.insert(id.to_owned()), "operationId {id} twice");
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{m} {path} has no responses"
        );
    }
}

/// Every source file under `crates/*/src`, recursively.
fn sources(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_route_is_added_outside_the_scanned_tables() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).expect("crates") {
        let src = krate.expect("crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let mut with_routes = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        // `.route("/path", …)`, the path on the same line or the next.
        let routes = text
            .match_indices(".route(")
            .any(|(i, _)| text[i + ".route(".len()..].trim_start().starts_with('"'));
        if routes {
            let rel = file.strip_prefix(root()).expect("under the root");
            with_routes.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    let tables: BTreeSet<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
    assert_eq!(
        with_routes, tables,
        "routes are declared outside the files this test scans: add the file to TABLES"
    );
}

#[test]
fn the_route_scanner_reads_method_routers_as_axum_writes_them() {
    let source = r#"
        .route("/a/{x}", get(limits::get).post(limits::create).delete(m::delete_all))
        .route(
            "/b",
            put(publish::publish)
                .get(consume::consume),
        )"#;
    let found: Vec<_> = routes_in(source).into_iter().collect();
    let want: Vec<(String, String)> = [
        ("/a/{x}", "delete"),
        ("/a/{x}", "get"),
        ("/a/{x}", "post"),
        ("/b", "get"),
        ("/b", "put"),
    ]
    .iter()
    .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
    .collect();
    assert_eq!(found, want);
}

/// Whether the document puts `path` on the admin listener, the job
/// listener, or both: a path's own `servers`, else the top-level ones.
fn listeners(doc: &Value, path: &str) -> Vec<&'static str> {
    let servers = doc["paths"][path]
        .get("servers")
        .unwrap_or(&doc["servers"])
        .as_array()
        .expect("servers");
    servers
        .iter()
        .map(|s| {
            let url = s["url"].as_str().expect("url");
            if url.ends_with(":7778") {
                "admin"
            } else {
                assert!(url.ends_with(":7777"), "{url}");
                "api"
            }
        })
        .collect()
}

#[tokio::test]
async fn every_documented_operation_reaches_its_handler_on_its_listener() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), "ops-pass-9Xq2vT".to_owned())];
    let gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None).with_basic_auth("ops", "ops-pass-9Xq2vT");
    let token = admin.create_token("ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let job = api.publish("ns", "q", "", b"x").await;

    // Served as `sundial openapi` prints it, the same on both listeners.
    let file = sundial_tests::contract::document_text();
    for base in [gw.api(), gw.admin()] {
        let r = reqwest::get(format!("{base}/openapi.json"))
            .await
            .expect("GET");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-type"].to_str().ok(),
            Some("application/json")
        );
        let served = r.bytes().await.expect("body");
        assert!(
            served.as_ref() == file,
            "{base}/openapi.json is not what `sundial openapi` prints"
        );
    }

    let doc = document();
    let id = token_id(&token);
    let fill = |path: &str| {
        path.replace("{ns}", "ns")
            .replace("{queue}", "q")
            .replace("{job_id}", &job)
            .replace("{token}", &id)
            .replace("{pool}", "default")
            .replace("{file}", "app.js")
    };
    // Destructive operations last, so the rest see a live token and job.
    let mut ops: Vec<_> = operations(&doc).into_iter().collect();
    ops.sort_by_key(|(path, m)| (m == "delete" || path == "/tokens/migrate", path.clone()));
    for (path, m) in ops {
        for listener in listeners(&doc, &path) {
            let client = match listener {
                "admin" => &admin,
                _ => &api,
            };
            let method = Method::from_bytes(m.to_uppercase().as_bytes()).expect("method");
            let body = match (listener, m.as_str()) {
                (_, "get" | "delete") => None,
                _ => Some(b"{}".to_vec()),
            };
            let url = fill(&path);
            let r = client.call(method, &url, body, &[]).await;
            let fallback = r.status == 405
                || (r.status == 404 && r.json == serde_json::json!({"error": "api not found"}));
            assert!(
                !fallback,
                "{m} {url} on the {listener} listener fell through: {r:?}"
            );
        }
    }
}

#[test]
fn every_reference_in_the_document_resolves() {
    let doc = document();
    // Every `$ref` resolves inside the document.
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "$ref" {
                        out.push(v.as_str().expect("a $ref is a string"));
                    } else {
                        refs(v, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let pointer = r.strip_prefix('#').expect("a local $ref");
        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
    }
}

/// The check that every test's answers go through: a documented answer
/// passes, and each kind of drift is caught.
#[test]
fn the_contract_check_catches_an_answer_outside_the_document() {
    use sundial_tests::contract::check;
    let json = "application/json";
    let refused = |method: &str, path: &str, status: u16, body: &[u8]| {
        let (m, p, b) = (method.to_owned(), path.to_owned(), body.to_vec());
        std::panic::catch_unwind(move || check(&m, &p, status, json, &b)).is_err()
    };
    check(
        "GET",
        "/api/ns/q/size?x=1",
        200,
        json,
        br#"{"namespace":"ns","queue":"q","size":3}"#,
    );
    // Paths that no operation matches are the fallback's, not checked.
    check("GET", "/nothing/here", 404, json, b"{}");
    assert!(
        refused(
            "GET",
            "/api/ns/q/size",
            200,
            br#"{"namespace":"ns","queue":"q"}"#
        ),
        "a required field missing"
    );
    assert!(
        refused(
            "GET",
            "/api/ns/q/size",
            200,
            br#"{"namespace":"ns","queue":"q","size":-1}"#
        ),
        "a value out of range"
    );
    assert!(
        refused("GET", "/api/ns/q/size", 418, br#"{"error":"teapot"}"#),
        "a status the operation does not list"
    );
    assert!(
        refused("GET", "/api/ns/q/peek", 200, br#"{"error":"x"}"#),
        "another operation's shape on a literal segment"
    );
    assert!(
        std::panic::catch_unwind(|| check("GET", "/api/ns/q/size", 200, "text/plain", b"3"))
            .is_err(),
        "a JSON answer sent as text"
    );
}
