//! The connection to one shard, the script runner, and the startup checks.

use std::{sync::Arc, time::Duration};

use fred::{
    clients::{Pool, SubscriberClient},
    error::{Error as RedisError, ErrorKind},
    prelude::*,
    types::{
        Value,
        config::{Config, ConnectionConfig, PerformanceConfig, ReconnectError, ReconnectPolicy},
    },
};

use crate::{
    EngineError, keys,
    scripts::{Named, SCRIPTS},
};

/// How to connect to a shard.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// `redis://[:password@]host:port[/db]`, `rediss://…` for TLS, or
    /// `redis-sentinel://[:password@]sentinel:port[/db]?sentinelServiceName=…&node=…`
    /// for a Sentinel-managed master.
    pub url: String,
    /// Connections in the pool; each pipelines many requests.
    pub connections: usize,
    /// How long a command may take before the request fails with 503.
    pub command_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
}

impl ShardOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connections: 4,
            command_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
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
    /// `sundial_redis_script_seconds` handles per script (as in
    /// `Scripts::all`), [ok, error]: registered once, so a call records
    /// without building labels.
    timings: Vec<[metrics::Histogram; 2]>,
    command_timeout: Duration,
    /// When a timeout last made the connections reconnect (ms since
    /// `created`), 0 never.
    last_reconnect_ms: std::sync::atomic::AtomicU64,
    created: std::time::Instant,
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
            rt.spawn(async move {
                let _ = pool.quit().await;
            });
        }
    }
}

/// What the startup check found on a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardCheck {
    pub maxmemory_policy: String,
    pub aof_enabled: bool,
    pub redis_version: String,
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
                // and let the client decide.
                c.max_command_attempts = 1;
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
        Ok(Self {
            inner: Arc::new(Inner {
                name,
                pool,
                builder,
                timings,
                command_timeout: opts.command_timeout,
                last_reconnect_ms: std::sync::atomic::AtomicU64::new(0),
                created: std::time::Instant::now(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether both are the same connection (a reload that changes nothing
    /// about a shard keeps its connection).
    pub fn same(&self, other: &Shard) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A new subscriber connection to this shard (it reconnects and
    /// resubscribes by itself).
    pub fn subscriber(&self) -> Result<SubscriberClient, EngineError> {
        self.inner
            .builder
            .build_subscriber_client()
            .map_err(|e| self.err(e))
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

    /// Runs a script, loading it first if the shard does not know it.
    pub(crate) async fn eval(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        let client = self.client()?;
        let start = std::time::Instant::now();
        let result = script
            .script
            .evalsha_with_reload(client, keys, args)
            .await
            .map_err(|e| self.err(e));
        if let Some(h) = self.inner.timings.get(script.index) {
            h[usize::from(result.is_err())].record(start.elapsed().as_secs_f64());
        }
        result
    }

    /// Loads every script, so that the first requests need no reload.
    pub async fn load_scripts(&self) -> Result<(), EngineError> {
        let client = self.client()?;
        for s in SCRIPTS.all() {
            s.script.load(client).await.map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Startup check: refuses a shard that would evict keys, and pins the
    /// pool's bucket count in the shard so that a later change is refused
    /// instead of silently orphaning jobs.
    pub async fn check(&self, buckets: u32) -> Result<ShardCheck, EngineError> {
        let client = self.client()?;
        let info: String = client.info(None).await.map_err(|e| self.err(e))?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        let check = ShardCheck {
            maxmemory_policy: field("maxmemory_policy"),
            aof_enabled: field("aof_enabled") == "1",
            redis_version: field("redis_version"),
        };
        // The scripts use LPOP with a count and LPOS (Redis 6.2).
        let version: Vec<u32> = check
            .redis_version
            .split('.')
            .map_while(|p| p.parse().ok())
            .collect();
        if version.len() >= 2 && (version[0], version[1]) < (6, 2) {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "Redis {} is too old: Sundial needs Redis 6.2 or later",
                    check.redis_version
                ),
            });
        }
        // allkeys-* evicts jobs and tokens; volatile-* evicts the keys that
        // Sundial gives a TTL (pump leases, gateway views, rate counters),
        // and a lost view can retire a shard layout still written to.
        if check.maxmemory_policy != "noeviction" {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "maxmemory-policy is {}, which evicts keys (jobs and tokens, or the leases and \
                     views that Sundial sets with a TTL); set `maxmemory-policy noeviction` in \
                     redis.conf (or CONFIG SET) and restart Sundial",
                    check.maxmemory_policy
                ),
            });
        }
        let stored: Option<u32> = {
            let _: bool = client
                .hsetnx(keys::META, keys::META_BUCKETS, buckets)
                .await
                .map_err(|e| self.err(e))?;
            client
                .hget(keys::META, keys::META_BUCKETS)
                .await
                .map_err(|e| self.err(e))?
        };
        if stored != Some(buckets) {
            return Err(EngineError::Unsafe {
                shard: self.name().to_owned(),
                what: format!(
                    "this shard holds data written with {} buckets per namespace, but the config says {buckets}; \
                     the bucket count cannot change once jobs exist (set it back to {0})",
                    stored.map_or_else(|| "an unknown number of".to_owned(), |b| b.to_string())
                ),
            });
        }
        Ok(check)
    }

    /// Changes one field of an admin table and bumps `version` only when the
    /// table changed: `add` (only if absent), `set`, or `del` (`value`
    /// unused). Returns whether it changed.
    pub async fn table_change(
        &self,
        table: &str,
        version: &str,
        op: &str,
        field: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        let v = self
            .eval(
                &SCRIPTS.table_change,
                vec![table.to_owned(), version.to_owned()],
                vec![op.into(), field.into(), value.into()],
            )
            .await?;
        Ok(v.as_i64().unwrap_or(0) > 0)
    }

    /// One round trip, bounded by the command timeout, that also says
    /// whether the shard holds Sundial's metadata (`sd:meta`), which every
    /// shard in use has: one without it was restarted without its data, or
    /// flushed. Returns how long it took and whether the metadata is there.
    pub async fn probe(&self) -> Result<(Duration, bool), EngineError> {
        let client = self.client()?;
        let start = std::time::Instant::now();
        let n: i64 = client.exists(keys::META).await.map_err(|e| self.err(e))?;
        Ok((start.elapsed(), n > 0))
    }

    /// Counts one request on a fixed-window counter (`delta` 1), or refunds
    /// one (`delta` -1); returns the count in the current window.
    pub async fn rate(&self, key: &str, window_ms: u64, delta: i64) -> Result<u64, EngineError> {
        let v = self
            .eval(
                &SCRIPTS.rate,
                vec![key.to_owned()],
                vec![(window_ms as i64).into(), delta.into()],
            )
            .await?;
        Ok(v.as_i64().unwrap_or(0).max(0) as u64)
    }

    /// Whether this shard holds any job, in any state, of any namespace
    /// (read from the per-bucket counters of every registered namespace; an
    /// admin-time check, not for hot paths).
    pub async fn holds_jobs(&self, buckets: u32) -> Result<bool, EngineError> {
        let client = self.client()?;
        let namespaces: Vec<String> = client
            .smembers(keys::NAMESPACES)
            .await
            .map_err(|e| self.err(e))?;
        for ns in namespaces {
            let pipe = client.pipeline();
            for b in 0..buckets {
                let _: () = pipe
                    .hgetall(keys::BucketKeys::new(&ns, b).counters())
                    .await
                    .map_err(|e| self.err(e))?;
            }
            let counts: Vec<std::collections::HashMap<String, i64>> =
                pipe.all().await.map_err(|e| self.err(e))?;
            // Only the per-state counts say what is held (the running
            // totals, 'P' and 'C', only grow).
            let held = counts.iter().flatten().any(|(field, n)| {
                *n > 0 && matches!(field.as_bytes().first(), Some(b'l' | b'r' | b'f' | b'd'))
            });
            if held {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The pool's layouts as pinned in this shard: the current ring
    /// membership (if any) and the earlier ones that still drain.
    pub async fn ring_pins(&self) -> Result<(Option<String>, Vec<String>), EngineError> {
        let (ring, draining): (Option<String>, Option<String>) = self
            .client()?
            .hmget(keys::META, vec![keys::META_RING, keys::META_DRAINING])
            .await
            .map_err(|e| self.err(e))?;
        let draining = draining
            .map(|d| {
                parse_string_list(&d)
                    .ok_or_else(|| self.bad_reply(format!("unreadable draining pin {d:?}")))
            })
            .transpose()?
            .unwrap_or_default();
        Ok((ring, draining))
    }

    /// Pins the pool's layouts in this shard.
    pub async fn set_ring_pins(
        &self,
        current: &str,
        draining: &[String],
    ) -> Result<(), EngineError> {
        self.client()?
            .hset::<(), _, _>(
                keys::META,
                vec![
                    (keys::META_RING, current.to_owned()),
                    (keys::META_DRAINING, string_list(draining)),
                ],
            )
            .await
            .map_err(|e| self.err(e))
    }

    /// How many jobs each of `buckets` of `ns` holds here (records in any
    /// state).
    pub async fn bucket_jobs(&self, ns: &str, buckets: &[u32]) -> Result<Vec<u64>, EngineError> {
        if buckets.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for b in buckets {
            let _: () = pipe
                .hlen(keys::BucketKeys::new(ns, *b).jobs())
                .await
                .map_err(|e| self.err(e))?;
        }
        pipe.all().await.map_err(|e| self.err(e))
    }

    /// The per-state counters of `buckets` of `ns`, summed per queue:
    /// queue → [delayed, ready, reserved, dead]. O(buckets × queues).
    pub async fn queue_counts(
        &self,
        ns: &str,
        buckets: &[u32],
    ) -> Result<std::collections::BTreeMap<String, [u64; 4]>, EngineError> {
        let mut out = std::collections::BTreeMap::new();
        if buckets.is_empty() {
            return Ok(out);
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for b in buckets {
            let _: () = pipe
                .hgetall(keys::BucketKeys::new(ns, *b).counters())
                .await
                .map_err(|e| self.err(e))?;
        }
        let all: Vec<std::collections::HashMap<String, i64>> =
            pipe.all().await.map_err(|e| self.err(e))?;
        for fields in all {
            for (field, n) in fields {
                let mut chars = field.chars();
                let state = match chars.next() {
                    Some('l') => 0,
                    Some('r') => 1,
                    Some('f') => 2,
                    Some('d') => 3,
                    _ => continue,
                };
                let entry: &mut [u64; 4] = out.entry(chars.as_str().to_owned()).or_default();
                entry[state] += n.max(0) as u64;
            }
        }
        Ok(out)
    }

    /// Announces the layouts a gateway instance may write to, for `ttl`.
    pub async fn announce_view(
        &self,
        instance: &str,
        layouts: &[String],
        ttl: std::time::Duration,
    ) -> Result<(), EngineError> {
        let client = self.client()?;
        let pipe = client.pipeline();
        let _: () = pipe
            .sadd(keys::VIEWS, instance)
            .await
            .map_err(|e| self.err(e))?;
        let _: () = pipe
            .set(
                keys::view(instance),
                string_list(layouts),
                Some(fred::types::Expiration::PX(ttl.as_millis() as i64)),
                None,
                false,
            )
            .await
            .map_err(|e| self.err(e))?;
        let _: Vec<Value> = pipe.all().await.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Withdraws a gateway instance's view (at shutdown).
    pub async fn withdraw_view(&self, instance: &str) -> Result<(), EngineError> {
        let client = self.client()?;
        let _: i64 = client
            .del(keys::view(instance))
            .await
            .map_err(|e| self.err(e))?;
        let _: i64 = client
            .srem(keys::VIEWS, instance)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The layouts that live gateway instances may write to; forgets
    /// instances whose view expired.
    pub async fn live_views(&self) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        let instances: Vec<String> = client
            .smembers(keys::VIEWS)
            .await
            .map_err(|e| self.err(e))?;
        let mut layouts = Vec::new();
        for instance in instances {
            let v: Option<String> = client
                .get(keys::view(&instance))
                .await
                .map_err(|e| self.err(e))?;
            match v.and_then(|v| parse_string_list(&v)) {
                Some(l) => layouts.extend(l),
                None => {
                    let _: i64 = client
                        .srem(keys::VIEWS, &instance)
                        .await
                        .map_err(|e| self.err(e))?;
                }
            }
        }
        Ok(layouts)
    }

    /// Records that a namespace has a queue on this shard (idempotent). The
    /// gateway calls this before the first publish to a queue, so a job never
    /// exists in a queue the registry does not list.
    pub async fn register(&self, ns: &str, queue: &str) -> Result<(), EngineError> {
        let client = self.client()?;
        let pipe = client.pipeline();
        let _: () = pipe
            .sadd(keys::NAMESPACES, ns)
            .await
            .map_err(|e| self.err(e))?;
        let _: () = pipe
            .sadd(keys::queues(ns), queue)
            .await
            .map_err(|e| self.err(e))?;
        let _: Vec<Value> = pipe.all().await.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The namespaces registered on this shard.
    pub async fn namespaces(&self) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        client
            .smembers(keys::NAMESPACES)
            .await
            .map_err(|e| self.err(e))
    }

    /// The queues of a namespace registered on this shard.
    pub async fn queues(&self, ns: &str) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        client
            .smembers(keys::queues(ns))
            .await
            .map_err(|e| self.err(e))
    }
}

/// A list of signatures as a JSON array of strings.
fn string_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn parse_string_list(s: &str) -> Option<Vec<String>> {
    serde_json::from_str(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lists_round_trip() {
        for l in [
            vec![],
            vec!["a:1".to_owned()],
            vec!["a:1,b:2".to_owned(), "a:1".to_owned()],
        ] {
            assert_eq!(parse_string_list(&string_list(&l)), Some(l));
        }
        assert_eq!(parse_string_list("nope"), None);
    }
}
