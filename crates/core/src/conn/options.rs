//! How to connect to a shard: its URL, pool size, timeouts, TLS files and
//! replica waits, with their defaults.

use std::time::Duration;

/// How to connect to a shard.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// `redis://[:password@]host:port[/db]`, `rediss://…` for TLS,
    /// `redis-sentinel://[:password@]sentinel:port[/db]?sentinelServiceName=…&node=…`
    /// for a Sentinel-managed master, or
    /// `redis-cluster://[[user]:password@]host:port?node=host:port…`
    /// (`rediss-cluster://` for TLS) for a Redis Cluster.
    pub url: String,
    /// Connections in the pool; each pipelines many requests.
    pub connections: usize,
    /// How long a command may take before the request fails with 503.
    pub command_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Publishes wait for replicas (`WAIT`) before they are answered.
    pub wait: Option<ReplicaWait>,
    /// The CA and client certificate of a TLS URL (`rediss://`,
    /// `rediss-cluster://`); `None`: the system's roots, no client
    /// certificate.
    pub tls: Option<super::TlsFiles>,
}

/// `WAIT`-based durability (see `Connection::eval_replicated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    /// Replicas that must acknowledge a write.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// Pooled connections to a shard unless configured.
pub const DEFAULT_CONNECTIONS: usize = 4;
/// How long a command may take unless configured: bounds what a hung or
/// partitioned shard costs a request.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

impl ShardOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connections: DEFAULT_CONNECTIONS,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: Duration::from_secs(2),
            wait: None,
            tls: None,
        }
    }
}
