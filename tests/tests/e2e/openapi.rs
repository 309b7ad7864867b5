//! The OpenAPI document against the routers, both ways. Every route is
//! registered from its handler's `#[utoipa::path]` (the routers'
//! `routes!`), so every route is documented by construction, and a route
//! added by hand (`.route("…", …)`, undocumented) is refused here; every
//! documented operation, sent to the listener the document names, reaches
//! a handler (not the 404 or 405 fallbacks). `tests/run` also runs a
//! validator from PyPI on the file.

use std::{collections::BTreeSet, path::PathBuf};

use reqwest::Method;
use serde_json::Value;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, token_id};

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
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
fn every_operation_has_a_name_of_its_own_and_says_what_it_answers() {
    let doc = document();
    assert_eq!(doc["openapi"].as_str().map(|v| &v[..4]), Some("3.1."));
    let documented = operations(&doc);
    // Both listeners' routes and the binary's probes and metrics.
    assert!(documented.len() >= 59, "{} operations", documented.len());
    let mut ids = BTreeSet::new();
    for (path, m) in &documented {
        let op = &doc["paths"][path][m];
        let id = op["operationId"].as_str().expect("operationId");
        assert!(ids.insert(id.to_owned()), "operationId {id} twice");
        for key in ["summary", "description"] {
            let text = op[key].as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "{m} {path} has no {key}");
        }
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
fn no_route_is_added_by_hand() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).expect("crates") {
        let src = krate.expect("crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let mut by_hand = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        // `.route("/path", …)` and the like, the path on the same line or
        // the next.
        let routes = [".route(", ".route_service(", ".nest(", ".nest_service("]
            .iter()
            .any(|call| {
                text.match_indices(call)
                    .any(|(i, _)| text[i + call.len()..].trim_start().starts_with('"'))
            });
        if routes {
            let rel = file.strip_prefix(root()).expect("under the root");
            by_hand.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    assert!(
        by_hand.is_empty(),
        "routes added by hand, so not documented: register them with \
         `routes!` from a handler's `#[utoipa::path]`: {by_hand:?}"
    );
}

/// Every handler that documents an operation (`operation_id = "…"` in its
/// `#[utoipa::path]`) is in the document, and nothing else is: a handler
/// registered with `routes!` in a router whose document is thrown away
/// would be served but not documented.
#[test]
fn every_documented_handler_is_in_the_document() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).expect("crates") {
        let src = krate.expect("crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let mut in_code = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for (i, _) in text.match_indices("operation_id = \"") {
            let rest = &text[i + "operation_id = \"".len()..];
            let id = &rest[..rest.find('"').expect("the id's end")];
            assert!(in_code.insert(id.to_owned()), "operation_id {id} twice");
        }
    }
    let doc = document();
    let documented: BTreeSet<String> = operations(&doc)
        .iter()
        .map(|(path, m)| {
            doc["paths"][path][m]["operationId"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    assert_eq!(in_code, documented);
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
    let anonymous = Api::new(gw.admin(), None);
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
            if listener == "admin" {
                // Behind the accounts exactly where the document says.
                let guarded = doc["paths"][&path][&m]["security"] != serde_json::json!([]);
                let r = anonymous
                    .call(method.clone(), &url, body.clone(), &[])
                    .await;
                assert_eq!(
                    r.status == 401,
                    guarded,
                    "{m} {url}: documented as guarded: {guarded}, answered {r:?}"
                );
            }
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
