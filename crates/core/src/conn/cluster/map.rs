//! Reading and changing a cluster's hash slot map: `CLUSTER SLOTS` in the
//! background and on demand, and `MOVED` replies followed at once.

use std::{
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use fred::{
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::{
        Value,
        cluster::ClusterRouting,
        config::{Options, Server, ServerConfig},
    },
};

use super::{Cluster, HASH_SLOTS};
use crate::conn::node::Node;

/// How often a cluster shard's hash slot map is read when nothing asks
/// sooner.
pub(crate) const MAP_EVERY: Duration = Duration::from_secs(1);

/// How often the hash slot map is read while no read has succeeded yet
/// (the cluster is starting, or unreachable).
const MAP_FIRST_EVERY: Duration = Duration::from_millis(200);

/// The shortest gap between two reads of the hash slot map that requests
/// asked for: requests to a dead primary's hash slots do not each read it.
pub(crate) const MAP_MIN_GAP: Duration = Duration::from_millis(100);

/// How long one node may take to answer `CLUSTER SLOTS` before another is
/// asked (at most the shard's command timeout).
const MAP_READ_TIMEOUT: Duration = Duration::from_millis(500);

impl Cluster {
    /// Starts reading the hash slot map in the background, for as long as
    /// the cluster is in use (outside a Tokio runtime: never).
    pub(super) fn keep_reading_map(self: &Arc<Self>) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(keep_map(Arc::downgrade(self)));
        }
    }

    /// A node answered `MOVED <hash slot> <host>:<port>`: the hash slot is
    /// served there from now on.
    pub(crate) fn moved(&self, details: &str) {
        let Some((hash_slot, server)) = parse_moved(details) else {
            return;
        };
        let mut map = self.write();
        if usize::from(hash_slot) >= map.owners.len() {
            return;
        }
        match self.node_in(&mut map, &server) {
            Ok(node) => map.owners[usize::from(hash_slot)] = Some(node),
            Err(e) => tracing::warn!(shard = self.shard, error = %e, "cannot follow a MOVED"),
        }
    }

    /// Reads the hash slot map again, unless one was read since the call
    /// began (it waited for that read) or a read started less than
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

    /// Makes `routing` the hash slot map: connects to new primaries, drops
    /// the nodes that serve no hash slot.
    fn apply(&self, routing: &ClusterRouting, from: &str) {
        let mut map = self.write();
        let mut owners: Vec<Option<Arc<Node>>> = vec![None; HASH_SLOTS];
        for range in routing.slots() {
            let node = match self.node_in(&mut map, &range.primary) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(shard = self.shard, error = %e, "cannot connect to a primary");
                    continue;
                }
            };
            let end = usize::from(range.end).min(HASH_SLOTS - 1);
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
}

/// The hash slot and node of a `MOVED <hash slot> <host>:<port>` reply;
/// `None` for anything else, or a node without a host (`MOVED 7 :6380`,
/// which the next read of the hash slot map resolves).
fn parse_moved(details: &str) -> Option<(u16, Server)> {
    let mut parts = details.split_whitespace();
    if parts.next() != Some("MOVED") {
        return None;
    }
    let hash_slot: u16 = parts.next()?.parse().ok()?;
    let (host, port) = parts.next()?.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (usize::from(hash_slot) < HASH_SLOTS && !host.is_empty())
        .then(|| (hash_slot, Server::new(host, port)))
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
    // knows no hash slot: ask another.
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

/// Reads the hash slot map every [`MAP_EVERY`] (faster until it was read
/// once) for as long as the cluster is in use.
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
        let (hash_slot, server) = parse_moved("MOVED 3999 127.0.0.1:6381").expect("parsed");
        assert_eq!(
            (hash_slot, &*server.host, server.port),
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
