//! A real Redis Cluster: `redis-server --cluster-enabled yes` nodes on free
//! ports, joined by `redis-cli --cluster create`, as operators make one.

use std::{process::Command, time::Duration};

use crate::{RedisServer, free_port, wait_until};

/// Slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// A throwaway Redis Cluster: `masters` masters, each with `replicas`
/// replicas. Every node is a [`RedisServer`]. Stopped on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster, and waits until every node
    /// sees all slots served (`cluster_state:ok`) and every replica has
    /// synced with its master.
    pub fn start(masters: usize, replicas: usize) -> Self {
        assert!(masters >= 3, "redis-cli --cluster create needs 3 masters");
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                // The cluster bus gets a port of its own: the default,
                // port + 10000, may be taken or past 65535.
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-port",
                    &bus,
                    // Tests stall a node with DEBUG SLEEP.
                    "--enable-debug-command",
                    "local",
                    // A replica's first sync starts at once, not after
                    // Redis's default 5 s wait for more replicas.
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(redis_cli_bin())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli (install it with: apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        let total = cluster.nodes.len();
        wait_until(Duration::from_secs(30), "the cluster to form", || {
            cluster.nodes.iter().all(|n| {
                let info = cluster_info(n);
                field(&info, "cluster_state") == Some("ok")
                    && field(&info, "cluster_slots_ok") == Some(&CLUSTER_SLOTS.to_string())
                    && field(&info, "cluster_known_nodes") == Some(&total.to_string())
            })
        });
        // A replica that has not finished its first sync yet would make a
        // test's WAIT, or a failover, depend on how busy the machine is.
        wait_until(Duration::from_secs(30), "every replica to sync", || {
            let linked = cluster
                .nodes
                .iter()
                .filter(|n| field(&replication_info(n), "master_link_status") == Some("up"));
            linked.count() == masters * replicas
        });
        cluster
    }

    /// `CONFIG SET name value` on every node.
    pub fn config_set(&self, name: &str, value: &str) {
        for n in &self.nodes {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut n.client())
                .expect("CONFIG SET");
        }
    }

    /// Every node, to kill or restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// Every node, masters and replicas, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Moves cluster slot `slot`, with its keys, to master `to`, as
    /// `redis-cli --cluster reshard` moves each slot: the target imports,
    /// the source migrates its keys (`MIGRATE`), then every master learns
    /// the new owner.
    pub fn move_slot(&self, slot: u16, to: usize) {
        self.start_move(slot, to).finish();
    }

    /// Starts moving cluster slot `slot` to master `to`: the target
    /// imports it and the source migrates it, and no key has moved yet.
    /// [`SlotMove::migrate`] moves chosen keys; [`SlotMove::finish`] the
    /// rest, then hands the slot over.
    pub fn start_move(&self, slot: u16, to: usize) -> SlotMove<'_> {
        let from = self.master_of(slot);
        assert_ne!(from, to, "slot {slot} is on node {to} already");
        let to_id = self.id(to);
        self.setslot(to, slot, "IMPORTING", &self.id(from));
        self.setslot(from, slot, "MIGRATING", &to_id);
        SlotMove {
            cluster: self,
            slot,
            from,
            to,
            to_id,
        }
    }

    fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].client())
            .expect("CLUSTER MYID")
    }

    fn setslot(&self, i: usize, slot: u16, how: &str, node: &str) {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(node)
            .query(&mut self.nodes[i].client())
            .expect("CLUSTER SETSLOT");
    }

    /// Moves `slots` cluster slots, with their keys, from master `from` to
    /// master `to` with `redis-cli --cluster reshard`, as an operator does.
    /// Keys move one per `MIGRATE` (`--cluster-pipeline 1`; redis-cli's
    /// default is 10), so that a slot of a few keys spends as long as it
    /// can with some keys moved and others not: the window in which a
    /// script must neither run halfway nor be lost. Returns when every slot
    /// has moved.
    pub fn reshard(&self, from: usize, to: usize, slots: usize) {
        let id = |i: usize| self.id(i);
        let out = Command::new(redis_cli_bin())
            .args(["--cluster", "reshard"])
            .arg(format!("127.0.0.1:{}", self.nodes[from].port()))
            .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .args(["--cluster-pipeline", "1"])
            .output()
            .expect("run redis-cli (install it with: apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster reshard failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Node `i`'s `cluster_state` (`ok` or `fail`), as it sees the cluster;
    /// empty if it does not answer.
    pub fn state_of(&self, i: usize) -> String {
        field(&cluster_info(&self.nodes[i]), "cluster_state")
            .unwrap_or_default()
            .to_owned()
    }

    /// Kills node `i` (SIGKILL), as a crashed master or replica.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// The shard URL of the cluster for Sundial's config
    /// (`redis-cluster://` with every node as a seed).
    pub fn url(&self) -> String {
        let mut addrs = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port()));
        let first = addrs.next().expect("a node");
        let rest: Vec<String> = addrs.map(|a| format!("node={a}")).collect();
        if rest.is_empty() {
            format!("redis-cluster://{first}")
        } else {
            format!("redis-cluster://{first}?{}", rest.join("&"))
        }
    }

    /// The nodes that answer and serve slots (masters), as they are now.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| {
                connect(n)
                    .and_then(|mut c| {
                        redis::cmd("ROLE")
                            .query::<Vec<redis::Value>>(&mut c)
                            .ok()
                    })
                    .is_some_and(|role| {
                        matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
                    })
            })
            .collect()
    }

    /// The cluster slot of `key`, as Redis computes it (`CLUSTER KEYSLOT`,
    /// hash tags included).
    pub fn key_slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.live_connection())
            .expect("CLUSTER KEYSLOT")
    }

    /// The index (in [`nodes`](Self::nodes)) of the master that serves
    /// `slot` now, as a live node sees it.
    pub fn master_of(&self, slot: u16) -> usize {
        // CLUSTER SLOTS: [[start, end, [ip, port, id, …], replicas…], …]
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.live_connection())
            .expect("CLUSTER SLOTS");
        for range in ranges {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let (Some(redis::Value::Int(start)), Some(redis::Value::Int(end))) =
                (parts.first(), parts.get(1))
            else {
                continue;
            };
            if !(*start..=*end).contains(&i64::from(slot)) {
                continue;
            }
            let Some(redis::Value::Array(master)) = parts.get(2) else {
                continue;
            };
            let Some(redis::Value::Int(port)) = master.get(1) else {
                continue;
            };
            if let Some(i) = self.nodes.iter().position(|n| i64::from(n.port()) == *port) {
                return i;
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// The index of a replica of master `master` (by `ROLE`), if it has one.
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        let port = i64::from(self.nodes[master].port());
        self.nodes.iter().position(|n| {
            connect(n)
                .and_then(|mut c| redis::cmd("ROLE").query::<Vec<redis::Value>>(&mut c).ok())
                .is_some_and(|role| {
                    matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"slave")
                        && matches!(role.get(2), Some(redis::Value::Int(p)) if *p == port)
                })
        })
    }

    /// A connection to a node that answers (a test may have killed some).
    fn live_connection(&self) -> redis::Connection {
        self.nodes
            .iter()
            .find_map(connect)
            .expect("a live cluster node")
    }
}

/// A slot in the middle of a move ([`RedisCluster::start_move`]).
#[derive(Debug)]
pub struct SlotMove<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    from: usize,
    to: usize,
    to_id: String,
}

impl SlotMove<'_> {
    /// Moves `keys` (of the slot) to the target now, in one `MIGRATE`.
    pub fn migrate(&self, keys: &[String]) {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(self.cluster.nodes[self.to].port())
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(keys)
            .query(&mut self.cluster.nodes[self.from].client())
            .expect("MIGRATE");
    }

    /// Moves the keys left, then gives the slot to the target on every
    /// node and waits until they agree.
    pub fn finish(self) {
        let mut source = self.cluster.nodes[self.from].client();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(100)
                .query(&mut source)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            self.migrate(&keys);
        }
        for i in 0..self.cluster.nodes.len() {
            self.cluster.setslot(i, self.slot, "NODE", &self.to_id);
        }
        wait_until(
            Duration::from_secs(10),
            "every node to agree on the move",
            || self.cluster.master_of(self.slot) == self.to,
        );
    }
}

fn connect(node: &RedisServer) -> Option<redis::Connection> {
    let mut c = redis::Client::open(node.url())
        .ok()?
        .get_connection()
        .ok()?;
    redis::cmd("PING").query::<String>(&mut c).ok()?;
    Some(c)
}

fn cluster_info(node: &RedisServer) -> String {
    connect(node)
        .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok())
        .unwrap_or_default()
}

fn replication_info(node: &RedisServer) -> String {
    connect(node)
        .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c).ok())
        .unwrap_or_default()
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

fn redis_cli_bin() -> std::path::PathBuf {
    std::env::var_os("REDIS_CLI").map_or_else(|| "redis-cli".into(), Into::into)
}
