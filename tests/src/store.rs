//! Where a test's pool keeps its data: a standalone Redis or a Redis
//! Cluster, behind one interface, so that one scenario runs against each
//! shard kind ([`ShardKind`]).

use sundial_core::keys;

use crate::{RedisCluster, RedisServer};

/// The kinds of shard a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardKind {
    /// One `redis-server`.
    Standalone,
    /// A Redis Cluster of three masters.
    Cluster,
}

/// A shard's Redis, of either kind. Stopped on drop.
#[derive(Debug)]
pub enum Store {
    Standalone(RedisServer),
    Cluster(RedisCluster),
}

impl Store {
    pub fn start(kind: ShardKind) -> Self {
        match kind {
            ShardKind::Standalone => Self::Standalone(RedisServer::start()),
            ShardKind::Cluster => Self::Cluster(RedisCluster::start(3, 0)),
        }
    }

    /// The URL Sundial's shard config takes.
    pub fn url(&self) -> String {
        match self {
            Self::Standalone(r) => r.url(),
            Self::Cluster(c) => c.url(),
        }
    }

    /// The servers that hold data: the server, or every master.
    fn servers(&self) -> Vec<&RedisServer> {
        match self {
            Self::Standalone(r) => vec![r],
            Self::Cluster(c) => c.masters(),
        }
    }

    /// Every key matching `pattern`, on every server (`KEYS`: tests only).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut all = Vec::new();
        for s in self.servers() {
            let found: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query(&mut s.client())
                .expect("KEYS (test only)");
            all.extend(found);
        }
        all.sort();
        all
    }

    /// How many subscribers hear the newly ready jobs of lane 0 of `queue`
    /// of `ns` in the default pool (128 slots): a long poll waiting on it
    /// shows here.
    pub fn ready_listeners(&self, ns: &str, queue: &str) -> u64 {
        match self {
            Self::Standalone(r) => r.subscribers(&keys::ready_channel(ns, queue)),
            Self::Cluster(c) => {
                let slot = keys::slot_of(ns, queue, 0, 128);
                let channel = keys::SlotKeys::new(slot).ready_channel(&keys::qualified(ns, queue));
                c.masters()
                    .iter()
                    .map(|m| {
                        let n: Vec<(String, u64)> = redis::cmd("PUBSUB")
                            .arg("SHARDNUMSUB")
                            .arg(&channel)
                            .query(&mut m.client())
                            .expect("PUBSUB SHARDNUMSUB");
                        n.first().map_or(0, |(_, n)| *n)
                    })
                    .sum()
            }
        }
    }

    /// Commands the servers have run, summed over every server, leaving out
    /// those named in `except` (as `INFO commandstats` names them, e.g.
    /// `info`, `cluster|slots`).
    pub fn commands_run(&self, except: &[&str]) -> u64 {
        self.command_stats()
            .into_iter()
            .filter(|(name, _)| !except.contains(&name.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// How many times the servers have run `command` (as `INFO
    /// commandstats` names it, e.g. `evalsha`, `hget`), summed over every
    /// server.
    pub fn calls_of(&self, command: &str) -> u64 {
        self.command_stats()
            .into_iter()
            .filter(|(name, _)| name == command)
            .map(|(_, calls)| calls)
            .sum()
    }

    /// (command, calls) of every server's `INFO commandstats`.
    fn command_stats(&self) -> Vec<(String, u64)> {
        let mut all = Vec::new();
        for s in self.servers() {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut s.client())
                .expect("INFO commandstats");
            for line in info.lines() {
                let Some((name, stats)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(':'))
                else {
                    continue;
                };
                let calls = stats
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                all.push((name.to_owned(), calls));
            }
        }
        all
    }
}
