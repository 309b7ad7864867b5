//! The config's tables below its top level: `[http]`, `[limits]`,
//! `[pump]`, `[mover]` and `[log]`, each with its defaults' source and
//! what it turns into for the crate that runs it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sundial_core::Limits;

/// Bounds on what HTTP clients may cost the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Open connections to the job API at most (each waiting worker holds
    /// one); past it, a new client closes one with no request in flight,
    /// or waits to be accepted.
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
    /// Accept a job-API token in the query (`?token=`, as lmstfy does) when
    /// no `X-Token` header is sent. A token in a URL ends up in proxies'
    /// access logs: `false` refuses it with 401.
    pub query_token: bool,
}
/// The metrics `/metrics` exports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// A per-queue series (`sundial_core::series`) that nothing updated
    /// for this long goes (seconds; 0: never).
    pub idle_series_secs: u64,
}

impl MetricsConfig {
    /// The idle time, `None` for never.
    pub fn idle(&self) -> Option<std::time::Duration> {
        (self.idle_series_secs > 0).then(|| std::time::Duration::from_secs(self.idle_series_secs))
    }

    /// Refuses an idle time the pumps' backlog gauges could outlast
    /// between two refreshes (`refresh_ms`, `pump.metrics_interval_ms`).
    pub(super) fn validate(&self, refresh_ms: u64) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.idle_series_secs == 0 || self.idle_series_secs * 1000 >= 2 * refresh_ms,
            "metrics.idle_series_secs must be 0 (never) or at least twice \
             pump.metrics_interval_ms ({refresh_ms} ms), not {} s",
            self.idle_series_secs
        );
        Ok(())
    }
}

/// Headroom on shards near their `maxmemory` (`sundial_router::headroom`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadroomConfig {
    /// Above this share of a shard's `maxmemory` (percent), publishes of
    /// namespaces that hold more than their share of it are refused; 0
    /// turns headroom off.
    pub share_above_percent: u8,
}

impl HeadroomConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.share_above_percent <= 100,
            "headroom.share_above_percent must be 0 (off) to 100, not {}",
            self.share_above_percent
        );
        Ok(())
    }
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
    /// The longest TTR a touch may set; a longer one is refused (400).
    pub max_ttr: u32,
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

impl MoverConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=10_000).contains(&self.batch),
            "mover.batch must be within 1 and 10000"
        );
        anyhow::ensure!(
            (1..=128).contains(&self.slots_at_once),
            "mover.slots_at_once must be within 1 and 128"
        );
        anyhow::ensure!(
            (1_000..=60_000).contains(&self.lease_ms),
            "mover.lease_ms must be within 1000 and 60000"
        );
        anyhow::ensure!(
            (1_000..=60_000).contains(&self.settle_ms),
            "mover.settle_ms must be within 1000 and 60000 (each step waits it for the one before to \
             reach disk: appendfsync everysec writes each second)"
        );
        // A lease is renewed once per wait between a batch's steps and the
        // step after it: one that lapsed in every wait would pass the slot
        // between gateways all the time.
        anyhow::ensure!(
            self.lease_ms >= 2 * self.settle_ms,
            "mover.lease_ms must be at least twice mover.settle_ms"
        );
        Ok(())
    }
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

/// The longest timeout a config may set: one day.
const MAX_TIMEOUT_MS: u64 = 86_400_000;

impl HttpConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
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
            max_ttr: l.max_ttr_secs,
        }
    }
}

impl LimitsConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.default_tries >= 1,
            "limits.default_tries must be at least 1"
        );
        anyhow::ensure!(
            self.default_ttl == 0 || self.default_ttl >= self.default_delay,
            "limits.default_ttl must be 0 or at least limits.default_delay"
        );
        // A touch that names no TTR takes the default: it must be one a
        // touch may set.
        anyhow::ensure!(
            (1..=self.max_ttr).contains(&self.default_ttr),
            "limits.default_ttr must be from 1 to limits.max_ttr ({} s), not {}",
            self.max_ttr,
            self.default_ttr
        );
        Ok(())
    }

    pub fn limits(&self) -> Limits {
        Limits {
            default_ttl_secs: self.default_ttl,
            default_delay_secs: self.default_delay,
            default_tries: self.default_tries,
            default_ttr_secs: self.default_ttr,
            default_timeout_secs: self.default_timeout,
            max_timeout_secs: self.max_timeout,
            max_ttr_secs: self.max_ttr,
        }
    }
}
