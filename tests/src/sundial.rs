//! The real `sundial` binary, started with a generated config on free ports.

use std::{
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::free_port;

/// What to start a gateway with.
#[derive(Debug, Clone)]
pub struct SundialConfig {
    /// The default pool's shard.
    pub redis_url: String,
    /// Run the pumps inside the gateway.
    pub pump: bool,
    /// Admin accounts (user, password).
    pub accounts: Vec<(String, String)>,
    /// Extra TOML appended at the top level (before the pool tables).
    pub extra: String,
    /// Subcommand: `serve` or `pumpd`.
    pub command: &'static str,
    /// The `[pools.*]` tables in TOML, replacing the default pool on
    /// `redis_url`.
    pub pools: Option<String>,
    /// Extra lines inside the `[pump]` table.
    pub pump_extra: String,
    /// Extra lines inside the `[log]` table.
    pub log_extra: String,
}

impl SundialConfig {
    /// The `[pools.default]` table of these (name, server) shards, each of
    /// weight 1, with the default slot and lane counts.
    pub fn default_pool(shards: &[(&str, &crate::RedisServer)]) -> String {
        let list: Vec<String> = shards
            .iter()
            .map(|(name, r)| format!("{{ name = \"{name}\", url = \"{}\" }}", r.url()))
            .collect();
        format!("[pools.default]\nshards = [{}]\n", list.join(", "))
    }

    pub fn new(redis_url: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            pump: true,
            accounts: Vec::new(),
            extra: String::new(),
            command: "serve",
            pools: None,
            pump_extra: String::new(),
            log_extra: String::new(),
        }
    }
}

/// A running `sundial`. Killed on drop; its log is printed if the test failed.
#[derive(Debug)]
pub struct Sundial {
    child: Option<Child>,
    pub api_port: u16,
    pub admin_port: u16,
    dir: tempfile::TempDir,
    cfg: SundialConfig,
}

impl Sundial {
    /// Starts a gateway and waits until it is ready. Ports are picked free
    /// but may be taken by another test's process before `sundial` binds
    /// them; then it starts again on other ports.
    pub fn start(cfg: &SundialConfig) -> Self {
        for _ in 0..5 {
            let mut s = Self::spawn(cfg);
            if s.wait_ready(Duration::from_secs(30)) {
                return s;
            }
            assert!(
                s.log().contains("Address already in use"),
                "sundial did not start:\n{}",
                s.log()
            );
            s.kill();
        }
        panic!("sundial could not find free ports in 5 attempts");
    }

    /// Waits until this process (not another one on the same port) answers
    /// `/ready` with 200; false if it exited first.
    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let pid = self.pid().to_string();
        loop {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                self.child = None;
                return false;
            }
            let mine = http_get(self.admin_port, "/live").is_some_and(|(status, body)| {
                status == 200 && body.contains(&format!("\"pid\":{pid}"))
            });
            if mine && http_get(self.admin_port, "/ready").is_some_and(|(status, _)| status == 200)
            {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for sundial to be ready\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts `sundial pumpd` with `cfg` plus `pump_extra` lines in its
    /// `[pump]` table, and waits until its pumps run.
    pub fn start_pumpd(cfg: &SundialConfig, pump_extra: &str) -> Self {
        let mut p = cfg.clone();
        p.command = "pumpd";
        p.pump_extra = pump_extra.to_owned();
        let s = Self::spawn(&p);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !s.log().contains("pumps running") {
            assert!(
                Instant::now() < deadline,
                "pumpd did not start:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }

    /// Starts the binary and returns at once (for tests of failed starts,
    /// or of `pumpd`, which has no listener).
    pub fn spawn(cfg: &SundialConfig) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = Self {
            child: None,
            api_port: free_port(),
            admin_port: free_port(),
            dir,
            cfg: cfg.clone(),
        };
        s.launch();
        s
    }

    fn launch(&mut self) {
        self.write_config();
        let path = self.config_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let child = Command::new(binary())
            .arg(self.cfg.command)
            .arg("--config")
            .arg(&path)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sundial");
        self.child = Some(child);
    }

    /// The config file this process reads.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("sundial.toml")
    }

    /// Replaces the config (same ports) and writes it over the file the
    /// running process reads; it reloads on its own, on SIGHUP, or on
    /// `POST /reload`.
    pub fn rewrite(&mut self, cfg: &SundialConfig) {
        self.cfg = cfg.clone();
        self.write_config();
    }

    fn write_config(&self) {
        let cfg = &self.cfg;
        let accounts: Vec<String> = cfg
            .accounts
            .iter()
            .map(|(u, p)| format!("{u} = \"{p}\""))
            .collect();
        let pools = cfg.pools.clone().unwrap_or_else(|| {
            format!(
                "[pools.default]\nshards = [{{ url = \"{}\" }}]\n",
                cfg.redis_url
            )
        });
        let toml = format!(
            "listen = \"127.0.0.1:{api}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nshutdown_grace_secs = 5\n{extra}\n\
             [accounts]\n{accounts}\n\
             [pump]\nenabled = {pump}\n{pump_extra}\n\
             [log]\nlevel = \"info\"\n{log_extra}\n\
             {pools}",
            api = self.api_port,
            admin = self.admin_port,
            extra = cfg.extra,
            accounts = accounts.join("\n"),
            pump = cfg.pump,
            pump_extra = cfg.pump_extra,
            log_extra = cfg.log_extra,
        );
        // Write then rename, as an editor or a ConfigMap update would, so the
        // process never reads half a file.
        let tmp = self.dir.path().join(".sundial.toml.tmp");
        std::fs::write(&tmp, toml).expect("write config");
        std::fs::rename(&tmp, self.config_path()).expect("replace config");
    }

    /// Starts the same gateway again (same ports and config) after a kill.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
        assert!(
            self.wait_ready(Duration::from_secs(30)),
            "sundial did not start again:\n{}",
            self.log()
        );
    }

    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }

    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// `sundial <args>` as an operator runs it against this gateway (its
    /// URLs in the environment; no credentials or token unless added).
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .env("SUNDIAL_ADMIN_URL", self.admin())
            .env("SUNDIAL_API_URL", self.api())
            .env_remove("SUNDIAL_ADMIN_USER")
            .env_remove("SUNDIAL_ADMIN_PASSWORD")
            .env_remove("SUNDIAL_TOKEN")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `sundial <args>` with `env` added, to its end.
    pub fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> CliRun {
        let mut cmd = self.cli_command(args);
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("run the sundial CLI");
        CliRun {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sundial.log")
    }

    /// What the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, and wait for the process to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal by name (`TERM`, `INT`, `STOP`, `CONT`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Waits for the process to exit by itself, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Sundial {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- sundial log ----\n{}", self.log());
        }
    }
}

/// Status and raw response of a plain GET on loopback, or `None` when
/// nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.get(9..12)?.parse().ok()?;
    Some((status, buf))
}

/// `sundial check-config` on a file holding `text`: (accepted, what it
/// printed on stderr and stdout).
pub fn check_config(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("sundial.toml");
    std::fs::write(&file, text).expect("write config");
    let out = Command::new(binary())
        .arg("check-config")
        .arg("--config")
        .arg(&file)
        .output()
        .expect("run check-config");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// The `sundial` binary: `$SUNDIAL_BIN`, else the workspace's debug build.
/// `tests/run` builds it before the tests; a plain `cargo test` needs
/// `cargo build --bin sundial` first (a nested cargo would wait on the
/// build lock that the running `cargo test` holds).
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SUNDIAL_BIN") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let bin = target.join("debug").join("sundial");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --bin sundial` (tests/run does) or set SUNDIAL_BIN",
        bin.display()
    );
    bin
}

/// What a CLI command did.
#[derive(Debug)]
pub struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Its stdout as JSON (after `--json`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}
