//! A real `redis-server` on a free port, in its own temporary directory.

use std::{
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::free_port;

/// A throwaway Redis. Killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    restarted: bool,
}

impl RedisServer {
    /// Starts a Redis with no persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a Redis with extra `redis-server` arguments
    /// (e.g. `["--maxmemory-policy", "allkeys-lru"]`).
    pub fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = Self {
            child: None,
            port: free_port(),
            dir,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            restarted: false,
        };
        s.spawn();
        s
    }

    /// Starts the server; on a port another process took meanwhile, starts
    /// again on another port (a restart keeps its port: it must get it).
    fn spawn(&mut self) {
        for _ in 0..5 {
            if self.try_spawn() {
                return;
            }
            self.kill();
            if self.restarted {
                panic!("redis-server could not get its port {} back", self.port);
            }
            self.port = free_port();
        }
        panic!("redis-server could not find a free port in 5 attempts");
    }

    /// Starts redis-server and checks that the server answering on the port
    /// is this child (by pid), not another test's process.
    fn try_spawn(&mut self) -> bool {
        let child = Command::new(redis_server_bin())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (install it with: apt-get install redis-server)");
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                self.child = None;
                return false;
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return self.server_pid() == Some(pid);
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for redis-server to accept"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn server_pid(&self) -> Option<u32> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection()
            .ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut c).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        match self.password() {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The `--requirepass` it was started with, if any.
    fn password(&self) -> Option<&str> {
        let i = self.args.iter().position(|a| a == "--requirepass")?;
        self.args.get(i + 1).map(String::as_str)
    }

    /// An independent client, to check what Redis really holds.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("redis url")
            .get_connection()
            .expect("connect to test redis")
    }

    /// Kills the server (SIGKILL) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server's process (`SIGSTOP`): its connections stay open
    /// and nothing answers, as on a hung host, until [`Self::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Starts the server again on the same port (its data is gone unless it
    /// was started with persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.restarted = true;
        self.spawn();
    }

    /// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
    pub fn subscribers(&self, channel: &str) -> u64 {
        let n: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut self.client())
            .expect("PUBSUB NUMSUB");
        n.first().map_or(0, |(_, n)| *n)
    }

    /// Job records held in the slots of a pool of the default 128 slots
    /// (each slot's job hash), read from Redis.
    pub fn job_records(&self) -> u64 {
        use redis::Commands;
        let mut c = self.client();
        (0..128)
            .map(|s| {
                c.hlen::<_, u64>(sundial_core::keys::SlotKeys::new(s).jobs())
                    .expect("HLEN")
            })
            .sum()
    }

    /// A section of `INFO`, as Redis writes it.
    fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.client())
            .expect("INFO")
    }

    /// Bytes of memory Redis reports as used (`INFO memory`, `used_memory`).
    pub fn used_memory(&self) -> u64 {
        self.info("memory")
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory in INFO")
    }

    /// How many times Redis has served `command` (lower case, as `INFO
    /// commandstats` names it), scripts' calls included; 0 before the first.
    pub fn command_calls(&self, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.info("commandstats")
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|l| l.split(',').next())
            .map_or(0, |n| n.parse().expect("calls"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn redis_server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}
