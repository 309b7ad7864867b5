//! The connection to one shard and the script runner. What runs on it is
//! split by concern: [`super::checks`] (startup checks), [`super::slots`]
//! (what a shard's slots hold, in bulk), [`super::pins`] (pinned
//! layouts and gateway views), [`super::admin`] (tokens, limits, rate
//! counters), [`super::pubsub`], and the job operations.

use std::{sync::Arc, time::Duration};

use fred::{
    clients::Pool,
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::{
        ClusterHash, Key, Value,
        config::{
            Config, ConnectionConfig, Options, PerformanceConfig, ReconnectError, ReconnectPolicy,
        },
    },
};

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
}

/// `WAIT`-based durability (see [`Shard::eval_replicated`]).
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

/// How long a shard with `wait` refuses publishes (storing nothing) after
/// its replicas failed to confirm one (see [`Shard::eval_replicated`]).
pub(crate) const WAIT_BACKOFF: Duration = Duration::from_secs(1);

/// How long a script call waits for a cluster slot that is being moved
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
        }
    }
}

/// A connected shard. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Shard {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    pool: Pool,
    builder: Builder,
    /// A Redis Cluster (not a standalone or Sentinel-managed server).
    cluster: bool,
    /// What every script call runs with: see [`Shard::connect`].
    eval_options: Options,
    /// `sundial_redis_script_seconds` handles per script (as in
    /// `Scripts::all`), [ok, error]: registered once, so a call records
    /// without building labels.
    timings: Vec<[metrics::Histogram; 2]>,
    command_timeout: Duration,
    /// Publishes wait for replicas: see [`Shard::eval_replicated`].
    wait: Option<ReplicaWait>,
    /// The connections that publishes and their `WAIT`s use when `wait` is
    /// set: a `WAIT` blocks its connection until it is answered, so it
    /// must not hold up consumes, acks and pumps.
    wait_pool: Option<Pool>,
    /// When replicas last failed to confirm a write (ms since `created`,
    /// 0 never): for [`WAIT_BACKOFF`] after that, publishes are refused
    /// before anything is stored.
    last_short_ms: std::sync::atomic::AtomicU64,
    /// `sundial_replica_wait_seconds` and `sundial_replica_waits_total`
    /// (confirmed, short) handles, when `wait` is set.
    wait_metrics: Option<(metrics::Histogram, [metrics::Counter; 2])>,
    /// When a timeout last made the connections reconnect (ms since
    /// `created`), 0 never.
    last_reconnect_ms: std::sync::atomic::AtomicU64,
    created: std::time::Instant,
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

impl Drop for Inner {
    /// The last user of a shard's connections is gone (a reload replaced
    /// it): close them rather than let them reconnect forever.
    fn drop(&mut self) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let pool = self.pool.clone();
            let wait_pool = self.wait_pool.clone();
            rt.spawn(async move {
                let _ = pool.quit().await;
                if let Some(p) = wait_pool {
                    let _ = p.quit().await;
                }
            });
        }
    }
}

impl Shard {
    /// Builds the connection pool and starts connecting in the background.
    /// The shard is usable at once: while it is not connected, operations
    /// fail fast with [`EngineError::Unavailable`], and it reconnects by itself.
    pub fn connect(name: impl Into<String>, opts: &ShardOptions) -> Result<Self, EngineError> {
        let name = name.into();
        let config = Config::from_url(&opts.url).map_err(|e| EngineError::Unsafe {
            shard: name.clone(),
            what: format!("invalid redis url: {e}"),
        })?;
        let mut config = config;
        let cluster = config.server.is_clustered();
        // Keep trying when the shard is down at startup: the gateway answers
        // 503 for it meanwhile instead of refusing to start.
        config.fail_fast = false;
        let mut builder = Builder::from_config(config);
        builder
            .with_connection_config(|c: &mut ConnectionConfig| {
                c.connection_timeout = opts.connect_timeout;
                c.internal_command_timeout = opts.connect_timeout;
                // A script whose connection dropped may or may not have run;
                // running it again could publish or consume twice. Fail it
                // and let the client decide: every script call is sent
                // `fail_fast` (`eval_options`), which fred never writes
                // again after a connection drops. Other commands (reads,
                // pins, subscriptions) are idempotent: a cluster client,
                // whose connections come and go with the cluster's nodes,
                // may write them up to three times.
                c.max_command_attempts = if cluster { 3 } else { 1 };
                // On a cluster, fred follows no redirection: a command
                // answered `MOVED` (after fred has read the new slot map)
                // or `ASK` fails, and Sundial sends it again (`eval`,
                // `probe`, the subscriber); Redis answers both before
                // running anything. fred 10's `ASK` handling writes `ASKING`
                // on the pipelined connection and takes the next reply as
                // its answer, which may be another command's: the replies
                // of every command in flight on that connection then go to
                // the wrong callers (seen under resharding load: a script
                // call answered `OK`). `MOVED` would be safe to follow, but
                // fred sets one limit for both.
                if cluster {
                    c.max_redirections = 0;
                }
                // After a Sentinel failover the old master answers READONLY
                // (or MASTERDOWN): reconnect, which asks the sentinels for
                // the new master.
                c.reconnect_errors = vec![ReconnectError::ReadOnly, ReconnectError::MasterDown];
            })
            .with_performance_config(|p: &mut PerformanceConfig| {
                p.default_command_timeout = opts.command_timeout;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2));
        let pool = builder
            .build_pool(opts.connections.max(1))
            .map_err(|e| EngineError::from_redis(&name, e))?;
        let _handles = pool.connect_pool();
        let wait_pool = match opts.wait {
            Some(_) => {
                let p = builder
                    .build_pool(opts.connections.max(1))
                    .map_err(|e| EngineError::from_redis(&name, e))?;
                let _handles = p.connect_pool();
                Some(p)
            }
            None => None,
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
                pool,
                builder,
                cluster,
                eval_options: Options {
                    fail_fast: true,
                    ..Options::default()
                },
                timings,
                command_timeout: opts.command_timeout,
                wait: opts.wait,
                wait_pool,
                last_short_ms: std::sync::atomic::AtomicU64::new(0),
                wait_metrics,
                last_reconnect_ms: std::sync::atomic::AtomicU64::new(0),
                created: std::time::Instant::now(),
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
        self.inner.cluster
    }

    /// The channel on which this shard announces the newly ready jobs of a
    /// queue (`<ns>/<queue>`) in `slot`: one channel per queue on a
    /// standalone shard, a sharded channel of the slot on a cluster (see
    /// [`crate::keys`]).
    pub fn ready_channel(&self, slot: u32, qualified: &str) -> String {
        if self.inner.cluster {
            SlotKeys::new(slot).ready_channel(qualified)
        } else {
            crate::keys::ready_channel_of(qualified)
        }
    }

    /// What [`Self::ready_channel`] puts before the queue's name.
    pub fn ready_channel_prefix(&self, slot: u32) -> String {
        if self.inner.cluster {
            SlotKeys::new(slot).ready_channel_prefix()
        } else {
            crate::keys::READY_CHANNEL_PREFIX.to_owned()
        }
    }

    /// The channel on which this shard announces that `slot` became due
    /// sooner: one for all slots on a standalone shard, one per slot on a
    /// cluster.
    pub fn timer_channel(&self, slot: u32) -> String {
        if self.inner.cluster {
            SlotKeys::new(slot).timer_channel()
        } else {
            crate::keys::TIMER_CHANNEL.to_owned()
        }
    }

    /// The timer channels that announce `slots`, each once.
    pub fn timer_channels(&self, slots: &[u32]) -> Vec<String> {
        if self.inner.cluster {
            slots.iter().map(|s| self.timer_channel(*s)).collect()
        } else {
            vec![crate::keys::TIMER_CHANNEL.to_owned()]
        }
    }

    /// The builder the pool was made with, for connections of another kind.
    pub(super) fn builder(&self) -> &Builder {
        &self.inner.builder
    }

    pub(super) fn pubsub_cell(&self) -> &std::sync::OnceLock<super::pubsub::PubSub> {
        &self.inner.pubsub
    }

    /// Whether both are the same connection (a reload that changes nothing
    /// about a shard keeps its connection).
    pub fn same(&self, other: &Shard) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether at least one pooled connection is up.
    pub fn is_connected(&self) -> bool {
        self.inner.pool.next_connected().is_connected()
    }

    /// Waits until the shard is connected, up to `timeout`, logging every
    /// few seconds which shard it waits for and the Redis client's last
    /// error; fails with that error.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<(), EngineError> {
        const REPORT: Duration = Duration::from_secs(3);
        let start = tokio::time::Instant::now();
        let mut errors: Vec<_> = self
            .inner
            .pool
            .clients()
            .iter()
            .map(|c| c.error_rx())
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

    /// A connected client, or `Unavailable` at once (no queuing behind a
    /// reconnect: a request should get its 503 quickly).
    pub fn client(&self) -> Result<&Client, EngineError> {
        let client = self.inner.pool.next_connected();
        if client.is_connected() {
            Ok(client)
        } else {
            Err(self.unavailable("not connected"))
        }
    }

    /// Classifies a Redis error of this shard (see [`EngineError`]). A
    /// timeout means a connection left a command unanswered for a whole
    /// command timeout: the shard is hung or cut off. Its connections are
    /// then dropped and made again (at most once per timeout), so that the
    /// next requests fail at once while it is away, instead of each waiting
    /// out the timeout. (fred's own `unresponsive` check does this too, but
    /// arms and cancels a timer in its router task for every command and
    /// every reply.)
    pub fn err(&self, e: RedisError) -> EngineError {
        if *e.kind() == ErrorKind::Timeout {
            self.reconnect_hung();
        }
        EngineError::from_redis(&self.inner.name, e)
    }

    fn reconnect_hung(&self) {
        use std::sync::atomic::Ordering;
        let now = self.inner.created.elapsed().as_millis() as u64 + 1;
        let last = self.inner.last_reconnect_ms.load(Ordering::Acquire);
        let every = self.inner.command_timeout.as_millis() as u64;
        if last != 0 && now < last + every {
            return;
        }
        if self
            .inner
            .last_reconnect_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (pool, name) = (self.inner.pool.clone(), self.inner.name.clone());
            rt.spawn(async move {
                tracing::warn!(
                    shard = name,
                    "a command timed out: reconnecting to the shard"
                );
                let _ = pool.force_reconnection().await;
            });
        }
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
    /// [`SlotKeys::guard`]) or has moved (`MOVED`) is sent again after a
    /// pause, for up to [`SLOT_MOVE_WAIT`]: moving a slot's keys takes
    /// milliseconds, so a reshard costs a request a short wait rather than
    /// a 503.
    pub(crate) async fn eval(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        self.eval_on(self.client()?, script, keys, args).await
    }

    /// [`eval`](Self::eval) of a script that stores jobs a client is then
    /// told are stored (publish, republish). When the shard is configured
    /// to (`wait`), the script runs on connections of their own, and then
    /// waits on the same connection to the same master until that many
    /// replicas hold every write made on it so far (`WAIT`); it fails with
    /// [`EngineError::NotReplicated`] if they do not within the timeout
    /// (the write stays on the master). For [`WAIT_BACKOFF`] after that,
    /// publishes are refused as unavailable before anything is stored, so
    /// that a replica outage costs each publish nothing rather than a
    /// `WAIT` timeout each.
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
        let (Some(wait), Some(pool)) = (self.inner.wait, &self.inner.wait_pool) else {
            return self.eval(script, keys, args).await;
        };
        let now_ms = || self.inner.created.elapsed().as_millis() as u64 + 1;
        let last_short = self.inner.last_short_ms.load(Ordering::Acquire);
        if last_short != 0 && now_ms().saturating_sub(last_short) < WAIT_BACKOFF.as_millis() as u64
        {
            return Err(self.unavailable(
                "the replicas confirmed no write in the last second: nothing stored",
            ));
        }
        let client = pool.next_connected();
        if !client.is_connected() {
            return Err(self.unavailable("not connected"));
        }
        // The master that ran the script: the one serving its keys' slot.
        let slot = keys.first().map_or(0, |k| crate::keys::cluster_slot(k));
        let value = self.eval_on(client, script, keys, args).await?;
        let start = std::time::Instant::now();
        let opts = Options {
            cluster_hash: self.inner.cluster.then_some(ClusterHash::Custom(slot)),
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
            self.inner.last_short_ms.store(0, Ordering::Release);
            Ok(value)
        } else {
            self.inner.last_short_ms.store(now_ms(), Ordering::Release);
            Err(EngineError::NotReplicated {
                shard: self.inner.name.clone(),
                acked,
                wanted: wait.replicas,
            })
        }
    }

    async fn eval_on(
        &self,
        client: &Client,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        let start = std::time::Instant::now();
        // As `Key`s, whose bytes are shared: a call sent again (NOSCRIPT, a
        // slot on the move) copies no key.
        let keys: Vec<Key> = keys.into_iter().map(Key::from).collect();
        let result = self
            .resend_while_moving(client, |c| self.eval_once(c, script, &keys, &args))
            .await
            .map_err(|e| self.err(e));
        if let Some(h) = self.inner.timings.get(script.index) {
            h[usize::from(result.is_err())].record(start.elapsed().as_secs_f64());
        }
        result
    }

    /// One [`eval`](Self::eval), with the script loaded (on every primary
    /// of a cluster) and sent once more if a restarted or failed-over node
    /// answers `NOSCRIPT` (it did not run the first time).
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

    /// Loads every script, so that the first requests need no reload.
    pub async fn load_scripts(&self) -> Result<(), EngineError> {
        let client = self.client()?;
        for s in SCRIPTS.all() {
            s.script.load(client).await.map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// One round trip, bounded by the command timeout, that also says
    /// whether the shard holds Sundial's metadata (`sd:meta`), which every
    /// shard in use has: one without it was restarted without its data, or
    /// flushed. Returns how long it took and whether the metadata is there.
    pub async fn probe(&self) -> Result<(Duration, bool), EngineError> {
        let start = std::time::Instant::now();
        let n: i64 = self.idempotent(|c| c.exists(crate::keys::META)).await?;
        Ok((start.elapsed(), n > 0))
    }

    /// Runs `op`, a read or a write that may run twice (it gets a
    /// connection of the pool). On a cluster, one refused because its slot
    /// moved or is moving (see [`not_run_slot_moving`]) is sent again,
    /// after the slot map is read again, with growing pauses for up to
    /// [`SLOT_MOVE_WAIT`], as [`eval`](Self::eval) does.
    pub(crate) async fn idempotent<'c, T, F, Fut>(&'c self, op: F) -> Result<T, EngineError>
    where
        F: Fn(&'c Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let client = self.client()?;
        self.resend_while_moving(client, op)
            .await
            .map_err(|e| self.err(e))
    }

    /// Runs `op` on `client`. On a cluster, while the cluster refuses it
    /// because its slot moved or is moving ([`not_run_slot_moving`]: it did
    /// not run), sends it again with growing pauses for up to
    /// [`SLOT_MOVE_WAIT`], reading the slot map again first (a transaction
    /// refused by `MOVED` leaves fred's map as it was).
    async fn resend_while_moving<'c, T, F, Fut>(
        &self,
        client: &'c Client,
        op: F,
    ) -> Result<T, RedisError>
    where
        F: Fn(&'c Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        use fred::interfaces::ClusterInterface;
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match op(client).await {
                Err(e)
                    if self.inner.cluster
                        && not_run_slot_moving(&e)
                        && start.elapsed() + pause < SLOT_MOVE_WAIT =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                    let _ = client.sync_cluster().await;
                }
                result => return result,
            }
        }
    }
}

/// Whether a cluster refused a command before running it because the
/// command's slot is moving or has moved: `TRYAGAIN`, or a redirection
/// (`MOVED`, `ASK`) that fred was told not to follow (see
/// [`Shard::connect`]). Such a command may be sent again.
pub(crate) fn not_run_slot_moving(e: &RedisError) -> bool {
    [
        "TRYAGAIN",
        "Too many redirections",
        // fred's words for a transaction answered `MOVED` or `ASK`.
        "Max redirections exceeded",
    ]
    .iter()
    .any(|p| e.details().starts_with(p))
}
