//! A Sentinel-managed Redis for tests: a master, a replica, and three real
//! `redis-sentinel` processes (quorum 2) with short failure timeouts.

use std::{
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{RedisServer, free_port, wait_until};

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "sundial";

#[derive(Debug)]
pub struct SentinelSet {
    /// The servers; after a failover the replica is the master.
    pub servers: Vec<RedisServer>,
    sentinels: Vec<(Child, u16)>,
    dir: tempfile::TempDir,
}

impl SentinelSet {
    pub fn start() -> Self {
        let master = RedisServer::start();
        let port = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        wait_until(Duration::from_secs(15), "the replica to sync", || {
            info(&replica, "replication").contains("master_link_status:up")
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let sport = free_port();
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {sport}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel-{i}.log\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                     sentinel failover-timeout {MASTER_NAME} 3000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir = dir.path().display()
                ),
            )
            .expect("sentinel conf");
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-sentinel (apt-get install redis-sentinel)");
            wait_until(Duration::from_secs(10), "a sentinel to accept", || {
                TcpStream::connect(("127.0.0.1", sport)).is_ok()
            });
            sentinels.push((child, sport));
        }
        let s = Self {
            servers: vec![master, replica],
            sentinels,
            dir,
        };
        // Every sentinel knows the replica and the other sentinels.
        wait_until(
            Duration::from_secs(20),
            "the sentinels to know each other",
            || {
                s.sentinels.iter().all(|(_, p)| {
                    let r: Result<Vec<redis::Value>, _> =
                        sentinel_cmd(*p, &["SENTINEL", "replicas", MASTER_NAME]);
                    let others: Result<Vec<redis::Value>, _> =
                        sentinel_cmd(*p, &["SENTINEL", "sentinels", MASTER_NAME]);
                    r.is_ok_and(|v| v.len() == 1) && others.is_ok_and(|v| v.len() == 2)
                })
            },
        );
        s
    }

    /// The sentinel addresses, `127.0.0.1:port`.
    pub fn addresses(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|(_, p)| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The sentinels' logs, one after another (their events, such as
    /// `+switch-master` and `+convert-to-slave`, say what they did).
    pub fn log(&self) -> String {
        (0..self.sentinels.len())
            .map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("sentinel-{i}.log")))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The port of the current master, as the first sentinel says.
    pub fn master_port(&self) -> Option<u16> {
        master_of(self.sentinels.first()?.1)
    }

    /// The server that is master now.
    pub fn master(&mut self) -> &mut RedisServer {
        let port = self.master_port().expect("a master");
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("master is ours")
    }

    /// Waits until the sentinels name a master other than `old`, every one
    /// of them the same, and that server says it is one. Only then may a
    /// test restart the old master without its data: a sentinel whose view
    /// is still behind may take an empty old master back for the master,
    /// and make the promoted replica resync from it, emptied (Redis's
    /// replication docs warn that a master without persistence must not
    /// restart by itself).
    pub fn wait_failover(&self, old: u16, timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|(_, port)| master_of(*port))
                .collect();
            let promoted = named[0]
                .filter(|p| *p != old && named.iter().all(|n| *n == Some(*p)))
                .filter(|p| {
                    self.servers
                        .iter()
                        .find(|s| s.port() == *p)
                        .is_some_and(|s| info(s, "replication").contains("role:master"))
                });
            if let Some(p) = promoted {
                return p;
            }
            assert!(Instant::now() < deadline, "no failover within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for (c, _) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = &self.dir;
    }
}

/// The port of the master the sentinel on `port` names.
fn master_of(port: u16) -> Option<u16> {
    let addr: Vec<String> =
        sentinel_cmd(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME]).ok()?;
    addr.get(1)?.parse().ok()
}

fn info(r: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut r.client())
        .unwrap_or_default()
}

fn sentinel_cmd<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))?.get_connection()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut c)
}
