//! The connection to one shard and the script runner. Its connections,
//! per Redis server, are in [`super::nodes`]. What runs on it is split by
//! concern: [`super::checks`] (startup checks), [`super::slots`]
//! (what a shard's slots hold, in bulk), [`super::pins`] (pinned
//! layouts and gateway views), [`super::admin`] (tokens, limits, rate
//! counters), [`super::pubsub`], and the job operations.

use std::{sync::Arc, time::Duration};

use fred::{
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::{
        Key, Value,
        config::{Config, Options},
    },
};

use super::nodes::{Cluster, Node};
use crate::{
    EngineError,
    keys::SlotKeys,
    scripts::{Named, SCRIPTS},
};

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

/// `WAIT`-based durability (see [`Shard::eval_replicated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    /// Replicas that must acknowledge a write.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// A primary of a Redis Cluster shard, as the slot map last read shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPrimary {
    /// `host:port`.
    pub addr: String,
    pub connected: bool,
    /// How many of the cluster's 16,384 hash slots it serves.
    pub hash_slots: u32,
}

/// Pooled connections to a shard unless configured.
pub const DEFAULT_CONNECTIONS: usize = 4;
/// How long a command may take unless configured: bounds what a hung or
/// partitioned shard costs a request.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a shard with `wait` refuses publishes (storing nothing) after
/// its replicas failed to confirm one (see [`Shard::eval_replicated`]).
pub(crate) const WAIT_BACKOFF: Duration = Duration::from_secs(1);

/// How long a command waits for a cluster slot that is being moved
/// between nodes (see [`Shard::eval`]) before it fails as unavailable.
pub(crate) const SLOT_MOVE_WAIT: Duration = Duration::from_secs(1);

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

/// A connected shard. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Shard {
    inner: Arc<Inner>,
}

/// A shard's connections.
#[derive(Debug)]
pub(crate) enum Conns {
    /// A standalone or Sentinel-managed master.
    Single(Arc<Node>),
    /// A Redis Cluster: a node per primary.
    Cluster(Arc<Cluster>),
}

struct Inner {
    name: String,
    conns: Conns,
    /// What every script call runs with: see [`Shard::connect`].
    eval_options: Options,
    /// `sundial_redis_script_seconds` handles per script (as in
    /// `Scripts::all`), [ok, error]: registered once, so a call records
    /// without building labels.
    timings: Vec<[metrics::Histogram; 2]>,
    command_timeout: Duration,
    /// Publishes wait for replicas: see [`Shard::eval_replicated`].
    wait: Option<ReplicaWait>,
    /// `sundial_replica_wait_seconds` and `sundial_replica_waits_total`
    /// (confirmed, short) handles, when `wait` is set.
    wait_metrics: Option<(metrics::Histogram, [metrics::Counter; 2])>,
    /// The shared subscriber, made on first use.
    pubsub: std::sync::OnceLock<super::pubsub::PubSub>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// Builds the connection pools and starts connecting in the background.
    /// The shard is usable at once: while it is not connected, operations
    /// fail fast with [`EngineError::Unavailable`], and it reconnects by itself.
    pub fn connect(name: impl Into<String>, opts: &ShardOptions) -> Result<Self, EngineError> {
        let name = name.into();
        let mut config = Config::from_url(&opts.url).map_err(|e| EngineError::Unsafe {
            shard: name.clone(),
            what: format!("invalid redis url: {e}"),
        })?;
        if let Some(files) = &opts.tls {
            if config.tls.is_none() {
                return Err(EngineError::Unsafe {
                    shard: name,
                    what: "TLS files are set but the URL does not use TLS (rediss://)".into(),
                });
            }
            config.tls = Some(files.config().map_err(|what| EngineError::Unsafe {
                shard: name.clone(),
                what,
            })?);
        }
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
        let timings = SCRIPTS
            .all()
            .iter()
            .map(|s| {
                let script = s.name;
                ["ok", "error"].map(|result| {
                    metrics::histogram!(
                        "sundial_redis_script_seconds",
                        "shard" => name.clone(),
                        "script" => script,
                        "result" => result
                    )
                })
            })
            .collect();
        let wait_metrics = opts.wait.map(|_| {
            (
                metrics::histogram!("sundial_replica_wait_seconds", "shard" => name.clone()),
                ["confirmed", "short"].map(|result| {
                    metrics::counter!(
                        "sundial_replica_waits_total",
                        "shard" => name.clone(),
                        "result" => result
                    )
                }),
            )
        });
        Ok(Self {
            inner: Arc::new(Inner {
                name,
                conns,
                eval_options: Options {
                    fail_fast: true,
                    ..Options::default()
                },
                timings,
                command_timeout: opts.command_timeout,
                wait: opts.wait,
                wait_metrics,
                pubsub: std::sync::OnceLock::new(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many replicas a publish waits for (`wait`), if any.
    pub fn wait_replicas(&self) -> Option<u32> {
        self.inner.wait.map(|w| w.replicas)
    }

    /// Whether the shard is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.conns, Conns::Cluster(_))
    }

    /// A cluster shard's primaries, in address order (empty for any other
    /// shard, and for a cluster whose slot map was never read).
    pub fn cluster_primaries(&self) -> Vec<ClusterPrimary> {
        let Conns::Cluster(c) = &self.inner.conns else {
            return Vec::new();
        };
        let mut out: Vec<ClusterPrimary> = c
            .slot_counts()
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
    /// shard that is not a cluster, or a slot without a known primary).
    pub fn cluster_node_of(&self, key: &str) -> Option<String> {
        let Conns::Cluster(c) = &self.inner.conns else {
            return None;
        };
        c.owner(crate::keys::cluster_slot(key))
            .map(|n| n.addr.clone())
    }

    pub(crate) fn conns(&self) -> &Conns {
        &self.inner.conns
    }

    /// The channel on which this shard announces the newly ready jobs of a
    /// queue (`<ns>/<queue>`) in `slot`: one channel per queue on a
    /// standalone shard, a sharded channel of the slot on a cluster (see
    /// [`crate::keys`]).
    pub fn ready_channel(&self, slot: u32, qualified: &str) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).ready_channel(qualified)
        } else {
            crate::keys::ready_channel_of(qualified)
        }
    }

    /// What [`Self::ready_channel`] puts before the queue's name.
    pub fn ready_channel_prefix(&self, slot: u32) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).ready_channel_prefix()
        } else {
            crate::keys::READY_CHANNEL_PREFIX.to_owned()
        }
    }

    /// The channel on which this shard announces that `slot` became due
    /// sooner: one for all slots on a standalone shard, one per slot on a
    /// cluster.
    pub fn timer_channel(&self, slot: u32) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).timer_channel()
        } else {
            crate::keys::TIMER_CHANNEL.to_owned()
        }
    }

    /// The timer channels that announce `slots`, each once.
    pub fn timer_channels(&self, slots: &[u32]) -> Vec<String> {
        if self.is_cluster() {
            slots.iter().map(|s| self.timer_channel(*s)).collect()
        } else {
            vec![crate::keys::TIMER_CHANNEL.to_owned()]
        }
    }

    pub(super) fn pubsub_cell(&self) -> &std::sync::OnceLock<super::pubsub::PubSub> {
        &self.inner.pubsub
    }

    /// Whether both are the same connection (a reload that changes nothing
    /// about a shard keeps its connection).
    pub fn same(&self, other: &Shard) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the shard can be reached: a pooled connection is up (on a
    /// cluster: the slot map is known and every primary is connected).
    pub fn is_connected(&self) -> bool {
        match &self.inner.conns {
            Conns::Single(n) => n.is_connected(),
            Conns::Cluster(c) => c.is_connected(),
        }
    }

    /// Whether a command on `key` can be sent: on a cluster, whether the
    /// primary that serves its slot is connected.
    pub fn is_connected_for(&self, key: &str) -> bool {
        match &self.inner.conns {
            Conns::Single(n) => n.is_connected(),
            Conns::Cluster(c) => c
                .owner(crate::keys::cluster_slot(key))
                .is_some_and(|n| n.is_connected()),
        }
    }

    /// Every server connected to (on a cluster: the nodes in use).
    fn nodes(&self) -> Vec<Arc<Node>> {
        match &self.inner.conns {
            Conns::Single(n) => vec![n.clone()],
            Conns::Cluster(c) => c.nodes(),
        }
    }

    /// Waits until the shard is connected, up to `timeout`, logging every
    /// few seconds which shard it waits for and the Redis client's last
    /// error; fails with that error.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<(), EngineError> {
        const REPORT: Duration = Duration::from_secs(3);
        let start = tokio::time::Instant::now();
        let mut errors: Vec<_> = self
            .nodes()
            .iter()
            .flat_map(|n| {
                n.pool
                    .clients()
                    .iter()
                    .map(|c| c.error_rx())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut last: Option<RedisError> = None;
        let mut reported = start;
        while !self.is_connected() {
            for rx in &mut errors {
                while let Ok((e, _)) = rx.try_recv() {
                    last = Some(e);
                }
            }
            let now = tokio::time::Instant::now();
            if now >= start + timeout {
                return Err(match last {
                    Some(source) => EngineError::Unavailable {
                        shard: self.inner.name.clone(),
                        source,
                    },
                    None => self.unavailable("not connected"),
                });
            }
            if now >= reported + REPORT {
                reported = now;
                tracing::warn!(
                    shard = self.name(),
                    waited_s = (now - start).as_secs(),
                    timeout_s = timeout.as_secs(),
                    last_error = last
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "none yet".to_owned()),
                    "waiting for the shard to answer"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The cluster slot of `key` (0 on other shards, where it is unused).
    fn slot_of(&self, key: &str) -> u16 {
        if self.is_cluster() {
            crate::keys::cluster_slot(key)
        } else {
            0
        }
    }

    /// The node that serves `slot` (a cluster slot; any on other shards).
    async fn route(&self, slot: u16) -> Result<Arc<Node>, EngineError> {
        match &self.inner.conns {
            Conns::Single(n) => Ok(n.clone()),
            Conns::Cluster(c) => c.route(slot).await,
        }
    }

    /// A connected client of `node` (of its publish pool if `wait`), or
    /// `Unavailable` at once (no queuing behind a reconnect: a request
    /// should get its 503 quickly).
    fn client_of(&self, node: &Node, wait: bool) -> Result<Client, EngineError> {
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
        super::nodes::not_connected(&self.inner.name, addr)
    }

    /// Classifies a Redis error of this shard (see [`EngineError`]). A
    /// timeout means a connection left a command unanswered for a whole
    /// command timeout: the server is hung or cut off. Its connections are
    /// then made again (see [`Node::reconnect_hung`]).
    fn err_on(&self, node: &Node, e: RedisError) -> EngineError {
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

    fn unavailable(&self, what: &'static str) -> EngineError {
        EngineError::Unavailable {
            shard: self.inner.name.clone(),
            source: RedisError::new(ErrorKind::IO, what),
        }
    }

    pub(crate) fn bad_reply(&self, what: impl Into<String>) -> EngineError {
        EngineError::reply(&self.inner.name, what)
    }

    /// Runs a script, loading it first if the shard does not know it. Its
    /// keys lie in one cluster slot: they come from `keysets`, which the
    /// startup check of a cluster shard verifies.
    ///
    /// On a cluster, a script that Redis refused because its slot is in
    /// the middle of a move (`TRYAGAIN` or `ASK`: it did not run; see
    /// [`SlotKeys::guard`]) or has moved (`MOVED`) is sent again, for up to
    /// [`SLOT_MOVE_WAIT`]: moving a slot's keys takes milliseconds, so a
    /// reshard costs a request a short wait rather than a 503.
    pub(crate) async fn eval(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        self.eval_on(false, script, keys, args)
            .await
            .map(|(v, _)| v)
    }

    /// [`eval`](Self::eval) of a script that stores jobs a client is then
    /// told are stored (publish, republish). When the shard is configured
    /// to (`wait`), the script runs on connections of their own, and then
    /// waits on the same connection to the same master until that many
    /// replicas hold every write made on it so far (`WAIT`); it fails with
    /// [`EngineError::NotReplicated`] if they do not within the timeout
    /// (the write stays on the master). For [`WAIT_BACKOFF`] after that,
    /// publishes to that master are refused as unavailable before anything
    /// is stored, so that a replica outage costs each publish nothing
    /// rather than a `WAIT` timeout each (on a cluster, the other masters'
    /// publishes go on).
    ///
    /// A connection that drops between the script and its `WAIT` gives the
    /// `WAIT` a fresh connection with nothing to wait for: that `WAIT`
    /// confirms at once. The script's own write may then be lost with its
    /// master, as without `wait`.
    pub(crate) async fn eval_replicated(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        use std::sync::atomic::Ordering;
        let Some(wait) = self.inner.wait else {
            return self.eval(script, keys, args).await;
        };
        let node = self
            .route(keys.first().map_or(0, |k| self.slot_of(k)))
            .await?;
        let now_ms = || node.born.elapsed().as_millis() as u64 + 1;
        let last_short = node.last_short_ms.load(Ordering::Acquire);
        if last_short != 0 && now_ms().saturating_sub(last_short) < WAIT_BACKOFF.as_millis() as u64
        {
            return Err(self.unavailable(
                "the replicas confirmed no write in the last second: nothing stored",
            ));
        }
        // The connection that ran the script, to the master that serves
        // its keys' slot.
        let (value, client) = self.eval_on(true, script, keys, args).await?;
        let start = std::time::Instant::now();
        let opts = Options {
            timeout: Some(wait.timeout + self.inner.command_timeout),
            fail_fast: true,
            ..Options::default()
        };
        // A `WAIT` that fails leaves the job stored and unconfirmed, as one
        // that times out does.
        let acked: i64 = client
            .with_options(&opts)
            .wait(
                i64::from(wait.replicas),
                wait.timeout.as_millis().max(1) as i64,
            )
            .await
            .unwrap_or(0);
        let confirmed = acked >= i64::from(wait.replicas);
        if let Some((seconds, results)) = &self.inner.wait_metrics {
            seconds.record(start.elapsed().as_secs_f64());
            results[usize::from(!confirmed)].increment(1);
        }
        if confirmed {
            node.last_short_ms.store(0, Ordering::Release);
            Ok(value)
        } else {
            node.last_short_ms.store(now_ms(), Ordering::Release);
            Err(EngineError::NotReplicated {
                shard: self.inner.name.clone(),
                acked,
                wanted: wait.replicas,
            })
        }
    }

    /// A script call on the node of its keys' slot (on its publish pool if
    /// `wait`); returns the reply and the connection that gave it.
    async fn eval_on(
        &self,
        wait: bool,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<(Value, Client), EngineError> {
        let start = std::time::Instant::now();
        let slot = keys.first().map_or(0, |k| self.slot_of(k));
        // As `Key`s, whose bytes are shared: a call sent again (NOSCRIPT, a
        // slot on the move) copies no key.
        let keys: Vec<Key> = keys.into_iter().map(Key::from).collect();
        let result = self
            .resend_while_moving(slot, wait, |c| {
                let (keys, args) = (&keys, &args);
                async move {
                    let v = self.eval_once(&c, script, keys, args).await?;
                    Ok((v, c))
                }
            })
            .await;
        if let Some(h) = self.inner.timings.get(script.index) {
            h[usize::from(result.is_err())].record(start.elapsed().as_secs_f64());
        }
        result
    }

    /// One [`eval`](Self::eval), with the script loaded (on that node) and
    /// sent once more if a restarted or failed-over node answers `NOSCRIPT`
    /// (it did not run the first time).
    async fn eval_once(
        &self,
        client: &Client,
        script: &Named,
        keys: &[Key],
        args: &[Value],
    ) -> Result<Value, RedisError> {
        let call = client.with_options(&self.inner.eval_options);
        let sha = script.script.sha1().clone();
        match call
            .evalsha(sha.clone(), keys.to_vec(), args.to_vec())
            .await
        {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                script.script.load(client).await?;
                call.evalsha(sha, keys.to_vec(), args.to_vec()).await
            }
            result => result,
        }
    }

    /// Loads every script (on every primary of a cluster), so that the
    /// first requests need no reload.
    pub async fn load_scripts(&self) -> Result<(), EngineError> {
        let nodes = match &self.inner.conns {
            Conns::Single(n) => vec![n.clone()],
            Conns::Cluster(c) => c.primaries(),
        };
        for node in nodes {
            let client = self.client_of(&node, false)?;
            for s in SCRIPTS.all() {
                s.script
                    .load(&client)
                    .await
                    .map_err(|e| self.err_on(&node, e))?;
            }
        }
        Ok(())
    }

    /// One round trip, bounded by the command timeout, that also says
    /// whether the shard holds Sundial's metadata (`sd:meta`), which every
    /// shard in use has: one without it was restarted without its data, or
    /// flushed. Returns how long it took and whether the metadata is there.
    ///
    /// A cluster shard is up when every primary answers a `PING` too: one
    /// missing a primary serves only part of its slots.
    pub async fn probe(&self) -> Result<(Duration, bool), EngineError> {
        let start = std::time::Instant::now();
        if let Conns::Cluster(c) = &self.inner.conns {
            let primaries = c.primaries();
            if primaries.is_empty() {
                return Err(self.unavailable_node("(none known: the slot map was not read)"));
            }
            futures::future::try_join_all(primaries.iter().map(|n| async move {
                let client = self.client_of(n, false)?;
                client
                    .ping::<Value>(None)
                    .await
                    .map_err(|e| self.err_on(n, e))
            }))
            .await?;
        }
        let n: i64 = self
            .idempotent(crate::keys::META, |c| async move {
                c.exists(crate::keys::META).await
            })
            .await?;
        Ok((start.elapsed(), n > 0))
    }

    /// Runs `op`, a read or a write that may run twice, on a connection to
    /// the node that serves `key`'s slot (any on other shards). On a
    /// cluster, one refused because its slot moved or is moving (see
    /// [`not_run_slot_moving`]) is sent again for up to [`SLOT_MOVE_WAIT`],
    /// as [`eval`](Self::eval) does.
    pub(crate) async fn idempotent<T, F, Fut>(&self, key: &str, op: F) -> Result<T, EngineError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        self.resend_while_moving(self.slot_of(key), false, op).await
    }

    /// Runs `op` on a connection to the node that serves `slot` (of its
    /// publish pool if `wait`). On a cluster, while the cluster refuses it
    /// because its slot moved or is moving ([`not_run_slot_moving`]: it did
    /// not run), sends it again for up to [`SLOT_MOVE_WAIT`]: at once to
    /// the node a `MOVED` names, after growing pauses while the slot is
    /// half moved (`ASK`, `TRYAGAIN`).
    async fn resend_while_moving<T, F, Fut>(
        &self,
        slot: u16,
        wait: bool,
        op: F,
    ) -> Result<T, EngineError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut followed = false;
        loop {
            let node = self.route(slot).await?;
            let client = self.client_of(&node, wait)?;
            match op(client).await {
                Err(e) if not_run_slot_moving(&e) && start.elapsed() + pause < SLOT_MOVE_WAIT => {
                    let moved = e.details().starts_with("MOVED ");
                    if let Conns::Cluster(c) = &self.inner.conns {
                        if moved {
                            c.moved(e.details());
                        } else if e.details().starts_with(MULTI_REDIRECTED) {
                            // Which node fred did not say: read the map.
                            c.read_map(false).await;
                        }
                    }
                    // The first `MOVED` is followed at once; anything else
                    // waits for the move to end.
                    if !moved || followed {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                    followed |= moved;
                }
                Err(e) => return Err(self.err_on(&node, e)),
                Ok(v) => return Ok(v),
            }
        }
    }
}

/// fred's words for a transaction that a cluster node answered `MOVED` or
/// `ASK` (not run; see `Node::connect`).
const MULTI_REDIRECTED: &str = "Max redirections exceeded";

/// Whether a cluster refused a command before running it because the
/// command's slot is moving or has moved: `TRYAGAIN`, or a redirection
/// (`MOVED`, `ASK`). Such a command may be sent again.
pub(crate) fn not_run_slot_moving(e: &RedisError) -> bool {
    ["TRYAGAIN", "MOVED ", "ASK ", MULTI_REDIRECTED]
        .iter()
        .any(|p| e.details().starts_with(p))
}
