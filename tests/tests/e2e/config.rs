//! The config as an operator writes it, through the real binary: a file
//! means what it says, only Redis URLs are dialled, and a shard may sit on
//! a Unix socket.

use std::process::Command;

use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, check_config, create_token, free_port, sundial_binary,
};

#[test]
fn a_file_gets_only_the_pools_it_lists() {
    let (ok, out) = check_config("[pools.eu]\nshards = [{ url = \"redis://127.0.0.1:6401\" }]\n");
    assert!(!ok, "{out}");
    assert!(
        out.contains("lists the pools eu but not `default`"),
        "{out}"
    );
    let (ok, out) = check_config(
        "[pools.default]\nshards = [{ url = \"redis://127.0.0.1:6400\" }]\n\
         [pools.eu]\nshards = [{ url = \"redis://127.0.0.1:6401\" }]\n",
    );
    assert!(ok, "{out}");
    assert!(out.contains("pools: default (1 shard(s)"), "{out}");
    assert_eq!(
        out.matches("shard(s)").count(),
        2,
        "two pools, no third: {out}"
    );
}

#[test]
fn a_url_that_is_not_redis_is_refused_without_its_password() {
    for (url, said) in [
        ("https://user:hunter2secret@cache.example:443", "`https`"),
        ("http://127.0.0.1:6379", "`http`"),
        ("127.0.0.1:6379", "has no scheme"),
    ] {
        let (ok, out) = check_config(&format!(
            "[pools.default]\nshards = [{{ url = \"{url}\" }}]\n"
        ));
        assert!(!ok, "{url}: {out}");
        assert!(out.contains(said), "{url}: {out}");
        assert!(!out.contains("hunter2secret"), "{url}: {out}");
    }
    let (ok, out) = check_config("admin_redis = \"https://h:1\"\n");
    assert!(!ok && out.contains("admin_redis"), "{out}");
}

#[test]
fn limits_that_contradict_each_other_are_refused() {
    let pool = "[pools.default]\nshards = [{ url = \"redis://127.0.0.1:6400\" }]\n";
    for (limits, said) in [
        (
            "default_ttr = 600\nmax_ttr = 300",
            "limits.default_ttr must be from 1 to limits.max_ttr (300 s), not 600",
        ),
        ("default_ttr = 0", "limits.default_ttr must be from 1"),
        (
            "max_ttr = 0",
            "limits.default_ttr must be from 1 to limits.max_ttr (0 s)",
        ),
        (
            "default_tries = 0",
            "limits.default_tries must be at least 1",
        ),
    ] {
        let (ok, out) = check_config(&format!("[limits]\n{limits}\n{pool}"));
        assert!(!ok, "{limits}: {out}");
        assert!(out.contains(said), "{limits}: {out}");
    }
    let (ok, out) = check_config(&format!(
        "[limits]\ndefault_ttr = 300\nmax_ttr = 300\n{pool}"
    ));
    assert!(ok, "{out}");
}

#[tokio::test]
async fn a_shard_on_a_unix_socket_serves_jobs_from_the_database_it_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("redis.sock");
    let socket = socket.to_str().expect("utf-8 path");
    let redis = RedisServer::start_with(&["--unixsocket", socket, "--unixsocketperm", "700"]);
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"unix://{socket}?db=3\" }}]\n"
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.publish("ns", "q", "", b"over a socket").await;
    let r = api.get("/api/ns/q?timeout=1").await;
    assert_eq!(
        (r.status, r.json["job_id"].as_str()),
        (200, Some(id.as_str())),
        "{r:?}"
    );
    // In the Redis behind the socket, in the database the URL names.
    let keyspace: String = redis::cmd("INFO")
        .arg("keyspace")
        .query(&mut redis.client())
        .expect("INFO");
    assert!(
        keyspace.contains("db3:keys=") && !keyspace.contains("db0:"),
        "{keyspace}"
    );
    let r = api.delete(&format!("/api/ns/q/job/{id}")).await;
    assert_eq!(r.status, 204, "{r:?}");
}

#[tokio::test]
async fn a_gateway_refuses_to_start_when_tokens_name_a_pool_it_lacks() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\" }}]\n[pools.eu]\nshards = [{{ url = \"{}\" }}]\n",
        a.url(),
        b.url()
    ));
    let gw = Sundial::start(&cfg);
    let r = Api::new(gw.admin(), None)
        .post("/token/ns?description=t&pool=eu")
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    drop(gw);

    // The same admin Redis, and a config that no longer lists `eu`.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("sundial.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\
             [pools.default]\nshards = [{{ url = \"{}\" }}]\n",
            free_port(),
            free_port(),
            a.url()
        ),
    )
    .expect("write config");
    let mut child = Command::new(sundial_binary())
        .args(["serve", "--config"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway started with tokens of a pool it lacks");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut said)
        .expect("read stderr");
    assert!(!status.success(), "{said}");
    assert!(
        said.contains("sundial: tokens need pools that the config does not list: eu (1 token(s))"),
        "{said}"
    );
}
