//! The configuration of every command: embedded defaults, then the TOML file, then
//! `SUNDIAL_` environment variables (`__` separates levels, e.g.
//! `SUNDIAL_LIMITS__DEFAULT_TTR=60`). `config/sundial.toml` documents every key.

use std::{collections::BTreeMap, net::SocketAddr, path::Path, time::Duration};

use anyhow::Context;
use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};
use sundial_core::Limits;
use sundial_router::{
    PoolConfig, ShardConfig,
    config::{DEFAULT_LANES, DEFAULT_SLOTS},
    reload::Desired,
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
    /// Admin API basic-auth accounts (user → password); none = no auth.
    pub accounts: BTreeMap<String, String>,
    /// Start even when `admin_listen` is not on loopback and there are no
    /// accounts (anyone who reaches it may mint tokens).
    pub allow_open_admin: bool,
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
    pub pools: BTreeMap<String, PoolConfig>,
    /// `SUNDIAL_*` environment variables that name no config key, ignored
    /// (logged once logging is up).
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

/// Bounds on what HTTP clients may cost the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Open connections to the job API at most (each waiting worker holds
    /// one); further clients wait to be accepted.
    pub max_connections: usize,
    /// Open connections to the admin API at most.
    pub admin_max_connections: usize,
    /// How long a request's head may take to arrive (ms).
    pub header_timeout_ms: u64,
    /// How long a request's body may take to arrive (ms); slower is 408.
    pub body_timeout_ms: u64,
    /// How long a keep-alive connection may sit idle between requests (ms).
    pub idle_timeout_ms: u64,
    /// The largest request head (request line and headers), in bytes.
    pub max_head_bytes: usize,
    /// The largest bulk publish body, in bytes (each job is at most 1 MiB).
    pub max_bulk_bytes: usize,
    /// Memory that request bodies being read may hold together (MiB); a
    /// body that finds none left is answered 503.
    pub body_memory_mb: usize,
}
/// lmstfy's defaults for requests that leave a parameter out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub default_ttl: u32,
    pub default_delay: u32,
    pub default_tries: u16,
    pub default_ttr: u32,
    pub default_timeout: u32,
    /// The longest long poll; longer asks are capped to this.
    pub max_timeout: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PumpConfig {
    /// Run the pumps inside `sundial serve`.
    pub enabled: bool,
    /// Timer entries per pump call.
    pub batch: u32,
    /// How long an idle slot sleeps before it checks anyway (ms).
    pub idle_check_ms: u64,
    /// How long a pump process's heartbeat counts; its slots pass to others
    /// about 0.7 of this after its last one (ms).
    pub lease_ttl_ms: u64,
    /// How often the backlog gauges of held slots are refreshed (ms).
    pub metrics_interval_ms: u64,
}

/// The mover, which copies the jobs of moved slots to their new shard
/// (`sundial_router::mover`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoverConfig {
    /// Run it inside `sundial serve` (else drains wait for their jobs to
    /// be consumed, acknowledged, expire or be deleted).
    pub enabled: bool,
    /// Jobs per batch.
    pub batch: u32,
    /// Slots one gateway moves at once.
    pub slots_at_once: usize,
    /// How long each batch waits between its steps (ms).
    pub settle_ms: u64,
    /// How long a mover's lease on a slot lasts unless renewed (ms).
    pub lease_ms: u64,
}

impl From<&sundial_router::mover::MoverOptions> for MoverConfig {
    fn from(o: &sundial_router::mover::MoverOptions) -> Self {
        Self {
            enabled: true,
            batch: o.batch,
            slots_at_once: o.slots_at_once,
            settle_ms: o.settle.as_millis() as u64,
            lease_ms: o.lease.as_millis() as u64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: String,
    /// A tracing filter, e.g. `info` or `sundial_gateway=debug,info`;
    /// `RUST_LOG` overrides it.
    pub level: String,
    /// One info line per request (request id, route, namespace, queue,
    /// status, time); otherwise those lines are at debug.
    pub access: bool,
}

impl Default for Config {
    fn default() -> Self {
        let default_pool = PoolConfig {
            slots: DEFAULT_SLOTS,
            lanes: DEFAULT_LANES,
            shards: vec![ShardConfig::at("redis://127.0.0.1:6379")],
        };
        Self {
            listen: ([127, 0, 0, 1], 7777).into(),
            admin_listen: ([127, 0, 0, 1], 7778).into(),
            admin_redis: None,
            accounts: BTreeMap::new(),
            allow_open_admin: false,
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
            },
            pump: PumpConfig::from(&sundial_pumpd::PumpOptions::default()),
            mover: MoverConfig::from(&sundial_router::mover::MoverOptions::default()),
            log: LogConfig {
                format: "text".to_owned(),
                level: "info".to_owned(),
                access: false,
            },
            pools: BTreeMap::from([("default".to_owned(), default_pool)]),
            ignored_env: Vec::new(),
        }
    }
}

/// The config's top-level keys, lower case.
fn top_level_keys() -> Vec<String> {
    match serde_json::to_value(Config::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `LIMITS__DEFAULT_TTR` → `limits`.
fn first_segment(key: &str) -> String {
    key.split("__")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// The longest timeout a config may set: one day.
const MAX_TIMEOUT_MS: u64 = 86_400_000;

impl HttpConfig {
    fn validate(&self) -> anyhow::Result<()> {
        let h = self;
        anyhow::ensure!(
            h.max_connections >= 1 && h.admin_max_connections >= 1,
            "http.max_connections and http.admin_max_connections must be at least 1"
        );
        let timeouts = [h.header_timeout_ms, h.body_timeout_ms, h.idle_timeout_ms];
        anyhow::ensure!(
            timeouts.iter().all(|t| (100..=MAX_TIMEOUT_MS).contains(t)),
            "http timeouts must be within 100 ms and one day"
        );
        anyhow::ensure!(
            h.max_head_bytes >= 8192,
            "http.max_head_bytes must be at least 8192"
        );
        anyhow::ensure!(
            h.max_bulk_bytes >= 1024,
            "http.max_bulk_bytes must be at least 1024"
        );
        let largest = sundial_core::job::MAX_BODY_BYTES.max(h.max_bulk_bytes);
        anyhow::ensure!(
            h.body_memory_mb * 1024 * 1024 >= largest,
            "http.body_memory_mb must hold at least one largest body ({largest} bytes)"
        );
        Ok(())
    }

    /// The bounds of the job API's listener.
    pub fn api_limits(&self) -> sundial_gateway::server::HttpLimits {
        sundial_gateway::server::HttpLimits {
            max_connections: self.max_connections,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_head_bytes: self.max_head_bytes,
        }
    }

    /// The bounds of the admin listener.
    pub fn admin_limits(&self) -> sundial_gateway::server::HttpLimits {
        sundial_gateway::server::HttpLimits {
            max_connections: self.admin_max_connections,
            ..self.api_limits()
        }
    }

    /// The body readers' shared bounds.
    pub fn bodies(&self) -> sundial_gateway::api::body::Bodies {
        sundial_gateway::api::body::Bodies::new(
            self.body_memory_mb * 1024 * 1024,
            Duration::from_millis(self.body_timeout_ms),
            self.max_bulk_bytes,
        )
    }
}

impl From<&sundial_pumpd::PumpOptions> for PumpConfig {
    fn from(o: &sundial_pumpd::PumpOptions) -> Self {
        Self {
            enabled: true,
            batch: o.batch,
            idle_check_ms: o.idle_check.as_millis() as u64,
            lease_ttl_ms: o.lease_ttl.as_millis() as u64,
            metrics_interval_ms: o.metrics_interval.as_millis() as u64,
        }
    }
}

impl From<&Limits> for LimitsConfig {
    fn from(l: &Limits) -> Self {
        Self {
            default_ttl: l.default_ttl_secs,
            default_delay: l.default_delay_secs,
            default_tries: l.default_tries,
            default_ttr: l.default_ttr_secs,
            default_timeout: l.default_timeout_secs,
            max_timeout: l.max_timeout_secs,
        }
    }
}

impl LimitsConfig {
    pub fn limits(&self) -> Limits {
        Limits {
            default_ttl_secs: self.default_ttl,
            default_delay_secs: self.default_delay,
            default_tries: self.default_tries,
            default_ttr_secs: self.default_ttr,
            default_timeout_secs: self.default_timeout,
            max_timeout_secs: self.max_timeout,
        }
    }
}

impl Config {
    /// Loads and validates the configuration.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            anyhow::ensure!(
                file.exists(),
                "config file {} does not exist",
                file.display()
            );
            // A file that lists pools replaces the default pool entirely.
            fig = fig.merge(Toml::file(file));
        }
        let keys = top_level_keys();
        let known = keys.clone();
        let env = Env::prefixed("SUNDIAL_")
            .filter(move |k| known.contains(&first_segment(k.as_str())))
            .split("__");
        let mut cfg: Config = fig.merge(env).extract().context("invalid configuration")?;
        cfg.ignored_env = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| {
                k.strip_prefix("SUNDIAL_").is_some_and(|rest| {
                    // SUNDIAL_CONFIG names the file (read by the command line).
                    !rest.eq_ignore_ascii_case("CONFIG") && !keys.contains(&first_segment(rest))
                })
            })
            .collect();
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.pools.contains_key("default"),
            "a pool named `default` is required (bare tokens route to it)"
        );
        for (name, pool) in &self.pools {
            sundial_core::job::check_namespace(name)
                .map_err(|_| anyhow::anyhow!("pool name {name:?} must match [-_A-Za-z0-9]+"))?;
            pool.validate(name).map_err(anyhow::Error::msg)?;
        }
        anyhow::ensure!(
            self.limits.default_tries >= 1,
            "limits.default_tries must be at least 1"
        );
        anyhow::ensure!(
            self.limits.default_ttl == 0 || self.limits.default_ttl >= self.limits.default_delay,
            "limits.default_ttl must be 0 or at least limits.default_delay"
        );
        anyhow::ensure!(self.pump.batch >= 1, "pump.batch must be at least 1");
        anyhow::ensure!(
            (1..=10_000).contains(&self.mover.batch),
            "mover.batch must be within 1 and 10000"
        );
        anyhow::ensure!(
            (1..=128).contains(&self.mover.slots_at_once),
            "mover.slots_at_once must be within 1 and 128"
        );
        anyhow::ensure!(
            (1_000..=60_000).contains(&self.mover.lease_ms),
            "mover.lease_ms must be within 1000 and 60000"
        );
        anyhow::ensure!(
            (1_000..=60_000).contains(&self.mover.settle_ms),
            "mover.settle_ms must be within 1000 and 60000 (each step waits it for the one before to \
             reach disk: appendfsync everysec writes each second)"
        );
        // A lease is renewed once per wait between a batch's steps and the
        // step after it: one that lapsed in every wait would pass the slot
        // between gateways all the time.
        anyhow::ensure!(
            self.mover.lease_ms >= 2 * self.mover.settle_ms,
            "mover.lease_ms must be at least twice mover.settle_ms"
        );
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

    /// What a reload reads: the pools, and the other keys (which need a
    /// restart) in a form that tells when they changed.
    pub fn desired(&self) -> Desired {
        let mut others = self.clone();
        others.pools.clear();
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
}
