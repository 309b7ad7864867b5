//! A Redis Cluster shard: one [`Node`] per primary, and the cluster's hash
//! slot map as Sundial last read it ([`Cluster`]).
//!
//! A cluster shard does not use fred's cluster client: that client routes
//! every node's commands through one task, which reconnects inline, and
//! while one primary cannot be reached (killed, its replica not yet
//! promoted) it fails every command to every hash slot. With a pool per
//! primary a dead primary costs only the requests to its own hash slots.
//!
//! - The hash slot map is read with `CLUSTER SLOTS` from any connected
//!   node: every [`MAP_EVERY`](map::MAP_EVERY), and when a request finds
//!   its hash slot's node down (at most once per
//!   [`MAP_MIN_GAP`](map::MAP_MIN_GAP)), which is how a promoted replica
//!   is found ([`map`]).
//! - A `MOVED` reply moves its hash slot to the node it names at once
//!   ([`Cluster::moved`]), so that the request sent again goes there.
//! - A node that serves no hash slot at the next read is dropped; its
//!   connections close once the last request using them ends.

mod map;

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Instant,
};

use fred::{
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::config::{Config, Server, ServerConfig},
};

use super::{node::Node, options::ShardOptions};
use crate::EngineError;

/// Hash slots of a Redis Cluster.
const HASH_SLOTS: usize = 16_384;

/// A Redis Cluster shard's nodes and hash slot map (see the module's docs).
pub(crate) struct Cluster {
    shard: String,
    /// The shard's config; each node's pools replace its server.
    config: Config,
    opts: ShardOptions,
    /// The nodes the config names, asked for the hash slot map when no
    /// node of the map answers.
    seeds: Vec<Server>,
    map: RwLock<Map>,
    /// Serialises reads of the hash slot map.
    reading: tokio::sync::Mutex<Reads>,
}

/// When the last read of the hash slot map started and ended.
#[derive(Default)]
struct Reads {
    started: Option<Instant>,
    ended: Option<Instant>,
}

#[derive(Default)]
struct Map {
    /// Hash slot → the primary that serves it; empty until a read
    /// succeeded.
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
    /// Connects to the nodes the config names and starts reading the hash
    /// slot map in the background (for as long as the cluster is in use).
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
        cluster.keep_reading_map();
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

    /// The primary that serves `hash_slot`, as last read.
    pub(crate) fn owner(&self, hash_slot: u16) -> Option<Arc<Node>> {
        self.read()
            .owners
            .get(usize::from(hash_slot))
            .cloned()
            .flatten()
    }

    /// The primaries that serve a hash slot, each once.
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
    pub(crate) fn hash_slot_counts(&self) -> Vec<(Arc<Node>, u32)> {
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

    /// Whether every hash slot has a primary and every primary is
    /// connected.
    pub(crate) fn is_connected(&self) -> bool {
        let map = self.read();
        !map.owners.is_empty()
            && map
                .owners
                .iter()
                .all(|n| n.as_ref().is_some_and(|n| n.is_connected()))
    }

    /// The node to send a command on `hash_slot` to. One whose node is down
    /// has the hash slot map read again first (a replica may have been
    /// promoted); a node just connected to is waited for, up to the connect
    /// timeout.
    pub(crate) async fn route(&self, hash_slot: u16) -> Result<Arc<Node>, EngineError> {
        if let Some(n) = self.owner(hash_slot)
            && n.is_connected()
        {
            return Ok(n);
        }
        self.read_map(false).await;
        let Some(node) = self.owner(hash_slot) else {
            return Err(self.unavailable(format!(
                "no node of the cluster is known to serve slot {hash_slot} (the slot map could \
                 not be read, or leaves the slot out)"
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

    fn unavailable(&self, what: String) -> EngineError {
        EngineError::Unavailable {
            shard: self.shard.clone(),
            source: RedisError::new(ErrorKind::IO, what),
        }
    }
}
