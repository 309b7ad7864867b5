//! NDJSON export and import of a namespace's jobs: a round trip between two
//! installations keeps every field of every job, an import can run twice,
//! and a bad line stops it with its number.

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::Value;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

/// One installation: its own Redis (also its admin Redis) and gateway, a
/// pool of 16 slots with one lane (so a queue keeps one order).
struct Installation {
    _redis: RedisServer,
    gw: Sundial,
    api: Api,
    admin: Api,
}

async fn installation(ns: &str) -> Installation {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nlanes = 1\nshards = [{{ url = \"{}\" }}]\n",
        redis.url()
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), ns).await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    Installation {
        _redis: redis,
        gw,
        api,
        admin,
    }
}

/// The export of `ns`, as lines keyed by job id, and the ids in file order.
async fn export(admin: &Api, ns: &str) -> (BTreeMap<String, Value>, Vec<String>) {
    let r = admin.get(&format!("/namespaces/{ns}/export")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.headers["content-type"], "application/x-ndjson",
        "{:?}",
        r.headers
    );
    let text = match &r.json {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        // One line parses as JSON on its own.
        other => other.to_string(),
    };
    let mut lines = BTreeMap::new();
    let mut order = Vec::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).expect("a line is JSON");
        let id = v["job_id"].as_str().expect("id").to_owned();
        order.push(id.clone());
        assert!(lines.insert(id, v).is_none(), "a job listed twice");
    }
    (lines, order)
}

async fn import(admin: &Api, ns: &str, body: &str) -> sundial_tests::Resp {
    admin
        .call(
            Method::POST,
            &format!("/namespaces/{ns}/import"),
            Some(body.as_bytes().to_vec()),
            &[],
        )
        .await
}

/// Two lines of the same job agree: every field equal, and the times that
/// pass moved by less than `slack` ms in the right direction.
fn same_job(was: &Value, now: &Value, slack: u64) {
    let mut a = was.as_object().expect("object").clone();
    let mut b = now.as_object().expect("object").clone();
    for (field, grows) in [
        ("elapsed_ms", true),
        ("dead_for_ms", true),
        ("ttl_ms", false),
        ("delay_ms", false),
        ("ttr_ms", false),
    ] {
        let (x, y) = (a.remove(field), b.remove(field));
        let (x, y) = match (x, y) {
            (None, None) => continue,
            (Some(x), Some(y)) => (x.as_u64().expect("ms"), y.as_u64().expect("ms")),
            other => panic!("{field}: {other:?} in {was} and {now}"),
        };
        if x == 0 && y == 0 {
            continue;
        }
        let (from, to) = if grows { (x, y) } else { (y, x) };
        assert!(
            to >= from && to - from < slack,
            "{field} {x} then {y}: {was} / {now}"
        );
    }
    assert_eq!(a, b);
}

#[tokio::test]
async fn an_export_imported_elsewhere_keeps_every_field_of_every_job() {
    let one = installation("shop").await;
    let api = &one.api;
    // Every state, attributes, binary bodies, TTLs, tries.
    let mut ready = Vec::new();
    for i in 0..30u8 {
        let body = vec![0xff, 0x00, i, b'\n'];
        let r = api
            .call(
                Method::PUT,
                "/api/shop/orders?tries=3&ttl=3600",
                Some(body),
                &[("Enable-Job-Version", "YES"), ("Job-Attr-Region", "eu")],
            )
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        ready.push(r.json["job_id"].as_str().expect("id").to_owned());
    }
    // Each with a retry policy of its own.
    let later = "delay=3600&tries=2&backoff=exponential&initial_delay_ms=1000&jitter_percent=10";
    for _ in 0..20 {
        api.publish("shop", "later", later, b"{\"at\":1}").await;
    }
    for _ in 0..5 {
        api.publish("shop", "work", "tries=4", b"w").await;
    }
    let r = api.get("/api/shop/work?count=5&ttr=600").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(5), "{r:?}");
    for _ in 0..4 {
        api.publish("shop", "fail", "tries=1", b"f").await;
    }
    let r = api.get("/api/shop/fail?count=4&ttr=1").await;
    assert_eq!(r.json.as_array().map(Vec::len), Some(4), "{r:?}");
    wait_until_async(
        std::time::Duration::from_secs(10),
        "4 dead jobs",
        || async { api.get("/api/shop/fail/deadletter/size").await.json["size"] == 4 },
    )
    .await;

    let (first, order) = export(&one.admin, "shop").await;
    assert_eq!(first.len(), 59);
    let states =
        |m: &BTreeMap<String, Value>, s: &str| m.values().filter(|v| v["state"] == s).count();
    assert_eq!(
        [
            states(&first, "ready"),
            states(&first, "delayed"),
            states(&first, "reserved"),
            states(&first, "dead")
        ],
        [30, 20, 5, 4]
    );
    let line = &first[&ready[0]];
    assert_eq!(line["attributes"]["region"], "eu", "{line}");
    assert_eq!(line["data"], "/wAACg==", "{line}");
    assert_eq!(line.get("delivery"), None, "never delivered: {line}");
    assert_eq!(line.get("policy"), None, "no policy: {line}");
    for later in first.values().filter(|v| v["state"] == "delayed") {
        assert_eq!(
            later["policy"],
            serde_json::json!({"backoff": "exponential", "initial_delay_ms": 1000,
                "multiplier": 2.0, "max_delay_ms": 3_600_000, "jitter_percent": 10}),
            "the policy, its defaults written out: {later}"
        );
    }
    // The dead jobs' TTR ran out on their one delivery: that is kept too.
    for dead in first.values().filter(|v| v["state"] == "dead") {
        assert_eq!(
            (&dead["delivery"], &dead["reason"]),
            (&1.into(), &"ttr expired".into()),
            "{dead}"
        );
    }

    // Another installation, another namespace name.
    let two = installation("shop2").await;
    let body: String = order.iter().map(|id| format!("{}\n", first[id])).collect();
    let r = import(&two.admin, "shop2", &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.json["imported"].as_u64(), r.json["existing"].as_u64()),
        (Some(59), Some(0))
    );
    // Run again (a retry after a failure): nothing twice.
    let r = import(&two.admin, "shop2", &body).await;
    assert_eq!(
        (r.json["imported"].as_u64(), r.json["existing"].as_u64()),
        (Some(0), Some(59))
    );
    let (second, _) = export(&two.admin, "shop2").await;
    assert_eq!(second.len(), first.len());
    for (id, was) in &first {
        same_job(was, &second[id], 10_000);
    }
    // The jobs work there: ready ones in their order, with their bodies.
    let api2 = &two.api;
    let r = api2.get("/api/shop2/orders?count=30&ttr=30").await;
    let got: Vec<&str> = r
        .json
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["job_id"].as_str().expect("id"))
        .collect();
    assert_eq!(got, ready.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.json[0]["remain_tries"], 2);
    assert_eq!(
        api2.get("/api/shop2/fail/deadletter/size").await.json["size"],
        4
    );
    let listed = two.admin.get("/namespaces/shop2/queues").await;
    assert_eq!(
        listed.json["queues"].as_array().map(Vec::len),
        Some(4),
        "{listed:?}"
    );
    drop(two.gw);
}

#[tokio::test]
async fn a_bad_line_stops_an_import_with_its_number_and_keeps_the_lines_before() {
    let one = installation("ns").await;
    let job = |id: &str| {
        format!(
            "{{\"queue\":\"q\",\"job_id\":\"{id}\",\"state\":\"ready\",\"remain_tries\":1,\"elapsed_ms\":5,\"ttl_ms\":0,\"attributes\":null,\"data\":\"eA==\"}}\n"
        )
    };
    let ids = ["01JAAAAAAAAAAAAAAAAAAAAAAA", "01JAAAAAAAAAAAAAAAAAAAAAAB"];
    let cases = [
        ("{\"queue\":\"q\"", "line 3"),
        (
            "{\"queue\":\"q\",\"job_id\":\"nope\",\"state\":\"ready\",\"remain_tries\":1,\"data\":\"\"}",
            "invalid job id",
        ),
        (
            "{\"queue\":\"q/x\",\"job_id\":\"01JAAAAAAAAAAAAAAAAAAAAAAC\",\"state\":\"ready\",\"remain_tries\":1,\"data\":\"\"}",
            "line 3",
        ),
        (
            "{\"queue\":\"q\",\"job_id\":\"01JAAAAAAAAAAAAAAAAAAAAAAC\",\"state\":\"gone\",\"remain_tries\":1,\"data\":\"\"}",
            "invalid state",
        ),
        (
            "{\"queue\":\"q\",\"job_id\":\"01JAAAAAAAAAAAAAAAAAAAAAAC\",\"state\":\"ready\",\"remain_tries\":0,\"data\":\"\"}",
            "remain_tries",
        ),
        (
            "{\"queue\":\"q\",\"job_id\":\"01JAAAAAAAAAAAAAAAAAAAAAAC\",\"state\":\"ready\",\"remain_tries\":1,\"data\":\"%%\"}",
            "base64",
        ),
        (
            "{\"queue\":\"q\",\"job_id\":\"01JAAAAAAAAAAAAAAAAAAAAAAC\",\"state\":\"ready\",\"remain_tries\":1,\"data\":\"\",\"extra\":1}",
            "unknown field",
        ),
    ];
    for (i, (bad, why)) in cases.iter().enumerate() {
        let body = format!(
            "{}{}{bad}\n{}",
            job(ids[0]),
            job(ids[1]),
            job("01JAAAAAAAAAAAAAAAAAAAAAAD")
        );
        let r = import(&one.admin, "ns", &body).await;
        assert_eq!(r.status, 400, "{r:?}");
        let msg = r.json["error"].as_str().expect("error");
        assert!(msg.starts_with("line 3: ") && msg.contains(why), "{msg}");
        let before = if i == 0 { "2 job(s)" } else { "0 job(s)" };
        assert!(msg.contains(before), "{msg}");
    }
    // The two lines before were stored once; the one after never.
    let (held, _) = export(&one.admin, "ns").await;
    assert_eq!(
        held.keys().collect::<Vec<_>>(),
        ids.iter().collect::<Vec<_>>()
    );
    // An unknown pool, a bad namespace name; an empty namespace exports
    // nothing.
    assert_eq!(
        one.admin
            .get("/namespaces/ns/export?pool=nope")
            .await
            .status,
        404
    );
    assert_eq!(import(&one.admin, "bad.ns", "").await.status, 400);
    let (none, _) = export(&one.admin, "empty").await;
    assert!(none.is_empty());
}

#[tokio::test]
async fn the_cli_exports_a_namespace_to_a_file_and_imports_it_elsewhere() {
    let one = installation("app").await;
    for i in 0..40 {
        one.api
            .publish("app", &format!("q{}", i % 4), "delay=600", b"x")
            .await;
    }
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("app.ndjson");
    let file_s = file.to_str().expect("path");
    let r = one
        .gw
        .cli(&["namespace", "export", "app", "--out", file_s], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let text = std::fs::read_to_string(&file).expect("export file");
    assert_eq!(text.lines().count(), 40);
    // To standard output as well.
    let r = one.gw.cli(&["namespace", "export", "app"], &[]);
    assert_eq!(r.stdout.lines().count(), 40, "{r:?}");

    let two = installation("app").await;
    let r = two.gw.cli(&["namespace", "import", "app", file_s], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("40 job(s) imported, 0 there already"),
        "{r:?}"
    );
    let r = two
        .gw
        .cli(&["namespace", "import", "app", file_s, "--json"], &[]);
    let out: Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(
        (out["imported"].as_u64(), out["existing"].as_u64()),
        (Some(0), Some(40))
    );
    // A bad line is named by its number in the file.
    let mut bad = text
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    bad.push_str("{\"queue\":\"q0\"}\n");
    std::fs::write(&file, bad).expect("write");
    let r = two.gw.cli(&["namespace", "import", "app", file_s], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("line 4:"), "{r:?}");
    // An unknown pool is "not found".
    let r = two
        .gw
        .cli(&["namespace", "export", "app", "--pool", "nope"], &[]);
    assert_eq!(r.code, 3, "{r:?}");
}

#[tokio::test]
async fn keys_come_along_with_their_jobs() {
    let (from, to) = (installation("ns").await, installation("ns").await);
    let until = from
        .api
        .publish("ns", "q", "dedup=u-1&delay=600", b"u")
        .await;
    let window = from
        .api
        .publish("ns", "q", "dedup=w-1&dedup_ttl=3600", b"w")
        .await;
    let plain = from.api.publish("ns", "q", "delay=600", b"p").await;
    let (lines, _) = export(&from.admin, "ns").await;
    assert_eq!(lines[&until]["dedup"], "u-1");
    assert_eq!(lines[&until].get("dedup_ttl_ms"), None, "until done");
    let left = lines[&window]["dedup_ttl_ms"]
        .as_u64()
        .expect("window left");
    assert!((3_590_000..=3_600_000).contains(&left), "{left}");
    assert_eq!(lines[&plain].get("dedup"), None);
    let body: String = lines.values().map(|l| format!("{l}\n")).collect();
    let r = import(&to.admin, "ns", &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    for (key, id) in [("u-1", &until), ("w-1", &window)] {
        let r = to
            .api
            .put(&format!("/api/ns/q?dedup={key}"), b"again")
            .await;
        assert_eq!(
            (r.json["job_id"].as_str(), r.json["duplicate"].as_bool()),
            (Some(id.as_str()), Some(true)),
            "{key}: {r:?}"
        );
    }
    // The window's job is acked at its new home: its key still holds.
    let r = to.api.delete(&format!("/api/ns/q/job/{window}")).await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = to.api.put("/api/ns/q?dedup=w-1", b"again").await;
    assert_eq!(r.json["job_id"].as_str(), Some(window.as_str()), "{r:?}");
}
