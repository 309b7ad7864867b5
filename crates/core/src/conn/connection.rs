//! [`Connection`]: the connections to one shard (one [`Node`], or a
//! [`Cluster`] of them), made once and shared by every clone. What runs on
//! it is in the sibling files: `eval` and `replicated` (the script
//! runner), `resend` (commands sent again while a hash slot moves),
//! `health` (waiting, probing, loading the scripts), and the shared
//! subscriber ([`super::pubsub`]).

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use fred::{
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::config::{Config, Options},
};

use super::{
    cluster::Cluster,
    node::{Node, not_connected},
    options::{ReplicaWait, ShardOptions},
    pubsub::{self, PubSub},
};
use crate::{EngineError, scripts::SCRIPTS};

/// A primary of a Redis Cluster shard, as the hash slot map last read
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPrimary {
    /// `host:port`.
    pub addr: String,
    pub connected: bool,
    /// How many of the cluster's 16,384 hash slots it serves.
    pub hash_slots: u32,
}

/// The connections to one shard. Cheap to clone: clones share them.
#[derive(Clone, Debug)]
pub struct Connection {
    pub(super) inner: Arc<Inner>,
}

/// A shard's connections.
#[derive(Debug)]
pub(super) enum Conns {
    /// A standalone or Sentinel-managed master.
    Single(Arc<Node>),
    /// A Redis Cluster: a node per primary.
    Cluster(Arc<Cluster>),
}

pub(super) struct Inner {
    pub(super) name: String,
    /// Where it dials, without credentials (`address::address_of`).
    address: String,
    pub(super) conns: Conns,
    /// What every script call runs with: see [`Connection::connect`].
    pub(super) eval_options: Options,
    /// `sundial_redis_script_seconds` handles per script (as in
    /// `Scripts::all`), [ok, error]: each registered on its first call
    /// (a shard exports only the scripts it ran, and their errors only if
    /// they had some), so that a call records without building labels.
    pub(super) timings: Vec<[ScriptTiming; 2]>,
    pub(super) command_timeout: Duration,
    /// Pooled connections per Redis server (`connections`).
    pooled: usize,
    /// Publishes wait for replicas: see [`Connection::eval_replicated`].
    pub(super) wait: Option<ReplicaWait>,
    /// `sundial_replica_wait_seconds` and `sundial_replica_waits_total`
    /// (confirmed, short) handles, when `wait` is set.
    pub(super) wait_metrics: Option<(metrics::Histogram, [metrics::Counter; 2])>,
    /// The shared subscriber, made on first use.
    pubsub: OnceLock<PubSub>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Builds the connection pools and starts connecting in the background.
    /// The connection is usable at once: while it is not connected,
    /// commands fail fast with [`EngineError::Unavailable`], and it
    /// reconnects by itself.
    pub fn connect(name: impl Into<String>, opts: &ShardOptions) -> Result<Self, EngineError> {
        let name = name.into();
        let config = config_of(&name, opts)?;
        let address = super::address::address_of(&config.server);
        let conns = if config.server.is_clustered() {
            Conns::Cluster(Cluster::connect(&name, config, opts)?)
        } else {
            Conns::Single(Arc::new(Node::connect(
                &name,
                String::new(),
                config,
                opts,
                false,
            )?))
        };
        let timings = script_timings(&name);
        let wait_metrics = opts.wait.map(|_| wait_metrics(&name));
        Ok(Self {
            inner: Arc::new(Inner {
                name,
                address,
                conns,
                eval_options: Options {
                    fail_fast: true,
                    ..Options::default()
                },
                timings,
                command_timeout: opts.command_timeout,
                pooled: opts.connections.max(1),
                wait: opts.wait,
                wait_metrics,
                pubsub: OnceLock::new(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Where it dials, for people: `host:port`, a cluster's or the
    /// sentinels' seed addresses, or a socket's path; no credentials.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// How many replicas a publish waits for (`wait`), if any.
    pub fn wait_replicas(&self) -> Option<u32> {
        self.inner.wait.map(|w| w.replicas)
    }

    /// How long a command may take before the shard counts as unavailable.
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// The error of a request that found the shard unavailable because
    /// nothing it ran ended in time (`what`).
    pub fn timed_out(&self, what: &str) -> EngineError {
        EngineError::Unavailable {
            shard: self.inner.name.clone(),
            source: RedisError::new(ErrorKind::Timeout, what.to_owned()),
        }
    }

    /// How many connections each of its Redis servers has in the pool
    /// that scripts use.
    pub fn pooled_connections(&self) -> usize {
        self.inner.pooled
    }

    /// Whether the shard is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.conns, Conns::Cluster(_))
    }

    /// Whether both are the same connection (a reload that changes nothing
    /// about a shard keeps its connection).
    pub fn same(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A cluster shard's primaries, in address order (empty for any other
    /// shard, and for a cluster whose hash slot map was never read).
    pub fn cluster_primaries(&self) -> Vec<ClusterPrimary> {
        let Conns::Cluster(c) = &self.inner.conns else {
            return Vec::new();
        };
        let mut out: Vec<ClusterPrimary> = c
            .hash_slot_counts()
            .into_iter()
            .map(|(node, hash_slots)| ClusterPrimary {
                addr: node.addr.clone(),
                connected: node.is_connected(),
                hash_slots,
            })
            .collect();
        out.sort_by(|a, b| a.addr.cmp(&b.addr));
        out
    }

    /// The address of the cluster primary that serves `key` (`None` for a
    /// shard that is not a cluster, or a hash slot without a known
    /// primary).
    pub fn cluster_node_of(&self, key: &str) -> Option<String> {
        let Conns::Cluster(c) = &self.inner.conns else {
            return None;
        };
        c.owner(crate::keys::hash_slot(key)).map(|n| n.addr.clone())
    }

    /// Whether the shard can be reached: a pooled connection is up (on a
    /// cluster: the hash slot map is known and every primary is connected).
    pub fn is_connected(&self) -> bool {
        match &self.inner.conns {
            Conns::Single(n) => n.is_connected(),
            Conns::Cluster(c) => c.is_connected(),
        }
    }

    /// Whether a command on `key` can be sent: on a cluster, whether the
    /// primary that serves its hash slot is connected.
    pub fn is_connected_for(&self, key: &str) -> bool {
        match &self.inner.conns {
            Conns::Single(n) => n.is_connected(),
            Conns::Cluster(c) => c
                .owner(crate::keys::hash_slot(key))
                .is_some_and(|n| n.is_connected()),
        }
    }

    /// The shard's shared subscriber, made (and its task started) on first
    /// use. Needs a Tokio runtime.
    pub fn pubsub(&self) -> Result<&PubSub, EngineError> {
        let source = match &self.inner.conns {
            Conns::Single(n) => pubsub::Source::Single(n),
            Conns::Cluster(c) => pubsub::Source::Cluster(c),
        };
        pubsub::shared(&self.inner.pubsub, &self.inner.name, source)
    }

    /// Every server connected to (on a cluster: the nodes in use).
    pub(super) fn nodes(&self) -> Vec<Arc<Node>> {
        match &self.inner.conns {
            Conns::Single(n) => vec![n.clone()],
            Conns::Cluster(c) => c.nodes(),
        }
    }

    /// The primaries: the one node, or a cluster's primaries that serve a
    /// hash slot.
    pub(super) fn primaries(&self) -> Vec<Arc<Node>> {
        match &self.inner.conns {
            Conns::Single(n) => vec![n.clone()],
            Conns::Cluster(c) => c.primaries(),
        }
    }

    /// The cluster hash slot of `key` (0 on other shards, where it is
    /// unused).
    pub(super) fn hash_slot_of(&self, key: &str) -> u16 {
        if self.is_cluster() {
            crate::keys::hash_slot(key)
        } else {
            0
        }
    }

    /// The node that serves `hash_slot` (any on other shards).
    pub(super) async fn route(&self, hash_slot: u16) -> Result<Arc<Node>, EngineError> {
        match &self.inner.conns {
            Conns::Single(n) => Ok(n.clone()),
            Conns::Cluster(c) => c.route(hash_slot).await,
        }
    }

    /// A connected client of `node` (of its publish pool if `wait`), or
    /// `Unavailable` at once (no queuing behind a reconnect: a request
    /// should get its 503 quickly).
    pub(super) fn client_of(&self, node: &Node, wait: bool) -> Result<Client, EngineError> {
        let pool = match (wait, &node.wait_pool) {
            (true, Some(p)) => p,
            _ => &node.pool,
        };
        let client = pool.next_connected();
        if client.is_connected() {
            Ok(client.clone())
        } else if node.addr.is_empty() {
            Err(self.unavailable("not connected"))
        } else {
            Err(self.unavailable_node(&node.addr))
        }
    }

    pub(crate) fn unavailable_node(&self, addr: &str) -> EngineError {
        not_connected(&self.inner.name, addr)
    }

    /// Classifies a Redis error of this shard (see [`EngineError`]). A
    /// timeout means a connection left a command unanswered for a whole
    /// command timeout: the server is hung or cut off. Its connections are
    /// then made again (see [`Node::reconnect_hung`]).
    pub(super) fn err_on(&self, node: &Node, e: RedisError) -> EngineError {
        if *e.kind() == ErrorKind::Timeout {
            node.reconnect_hung(&self.inner.name, self.inner.command_timeout);
        }
        EngineError::from_redis(&self.inner.name, e)
    }

    /// Classifies a Redis error of this shard that no node can be blamed
    /// for (see [`EngineError`]).
    pub(crate) fn err(&self, e: RedisError) -> EngineError {
        EngineError::from_redis(&self.inner.name, e)
    }

    pub(super) fn unavailable(&self, what: &'static str) -> EngineError {
        EngineError::Unavailable {
            shard: self.inner.name.clone(),
            source: RedisError::new(ErrorKind::IO, what),
        }
    }

    pub(crate) fn bad_reply(&self, what: impl Into<String>) -> EngineError {
        EngineError::reply(&self.inner.name, what)
    }
}

/// The client config of `opts`'s URL, with its TLS files.
fn config_of(name: &str, opts: &ShardOptions) -> Result<Config, EngineError> {
    let mut config = Config::from_url(&opts.url).map_err(|e| EngineError::Unsafe {
        shard: name.to_owned(),
        what: format!("invalid redis url: {e}"),
    })?;
    if matches!(
        config.server,
        fred::types::config::ServerConfig::Unix { .. }
    ) {
        config.database =
            super::address::unix_database(&opts.url).map_err(|what| EngineError::Unsafe {
                shard: name.to_owned(),
                what,
            })?;
    }
    if let Some(files) = &opts.tls {
        if config.tls.is_none() {
            return Err(EngineError::Unsafe {
                shard: name.to_owned(),
                what: "TLS files are set but the URL does not use TLS (rediss://)".into(),
            });
        }
        config.tls = Some(files.config().map_err(|what| EngineError::Unsafe {
            shard: name.to_owned(),
            what,
        })?);
    }
    Ok(config)
}

/// One `sundial_redis_script_seconds` series of a shard, registered when
/// it first has something to record.
pub(super) struct ScriptTiming {
    labels: [(&'static str, metrics::SharedString); 3],
    histogram: std::sync::OnceLock<metrics::Histogram>,
}

impl ScriptTiming {
    pub(super) fn record(&self, secs: f64) {
        self.histogram
            .get_or_init(|| metrics::histogram!("sundial_redis_script_seconds", &self.labels))
            .record(secs);
    }
}

/// The `sundial_redis_script_seconds` series of shard `name`, per script
/// (in the order of `Scripts::all`), [ok, error], none registered yet.
fn script_timings(name: &str) -> Vec<[ScriptTiming; 2]> {
    SCRIPTS
        .all()
        .iter()
        .map(|s| {
            ["ok", "error"].map(|result| ScriptTiming {
                labels: [
                    ("shard", name.to_owned().into()),
                    ("script", s.name.into()),
                    ("result", result.into()),
                ],
                histogram: std::sync::OnceLock::new(),
            })
        })
        .collect()
}

/// The `sundial_replica_wait_seconds` and `sundial_replica_waits_total`
/// (confirmed, short) handles of shard `name`.
fn wait_metrics(name: &str) -> (metrics::Histogram, [metrics::Counter; 2]) {
    (
        metrics::histogram!("sundial_replica_wait_seconds", "shard" => name.to_owned()),
        ["confirmed", "short"].map(|result| {
            metrics::counter!(
                "sundial_replica_waits_total",
                "shard" => name.to_owned(),
                "result" => result
            )
        }),
    )
}
