//! The operator commands (`sundial token|limit|queue|deadletter|pool|drain|
//! publish|consume`), run as an operator runs them: the real binary
//! against a real gateway, checked by their output, their exit codes, and
//! what Redis and the API hold afterwards.

use std::{process::Stdio, time::Duration};

use serde_json::json;
use sundial_tests::{
    Api, CliRun, RedisServer, Sundial, SundialConfig, create_token, token_id, wait_until_async,
};

const ADMIN: [(&str, &str); 2] = [
    ("SUNDIAL_ADMIN_USER", "ops"),
    ("SUNDIAL_ADMIN_PASSWORD", "ops-pass-9Xq2vT"),
];

fn ok(r: &CliRun) {
    assert_eq!(r.code, 0, "{r:?}");
}

#[tokio::test]
async fn tokens_scopes_and_limits_are_managed_from_the_cli() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.accounts = vec![("ops".to_owned(), "ops-pass-9Xq2vT".to_owned())];
    let gw = Sundial::start(&cfg);

    // Without the admin password: refused, and told what to set.
    let r = gw.cli(&["token", "create", "ns", "-d", "ci"], &[]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stderr.contains("SUNDIAL_ADMIN_PASSWORD"), "{r:?}");

    let r = gw.cli(
        &[
            "token",
            "create",
            "ns",
            "-d",
            "ci producer",
            "--scope",
            "publish",
            "--queues",
            "emails,reports-*",
        ],
        &ADMIN,
    );
    ok(&r);
    let token = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("token"))
        .expect("the token is shown")
        .trim()
        .to_owned();
    assert!(r.stderr.contains("will not show it again"), "{r:?}");
    let id = token_id(&token);
    let api = Api::new(gw.api(), Some(&token));
    assert_eq!(api.put("/api/ns/emails", b"x").await.status, 201);
    assert_eq!(api.get("/api/ns/emails/size").await.status, 403);

    let r = gw.cli(&["token", "list", "ns"], &ADMIN);
    ok(&r);
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .expect("listed by id");
    assert!(
        row.contains("publish") && row.contains("emails,reports-*") && row.contains("ci producer"),
        "{r:?}"
    );
    assert!(!r.stdout.contains(&token), "never the token itself: {r:?}");

    // Widen it: read too, every queue. The API follows within a second.
    let r = gw.cli(
        &[
            "token",
            "scope",
            "ns",
            &id,
            "--scope",
            "publish,read",
            "--all-queues",
            "--json",
        ],
        &ADMIN,
    );
    ok(&r);
    assert_eq!(r.json()["scopes"], json!(["publish", "read"]));
    assert_eq!(r.json()["queues"], json!(null));
    wait_until_async(Duration::from_secs(3), "the wider scope", || async {
        api.get("/api/ns/other/size").await.status == 200
    })
    .await;
    // Queues alone keep the scopes.
    let r = gw.cli(&["token", "scope", "ns", &id, "--queues", "emails"], &ADMIN);
    ok(&r);
    assert!(
        r.stdout.contains("publish,read") && r.stdout.contains("emails"),
        "{r:?}"
    );

    ok(&gw.cli(
        &[
            "limit",
            "set",
            "ns",
            &id,
            "--write",
            "1",
            "--interval",
            "60",
        ],
        &ADMIN,
    ));
    let r = gw.cli(&["limit", "get", "ns", &id, "--json"], &ADMIN);
    assert_eq!(
        r.json(),
        json!({"read": 0, "write": 1, "interval": 60}),
        "{r:?}"
    );
    let r = gw.cli(&["limit", "list"], &ADMIN);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains(&id) && l.contains("60")),
        "{r:?}"
    );
    let r = gw.cli(&["limit", "delete", "ns", &id], &ADMIN);
    assert!(r.stdout.contains("limit removed"), "{r:?}");
    let r = gw.cli(&["limit", "get", "ns", &id], &ADMIN);
    assert_eq!(r.code, 3, "{r:?}");

    let r = gw.cli(&["token", "migrate"], &ADMIN);
    assert!(r.stdout.contains("migrated 0 tokens"), "{r:?}");
    ok(&gw.cli(&["token", "revoke", "ns", &id], &ADMIN));
    wait_until_async(
        Duration::from_secs(3),
        "the revoked token to go",
        || async { api.put("/api/ns/emails", b"x").await.status == 401 },
    )
    .await;
    let r = gw.cli(&["token", "revoke", "ns", &id], &ADMIN);
    assert_eq!(r.code, 3, "a token that is not there: {r:?}");
    assert!(r.stderr.contains("token not found"), "{r:?}");
    let r = gw.cli(
        &["token", "create", "ns", "-d", "x", "--scope", "write"],
        &ADMIN,
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("unknown scope"), "{r:?}");
}

#[tokio::test]
async fn queues_dead_letters_and_jobs_are_driven_from_the_cli() {
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let with_token = [("SUNDIAL_TOKEN", token.as_str())];

    let r = gw.cli(
        &["publish", "ns", "q", "hello", "--tries", "1"],
        &with_token,
    );
    ok(&r);
    let first = r.stdout.trim().to_owned();
    assert_eq!(first.len(), 26, "{r:?}");
    let r = gw.cli(&["consume", "ns", "q", "--ttr", "1"], &with_token);
    ok(&r);
    assert!(
        r.stdout.contains(&first) && r.stdout.contains("hello"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("1 job(s) left reserved, a try spent"),
        "a consume without --ack says what it left: {r:?}"
    );
    let r = gw.cli(&["queue", "stats", "ns", "no-such-queue"], &[]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("no queue no-such-queue in namespace ns"),
        "{r:?}"
    );
    for i in 0..3 {
        let query = format!("tries=1&priority={}", 7 * i);
        api.publish("ns", "q", &query, format!("body {i}").as_bytes())
            .await;
        assert_eq!(api.get("/api/ns/q?ttr=1").await.status, 200);
    }
    wait_until_async(Duration::from_secs(10), "four dead jobs", || async {
        api.get("/api/ns/q/deadletter/size").await.json["size"] == 4
    })
    .await;

    let r = gw.cli(&["queue", "list", "ns"], &[]);
    ok(&r);
    let row: Vec<&str> = r
        .stdout
        .lines()
        .find(|l| l.starts_with("q "))
        .expect("q listed")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..5], ["q", "0", "0", "0", "4"], "{r:?}");
    let r = gw.cli(&["queue", "stats", "ns", "q", "--json"], &[]);
    assert_eq!(r.json()["dead"], 4, "{r:?}");

    let r = gw.cli(&["deadletter", "list", "ns", "q"], &[]);
    ok(&r);
    assert_eq!(r.stdout.lines().count(), 5, "a header and four jobs: {r:?}");
    assert!(
        r.stdout.contains("hello") && r.stdout.contains(&first),
        "{r:?}"
    );
    let mut lines = r.stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(header[..2], ["JOB ID", "PRIORITY"], "{r:?}");
    let priorities: Vec<&str> = lines
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(
        priorities,
        ["0", "0", "7", "14"],
        "each dead job's priority, oldest first: {r:?}"
    );

    let stranger = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let r = gw.cli(
        &[
            "deadletter",
            "respawn",
            "ns",
            "q",
            "--ids",
            &format!("{first},{stranger}"),
        ],
        &[],
    );
    ok(&r);
    assert!(r.stdout.contains("respawned 1 dead jobs; 3 left"), "{r:?}");
    assert!(
        r.stdout.contains(stranger),
        "the id that was not dead is named: {r:?}"
    );
    let r = gw.cli(
        &["deadletter", "respawn", "ns", "q", "--ids", stranger],
        &[],
    );
    assert_eq!(r.code, 3, "{r:?}");

    let r = gw.cli(&["deadletter", "delete", "ns", "q", "--all"], &[]);
    assert_eq!(r.code, 2, "--all deletes only with --yes: {r:?}");
    assert_eq!(api.get("/api/ns/q/deadletter/size").await.json["size"], 3);
    let r = gw.cli(
        &[
            "deadletter",
            "delete",
            "ns",
            "q",
            "--all",
            "--yes",
            "--json",
        ],
        &[],
    );
    assert_eq!(r.json()["deleted"], 3, "{r:?}");
    assert_eq!(redis.job_records(), 1, "only the respawned job is left");

    let r = gw.cli(&["queue", "peek", "ns", "q"], &with_token);
    ok(&r);
    assert!(r.stdout.contains(&first), "{r:?}");
    let r = gw.cli(&["consume", "ns", "q", "--ack"], &with_token);
    ok(&r);
    assert!(r.stdout.contains("hello"), "{r:?}");
    assert_eq!(redis.job_records(), 0, "acknowledged");
    let r = gw.cli(&["consume", "ns", "q"], &with_token);
    assert_eq!(
        (r.code, r.stderr.trim()),
        (3, "sundial: no job available"),
        "{r:?}"
    );
    let r = gw.cli(&["consume", "ns", "q"], &[]);
    assert_eq!(r.code, 4, "no token: {r:?}");
    assert!(r.stderr.contains("SUNDIAL_TOKEN"), "{r:?}");

    for i in 0..5 {
        api.publish("ns", "q2", "", format!("{i}").as_bytes()).await;
    }
    let r = gw.cli(&["queue", "destroy", "ns", "q2"], &with_token);
    assert_eq!(r.code, 2, "{r:?}");
    let r = gw.cli(&["queue", "destroy", "ns", "q2", "--yes"], &with_token);
    ok(&r);
    assert!(r.stdout.contains("(5 before)"), "{r:?}");
    assert_eq!(redis.job_records(), 0);

    let r = gw.cli(
        &["queue", "list", "ns", "--admin", "http://127.0.0.1:1"],
        &[],
    );
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stderr.contains("is Sundial running there?"), "{r:?}");
}

#[tokio::test]
async fn pool_status_and_a_drain_are_watched_from_the_cli() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300".to_owned();
    cfg.pools = Some(SundialConfig::default_pool(&[("a", &a), ("b", &b)]));
    let mut gw = Sundial::start(&cfg);
    let api = Api::new(gw.api(), Some(&create_token(&gw.admin(), "ns").await));
    let r = gw.cli(&["drain", "status"], &[]);
    assert_eq!(r.stdout.trim(), "no drain", "{r:?}");

    let queues: Vec<String> = (0..40).map(|i| format!("q{i}")).collect();
    for q in &queues {
        api.publish("ns", q, "", b"move me").await;
    }
    cfg.pools = Some(SundialConfig::default_pool(&[
        ("a", &a),
        ("b", &b),
        ("c", &c),
    ]));
    gw.rewrite(&cfg);
    assert_eq!(Api::new(gw.admin(), None).post("/reload").await.status, 200);

    let r = gw.cli(&["pool", "status"], &[]);
    ok(&r);
    for needle in [
        "pool default: 128 slots",
        "default/a",
        "default/c",
        "UNLEASED",
        "DRAINING LAYOUT",
    ] {
        assert!(r.stdout.contains(needle), "{needle}: {r:?}");
    }
    let r = gw.cli(&["pool", "status", "default", "--json"], &[]);
    assert_eq!(
        r.json()[0]["shards"].as_array().map(Vec::len),
        Some(3),
        "{r:?}"
    );
    let r = gw.cli(&["drain", "status"], &[]);
    assert!(r.stdout.contains("SLOTS DRAINED"), "{r:?}");

    // Watch while the moved jobs are taken: the watcher ends by itself.
    let mut watcher = gw
        .cli_command(&["drain", "status", "--watch", "--every", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the watcher");
    for q in &queues {
        let r = api.get(&format!("/api/ns/{q}?ttr=30")).await;
        assert_eq!(r.status, 200, "{r:?}");
        let id = r.json["job_id"].as_str().expect("job_id");
        assert_eq!(
            api.delete(&format!("/api/ns/{q}/job/{id}")).await.status,
            204
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while watcher.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = watcher.kill();
            panic!("the watcher did not end when the drain did");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = watcher.wait_with_output().expect("the watcher's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("slots drained"), "progress lines: {stdout}");
    assert_eq!(stdout.lines().last(), Some("no drain"), "{stdout}");
}

#[test]
fn completions_and_a_manual_page_are_printed() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = std::process::Command::new(sundial_tests::sundial_binary())
            .args(["completions", shell])
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(
            text.contains("sundial") && text.contains("quota"),
            "{shell}: {text}"
        );
    }
    let out = std::process::Command::new(sundial_tests::sundial_binary())
        .arg("man")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with(".ie"), "{text}");
    assert!(text.contains(".TH sundial 1"), "{text}");
    // Every page the top one refers to is written with --dir.
    let dir = tempfile::tempdir().expect("tmp");
    let out = std::process::Command::new(sundial_tests::sundial_binary())
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    for page in [
        "sundial.1",
        "sundial-quota.1",
        "sundial-quota-set.1",
        "sundial-token-create.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    // Setting and unsetting one bound at once is refused before any request.
    let out = std::process::Command::new(sundial_tests::sundial_binary())
        .args([
            "quota",
            "set",
            "ns",
            "--max-jobs",
            "5",
            "--unset",
            "max_jobs",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("opposite"),
        "{out:?}"
    );
    // Connection flags sit under their own heading in every command's help.
    let out = std::process::Command::new(sundial_tests::sundial_binary())
        .args(["queue", "stats", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Connection:\n"), "{help}");
    assert!(help.contains("<NAMESPACE>  The namespace"), "{help}");
}
