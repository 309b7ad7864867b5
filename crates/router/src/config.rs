//! Pool and shard configuration, as the operator writes it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::Layout;

/// The default number of slots per pool; see `docs/ARCHITECTURE.md` for
/// why.
pub const DEFAULT_SLOTS: u32 = 128;
/// The most slots a pool may have (Redis Cluster's hash slot count).
pub const MAX_SLOTS: u32 = 16_384;
/// The default number of lanes per queue.
pub const DEFAULT_LANES: u32 = 1;
/// The most lanes a queue may have.
pub const MAX_LANES: u32 = 64;
/// The name of the shard of a one-shard pool that does not name it.
pub const DEFAULT_SHARD_NAME: &str = "main";

/// One pool: a named set of shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Slots of the pool: the unit that the ring places on shards, that a
    /// pump lease covers, and that moves when shards change. Fixed once the
    /// pool holds data.
    #[serde(default = "default_slots")]
    pub slots: u32,
    /// Lanes per queue: a queue's jobs spread over this many slots (so over
    /// up to this many shards), and a consume visits each. Fixed once the
    /// pool holds data.
    #[serde(default = "default_lanes")]
    pub lanes: u32,
    /// The pool's shards.
    pub shards: Vec<ShardConfig>,
}

/// One shard: a standalone Redis (`url`), a master managed by Redis
/// Sentinel (`sentinel`), or a Redis Cluster (`cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// The shard's stable name: its place on the ring depends on it (not on
    /// its address). Required when a pool has several shards.
    #[serde(default)]
    pub name: Option<String>,
    /// `redis://[[user]:password@]host:port[/db]`, `rediss://` for TLS, or a
    /// `redis-sentinel://` URL as fred reads it.
    #[serde(default)]
    pub url: Option<String>,
    /// A Sentinel-managed master, instead of `url`.
    #[serde(default)]
    pub sentinel: Option<SentinelConfig>,
    /// A Redis Cluster, instead of `url`.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// Relative share of the pool's slots.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Pooled connections to this shard.
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// How long a command may wait for this shard before the request fails
    /// with 503 (ms): bounds what a hung or partitioned shard costs.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Answer a publish only once this many replicas hold it (`WAIT`).
    #[serde(default)]
    pub wait: Option<WaitConfig>,
    /// The CA to trust and the client certificate to show, for a shard
    /// reached over TLS (`rediss://` or `cluster.tls`).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

/// Files for a shard's TLS connections, PEM. Paths are read when the shard
/// connects (at start and when a reload changes the shard's config): a
/// renewed certificate is taken up by a restart, or by a reload that names
/// new paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificates to trust instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// The client certificate (chain), for servers with
    /// `tls-auth-clients yes`.
    #[serde(default)]
    pub cert_file: Option<std::path::PathBuf>,
    /// The private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// What the engine connects with.
    pub fn files(&self) -> sundial_core::TlsFiles {
        sundial_core::TlsFiles {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
        }
    }
}

/// `WAIT`-based durability: a publish (or republish) is answered 201 only
/// once `replicas` replicas of the master that stored it have acknowledged
/// it, within `timeout_ms`; else 503, although the job is stored on the
/// master and may still be delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitConfig {
    /// How many replicas must acknowledge (1 or more).
    pub replicas: u32,
    /// How long to wait for them (ms).
    #[serde(default = "default_wait_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_wait_timeout_ms() -> u64 {
    100
}

/// Where the sentinels are and which master they watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// Sentinel addresses, `host:port` (port 26379 if left out).
    pub addresses: Vec<String>,
    /// The master's name in the sentinels' config (`sentinel monitor NAME …`).
    pub master: String,
    /// The password of the Redis servers (master and replicas).
    #[serde(default)]
    pub password: Option<String>,
    /// The password of the sentinels themselves, if they have one.
    #[serde(default)]
    pub sentinel_password: Option<String>,
    /// The database number.
    #[serde(default)]
    pub db: u8,
}

/// A Redis Cluster: where to find it (the client learns the other nodes
/// from these), and how to log in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Some of the cluster's nodes, `redis://host:port` or `host:port`;
    /// one that answers is enough.
    pub nodes: Vec<String>,
    /// The ACL user, if not `default`.
    #[serde(default)]
    pub username: Option<String>,
    /// The password of the cluster's nodes.
    #[serde(default)]
    pub password: Option<String>,
    /// Connect with TLS (every node, including those the client discovers).
    #[serde(default)]
    pub tls: bool,
}

impl ClusterConfig {
    /// The `redis-cluster://` (or `rediss-cluster://`) URL fred reads.
    fn url(&self) -> Result<String, String> {
        let mut addrs = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let addr = n
                .strip_prefix("redis://")
                .or_else(|| n.strip_prefix("rediss://"))
                .unwrap_or(n)
                .trim_end_matches('/');
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| format!("cluster node {n:?} needs a port (host:port)"))?;
            if host.is_empty() || host.contains(['@', '/', '?']) || port.parse::<u16>().is_err() {
                return Err(format!(
                    "cluster node {n:?} must be host:port or redis://host:port (credentials go in \
                     `username` and `password`)"
                ));
            }
            addrs.push(addr);
        }
        let (first, rest) = addrs
            .split_first()
            .ok_or_else(|| "cluster.nodes is empty".to_owned())?;
        let scheme = if self.tls {
            "rediss-cluster"
        } else {
            "redis-cluster"
        };
        let auth = match (&self.username, &self.password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                user.as_deref().map(encode).unwrap_or_default(),
                password.as_deref().map(encode).unwrap_or_default()
            ),
        };
        let mut url = format!("{scheme}://{auth}{first}");
        for (i, node) in rest.iter().enumerate() {
            url += if i == 0 { "?" } else { "&" };
            url += &format!("node={node}");
        }
        Ok(url)
    }
}

fn default_slots() -> u32 {
    DEFAULT_SLOTS
}

fn default_lanes() -> u32 {
    DEFAULT_LANES
}

fn default_weight() -> u32 {
    1
}

fn default_connections() -> usize {
    sundial_core::DEFAULT_CONNECTIONS
}

/// The default of [`ShardConfig::timeout_ms`].
pub const DEFAULT_TIMEOUT_MS: u64 = sundial_core::DEFAULT_COMMAND_TIMEOUT.as_millis() as u64;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

impl ShardConfig {
    /// A standalone shard at `url`, with every other setting at its default.
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            name: None,
            url: Some(url.into()),
            sentinel: None,
            cluster: None,
            weight: default_weight(),
            connections: default_connections(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            wait: None,
            tls: None,
        }
    }

    /// Checks the `tls` table: that the shard uses TLS, and that its files
    /// can be read and go together.
    fn check_tls(&self) -> Result<(), String> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        if self.sentinel.is_some() {
            return Err("a `tls` table is not supported on a Sentinel shard".to_owned());
        }
        if !self
            .connect_url()
            .is_ok_and(|url| sundial_core::url_uses_tls(&url))
        {
            return Err(
                "a `tls` table needs a TLS connection: a rediss:// (or rediss-cluster://) url, \
                 or cluster.tls = true"
                    .to_owned(),
            );
        }
        tls.files().config().map(drop)
    }

    /// The shard's name on the ring.
    pub fn ring_name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_SHARD_NAME)
    }

    /// The URL to connect with: `url` as given, or the `redis-sentinel://`
    /// URL that `sentinel` describes, or the `redis-cluster://` URL of
    /// `cluster`.
    pub fn connect_url(&self) -> Result<String, String> {
        match (&self.url, &self.sentinel, &self.cluster) {
            (Some(url), None, None) => Ok(url.clone()),
            (None, None, Some(c)) => c.url(),
            (None, Some(s), None) => {
                let (first, rest) = s
                    .addresses
                    .split_first()
                    .ok_or_else(|| "sentinel.addresses is empty".to_owned())?;
                let auth = s
                    .password
                    .as_ref()
                    .map(|p| format!(":{}@", encode(p)))
                    .unwrap_or_default();
                let mut url = format!(
                    "redis-sentinel://{auth}{first}/{}?sentinelServiceName={}",
                    s.db,
                    encode(&s.master)
                );
                for node in rest {
                    url += &format!("&node={node}");
                }
                if let Some(p) = &s.sentinel_password {
                    url += &format!("&sentinelPassword={}", encode(p));
                }
                Ok(url)
            }
            (None, None, None) => {
                Err("needs a `url`, a `sentinel` or a `cluster` table".to_owned())
            }
            _ => Err("give one of `url`, `sentinel` and `cluster`, not several".to_owned()),
        }
    }
}

/// Percent-encodes what may not stand in a URL's userinfo or query.
fn encode(s: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    /// Everything but RFC 3986's unreserved characters.
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(s, RESERVED).to_string()
}

impl PoolConfig {
    /// Checks what can be checked without connecting.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if !(1..=MAX_SLOTS).contains(&self.slots) {
            return Err(format!(
                "pool {name}: slots must be within 1..={MAX_SLOTS}, not {}",
                self.slots
            ));
        }
        if !(1..=MAX_LANES).contains(&self.lanes) {
            return Err(format!(
                "pool {name}: lanes must be within 1..={MAX_LANES}, not {}",
                self.lanes
            ));
        }
        if self.shards.is_empty() {
            return Err(format!("pool {name}: needs at least one shard"));
        }
        if let Some(s) = self
            .shards
            .iter()
            .find(|s| !(10..=86_400_000).contains(&s.timeout_ms))
        {
            return Err(format!(
                "pool {name}: shard {}: timeout_ms must be within 10 ms and one day, not {}",
                s.ring_name(),
                s.timeout_ms
            ));
        }
        for s in &self.shards {
            if let Some(w) = &s.wait
                && (w.replicas == 0 || !(1..=s.timeout_ms).contains(&w.timeout_ms))
            {
                return Err(format!(
                    "pool {name}: shard {}: wait needs replicas of 1 or more and a timeout_ms \
                     within 1 ms and the shard's timeout_ms ({}), not {} replicas in {} ms",
                    s.ring_name(),
                    s.timeout_ms,
                    w.replicas,
                    w.timeout_ms
                ));
            }
        }
        if self.shards.len() > 1 && self.shards.iter().any(|s| s.name.is_none()) {
            return Err(format!(
                "pool {name}: every shard of a pool with several shards needs a `name` \
                 (its place on the ring depends on it)"
            ));
        }
        let mut seen = BTreeSet::new();
        for s in &self.shards {
            s.connect_url()
                .and_then(|_| s.check_tls())
                .map_err(|e| format!("pool {name}, shard {}: {e}", s.ring_name()))?;
            let n = s.ring_name();
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            {
                return Err(format!(
                    "pool {name}: shard name {n:?} must match [-_A-Za-z0-9]+"
                ));
            }
            if !seen.insert(n) {
                return Err(format!("pool {name}: two shards are named {n:?}"));
            }
        }
        if self.shards.iter().all(|s| s.weight == 0) {
            return Err(format!(
                "pool {name}: at least one shard needs a weight above 0"
            ));
        }
        Ok(())
    }

    /// The ring's membership: pinned in every shard, so that a change is
    /// noticed at start.
    pub fn layout(&self) -> Layout {
        Layout::new(self.shards.iter().map(|s| (s.ring_name(), s.weight)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(name: Option<&str>, weight: u32) -> ShardConfig {
        ShardConfig {
            name: name.map(str::to_owned),
            url: Some("redis://127.0.0.1:6379".to_owned()),
            sentinel: None,
            cluster: None,
            weight,
            connections: 1,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            wait: None,
            tls: None,
        }
    }

    #[test]
    fn sentinel_shards_become_fred_sentinel_urls() {
        let mut s = shard(Some("a"), 1);
        s.url = None;
        s.sentinel = Some(SentinelConfig {
            addresses: vec!["10.0.0.1:26379".to_owned(), "10.0.0.2:26379".to_owned()],
            master: "jobs".to_owned(),
            password: Some("p@ss".to_owned()),
            sentinel_password: Some("s".to_owned()),
            db: 2,
        });
        assert_eq!(
            s.connect_url().expect("url"),
            "redis-sentinel://:p%40ss@10.0.0.1:26379/2?sentinelServiceName=jobs&node=10.0.0.2:26379&sentinelPassword=s"
        );
        s.url = Some("redis://x:1".to_owned());
        assert!(s.connect_url().is_err(), "not both");
        s.url = None;
        s.sentinel = None;
        assert!(s.connect_url().is_err(), "not neither");
    }

    #[test]
    fn cluster_shards_become_fred_cluster_urls() {
        let mut s = shard(Some("c"), 1);
        s.url = None;
        let mut c = ClusterConfig {
            nodes: vec![
                "redis://10.0.0.1:7000".to_owned(),
                "10.0.0.2:7001".to_owned(),
                "redis://10.0.0.3:7002/".to_owned(),
            ],
            username: None,
            password: None,
            tls: false,
        };
        s.cluster = Some(c.clone());
        assert_eq!(
            s.connect_url().expect("url"),
            "redis-cluster://10.0.0.1:7000?node=10.0.0.2:7001&node=10.0.0.3:7002"
        );
        c.username = Some("jobs".to_owned());
        c.password = Some("p@ss".to_owned());
        c.tls = true;
        c.nodes.truncate(1);
        s.cluster = Some(c.clone());
        assert_eq!(
            s.connect_url().expect("url"),
            "rediss-cluster://jobs:p%40ss@10.0.0.1:7000"
        );
        for bad in ["10.0.0.1", "redis://u:p@10.0.0.1:7000", "h:port", ":7000"] {
            c.nodes = vec![bad.to_owned()];
            s.cluster = Some(c.clone());
            assert!(s.connect_url().is_err(), "{bad}");
        }
        c.nodes.clear();
        s.cluster = Some(c);
        assert!(s.connect_url().is_err(), "no nodes");
        s.url = Some("redis://x:1".to_owned());
        assert!(s.connect_url().is_err(), "not both");
    }

    #[test]
    fn validation() {
        let pool = |shards| PoolConfig {
            slots: 16,
            lanes: 1,
            shards,
        };
        assert!(pool(vec![shard(None, 1)]).validate("p").is_ok());
        assert!(
            pool(vec![shard(None, 1), shard(Some("b"), 1)])
                .validate("p")
                .is_err()
        );
        assert!(
            pool(vec![shard(Some("a"), 1), shard(Some("a"), 1)])
                .validate("p")
                .is_err()
        );
        assert!(pool(vec![shard(Some("a/b"), 1)]).validate("p").is_err());
        assert!(pool(vec![shard(Some("a"), 0)]).validate("p").is_err());
        assert!(
            pool(vec![shard(Some("a"), 0), shard(Some("b"), 2)])
                .validate("p")
                .is_ok()
        );
        assert!(pool(vec![]).validate("p").is_err());
        let waiting = |replicas, timeout_ms| {
            let mut s = shard(None, 1);
            s.wait = Some(WaitConfig {
                replicas,
                timeout_ms,
            });
            pool(vec![s]).validate("p")
        };
        assert!(waiting(1, 100).is_ok());
        assert!(waiting(2, DEFAULT_TIMEOUT_MS).is_ok());
        assert!(waiting(0, 100).is_err(), "no replica to wait for");
        assert!(waiting(1, 0).is_err(), "WAIT 0 would block for ever");
        assert!(
            waiting(1, DEFAULT_TIMEOUT_MS + 1).is_err(),
            "longer than a request may wait for the shard"
        );
    }

    #[test]
    fn layout_ignores_order_and_addresses() {
        let a = PoolConfig {
            slots: 16,
            lanes: 1,
            shards: vec![shard(Some("x"), 1), shard(Some("y"), 2)],
        };
        let mut b = PoolConfig {
            slots: 16,
            lanes: 1,
            shards: vec![shard(Some("y"), 2), shard(Some("x"), 1)],
        };
        b.shards[0].url = Some("redis://10.0.0.9:6380".to_owned());
        assert_eq!(a.layout(), b.layout());
        assert_eq!(a.layout().to_string(), "x:1,y:2");
    }
}
