use axum::http::{HeaderMap, Method};

use super::{cross_site, host_is_known, password_matches};

fn names() -> Vec<String> {
    vec!["sundial-admin.internal".to_owned()]
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("host", "127.0.0.1:7778".parse().expect("host"));
    for (k, v) in pairs {
        h.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            v.parse().expect("value"),
        );
    }
    h
}

fn cross(method: &str, pairs: &[(&str, &str)]) -> bool {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    cross_site(&names(), &method, "/dashboard", &headers(pairs))
}

#[test]
fn the_listener_answers_to_ip_addresses_localhost_and_its_configured_names() {
    let n = names();
    for known in [
        "127.0.0.1",
        "127.0.0.1:7778",
        "10.1.2.3:80",
        "[::1]",
        "[::1]:7778",
        "localhost",
        "LOCALHOST:7778",
        "sundial-admin.internal",
        "Sundial-Admin.Internal:7778",
    ] {
        assert!(host_is_known(&n, known), "{known}");
    }
    for unknown in [
        // A rebound page's own name, with or without its port.
        "attacker.example",
        "attacker.example:7778",
        // Names that only look like a known one.
        "127.0.0.1.attacker.example",
        "localhost.attacker.example",
        "sundial-admin.internal.attacker.example",
        "localhost.",
        "admin.internal",
        // Malformed.
        "",
        ":7778",
        "127.0.0.1:",
        "127.0.0.1:123456",
        "127.0.0.1:77a8",
        "[::1",
        "[::1]x",
        "[not-v6]:7778",
        "::1",
    ] {
        assert!(!host_is_known(&n, unknown), "{unknown}");
    }
    assert!(!host_is_known(&[], "sundial-admin.internal"));
}

#[test]
fn changes_sent_from_another_site_are_told_apart() {
    // The CLI, curl, and the dashboard's own calls.
    assert!(!cross("POST", &[]));
    assert!(!cross("POST", &[("sec-fetch-site", "same-origin")]));
    assert!(!cross("POST", &[("sec-fetch-site", "none")]));
    assert!(!cross("POST", &[("origin", "http://127.0.0.1:7778")]));
    // Another site's form or fetch, as browsers mark it.
    assert!(cross("POST", &[("sec-fetch-site", "cross-site")]));
    assert!(cross("DELETE", &[("sec-fetch-site", "same-site")]));
    assert!(cross("PUT", &[("origin", "http://evil.example")]));
    assert!(cross("POST", &[("origin", "null")]));
    assert!(cross("POST", &[("origin", "http://127.0.0.1:7779")]));
    // An Origin not ours counts, whatever Sec-Fetch-Site says.
    assert!(cross(
        "POST",
        &[
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "same-origin")
        ]
    ));
    // A top-level navigation does not make a change pass.
    assert!(cross(
        "POST",
        &[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-dest", "document")
        ]
    ));
}

#[test]
fn an_origin_must_be_a_known_name_not_only_the_requests_own_host() {
    // A rebound page sends its own name as both Host and Origin.
    let mut h = headers(&[("origin", "http://attacker.example:7778")]);
    h.insert("host", "attacker.example:7778".parse().expect("host"));
    assert!(cross_site(&names(), &Method::POST, "/reload", &h));
    // The same from a configured name passes.
    let mut h = headers(&[("origin", "http://sundial-admin.internal")]);
    h.insert("host", "sundial-admin.internal".parse().expect("host"));
    assert!(!cross_site(&names(), &Method::POST, "/reload", &h));
}

#[test]
fn reads_from_another_site_pass_only_as_top_level_navigations() {
    // A link followed to the dashboard.
    assert!(!cross(
        "GET",
        &[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-dest", "document")
        ]
    ));
    // Another page's image, script, frame or fetch of an export.
    for (mode, dest) in [
        ("no-cors", "image"),
        ("no-cors", "script"),
        ("navigate", "iframe"),
        ("cors", "empty"),
    ] {
        assert!(
            cross(
                "GET",
                &[
                    ("sec-fetch-site", "cross-site"),
                    ("sec-fetch-mode", mode),
                    ("sec-fetch-dest", dest)
                ]
            ),
            "{mode} {dest}"
        );
    }
    assert!(cross("GET", &[("origin", "http://evil.example")]));
    // A navigation to an export or a read of every slot is refused.
    let navigation = headers(&[
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-mode", "navigate"),
        ("sec-fetch-dest", "document"),
    ]);
    for path in ["/namespaces/shop/export", "/info", "/dashboard/app.js"] {
        assert!(
            cross_site(&names(), &Method::GET, path, &navigation),
            "{path}"
        );
    }
    // The dashboard's own reads, and curl's.
    assert!(!cross("GET", &[("sec-fetch-site", "same-origin")]));
    assert!(!cross("GET", &[]));
}

#[test]
fn passwords_match_exactly() {
    assert!(password_matches(Some("s3cret"), "s3cret"));
    assert!(!password_matches(Some("s3cret"), "s3cre"));
    assert!(!password_matches(Some("s3cret"), "s3creT"));
    assert!(!password_matches(None, "anything"));
}
