//! A shard's config: a standalone Redis, a Sentinel-managed master or a
//! Redis Cluster, with its weight, connections, timeout, `WAIT` and TLS
//! tables, and their defaults.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The name of the shard of a one-shard pool that does not name it.
pub const DEFAULT_SHARD_NAME: &str = "main";

/// One shard: a standalone Redis (`url`), a master managed by Redis
/// Sentinel (`sentinel`), or a Redis Cluster (`cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// The shard's stable name: its place on the ring depends on it (not on
    /// its address). Required when a pool has several shards.
    #[serde(default)]
    pub name: Option<String>,
    /// `redis://[[user]:password@]host:port[/db]`, `rediss://` for TLS, or a
    /// `redis-sentinel://` URL as fred reads it.
    #[serde(default)]
    pub url: Option<String>,
    /// A Sentinel-managed master, instead of `url`.
    #[serde(default)]
    pub sentinel: Option<SentinelConfig>,
    /// A Redis Cluster, instead of `url`.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// Relative share of the pool's slots.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Pooled connections to this shard.
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// How long a command may wait for this shard before the request fails
    /// with 503 (ms): bounds what a hung or partitioned shard costs.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Answer a publish only once this many replicas hold it (`WAIT`).
    #[serde(default)]
    pub wait: Option<WaitConfig>,
    /// The CA to trust and the client certificate to show, for a shard
    /// reached over TLS (`rediss://` or `cluster.tls`).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The password for `url`, over any in it: so that the URL can sit in a
    /// shared config and the password in a file or a variable (see
    /// [`Secret`]).
    #[serde(default)]
    pub password: Option<Secret>,
}

/// Files for a shard's TLS connections, PEM. Paths are read when the shard
/// connects (at start and when a reload changes the shard's config): a
/// renewed certificate is taken up by a restart, or by a reload that names
/// new paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificates to trust instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// The client certificate (chain), for servers with
    /// `tls-auth-clients yes`.
    #[serde(default)]
    pub cert_file: Option<std::path::PathBuf>,
    /// The private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// What the engine connects with.
    pub fn files(&self) -> sundial_core::TlsFiles {
        sundial_core::TlsFiles {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
        }
    }
}

/// `WAIT`-based durability: a publish (or republish) is answered 201 only
/// once `replicas` replicas of the master that stored it have acknowledged
/// it, within `timeout_ms`; else 503, although the job is stored on the
/// master and may still be delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitConfig {
    /// How many replicas must acknowledge (1 or more).
    pub replicas: u32,
    /// How long to wait for them (ms).
    #[serde(default = "default_wait_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_wait_timeout_ms() -> u64 {
    100
}

/// Where the sentinels are and which master they watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// Sentinel addresses, `host:port` (port 26379 if left out).
    pub addresses: Vec<String>,
    /// The master's name in the sentinels' config (`sentinel monitor NAME …`).
    pub master: String,
    /// The password of the Redis servers (master and replicas).
    #[serde(default)]
    pub password: Option<Secret>,
    /// The password of the sentinels themselves, if they have one.
    #[serde(default)]
    pub sentinel_password: Option<Secret>,
    /// The database number.
    #[serde(default)]
    pub db: u8,
}

/// A Redis Cluster: where to find it (the client learns the other nodes
/// from these), and how to log in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Some of the cluster's nodes, `redis://host:port` or `host:port`;
    /// one that answers is enough.
    pub nodes: Vec<String>,
    /// The ACL user, if not `default`.
    #[serde(default)]
    pub username: Option<String>,
    /// The password of the cluster's nodes.
    #[serde(default)]
    pub password: Option<Secret>,
    /// Connect with TLS (every node, including those the client discovers).
    #[serde(default)]
    pub tls: bool,
}

fn default_weight() -> u32 {
    1
}

fn default_connections() -> usize {
    sundial_core::DEFAULT_CONNECTIONS
}

/// The default of [`ShardConfig::timeout_ms`].
pub const DEFAULT_TIMEOUT_MS: u64 = sundial_core::DEFAULT_COMMAND_TIMEOUT.as_millis() as u64;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

impl ShardConfig {
    /// A standalone shard at `url`, with every other setting at its default.
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            name: None,
            url: Some(url.into()),
            sentinel: None,
            cluster: None,
            weight: default_weight(),
            connections: default_connections(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            wait: None,
            tls: None,
            password: None,
        }
    }

    /// The shard's name on the ring.
    pub fn ring_name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_SHARD_NAME)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A standalone shard on the default port, named `name`.
    pub(in crate::config) fn shard(name: Option<&str>, weight: u32) -> ShardConfig {
        ShardConfig {
            name: name.map(str::to_owned),
            url: Some("redis://127.0.0.1:6379".to_owned()),
            sentinel: None,
            cluster: None,
            weight,
            connections: 1,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            wait: None,
            tls: None,
            password: None,
        }
    }
}
