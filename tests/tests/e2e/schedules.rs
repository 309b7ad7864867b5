//! Schedules end to end, over the job API against the real binary: an
//! interval and a cron schedule in a named zone fire each second, never
//! early, each fire once and none lost, on a standalone and on a cluster
//! shard; a deleted schedule fires no more; a paused one fires nothing
//! until resumed; bad definitions are refused with nothing stored; a
//! token's scope decides who may read and who may change them; fires
//! missed in a Redis outage are skipped, fired once or caught up, as each
//! schedule says, and every fire not published is counted missed.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use sundial_tests::{Api, RedisServer, ShardKind, Sundial, SundialConfig, started, started_on};

on_every_shard_kind!(interval_and_cron_schedules_fire_once_each_never_early,);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("json")
}

/// Consumes and acks `q`'s jobs for `span`; per schedule, the fire times
/// (`scheduled-at`) of its jobs, each checked not received before it.
async fn fires_for(api: &Api, q: &str, span: Duration) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let end = Instant::now() + span;
    while Instant::now() < end {
        let r = api.get(&format!("/api/ns/{q}?timeout=1&ttr=30")).await;
        if r.status == 404 {
            continue;
        }
        assert_eq!(r.status, 200, "{r:?}");
        let received = now_ms();
        let attrs = &r.json["attributes"];
        let name = attrs["schedule"]
            .as_str()
            .expect("a schedule's job")
            .to_owned();
        let at: u64 = attrs["scheduled-at"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("its fire time");
        assert!(received >= at, "a fire for {at} came early, at {received}");
        let id = r.json["job_id"].as_str().expect("id");
        assert_eq!(
            api.delete(&format!("/api/ns/{q}/job/{id}")).await.status,
            204
        );
        out.entry(name).or_default().push(at);
    }
    for times in out.values_mut() {
        times.sort_unstable();
    }
    out
}

/// Each fire once (no time twice) and none lost (a second apart).
fn once_each(name: &str, times: &[u64]) {
    assert!(times.len() >= 2, "{name} fired {times:?}");
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "{name}: {times:?}");
    }
}

async fn interval_and_cron_schedules_fire_once_each_never_early(kind: ShardKind) {
    let (_store, _gw, _token, api) = started_on(kind, "ns").await;
    let tick = body(json!({"every": 1, "job": {"data": "dGljaw==", "ttl": 60}}));
    let r = api.put("/api/ns/q/schedules/tick", &tick).await;
    assert_eq!(r.status, 201, "{r:?}");
    let next: Vec<u64> = r.json["next_ms"]
        .as_array()
        .expect("next fires")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(next.len(), 5, "{r:?}");
    assert!(next.windows(2).all(|w| w[1] - w[0] == 1000), "{next:?}");
    let tock = body(json!({
        "cron": "* * * * * *",
        "tz": "Asia/Kolkata",
        "missed": "skip",
        "job": {"data": "dG9jaw==", "tries": 2, "attributes": {"kind": "clock"}}
    }));
    let r = api.put("/api/ns/q/schedules/tock", &tock).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        api.put("/api/ns/q/schedules/tock", &tock).await.status,
        200,
        "the same again"
    );

    let seen = fires_for(&api, "q", Duration::from_millis(3_500)).await;
    once_each("tick", &seen["tick"]);
    once_each("tock", &seen["tock"]);
    let r = api.get("/api/ns/q/schedules/tick").await;
    assert_eq!(r.status, 200, "{r:?}");
    let fired = r.json["fired"].as_u64().expect("fired");
    assert!(fired >= seen["tick"].len() as u64, "{r:?}");
    assert!(r.json["last"]["job_id"].is_string(), "{r:?}");
    let list = api.get("/api/ns/q/schedules").await;
    let names: Vec<&str> = list.json["schedules"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["tick", "tock"], "{list:?}");

    // Deleted: no tick once the pumps see it gone; tock goes on.
    assert_eq!(api.delete("/api/ns/q/schedules/tick").await.status, 204);
    assert_eq!(api.delete("/api/ns/q/schedules/tick").await.status, 404);
    fires_for(&api, "q", Duration::from_millis(700)).await;
    let after = fires_for(&api, "q", Duration::from_millis(2_000)).await;
    assert!(!after.contains_key("tick"), "{after:?}");
    once_each("tock", &after["tock"]);
}

#[tokio::test]
async fn a_paused_schedule_fires_nothing_until_it_resumes() {
    let (_redis, _gw, _token, api) = started("ns").await;
    let tick = body(json!({"every": 1, "job": {"data": ""}}));
    assert_eq!(api.put("/api/ns/q/schedules/tick", &tick).await.status, 201);
    let r = api.post("/api/ns/q/schedules/tick/pause").await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(true)),
        "{r:?}"
    );
    assert_eq!(r.json["next_ms"], json!([]), "{r:?}");
    // A change keeps it paused.
    let tick2 = body(json!({"every": 1, "job": {"data": "eA=="}}));
    let r = api.put("/api/ns/q/schedules/tick", &tick2).await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(true)),
        "{r:?}"
    );
    fires_for(&api, "q", Duration::from_millis(500)).await;
    let paused = fires_for(&api, "q", Duration::from_millis(2_000)).await;
    assert!(paused.is_empty(), "{paused:?}");
    let r = api.post("/api/ns/q/schedules/tick/resume").await;
    assert_eq!(
        (r.status, r.json["paused"].as_bool()),
        (200, Some(false)),
        "{r:?}"
    );
    let resumed = fires_for(&api, "q", Duration::from_millis(2_500)).await;
    once_each("tick", &resumed["tick"]);
    assert!(
        resumed["tick"][0] >= r.json["updated_ms"].as_u64().expect("updated"),
        "the fires while paused are skipped, not caught up"
    );
    assert_eq!(api.post("/api/ns/q/schedules/none/pause").await.status, 404);
}

#[tokio::test]
async fn bad_definitions_are_refused_and_nothing_is_stored() {
    let (_redis, gw, _token, api) = started("ns").await;
    let now = now_ms();
    let job = json!({"data": ""});
    let cases = [
        (json!({"cron": "61 * * * *", "job": job}), "invalid cron"),
        (
            json!({"cron": "0 8 * * *", "tz": "Mars/Olympus", "job": job}),
            "tz",
        ),
        (json!({"every": 0, "job": job}), "every"),
        (
            json!({"every": 60, "start_ms": now + 10_000, "end_ms": now + 5_000, "job": job}),
            "not after start_ms",
        ),
        (
            json!({"every": 60, "cron": "* * * * *", "job": job}),
            "not both",
        ),
        (
            json!({"every": 60, "job": {"data": "not base64!"}}),
            "base64",
        ),
        (json!({"every": 60, "job": {"tries": 0}}), "tries"),
        (
            json!({"every": 60, "job": {"attributes": {"schedule": "x"}}}),
            "schedule",
        ),
        (
            json!({"every": 60, "jitter_ms": 40_000, "job": job}),
            "jitter",
        ),
        (json!({"every": 60, "grace_ms": 5, "job": job}), "grace_ms"),
        (
            json!({"every": 60, "missed": {"catch_up": 0}, "job": job}),
            "missed",
        ),
        (
            json!({"every": 60, "job": job, "color": "red"}),
            "unknown field",
        ),
        (json!({"every": 60}), "job"),
    ];
    for (spec, says) in cases {
        let r = api.put("/api/ns/q/schedules/s", &body(spec.clone())).await;
        assert_eq!(r.status, 400, "{spec}: {r:?}");
        let msg = r.json["error"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{spec}: {msg:?} should say {says:?}");
    }
    let r = api
        .put(
            "/api/ns/q/schedules/bad%20name",
            &body(json!({"every": 1, "job": job})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let list = api.get("/api/ns/q/schedules").await;
    assert_eq!(
        list.json["schedules"],
        json!([]),
        "nothing stored: {list:?}"
    );
    assert_eq!(api.get("/api/ns/q/schedules/s").await.status, 404);

    // The namespace's quota bounds how many it holds: a new one over it is
    // 403 naming the bound, a change of one it holds is not.
    let admin = Api::new(gw.admin(), None);
    let r = admin
        .put(
            "/namespaces/ns/quota",
            json!({"max_schedules": 2}).to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let one = body(json!({"every": 60, "job": job}));
    for name in ["a", "b"] {
        assert_eq!(
            api.put(&format!("/api/ns/q/schedules/{name}"), &one)
                .await
                .status,
            201
        );
    }
    let r = api.put("/api/ns/q2/schedules/c", &one).await;
    assert_eq!(
        (r.status, r.json["quota"].as_str()),
        (403, Some("max_schedules")),
        "{r:?}"
    );
    assert_eq!(
        (r.json["limit"].as_u64(), r.json["usage"].as_u64()),
        (Some(2), Some(2)),
        "{r:?}"
    );
    let changed = body(json!({"every": 30, "job": job}));
    assert_eq!(api.put("/api/ns/q/schedules/a", &changed).await.status, 200);
    assert_eq!(
        api.get("/api/ns/q2/schedules/c").await.status,
        404,
        "nothing stored"
    );
    // Its fires publish into its queue: a schedule on a new queue counts
    // against max_queues as a publish to it would.
    let r = admin
        .put(
            "/namespaces/ns/quota",
            json!({"max_schedules": 10, "max_queues": 1})
                .to_string()
                .as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(api.put("/api/ns/q4/schedules/e", &one).await.status, 201);
    let r = api.put("/api/ns/q3/schedules/d", &one).await;
    assert_eq!(
        (r.status, r.json["quota"].as_str()),
        (403, Some("max_queues")),
        "{r:?}"
    );
    assert_eq!(api.get("/api/ns/q3/schedules/d").await.status, 404);

    // A read token reads schedules; changing them needs `manage`.
    let made = admin.post("/token/ns?description=reader&scope=read").await;
    let reader = Api::new(gw.api(), made.json["token"].as_str());
    assert_eq!(reader.get("/api/ns/q/schedules").await.status, 200);
    let r = reader
        .put(
            "/api/ns/q/schedules/s",
            &body(json!({"every": 1, "job": job})),
        )
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(reader.delete("/api/ns/q/schedules/s").await.status, 403);
}

/// Consumes and acks `q`'s jobs for `span`, tolerating a Redis outage
/// (503s); per schedule, the fire times seen.
async fn fires_through_faults(api: &Api, q: &str, span: Duration) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let end = Instant::now() + span;
    while Instant::now() < end {
        let r = api.get(&format!("/api/ns/{q}?timeout=1&ttr=30")).await;
        if r.status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let attrs = &r.json["attributes"];
        let name = attrs["schedule"].as_str().expect("a fire").to_owned();
        let at: u64 = attrs["scheduled-at"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("time");
        let id = r.json["job_id"].as_str().expect("id");
        api.delete(&format!("/api/ns/{q}/job/{id}")).await;
        out.entry(name).or_default().push(at);
    }
    out
}

#[tokio::test]
async fn missed_fires_after_a_redis_outage_are_skipped_fired_once_or_caught_up() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = sundial_tests::create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // Three schedules on the same seconds, in the same slot (one lane), a
    // grace of 1 s: an outage of 5 s misses the same fires of each.
    let start = (now_ms() / 1000 + 2) * 1000;
    for (name, missed) in [
        ("skip", json!("skip")),
        ("once", json!("once")),
        ("catch", json!({"catch_up": 3})),
    ] {
        let spec = json!({"every": 1, "start_ms": start, "grace_ms": 1000, "missed": missed, "job": {"data": ""}});
        let r = api
            .put(&format!("/api/ns/q/schedules/{name}"), &body(spec))
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let mut seen = fires_through_faults(&api, "q", Duration::from_secs(4)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    redis.restart();
    let back = now_ms();
    for (name, times) in fires_through_faults(&api, "q", Duration::from_secs(8)).await {
        seen.entry(name).or_default().extend(times);
    }
    let mut missed = BTreeMap::new();
    for (name, times) in &mut seen {
        // Once Redis is back, the pumps take their leases again and the
        // schedule fires on time, second after second.
        let after: Vec<u64> = times.iter().copied().filter(|t| *t > back + 1000).collect();
        assert!(
            after.len() >= 2,
            "{name}: fires after the restart: {times:?}"
        );
        times.sort_unstable();
        let n = times.len();
        times.dedup();
        assert_eq!(times.len(), n, "{name}: a fire twice: {times:?}");
        let expected = (times[n - 1] - times[0]) / 1000 + 1;
        let r = api.get(&format!("/api/ns/q/schedules/{name}")).await;
        let counted = r.json["missed_fires"].as_u64().expect("missed fires");
        assert_eq!(
            expected - n as u64,
            counted,
            "{name}: every fire not seen was counted missed: {times:?}"
        );
        missed.insert(name.clone(), counted);
    }
    let skipped = missed["skip"];
    assert!(skipped >= 3, "{missed:?}");
    assert_eq!(
        missed["once"],
        skipped - 1,
        "one fire for the outage: {missed:?}"
    );
    assert_eq!(
        missed["catch"],
        skipped - 3,
        "the latest 3 caught up: {missed:?}"
    );
}

#[tokio::test]
async fn a_thousand_schedules_fire_once_each_second_through_pump_processes_killed() {
    const SCHEDULES: usize = 1_000;
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pump = false;
    let gw = Sundial::start(&cfg);
    let token = sundial_tests::create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let pumpd = || Sundial::start_pumpd(&cfg, "lease_ttl_ms = 2000");
    let mut pumps = [pumpd(), pumpd()];
    let spec = body(json!({"every": 1, "job": {"data": ""}}));
    for i in 0..SCHEDULES {
        let r = api
            .put(&format!("/api/ns/q{}/schedules/s{i}", i % 10), &spec)
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // 60 s of fires, a pump process SIGKILLed and another started every 10 s.
    let end = Instant::now() + Duration::from_secs(60);
    let mut round = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(10)).await;
        pumps[round % 2].kill();
        pumps[round % 2] = pumpd();
        round += 1;
    }
    for i in 0..SCHEDULES {
        let r = api
            .delete(&format!("/api/ns/q{}/schedules/s{i}", i % 10))
            .await;
        assert_eq!(r.status, 204, "{r:?}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Every job of every fire, read back from an export.
    let admin = Api::new(gw.admin(), None);
    let r = admin.get("/namespaces/ns/export?pool=default").await;
    assert_eq!(r.status, 200);
    let text = r.json.as_str().map(str::to_owned).unwrap_or_default();
    let mut fires: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in text.lines() {
        let job: Value = serde_json::from_str(line).expect("a line");
        let attrs = &job["attributes"];
        let name = attrs["schedule"].as_str().expect("a fire").to_owned();
        let at: u64 = attrs["scheduled-at"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("time");
        fires.entry(name).or_default().push(at);
    }
    assert_eq!(fires.len(), SCHEDULES, "every schedule fired");
    let mut total = 0;
    for (name, times) in &mut fires {
        times.sort_unstable();
        let n = times.len();
        times.dedup();
        assert_eq!(times.len(), n, "{name} fired a time twice");
        assert_eq!(
            (times[n - 1] - times[0]) / 1000 + 1,
            n as u64,
            "{name} lost a fire: {times:?}"
        );
        assert!(n >= 55, "{name} fired {n} times in 60 s");
        total += n;
    }
    eprintln!("{total} fires of {SCHEDULES} schedules over 6 pump kills: each once");
}

#[tokio::test]
async fn the_cli_sets_lists_shows_pauses_and_deletes_schedules() {
    let (_redis, gw, token, _api) = started("ns").await;
    let env = [("SUNDIAL_TOKEN", token.as_str())];
    let set = [
        "schedule",
        "set",
        "ns",
        "q",
        "nightly",
        "hello",
        "--cron",
        "0 8 * * *",
        "--tz",
        "Europe/Paris",
        "--missed",
        "catch-up=2",
        "--attr",
        "team=ops",
        "--ttl",
        "600",
    ];
    let r = gw.cli(&set, &env);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("0 8 * * * (Europe/Paris)"),
        "{}",
        r.stdout
    );
    let r = gw.cli(&["schedule", "list", "ns", "q"], &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("nightly") && r.stdout.contains("active"),
        "{}",
        r.stdout
    );
    let r = gw.cli(&["schedule", "pause", "ns", "q", "nightly"], &env);
    assert!(
        r.code == 0 && r.stdout.contains("paused"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let r = gw.cli(&["schedule", "show", "ns", "q", "nightly", "--json"], &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let shown: Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(shown["job"]["attributes"]["team"], "ops");
    assert_eq!(shown["job"]["data"], "aGVsbG8=");
    assert_eq!(shown["job"]["ttl"], 600);
    assert_eq!(shown["missed"], json!({"catch_up": 2}));
    assert_eq!(shown["paused"], true);
    // Refused by the gateway, or by the command line.
    let r = gw.cli(
        &["schedule", "set", "ns", "q", "x", "b", "--every", "0"],
        &env,
    );
    assert!(
        r.code != 0 && r.stderr.contains("invalid every"),
        "{}",
        r.stderr
    );
    let bad = [
        "schedule", "set", "ns", "q", "x", "b", "--every", "5", "--missed", "often",
    ];
    let r = gw.cli(&bad, &env);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = gw.cli(&["schedule", "delete", "ns", "q", "nightly"], &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = gw.cli(&["schedule", "show", "ns", "q", "nightly"], &env);
    assert!(
        r.code != 0 && r.stderr.contains("schedule not found"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn schedules_go_with_their_namespace_through_export_and_import_paused() {
    let (_redis, gw, _token, api) = started("ns").await;
    let admin = Api::new(gw.admin(), None);
    let nightly = json!({"cron": "0 8 * * *", "tz": "Europe/Paris", "missed": {"catch_up": 2},
        "job": {"data": "aGk=", "ttl": 600, "attributes": {"team": "ops"}}});
    assert_eq!(
        api.put("/api/ns/q/schedules/nightly", &body(nightly))
            .await
            .status,
        201
    );
    let tick = json!({"every": 30, "job": {"data": ""}});
    assert_eq!(
        api.put("/api/ns/r/schedules/tick", &body(tick))
            .await
            .status,
        201
    );
    assert_eq!(api.post("/api/ns/r/schedules/tick/pause").await.status, 200);
    api.publish("ns", "q", "", b"a job").await;

    let r = admin.get("/namespaces/ns/export?pool=default").await;
    assert_eq!(r.status, 200, "{r:?}");
    let text = r.json.as_str().map(str::to_owned).unwrap_or_default();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 3, "two schedules and a job: {text}");
    assert_eq!(
        (lines[0]["schedule"].as_str(), lines[0]["queue"].as_str()),
        (Some("nightly"), Some("q"))
    );
    assert_eq!(lines[1]["paused"], true);
    assert!(
        lines[2]["job_id"].is_string(),
        "the jobs after the schedules"
    );

    let token2 = sundial_tests::create_token(&gw.admin(), "ns2").await;
    let api2 = Api::new(gw.api(), Some(&token2));
    let import = || async {
        admin
            .call(
                reqwest::Method::POST,
                "/namespaces/ns2/import?pool=default",
                Some(text.clone().into_bytes()),
                &[],
            )
            .await
    };
    let r = import().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.json["imported"].as_u64(), r.json["schedules"].as_u64()),
        (Some(1), Some(2)),
        "{r:?}"
    );
    let got = api2.get("/api/ns2/q/schedules/nightly").await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.json["paused"], true, "imported paused: {got:?}");
    assert_eq!(got.json["missed"], json!({"catch_up": 2}));
    assert_eq!(got.json["job"]["attributes"]["team"], "ops");
    assert_eq!(got.json["tz"], "Europe/Paris");
    assert_eq!(
        api2.get("/api/ns2/r/schedules/tick").await.json["every"],
        30
    );
    // Again, over a schedule resumed meanwhile: paused again; the job
    // there already.
    assert_eq!(
        api2.post("/api/ns2/q/schedules/nightly/resume")
            .await
            .status,
        200
    );
    let r = import().await;
    assert_eq!(
        api2.get("/api/ns2/q/schedules/nightly").await.json["paused"],
        true
    );
    assert_eq!(
        (r.json["existing"].as_u64(), r.json["schedules"].as_u64()),
        (Some(1), Some(2)),
        "{r:?}"
    );
    // A schedule's line that is not one is refused, naming its line.
    let bad = "{\"schedule\":\"x\",\"queue\":\"q\",\"spec\":{\"every\":0,\"job\":{}}}\n";
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/ns2/import?pool=default",
            Some(bad.as_bytes().to_vec()),
            &[],
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.json["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("line 1: invalid every"),
        "{r:?}"
    );
}

/// Daylight saving in a named zone, as the binary plans it (the fires'
/// times, which the pumps fire from, for a spring and an autumn change
/// in Europe/Paris, far enough ahead to stay ahead; expected instants
/// worked out from the EU rule: the last Sundays of March and October,
/// 01:00 UTC).
#[tokio::test]
async fn a_daily_cron_in_a_named_zone_keeps_its_local_time_across_daylight_saving() {
    let (_redis, _gw, _token, api) = started("ns").await;
    let cases = [
        // 2099-03-29: 02:00 CET → 03:00 CEST. 02:30 does not exist that
        // day: the first valid time after the gap, 03:00 CEST.
        (
            4_078_382_400_000_u64,
            [4_078_429_200_000_u64, 4_078_513_800_000, 4_078_600_200_000],
        ),
        // 2099-10-25: 03:00 CEST → 02:00 CET. 02:30 happens twice: it
        // fires once, at the first (CEST); then 02:30 CET.
        (
            4_096_526_400_000,
            [4_096_571_400_000, 4_096_661_400_000, 4_096_747_800_000],
        ),
    ];
    for (i, (start, want)) in cases.into_iter().enumerate() {
        let spec = json!({"cron": "30 2 * * *", "tz": "Europe/Paris", "start_ms": start,
            "job": {"data": ""}});
        let path = format!("/api/ns/q/schedules/paris{i}");
        let r = api.put(&path, &body(spec)).await;
        assert_eq!(r.status, 201, "{r:?}");
        let next: Vec<u64> = r.json["next_ms"]
            .as_array()
            .expect("next fires")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(next[..3], want, "{r:?}");
        assert_eq!(api.get(&path).await.json["next_ms"][0], want[0]);
    }
}
