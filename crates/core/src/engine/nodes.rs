//! The connections of a shard, per Redis server: one [`Node`] for a
//! standalone or Sentinel-managed master, and for a Redis Cluster one per
//! primary, with the cluster's slot map as Sundial last read it
//! ([`Cluster`]).
//!
//! A cluster shard does not use fred's cluster client: that client routes
//! every node's commands through one task, which reconnects inline, and
//! while one primary cannot be reached (killed, its replica not yet
//! promoted) it fails every command to every slot. With a pool per primary
//! a dead primary costs only the requests to its own slots.
//!
//! - The slot map is read with `CLUSTER SLOTS` from any connected node:
//!   every [`MAP_EVERY`], and when a request finds its slot's node down
//!   (at most once per [`MAP_MIN_GAP`]), which is how a promoted replica is
//!   found.
//! - A `MOVED` reply moves its slot to the node it names at once
//!   ([`Cluster::moved`]), so that the request sent again goes there.
//! - A node that serves no slot at the next read is dropped; its
//!   connections close once the last request using them ends.

use std::{
    collections::HashMap,
    sync::{
        Arc, RwLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use fred::{
    clients::Pool,
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::{
        Value,
        cluster::ClusterRouting,
        config::{
            Config, ConnectionConfig, Options, PerformanceConfig, ReconnectError, ReconnectPolicy,
            Server, ServerConfig,
        },
    },
};

use super::shard::ShardOptions;
use crate::EngineError;

/// Hash slots of a Redis Cluster.
const CLUSTER_SLOTS: usize = 16_384;

/// How often a cluster shard's slot map is read when nothing asks sooner.
pub(crate) const MAP_EVERY: Duration = Duration::from_secs(1);

/// How often the slot map is read while no read has succeeded yet (the
/// cluster is starting, or unreachable).
const MAP_FIRST_EVERY: Duration = Duration::from_millis(200);

/// The shortest gap between two reads of the slot map that requests
/// asked for: requests to a dead primary's slots do not each read it.
pub(crate) const MAP_MIN_GAP: Duration = Duration::from_millis(100);

/// How long one node may take to answer `CLUSTER SLOTS` before another is
/// asked (at most the shard's command timeout).
const MAP_READ_TIMEOUT: Duration = Duration::from_millis(500);

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
    /// `born`, 0 never): see `Shard::eval_replicated`.
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
    /// the shard, or the node no longer serves a slot): close them rather
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
                // send it again); `Shard::idempotent` reads the slot map
                // and sends it where the slot lives now.
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

/// A Redis Cluster shard's nodes and slot map (see the module's docs).
pub(crate) struct Cluster {
    shard: String,
    /// The shard's config; each node's pools replace its server.
    config: Config,
    opts: ShardOptions,
    /// The nodes the config names, asked for the slot map when no node of
    /// the map answers.
    seeds: Vec<Server>,
    map: RwLock<Map>,
    /// Serialises reads of the slot map.
    reading: tokio::sync::Mutex<Reads>,
}

/// When the last read of the slot map started and ended.
#[derive(Default)]
struct Reads {
    started: Option<Instant>,
    ended: Option<Instant>,
}

#[derive(Default)]
struct Map {
    /// Slot → the primary that serves it; empty until a read succeeded.
    owners: Vec<Option<Arc<Node>>>,
    /// Every node connected to, by `host:port`.
    nodes: HashMap<String, Arc<Node>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to the nodes the config names and starts reading the slot
    /// map in the background (for as long as the cluster is in use).
    pub(crate) fn connect(
        shard: &str,
        config: Config,
        opts: &ShardOptions,
    ) -> Result<Arc<Self>, EngineError> {
        let seeds = config.server.hosts();
        let cluster = Arc::new(Self {
            shard: shard.to_owned(),
            config,
            opts: opts.clone(),
            seeds: seeds.clone(),
            map: RwLock::default(),
            reading: tokio::sync::Mutex::new(Reads::default()),
        });
        {
            let mut map = cluster.write();
            for s in &seeds {
                cluster.node_in(&mut map, s)?;
            }
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(keep_map(Arc::downgrade(&cluster)));
        }
        Ok(cluster)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The node at `server`, connecting to it if it is new.
    fn node_in(&self, map: &mut Map, server: &Server) -> Result<Arc<Node>, EngineError> {
        let addr = format!("{}:{}", server.host, server.port);
        if let Some(n) = map.nodes.get(&addr) {
            return Ok(n.clone());
        }
        let mut config = self.config.clone();
        config.server = ServerConfig::Centralized {
            server: server.clone(),
        };
        let node = Arc::new(Node::connect(
            &self.shard,
            addr.clone(),
            config,
            &self.opts,
            true,
        )?);
        map.nodes.insert(addr, node.clone());
        Ok(node)
    }

    /// The primary that serves `slot`, as last read.
    pub(crate) fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        self.read().owners.get(usize::from(slot)).cloned().flatten()
    }

    /// The primaries that serve a slot, each once.
    pub(crate) fn primaries(&self) -> Vec<Arc<Node>> {
        let map = self.read();
        let mut out: Vec<Arc<Node>> = Vec::new();
        for n in map.owners.iter().flatten() {
            if !out.iter().any(|o| Arc::ptr_eq(o, n)) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Each primary with how many hash slots it serves.
    pub(crate) fn slot_counts(&self) -> Vec<(Arc<Node>, u32)> {
        let map = self.read();
        let mut out: Vec<(Arc<Node>, u32)> = Vec::new();
        for n in map.owners.iter().flatten() {
            match out.iter_mut().find(|(o, _)| Arc::ptr_eq(o, n)) {
                Some((_, count)) => *count += 1,
                None => out.push((n.clone(), 1)),
            }
        }
        out
    }

    /// Every node connected to.
    pub(crate) fn nodes(&self) -> Vec<Arc<Node>> {
        self.read().nodes.values().cloned().collect()
    }

    /// Whether every slot has a primary and every primary is connected.
    pub(crate) fn is_connected(&self) -> bool {
        let map = self.read();
        !map.owners.is_empty()
            && map
                .owners
                .iter()
                .all(|n| n.as_ref().is_some_and(|n| n.is_connected()))
    }

    /// The node to send a command on `slot` to. One whose node is down has
    /// the slot map read again first (a replica may have been promoted);
    /// a node just connected to is waited for, up to the connect timeout.
    pub(crate) async fn route(&self, slot: u16) -> Result<Arc<Node>, EngineError> {
        if let Some(n) = self.owner(slot)
            && n.is_connected()
        {
            return Ok(n);
        }
        self.read_map(false).await;
        let Some(node) = self.owner(slot) else {
            return Err(self.unavailable(format!(
                "no node of the cluster is known to serve slot {slot} (the slot map could not be \
                 read, or leaves the slot out)"
            )));
        };
        let young = self
            .opts
            .connect_timeout
            .saturating_sub(node.born.elapsed());
        if !node.is_connected() && !young.is_zero() {
            let _ = tokio::time::timeout(young, node.pool.wait_for_connect()).await;
        }
        Ok(node)
    }

    /// A node answered `MOVED <slot> <host>:<port>`: the slot is served
    /// there from now on.
    pub(crate) fn moved(&self, details: &str) {
        let Some((slot, server)) = parse_moved(details) else {
            return;
        };
        let mut map = self.write();
        if usize::from(slot) >= map.owners.len() {
            return;
        }
        match self.node_in(&mut map, &server) {
            Ok(node) => map.owners[usize::from(slot)] = Some(node),
            Err(e) => tracing::warn!(shard = self.shard, error = %e, "cannot follow a MOVED"),
        }
    }

    /// Reads the slot map again, unless one was read since the call began
    /// (it waited for that read) or a read started less than
    /// [`MAP_MIN_GAP`] ago. Only the background reader (`seeds`) asks the
    /// nodes the config names when no node of the map answers: that makes
    /// new connections, which a request should not wait for.
    pub(crate) async fn read_map(&self, seeds: bool) {
        let asked = Instant::now();
        let mut reads = self.reading.lock().await;
        if reads.ended.is_some_and(|t| t >= asked)
            || reads.started.is_some_and(|t| t.elapsed() < MAP_MIN_GAP)
        {
            return;
        }
        reads.started = Some(Instant::now());
        let read = self.ask_for_map(seeds).await;
        reads.ended = Some(Instant::now());
        match read {
            Ok((routing, from)) => self.apply(&routing, &from),
            Err(e) => {
                tracing::debug!(shard = self.shard, error = %e, "reading the cluster's slot map failed")
            }
        }
    }

    /// `CLUSTER SLOTS` from a connected node of the map, else from a node
    /// the config names; returns the map and the node that answered.
    async fn ask_for_map(&self, seeds: bool) -> Result<(ClusterRouting, String), RedisError> {
        let mut candidates: Vec<Arc<Node>> = self
            .read()
            .nodes
            .values()
            .filter(|n| n.is_connected())
            .cloned()
            .collect();
        // Spread the reads of many gateways over the nodes.
        use rand::seq::SliceRandom;
        candidates.shuffle(&mut rand::rng());
        // A node answers at once unless it is hung; then ask another soon.
        let timeout = self.opts.command_timeout.min(MAP_READ_TIMEOUT);
        let mut last = RedisError::new(ErrorKind::IO, "no node of the cluster is connected");
        for node in candidates {
            let Some(client) = node.client() else {
                continue;
            };
            match ask(client, &node.addr, timeout).await {
                Ok(routing) => return Ok((routing, node.addr.clone())),
                Err(e) => last = e,
            }
        }
        if !seeds {
            return Err(last);
        }
        // No node of the map answered: ask those the config names, on a
        // connection of its own each.
        for seed in &self.seeds {
            let mut config = self.config.clone();
            config.server = ServerConfig::Centralized {
                server: seed.clone(),
            };
            config.fail_fast = true;
            let client = Builder::from_config(config)
                .with_connection_config(|c| c.connection_timeout = self.opts.connect_timeout)
                .build()?;
            let addr = format!("{}:{}", seed.host, seed.port);
            let asked = match tokio::time::timeout(self.opts.connect_timeout, client.init()).await {
                Ok(Ok(_)) => ask(&client, &addr, timeout).await,
                Ok(Err(e)) => Err(e),
                Err(_) => Err(RedisError::new(ErrorKind::Timeout, "connecting timed out")),
            };
            let _ = client.quit().await;
            match asked {
                Ok(routing) => return Ok((routing, addr)),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Makes `routing` the slot map: connects to new primaries, drops the
    /// nodes that serve no slot.
    fn apply(&self, routing: &ClusterRouting, from: &str) {
        let mut map = self.write();
        let mut owners: Vec<Option<Arc<Node>>> = vec![None; CLUSTER_SLOTS];
        for range in routing.slots() {
            let node = match self.node_in(&mut map, &range.primary) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(shard = self.shard, error = %e, "cannot connect to a primary");
                    continue;
                }
            };
            let end = usize::from(range.end).min(CLUSTER_SLOTS - 1);
            for o in &mut owners[usize::from(range.start)..=end] {
                *o = Some(node.clone());
            }
        }
        let before: Vec<String> = primaries_of(&map.owners);
        let after: Vec<String> = primaries_of(&owners);
        if before != after {
            tracing::info!(
                shard = self.shard,
                read_from = from,
                primaries = after.join(","),
                uncovered = owners.iter().filter(|o| o.is_none()).count(),
                "the cluster's primaries changed"
            );
        }
        map.nodes
            .retain(|_, n| owners.iter().flatten().any(|o| Arc::ptr_eq(o, n)));
        map.owners = owners;
    }

    fn unavailable(&self, what: String) -> EngineError {
        EngineError::Unavailable {
            shard: self.shard.clone(),
            source: RedisError::new(ErrorKind::IO, what),
        }
    }
}

/// The slot and node of a `MOVED <slot> <host>:<port>` reply; `None` for
/// anything else, or a node without a host (`MOVED 7 :6380`, which the
/// next read of the slot map resolves).
fn parse_moved(details: &str) -> Option<(u16, Server)> {
    let mut parts = details.split_whitespace();
    if parts.next() != Some("MOVED") {
        return None;
    }
    let slot: u16 = parts.next()?.parse().ok()?;
    let (host, port) = parts.next()?.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (usize::from(slot) < CLUSTER_SLOTS && !host.is_empty()).then(|| (slot, Server::new(host, port)))
}

/// The addresses of the nodes in `owners`, sorted, each once.
fn primaries_of(owners: &[Option<Arc<Node>>]) -> Vec<String> {
    let mut out: Vec<String> = owners.iter().flatten().map(|n| n.addr.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// One `CLUSTER SLOTS`, bounded by `timeout`, failed at once if its
/// connection drops (the node died: ask another).
async fn ask(client: &Client, addr: &str, timeout: Duration) -> Result<ClusterRouting, RedisError> {
    let routing = ask_once(client, addr, timeout).await?;
    // A node that lost its cluster config (restarted without nodes.conf)
    // knows no slot: ask another.
    if routing.slots().is_empty() {
        return Err(RedisError::new(
            ErrorKind::Cluster,
            format!("node {addr} knows no slot owner"),
        ));
    }
    Ok(routing)
}

async fn ask_once(
    client: &Client,
    addr: &str,
    timeout: Duration,
) -> Result<ClusterRouting, RedisError> {
    let call = client.with_options(&Options {
        fail_fast: true,
        timeout: Some(timeout),
        ..Options::default()
    });
    let value: Value = call.cluster_slots().await?;
    // A node that leaves its own host out of the reply is the one asked.
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    ClusterRouting::from_cluster_slots(value, host)
}

/// Reads the slot map every [`MAP_EVERY`] (faster until it was read once)
/// for as long as the cluster is in use.
async fn keep_map(cluster: Weak<Cluster>) {
    loop {
        let every = {
            let Some(c) = cluster.upgrade() else { return };
            c.read_map(true).await;
            if c.read().owners.is_empty() {
                MAP_FIRST_EVERY
            } else {
                MAP_EVERY
            }
        };
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_replies_name_a_slot_and_a_node() {
        let (slot, server) = parse_moved("MOVED 3999 127.0.0.1:6381").expect("parsed");
        assert_eq!(
            (slot, &*server.host, server.port),
            (3999, "127.0.0.1", 6381)
        );
        for ipv6 in ["MOVED 1 ::1:7000", "MOVED 1 [::1]:7000"] {
            let (_, server) = parse_moved(ipv6).expect("IPv6");
            assert_eq!((&*server.host, server.port), ("::1", 7000), "{ipv6}");
        }
        for other in [
            "ASK 3999 127.0.0.1:6381",
            "MOVED 16384 127.0.0.1:6381",
            "MOVED 7 :6380",
            "MOVED x 127.0.0.1:6381",
            "MOVED 7",
            "TRYAGAIN",
        ] {
            assert!(parse_moved(other).is_none(), "{other}");
        }
    }
}
