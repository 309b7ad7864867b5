//! Loading the config: the example files, environment overrides, and what
//! is refused.

use std::path::Path;

use sundial::Config;

/// Runs `f` while no other test of this file changes the environment:
/// `Config::load` reads `SUNDIAL_*` variables, which the tests that set
/// some (in a `figment::Jail`) change for the whole process.
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure type is figment's"
)]
fn quietly(f: impl FnOnce()) {
    figment::Jail::expect_with(|_| {
        f();
        Ok(())
    });
}

#[test]
fn every_example_config_loads() {
    quietly(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("config/") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                let cfg = Config::load(Some(&path))
                    .unwrap_or_else(|e| panic!("{} is invalid: {e:#}", path.display()));
                assert!(cfg.pools.contains_key("default"), "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 3, "config/ holds the example files");
    });
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure type is figment's"
)]
fn environment_variables_override_the_file() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "s.toml",
            "listen = \"127.0.0.1:9000\"\n[limits]\ndefault_ttr = 30\n",
        )?;
        jail.set_env("SUNDIAL_LISTEN", "127.0.0.1:9001");
        jail.set_env("SUNDIAL_LIMITS__DEFAULT_TTR", "7");
        let cfg = Config::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(cfg.listen, ([127, 0, 0, 1], 9001).into());
        assert_eq!(cfg.limits.default_ttr, 7);
        assert_eq!(
            cfg.limits.default_ttl, 86_400,
            "untouched keys keep their defaults"
        );
        Ok(())
    });
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure type is figment's"
)]
fn environment_variables_that_name_no_key_are_ignored() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("SUNDIAL_REDIS_PORT", "6400");
        jail.set_env("SUNDIAL_CONFIG", "elsewhere.toml");
        jail.set_env("SUNDIAL_HTTP__MAX_CONNECTIONS", "77");
        // A key a known table lacks is ignored too, not fatal.
        jail.set_env("SUNDIAL_LIMITS__NOPE", "1");
        jail.set_env("SUNDIAL_HTTP__MAX_CONECTIONS", "5");
        // The command line's own variables are not config keys.
        for v in ["SUNDIAL_API_URL", "SUNDIAL_ADMIN_URL", "SUNDIAL_TOKEN"] {
            jail.set_env(v, "x");
        }
        let cfg = Config::load(None).map_err(|e| format!("{e:#}"))?;
        assert_eq!(cfg.http.max_connections, 77, "known keys still apply");
        assert_eq!(
            cfg.ignored_env,
            [
                "SUNDIAL_HTTP__MAX_CONECTIONS",
                "SUNDIAL_LIMITS__NOPE",
                "SUNDIAL_REDIS_PORT"
            ]
        );
        Ok(())
    });
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure type is figment's"
)]
fn a_variable_a_password_is_read_from_is_not_called_ignored() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "sundial.toml",
            r#"
admin_redis_password = { env = "SUNDIAL_REDIS_PASSWORD" }
[pools.default]
shards = [{ url = "redis://127.0.0.1:6379", password = { env = "SUNDIAL_SHARD_PW" } }]
"#,
        )?;
        jail.set_env("SUNDIAL_REDIS_PASSWORD", "admin-redis-pw");
        jail.set_env("SUNDIAL_SHARD_PW", "shard-pw");
        jail.set_env("SUNDIAL_NOT_A_KEY", "1");
        let cfg = Config::load(Some(std::path::Path::new("sundial.toml")))
            .map_err(|e| format!("{e:#}"))?;
        assert_eq!(cfg.ignored_env, ["SUNDIAL_NOT_A_KEY"]);
        // An empty one is refused, naming the variable.
        jail.set_env("SUNDIAL_SHARD_PW", "");
        let e = Config::load(Some(std::path::Path::new("sundial.toml")))
            .map(|_| ())
            .expect_err("empty");
        let e = format!("{e:#}");
        assert!(e.contains("SUNDIAL_SHARD_PW") && e.contains("empty"), "{e}");
        Ok(())
    });
}

#[test]
fn an_open_admin_listener_needs_accounts() {
    quietly(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let load = |extra: &str| {
            let path = dir.path().join("c.toml");
            std::fs::write(&path, format!("admin_listen = \"0.0.0.0:7778\"\n{extra}"))
                .expect("write");
            Config::load(Some(&path)).and_then(|c| c.check_admin_exposure())
        };
        let err = load("").expect_err("no accounts");
        assert!(format!("{err:#}").contains("[accounts]"), "{err:#}");
        load("[accounts]\nops = \"k3P9-vQ2x-7ZmL\"\n").expect("with accounts");
        load("allow_open_admin = true\n").expect("explicitly open");
    });
}

#[test]
fn a_pool_with_no_slots_or_lanes_is_refused() {
    quietly(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("c.toml");
        for (field, text) in [
            ("slots", "slots = 0"),
            ("lanes", "lanes = 0"),
            ("lanes", "lanes = 65"),
            ("buckets", "buckets = 16"),
        ] {
            std::fs::write(
                &path,
                format!(
                    "[pools.default]\n{text}\nshards = [{{ url = \"redis://127.0.0.1:1\" }}]\n"
                ),
            )
            .expect("write");
            let err = Config::load(Some(&path)).expect_err(text);
            assert!(format!("{err:#}").contains(field), "{text}: {err:#}");
        }
    });
}

#[test]
#[expect(
    clippy::result_large_err,
    reason = "figment::Jail's closure type is figment's"
)]
fn quotas_come_from_the_environment_too() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("SUNDIAL_QUOTAS__PUBLISH_RATE", "40");
        jail.set_env("SUNDIAL_POOLS__DEFAULT__QUOTAS__MAX_BODY", "512");
        let cfg = Config::load(None).map_err(|e| format!("{e:#}"))?;
        let q = cfg.pools["default"].quotas;
        assert_eq!((q.publish_rate, q.max_body), (Some(40), Some(512)));
        assert!(cfg.ignored_env.is_empty(), "{:?}", cfg.ignored_env);
        Ok(())
    });
}

#[test]
fn pools_come_from_the_file_only() {
    quietly(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("c.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).expect("write");
            Config::load(Some(&path))
        };
        let shard = |port: u16| format!("shards = [{{ url = \"redis://127.0.0.1:{port}\" }}]\n");
        let cfg = load(&format!(
            "[pools.default]\n{}[pools.eu]\n{}",
            shard(6400),
            shard(6401)
        ))
        .expect("two pools");
        assert_eq!(cfg.pools.keys().collect::<Vec<_>>(), ["default", "eu"]);
        let e = load(&format!("[pools.eu]\n{}", shard(6401))).expect_err("no default");
        let said = format!("{e:#}");
        assert!(
            said.contains("lists the pools eu but not `default`"),
            "{said}"
        );
        // A file with no pools gets the built-in one.
        let cfg = load("listen = \"127.0.0.1:9000\"\n").expect("no pools");
        assert_eq!(cfg.pools.keys().collect::<Vec<_>>(), ["default"]);
        assert_eq!(
            cfg.pools["default"].shards[0].url.as_deref(),
            Some("redis://127.0.0.1:6379")
        );
    });
}
