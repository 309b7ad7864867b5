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
    let (status, _) = call(&admin, Method::GET, "/dashboard/", &link).await;
    assert_eq!(status, 200);
    // A window another page opens on an export is no link to the dashboard.
    let (status, _) = call(&admin, Method::GET, "/namespaces/tenant/export", &link).await;
    assert_eq!(status, 403);

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

/// `sundial serve` with these accounts: whether it refused to start, and
/// what it printed.
fn serve_with_accounts(accounts: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("sundial.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n[accounts]\n{accounts}\n\
             [pools.default]\nshards = [{{ url = \"redis://127.0.0.1:{}\" }}]\n",
            sundial_tests::free_port(),
            sundial_tests::free_port(),
            sundial_tests::free_port()
        ),
    )
    .expect("write config");
    let mut child = std::process::Command::new(sundial_tests::sundial_binary())
        .args(["serve", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sundial serve");
    // A refused config ends the process at once; one that is accepted
    // starts serving (no Redis here: it waits), and is stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            let text = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            return (!out.status.success(), text);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    (false, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn weak_admin_passwords_stop_the_gateway_before_it_listens() {
    for (accounts, why) in [
        ("ops = \"\"", "shorter than 12 characters"),
        ("ops = \"s3cret\"", "shorter than 12 characters"),
        ("ops = \"password1234\"", "a well-known default"),
        ("operations = \"Operations\"", "shorter than 12 characters"),
        ("operator-main = \"OPERATOR-MAIN\"", "the user's name"),
        // Not a string: refused without showing it.
        ("ops = 987654321098765", "the value is not shown"),
    ] {
        let (refused, said) = serve_with_accounts(accounts);
        assert!(refused, "{accounts}: {said}");
        assert!(said.contains(why), "{accounts}: {said}");
        let password = accounts
            .split('"')
            .nth(1)
            .unwrap_or_else(|| accounts.trim_start_matches("ops = "));
        assert!(password.is_empty() || !said.contains(password), "{said}");
    }
    let (refused, said) = serve_with_accounts("ops = \"k3P9-vQ2x-7ZmL\"");
    assert!(!refused, "{said}");
}

#[tokio::test]
async fn failed_logins_lock_out_their_address_and_no_other() {
    const PASSWORD: &str = "ops-pass-9Xq2vT";
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), PASSWORD.to_owned())];
    let gw = Sundial::start(&cfg);
    let from = |addr: &str| {
        let mut api = Api::new(gw.admin(), None);
        api.http = reqwest::Client::builder()
            .local_address(addr.parse::<std::net::IpAddr>().expect("ip"))
            .build()
            .expect("client");
        api
    };
    let guesser = from("127.0.0.2");
    // Asking without credentials (as a browser first does) guesses nothing.
    for _ in 0..20 {
        assert_eq!(guesser.get("/namespaces").await.status, 401);
    }
    for i in 0..10 {
        let r = guesser
            .clone()
            .with_basic_auth("ops", &format!("guess-{i}"))
            .get("/namespaces")
            .await;
        assert_eq!(r.status, 401, "guess {i}");
    }
    // The eleventh try is refused even with the right password.
    let r = guesser
        .clone()
        .with_basic_auth("ops", PASSWORD)
        .get("/namespaces")
        .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("too many failed logins from this address")),
        "{r:?}"
    );
    let retry: u64 = r.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("secs");
    assert!((1..=60).contains(&retry), "{retry}");
    // Another address logs in.
    let r = from("127.0.0.3")
        .with_basic_auth("ops", PASSWORD)
        .get("/namespaces")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let metrics = Api::new(gw.admin(), None)
        .with_basic_auth("ops", PASSWORD)
        .get("/metrics")
        .await;
    let text = metrics.json.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("sundial_admin_login_failures_total 10")
            && text.contains("sundial_admin_logins_refused_total 1"),
        "{text}"
    );
}

#[tokio::test]
async fn pumpds_metrics_need_the_accounts_and_its_probes_do_not() {
    const PASSWORD: &str = "ops-pass-9Xq2vT";
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), PASSWORD.to_owned())];
    let pumpd = Sundial::start_pumpd(&cfg, "");
    let anon = Api::pumpd(pumpd.admin());
    assert_eq!(anon.get("/live").await.status, 200);
    let r = anon.get("/metrics").await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = anon
        .clone()
        .with_basic_auth("ops", PASSWORD)
        .get("/metrics")
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.json.as_str().is_some_and(|t| t.contains("sundial_pump")),
        "{r:?}"
    );
    let (status, _) = call(&anon, Method::GET, "/live", &rebound(pumpd.admin_port)).await;
    assert_eq!(status, 421);
}

#[tokio::test]
async fn a_gateway_can_refuse_tokens_in_urls() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = "[http]\nquery_token = false\n".to_owned();
    let gw = Sundial::start(&cfg);
    let token = Api::new(gw.admin(), None).create_token("ns").await;
    let anon = Api::new(gw.api(), None);
    let r = anon.get(&format!("/api/ns/q/size?token={token}")).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("X-Token") && !e.contains(&token)),
        "{r:?}"
    );
    let r = Api::new(gw.api(), Some(&token)).get("/api/ns/q/size").await;
    assert_eq!(r.status, 200, "the header still works");
}

/// One request as a client sent it: its request line, headers and body.
fn read_request(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).expect("read") == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("body");
    head + &String::from_utf8_lossy(&body)
}

#[test]
fn the_cli_sends_a_secret_in_a_body_and_names_a_token_by_its_id() {
    use std::io::Write;
    let secret = "chosen-secret-0123456789";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // Answers every request as the admin API would, enough for the CLI.
    let recorder = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..5 {
            let (mut s, _) = listener.accept().expect("accept");
            seen.push(read_request(&mut s));
            let body = r#"{"token":"t","id":"i","read":0,"write":0,"interval":1}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
        seen
    });
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(sundial_tests::sundial_binary())
            .args(args)
            .env("SUNDIAL_ADMIN_URL", format!("http://127.0.0.1:{port}"))
            .env_remove("SUNDIAL_ADMIN_USER")
            .output()
            .expect("run the CLI");
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    cli(&["token", "create", "ns", "-d", "ci", "--secret", secret]);
    cli(&["token", "revoke", "ns", secret]);
    cli(&["limit", "get", "ns", secret]);
    cli(&["token", "scope", "ns", &format!("eu:{secret}")]);
    let seen = recorder.join().expect("recorder");
    let id = token_id(secret);
    for request in &seen {
        let line = request.lines().next().unwrap_or_default();
        assert!(!line.contains(secret), "a secret in the URL: {line}");
    }
    let create = &seen[0];
    assert!(create.starts_with("POST /token/ns HTTP/1.1"), "{create}");
    assert!(
        create
            .to_ascii_lowercase()
            .contains("content-type: application/x-www-form-urlencoded"),
        "{create}"
    );
    // Form-encoded as the CLI encodes every field (`-` is `%2D`).
    let encoded = secret.replace('-', "%2D");
    assert!(create.ends_with(&format!("token={encoded}")), "{create}");
    assert!(
        seen[1].starts_with(&format!("GET /token/ns/{id}/scope ")),
        "{}",
        seen[1]
    );
    assert!(
        seen[2].starts_with(&format!("DELETE /token/ns/{id} ")),
        "{}",
        seen[2]
    );
    assert!(
        seen[3].starts_with(&format!("GET /token/ns/{id}/limit ")),
        "{}",
        seen[3]
    );
    assert!(
        seen[4].starts_with(&format!("GET /token/ns/eu%3A{id}/scope ")),
        "{}",
        seen[4]
    );
}

#[tokio::test]
async fn no_answer_but_the_one_that_creates_a_token_shows_its_secret() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let admin = Api::new(gw.admin(), None);
    let token = admin.create_token("ns").await;
    let id = token_id(&token);
    // A rate limit of one publish a minute, to see the 429 too.
    let r = admin
        .call(
            Method::POST,
            &format!("/token/ns/{id}/limit"),
            Some(br#"{"read":0,"write":1,"interval":60}"#.to_vec()),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let api = Api::new(gw.api(), Some(&token));
    let job = api.publish("ns", "q", "delay=3600", b"x").await;
    let in_query = Api::new(gw.api(), None);
    let mut answers = vec![
        api.put("/api/ns/q", b"over the limit").await,
        api.get("/api/ns/q?timeout=0").await,
        api.get(&format!("/api/ns/q/job/{job}")).await,
        api.get("/api/ns/q/size").await,
        api.get("/api/ns/q/stats").await,
        api.get("/api/ns/q/peek").await,
        api.get("/api/other/q/size").await,
        api.get("/api/ns/q/job/not-an-id").await,
        in_query.get(&format!("/api/ns/q/size?token={token}")).await,
        in_query
            .get(&format!("/api/other/q/size?token={token}"))
            .await,
        Api::new(gw.api(), Some(&format!("{token}x")))
            .get("/api/ns/q/size")
            .await,
    ];
    for path in [
        "/token/ns".to_owned(),
        format!("/token/ns/{id}/scope"),
        format!("/token/ns/{id}/limit"),
        format!("/token/ns/{token}/scope"),
        "/limits".to_owned(),
        "/info".to_owned(),
        "/usage".to_owned(),
        "/namespaces".to_owned(),
        "/namespaces/ns/queues".to_owned(),
        "/namespaces/ns/export".to_owned(),
        "/metrics".to_owned(),
    ] {
        answers.push(admin.get(&path).await);
    }
    let r = admin
        .call(
            Method::PUT,
            &format!("/token/ns/{id}/scope"),
            Some(br#"{"scopes":["read"]}"#.to_vec()),
            &[],
        )
        .await;
    answers.push(r);
    sundial_tests::wait_until_async(
        std::time::Duration::from_secs(3),
        "the narrowed scope",
        || async { api.put("/api/ns/q", b"outside the scope").await.status == 403 },
    )
    .await;
    answers.push(api.put("/api/ns/q", b"outside the scope").await);
    for r in &answers {
        let text = format!("{} {:?}", r.json, r.headers);
        assert!(!text.contains(&token), "the secret in an answer: {r:?}");
    }
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    // The refusals are among them: 429, 401 (wrong namespace, wrong
    // token), 403 (scope), 400 (bad id).
    for s in [429, 401, 403, 400] {
        assert!(statuses.contains(&s), "{s} in {statuses:?}");
    }
}
