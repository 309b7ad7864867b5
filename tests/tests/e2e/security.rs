//! What a web page can do to a gateway through a browser on the same host.

use reqwest::Method;
use serde_json::json;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, token_id};

/// The headers a browser sends with a `fetch` from a page whose name
/// (`attacker.example`) an attacker rebound to the admin listener's
/// address: the page's own name as `Host` and `Origin`, and same-origin.
fn rebound(port: u16) -> [(&'static str, String); 5] {
    [
        ("Host", format!("attacker.example:{port}")),
        ("Origin", format!("http://attacker.example:{port}")),
        ("Sec-Fetch-Site", "same-origin".to_owned()),
        ("Sec-Fetch-Mode", "cors".to_owned()),
        ("Sec-Fetch-Dest", "empty".to_owned()),
    ]
}

async fn call(api: &Api, method: Method, path: &str, headers: &[(&str, String)]) -> (u16, String) {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = api.call(method, path, None, &headers).await;
    (
        r.status,
        r.json["error"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn a_rebound_web_page_gets_nothing_from_a_default_admin_listener() {
    let redis = RedisServer::start();
    // The default config: no accounts, on loopback.
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let token = admin.create_token("tenant").await;
    Api::new(gw.api(), Some(&token))
        .publish("tenant", "q", "tries=1", b"secret body")
        .await;
    let id = token_id(&token);
    let page = rebound(gw.admin_port);

    // The requests that took over a default install: mint a token, export
    // every job, revoke a token; and the open reads that list tenants.
    for (method, path) in [
        (Method::POST, "/token/victim?description=x".to_owned()),
        (Method::GET, "/namespaces/tenant/export".to_owned()),
        (Method::DELETE, format!("/token/tenant/{id}")),
        (Method::GET, "/info".to_owned()),
        (Method::GET, "/metrics".to_owned()),
        (Method::GET, "/dashboard".to_owned()),
    ] {
        let (status, error) = call(&admin, method.clone(), &path, &page).await;
        assert_eq!(status, 421, "{method} {path}");
        assert!(
            error.contains("\"attacker.example:") && error.contains("admin_hosts"),
            "{method} {path}: {error}"
        );
    }
    // Nothing was done: no token for `victim`, and the tenant's still works.
    let r = admin.get("/token/victim").await;
    assert_eq!(r.json["tokens"], json!({}), "{r:?}");
    let size = Api::new(gw.api(), Some(&token))
        .get("/api/tenant/q/size")
        .await;
    assert_eq!((size.status, size.json["size"].as_u64()), (200, Some(1)));

    // Sent to the listener's address, but from the rebound page's origin.
    let mut other_origin = page.clone();
    other_origin[0].1 = format!("127.0.0.1:{}", gw.admin_port);
    for (method, path) in [
        (Method::POST, "/token/victim?description=x"),
        (Method::GET, "/namespaces/tenant/export"),
    ] {
        let (status, error) = call(&admin, method.clone(), path, &other_origin).await;
        assert_eq!(
            (status, error.as_str()),
            (403, "cross-site request refused"),
            "{method} {path}"
        );
    }
    // An image or script of another site reading an export is refused; a
    // link followed to the dashboard is not.
    let embed = [
        ("Sec-Fetch-Site", "cross-site".to_owned()),
        ("Sec-Fetch-Mode", "no-cors".to_owned()),
        ("Sec-Fetch-Dest", "image".to_owned()),
    ];
    let (status, _) = call(&admin, Method::GET, "/namespaces/tenant/export", &embed).await;
    assert_eq!(status, 403);
    let link = [
        ("Sec-Fetch-Site", "cross-site".to_owned()),
        ("Sec-Fetch-Mode", "navigate".to_owned()),
        ("Sec-Fetch-Dest", "document".to_owned()),
    ];
    let (status, _) = call(&admin, Method::GET, "/dashboard", &link).await;
    assert_eq!(status, 200);

    // Probes and the CLI, by address or by localhost, are served.
    for host in [
        format!("127.0.0.1:{}", gw.admin_port),
        format!("localhost:{}", gw.admin_port),
    ] {
        let (status, _) = call(&admin, Method::GET, "/ready", &[("Host", host.clone())]).await;
        assert_eq!(status, 200, "{host}");
    }
}

#[tokio::test]
async fn a_name_in_admin_hosts_is_served_with_its_own_origin() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = "admin_hosts = [\"Sundial-Admin.test\"]".to_owned();
    let gw = Sundial::start(&cfg);
    let admin = Api::new(gw.admin(), None);
    let named = format!("sundial-admin.test:{}", gw.admin_port);
    let page = [
        ("Host", named.clone()),
        ("Origin", format!("http://{named}")),
        ("Sec-Fetch-Site", "same-origin".to_owned()),
    ];
    let (status, _) = call(&admin, Method::POST, "/token/ops?description=x", &page).await;
    assert_eq!(status, 201);
    let (status, _) = call(&admin, Method::GET, "/info", &page[..1]).await;
    assert_eq!(status, 200);
    // Another name still is not.
    let (status, _) = call(&admin, Method::GET, "/info", &rebound(gw.admin_port)).await;
    assert_eq!(status, 421);
}

#[tokio::test]
async fn every_answer_tells_browsers_not_to_guess_its_type() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let token = admin.create_token("ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let rebound_page = rebound(gw.admin_port);
    let hosts: Vec<(&str, &str)> = vec![("Host", rebound_page[0].1.as_str())];
    for r in [
        api.get("/api/ns/q/size").await,
        api.get("/api/ns/q").await,
        api.get("/nowhere").await,
        Api::new(gw.api(), Some("wrong"))
            .get("/api/ns/q/size")
            .await,
        admin.get("/info").await,
        admin.get("/metrics").await,
        admin.get("/dashboard").await,
        admin.call(Method::GET, "/info", None, &hosts).await,
    ] {
        assert_eq!(
            r.headers
                .get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{r:?}"
        );
    }
}
