//! The pooled connections to one Redis server ([`Node`]): a standalone
//! server, a Sentinel-managed master, or one primary of a Redis Cluster
//! (see [`super::cluster`]).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use fred::{
    clients::Pool,
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::config::{Config, ConnectionConfig, PerformanceConfig, ReconnectError, ReconnectPolicy},
};

use super::options::ShardOptions;
use crate::EngineError;

/// A request refused because the cluster node that serves it is not
/// connected.
pub(crate) fn not_connected(shard: &str, addr: &str) -> EngineError {
    EngineError::Unavailable {
        shard: shard.to_owned(),
        source: RedisError::new(
            ErrorKind::IO,
            format!("not connected to cluster node {addr}"),
        ),
    }
}

/// The connections to one Redis server.
pub(crate) struct Node {
    /// `host:port` of a cluster node; the shard's URL otherwise.
    pub(crate) addr: String,
    pub(crate) pool: Pool,
    /// The connections that publishes and their `WAIT`s use when the shard
    /// waits for replicas: a `WAIT` blocks its connection until it is
    /// answered, so it must not hold up consumes, acks and pumps.
    pub(crate) wait_pool: Option<Pool>,
    /// What the pools were made with, for connections of another kind
    /// (the subscriber).
    pub(crate) builder: Builder,
    /// When a timeout last made the connections reconnect (ms since
    /// `born`), 0 never.
    last_reconnect_ms: AtomicU64,
    /// When this server's replicas last failed to confirm a write (ms since
    /// `born`, 0 never): see `Connection::eval_replicated`.
    pub(crate) last_short_ms: AtomicU64,
    pub(crate) born: Instant,
    /// The pools' connection tasks, ended when the node is dropped.
    handles: Vec<tokio::task::JoinHandle<Result<(), RedisError>>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Node {
    /// The last user of the node's connections is gone (a reload replaced
    /// the shard, or the node no longer serves a hash slot): close them rather
    /// than let them reconnect forever.
    fn drop(&mut self) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let pool = self.pool.clone();
            let wait_pool = self.wait_pool.clone();
            let handles = std::mem::take(&mut self.handles);
            rt.spawn(async move {
                let quit = async {
                    let _ = pool.quit().await;
                    if let Some(p) = wait_pool {
                        let _ = p.quit().await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), quit).await;
                // A client in the middle of reconnecting may miss the quit
                // (fred 10) and reconnect forever: end its task.
                for h in handles {
                    h.abort();
                }
            });
        }
    }
}

impl Node {
    /// Builds the node's pools and starts connecting in the background;
    /// they reconnect by themselves.
    pub(crate) fn connect(
        shard: &str,
        addr: String,
        mut config: Config,
        opts: &ShardOptions,
        cluster: bool,
    ) -> Result<Self, EngineError> {
        // Keep trying when the server is down at startup: the gateway
        // answers 503 for it meanwhile instead of refusing to start.
        config.fail_fast = false;
        let mut builder = Builder::from_config(config);
        builder
            .with_connection_config(|c: &mut ConnectionConfig| {
                c.connection_timeout = opts.connect_timeout;
                c.internal_command_timeout = opts.connect_timeout;
                // A script whose connection dropped may or may not have run;
                // running it again could publish or consume twice. Fail it
                // and let the caller decide (every script call is also sent
                // `fail_fast`, which fred never writes again after a
                // connection drops).
                c.max_command_attempts = 1;
                // After a Sentinel failover the old master answers READONLY
                // (or MASTERDOWN): reconnect, which asks the sentinels for
                // the new master.
                c.reconnect_errors = vec![ReconnectError::ReadOnly, ReconnectError::MasterDown];
                // A cluster node's transaction answered `MOVED` or `ASK`
                // fails at once (fred would reconnect to the same node and
                // send it again); `Connection::idempotent` reads the hash
                // slot map and sends it where the hash slot lives now.
                if cluster {
                    c.max_redirections = 0;
                }
            })
            .with_performance_config(|p: &mut PerformanceConfig| {
                p.default_command_timeout = opts.command_timeout;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2));
        let mut handles = Vec::new();
        let mut pool = |builder: &Builder| {
            let p = builder
                .build_pool(opts.connections.max(1))
                .map_err(|e| EngineError::from_redis(shard, e))?;
            handles.extend(p.connect_pool());
            Ok::<_, EngineError>(p)
        };
        let main = pool(&builder)?;
        let wait_pool = opts.wait.map(|_| pool(&builder)).transpose()?;
        Ok(Self {
            addr,
            pool: main,
            wait_pool,
            builder,
            last_reconnect_ms: AtomicU64::new(0),
            last_short_ms: AtomicU64::new(0),
            born: Instant::now(),
            handles,
        })
    }

    /// A connected client of the pool, if any is.
    pub(crate) fn client(&self) -> Option<&Client> {
        let c = self.pool.next_connected();
        c.is_connected().then_some(c)
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.pool.next_connected().is_connected()
    }

    /// A command on this node timed out: its connections are dropped and
    /// made again, at most once per `every`, so that the next requests fail
    /// at once while the server is away instead of each waiting out the
    /// timeout. (fred's own `unresponsive` check does this too, but arms and
    /// cancels a timer in its router task for every command and reply.)
    pub(crate) fn reconnect_hung(&self, shard: &str, every: Duration) {
        let now = self.born.elapsed().as_millis() as u64 + 1;
        let last = self.last_reconnect_ms.load(Ordering::Acquire);
        if last != 0 && now < last + every.as_millis() as u64 {
            return;
        }
        if self
            .last_reconnect_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (pool, shard, addr) = (self.pool.clone(), shard.to_owned(), self.addr.clone());
            rt.spawn(async move {
                tracing::warn!(
                    shard,
                    node = addr,
                    "a command timed out: reconnecting to the node"
                );
                let _ = pool.force_reconnection().await;
            });
        }
    }
}
