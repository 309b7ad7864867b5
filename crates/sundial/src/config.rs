//! The configuration of every command: embedded defaults, then the TOML file, then
//! `SUNDIAL_` environment variables (`__` separates levels, e.g.
//! `SUNDIAL_LIMITS__DEFAULT_TTR=60`). `config/sundial.toml` documents every key.
//!
//! The top level and validation are here; loading (what the file, the
//! defaults and the variables each give, and the warnings) is in
//! `config/load.rs`; the tables below the top level (`[http]`, `[limits]`,
//! `[pump]`, `[mover]`, `[log]`) are in `config/sections.rs`.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use serde::{Deserialize, Serialize};
use sundial_core::Limits;
use sundial_router::{
    PoolConfig, ShardConfig,
    config::{DEFAULT_LANES, DEFAULT_SLOTS},
    quota::Quota,
    reload::Desired,
};

mod admin;
mod load;
mod sections;

pub use sections::{
    HeadroomConfig, HttpConfig, LimitsConfig, LogConfig, MetricsConfig, MoverConfig, PumpConfig,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the public job API.
    pub listen: SocketAddr,
    /// Address of the admin API (tokens, pools, metrics, health).
    pub admin_listen: SocketAddr,
    /// Redis URL for tokens; the default pool's shard when absent.
    pub admin_redis: Option<String>,
    /// The password for `admin_redis`, over any in its URL: a string,
    /// `{ file = "…" }` or `{ env = "…" }`.
    pub admin_redis_password: Option<sundial_router::config::Secret>,
    /// Admin API basic-auth accounts (user → password); none = no auth.
    pub accounts: BTreeMap<String, String>,
    /// A TOML file of more accounts (`user = "password"` lines).
    pub accounts_file: Option<std::path::PathBuf>,
    /// Start even when `admin_listen` is not on loopback and there are no
    /// accounts (anyone who reaches it may mint tokens).
    pub allow_open_admin: bool,
    /// Names the admin listener answers to besides IP addresses and
    /// `localhost` (others get 421: a defence against DNS rebinding).
    pub admin_hosts: Vec<String>,
    /// How long a shutdown waits for requests in flight.
    pub shutdown_grace_secs: u64,
    /// Reload the pools when the config file changes (SIGHUP and
    /// `POST /reload` always work).
    pub watch_config: bool,
    /// How often layouts are checked: this gateway's view announced, drains
    /// measured and retired, the shards' pinned layouts compared with ours.
    pub layout_check_ms: u64,
    pub limits: LimitsConfig,
    pub http: HttpConfig,
    pub pump: PumpConfig,
    pub mover: MoverConfig,
    pub log: LogConfig,
    pub headroom: HeadroomConfig,
    pub metrics: MetricsConfig,
    /// Every namespace's quota, unless its pool's `quotas` or the quota
    /// table say otherwise (see `sundial_router::quota`).
    #[serde(default)]
    pub quotas: Quota,
    pub pools: BTreeMap<String, PoolConfig>,
    /// `SUNDIAL_*` environment variables that name no config key, ignored
    /// (logged once logging is up).
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        let default_pool = PoolConfig {
            slots: DEFAULT_SLOTS,
            lanes: DEFAULT_LANES,
            shards: vec![ShardConfig::at("redis://127.0.0.1:6379")],
            quotas: Quota::default(),
        };
        Self {
            listen: ([127, 0, 0, 1], 7777).into(),
            admin_listen: ([127, 0, 0, 1], 7778).into(),
            admin_redis: None,
            admin_redis_password: None,
            accounts: BTreeMap::new(),
            accounts_file: None,
            allow_open_admin: false,
            admin_hosts: Vec::new(),
            shutdown_grace_secs: 10,
            watch_config: true,
            layout_check_ms: 5_000,
            limits: LimitsConfig::from(&Limits::default()),
            http: HttpConfig {
                max_connections: 10_000,
                admin_max_connections: 256,
                header_timeout_ms: 10_000,
                body_timeout_ms: 60_000,
                idle_timeout_ms: 75_000,
                max_head_bytes: 64 * 1024,
                max_bulk_bytes: 8 * 1024 * 1024,
                body_memory_mb: 256,
                query_token: true,
            },
            pump: PumpConfig::from(&sundial_pumpd::PumpOptions::default()),
            mover: MoverConfig::from(&sundial_router::mover::MoverOptions::default()),
            log: LogConfig {
                format: "text".to_owned(),
                level: "info".to_owned(),
                access: false,
            },
            headroom: HeadroomConfig {
                share_above_percent: 90,
            },
            metrics: MetricsConfig {
                idle_series_secs: 3600,
            },
            quotas: Quota::default(),
            pools: BTreeMap::from([("default".to_owned(), default_pool)]),
            ignored_env: Vec::new(),
        }
    }
}

impl Config {
    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.pools.contains_key("default"),
            "the config lists the pools {} but not `default`, which is required: tokens with no \
             pool prefix route to it, and it holds the admin tables unless admin_redis is set. \
             Add [pools.default]",
            self.pools.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        if let Some(url) = &self.admin_redis {
            let password = self.admin_redis_password.as_ref();
            sundial_router::config::redis_url(url, password)
                .map_err(|e| anyhow::anyhow!("admin_redis: {e}"))?;
        }
        for (name, pool) in &self.pools {
            sundial_core::job::check_namespace(name)
                .map_err(|_| anyhow::anyhow!("pool name {name:?} must match [-_A-Za-z0-9]+"))?;
            pool.validate(name).map_err(anyhow::Error::msg)?;
        }
        self.quotas
            .validate()
            .map_err(|e| anyhow::anyhow!("quotas: {e}"))?;
        admin::check_admin_hosts(&self.admin_hosts)?;
        admin::check_accounts(&self.accounts)?;
        self.headroom.validate()?;
        self.metrics.validate(self.pump.metrics_interval_ms)?;
        self.limits.validate()?;
        anyhow::ensure!(self.pump.batch >= 1, "pump.batch must be at least 1");
        self.mover.validate()?;
        anyhow::ensure!(
            self.pump.lease_ttl_ms >= 200,
            "pump.lease_ttl_ms must be at least 200"
        );
        anyhow::ensure!(
            matches!(self.log.format.as_str(), "text" | "json"),
            "log.format must be `text` or `json`"
        );
        self.http.validate()?;
        Ok(())
    }

    /// The gateway's admin API mints tokens: refuses one that other hosts
    /// can reach without accounts, unless `allow_open_admin` says something
    /// else guards it. (`sundial pumpd`'s admin listener serves only
    /// metrics and health, so it needs no accounts.)
    pub fn check_admin_exposure(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.admin_listen.ip().is_loopback()
                || !self.accounts.is_empty()
                || self.allow_open_admin,
            "admin_listen {} is reachable from other hosts but no [accounts] are set: anyone who \
             reaches it could mint tokens. Add accounts, bind it to 127.0.0.1, or set \
             allow_open_admin = true if a network policy guards it",
            self.admin_listen
        );
        Ok(())
    }

    pub fn layout_check(&self) -> Duration {
        Duration::from_millis(self.layout_check_ms.max(100))
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// What a reload reads: the pools (each with `[quotas]` under its own
    /// quotas since [`Self::load`]), and the other keys (which need a
    /// restart) in a form that tells when they changed.
    pub fn desired(&self) -> Desired {
        let mut others = self.clone();
        others.pools.clear();
        others.quotas = Quota::default();
        Desired {
            pools: self.pools.clone(),
            others: format!("{others:?}"),
        }
    }

    /// What the gateway's handlers are run with.
    pub fn gateway_settings(&self) -> sundial_gateway::state::Settings {
        sundial_gateway::state::Settings {
            limits: self.limits.limits(),
            bodies: self.http.bodies(),
            accounts: self.accounts.clone(),
            admin_hosts: self.admin_hosts.clone(),
            query_token: self.http.query_token,
        }
    }

    pub fn mover_options(&self) -> sundial_router::mover::MoverOptions {
        sundial_router::mover::MoverOptions {
            batch: self.mover.batch,
            slots_at_once: self.mover.slots_at_once,
            settle: Duration::from_millis(self.mover.settle_ms),
            lease: Duration::from_millis(self.mover.lease_ms),
        }
    }

    pub fn pump_options(&self) -> sundial_pumpd::PumpOptions {
        sundial_pumpd::PumpOptions {
            batch: self.pump.batch,
            idle_check: Duration::from_millis(self.pump.idle_check_ms.max(1)),
            lease_ttl: Duration::from_millis(self.pump.lease_ttl_ms.max(200)),
            metrics_interval: Duration::from_millis(self.pump.metrics_interval_ms.max(100)),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mover_lease_shorter_than_two_settle_times_is_refused() {
        let mut cfg = Config::default();
        cfg.validate().expect("the defaults are valid");
        (cfg.mover.settle_ms, cfg.mover.lease_ms) = (5_000, 9_999);
        let e = cfg
            .validate()
            .expect_err("a lease shorter than two settles");
        assert_eq!(
            e.to_string(),
            "mover.lease_ms must be at least twice mover.settle_ms"
        );
        cfg.mover.lease_ms = 10_000;
        cfg.validate().expect("twice is enough");
    }

    #[test]
    fn a_pools_quotas_lie_over_the_configs_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("sundial.toml");
        let write = |text: &str| std::fs::write(&path, text).expect("write");
        write(
            r#"
            [quotas]
            max_tries = 10
            publish_rate = 50
            [pools.default]
            shards = [{ url = "redis://127.0.0.1:6379" }]
            quotas = { publish_rate = 0, max_body = 4096 }
            "#,
        );
        let cfg = Config::load(Some(&path)).expect("valid");
        let q = cfg.pools["default"].quotas;
        assert_eq!(
            (q.max_tries, q.publish_rate, q.max_body),
            (Some(10), Some(0), Some(4096)),
            "the pool's fields over the config's"
        );
        write("[quotas]\nmax_tries = 70000\n");
        let e = Config::load(Some(&path)).expect_err("too many tries");
        assert_eq!(
            format!("{e:#}"),
            "quotas: max_tries must be at most 65535, not 70000"
        );
        write("[quotas]\npublish_rate = -5\n");
        let e = Config::load(Some(&path)).expect_err("negative");
        assert!(format!("{e:#}").contains("quotas.publish_rate"), "{e:#}");
        write("[quotas]\npublish_rat = 5\n");
        let e = Config::load(Some(&path)).expect_err("unknown");
        assert!(format!("{e:#}").contains("publish_rat"), "{e:#}");
    }
}
