//! Tokens and their rate limits: stored in the admin Redis, replicated into
//! every gateway.
//!
//! Every gateway holds the whole token and limit tables in memory, so
//! authenticating a request and finding its limit cost no round trip. Each
//! change writes a table and, only when the table really changed, bumps
//! the tables' version, in one script; every gateway polls that version
//! every [`POLL`] and reloads both tables when it moved. A deleted token, or a changed limit, therefore
//! takes effect everywhere within about [`POLL`].

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::{ArcSwap, ArcSwapOption};
use sundial_core::{AdminTables, EngineError, Shard, keys::AdminTable};
use tokio_util::sync::CancellationToken;

use crate::{LiveTopology, Token};

/// How often each gateway checks the token table's version.
pub const POLL: Duration = Duration::from_millis(500);

/// A token's rate limit: at most `read` consumes and `write` publishes per
/// `interval` seconds; 0 = no limit on that action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limit {
    pub read: u64,
    pub write: u64,
    pub interval: u64,
}

/// One load of both tables, keyed by `<pool>/<ns>/<secret>`.
#[derive(Debug, Default)]
struct Snapshot {
    version: i64,
    tokens: HashMap<String, String>,
    limits: HashMap<String, Limit>,
}

fn field(pool: &str, ns: &str, secret: &str) -> String {
    format!("{pool}/{ns}/{secret}")
}

/// What an authentication attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Valid,
    Invalid,
    /// The table has never been loaded (admin Redis unreachable since start).
    Unknown,
}

#[derive(Debug)]
pub struct TokenStore {
    /// Swappable: when tokens live on the default pool's shard, a reload may
    /// give that shard a new address.
    redis: ArcSwap<Shard>,
    table: ArcSwapOption<Snapshot>,
}

impl TokenStore {
    pub fn new(redis: Shard) -> Arc<Self> {
        Arc::new(Self {
            redis: ArcSwap::from_pointee(redis),
            table: ArcSwapOption::empty(),
        })
    }

    /// Whether `token` may act on `ns`.
    pub fn check(&self, token: &Token, ns: &str) -> Check {
        match &*self.table.load() {
            None => Check::Unknown,
            Some(t)
                if t.tokens
                    .contains_key(&field(&token.pool, ns, &token.secret)) =>
            {
                Check::Valid
            }
            Some(_) => Check::Invalid,
        }
    }

    /// Creates a token; `false` if it already exists.
    pub async fn create(
        &self,
        token: &Token,
        ns: &str,
        description: &str,
    ) -> Result<bool, EngineError> {
        let f = field(&token.pool, ns, &token.secret);
        self.change(AdminTable::Tokens, "add", &f, description)
            .await
    }

    /// Deletes a token; `false` if there was none.
    pub async fn delete(&self, token: &Token, ns: &str) -> Result<bool, EngineError> {
        let f = field(&token.pool, ns, &token.secret);
        self.change(AdminTable::Tokens, "del", &f, "").await
    }

    /// The rate limit of a token, from this gateway's copy.
    pub fn limit(&self, token: &Token, ns: &str) -> Option<Limit> {
        let t = self.table.load();
        t.as_ref()?
            .limits
            .get(&field(&token.pool, ns, &token.secret))
            .copied()
    }

    /// Whether the token exists, from this gateway's copy.
    pub fn exists(&self, token: &Token, ns: &str) -> bool {
        self.check(token, ns) == Check::Valid
    }

    /// Sets a token's limit; with `only_new`, not if one exists (`false`).
    pub async fn set_limit(
        &self,
        token: &Token,
        ns: &str,
        limit: Limit,
        only_new: bool,
    ) -> Result<bool, EngineError> {
        let json = serde_json::to_string(&limit).unwrap_or_default();
        let f = field(&token.pool, ns, &token.secret);
        let op = if only_new { "add" } else { "set" };
        let changed = self.change(AdminTable::Limits, op, &f, &json).await?;
        Ok(changed || !only_new)
    }

    /// Removes a token's limit; `false` if it had none.
    pub async fn delete_limit(&self, token: &Token, ns: &str) -> Result<bool, EngineError> {
        let f = field(&token.pool, ns, &token.secret);
        self.change(AdminTable::Limits, "del", &f, "").await
    }

    /// Every limit: (pool, namespace, secret, limit), from this gateway's copy.
    pub fn limits(&self) -> Vec<(String, String, String, Limit)> {
        let t = self.table.load();
        let mut out: Vec<_> = t
            .as_ref()
            .map(|t| {
                t.limits
                    .iter()
                    .filter_map(|(k, l)| {
                        let mut parts = k.splitn(3, '/');
                        let (pool, ns, secret) = (parts.next()?, parts.next()?, parts.next()?);
                        Some((pool.to_owned(), ns.to_owned(), secret.to_owned(), *l))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
        out
    }

    /// The admin Redis, where tokens, limits and request counters live.
    pub fn redis(&self) -> Arc<Shard> {
        self.redis.load_full()
    }

    /// Points the store at another connection (after a reload).
    pub fn set_redis(&self, shard: Shard) {
        if !self.redis.load().same(&shard) {
            self.redis.store(Arc::new(shard));
        }
    }

    /// Changes one field of `table` and, only if that changed anything,
    /// the version (one script), then reloads this gateway's copy at once.
    async fn change(
        &self,
        table: AdminTable,
        op: &str,
        field: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        let changed = self.redis().table_change(table, op, field, value).await?;
        if changed {
            self.reload().await?;
        }
        Ok(changed)
    }

    /// The tokens of a namespace in a pool: token (as clients present it) →
    /// description. Read from Redis, not the cache, so it is exact.
    pub async fn list(&self, pool: &str, ns: &str) -> Result<Vec<(Token, String)>, EngineError> {
        let all = self.redis().token_table().await?;
        let prefix = format!("{pool}/{ns}/");
        let mut out: Vec<(Token, String)> = all
            .into_iter()
            .filter_map(|(k, v)| {
                let secret = k.strip_prefix(&prefix)?;
                Some((
                    Token {
                        pool: pool.to_owned(),
                        secret: secret.to_owned(),
                    },
                    v,
                ))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Loads the table if its version moved (or was never loaded). When the
    /// admin Redis has lost the table (its version is gone, or went back,
    /// while this gateway holds a newer one: it came back empty, and maybe
    /// took a change or two since), writes this gateway's copy back instead.
    pub async fn reload(&self) -> Result<(), EngineError> {
        let redis = self.redis();
        // The copy first, then the version: a copy loaded (by a concurrent
        // reload) after the version was read could be newer than it without
        // Redis having lost anything, and restoring it then would give two
        // different tables the same version.
        let cached = self.table.load_full();
        let version = redis.admin_version().await?;
        if let Some(t) = &cached {
            if t.version > version.unwrap_or(0) {
                return self.restore(&redis, t).await;
            }
            if t.version == version.unwrap_or(0) {
                return Ok(());
            }
        }
        let tables = redis.admin_tables().await?;
        let limits = tables
            .limits
            .into_iter()
            .filter_map(|(k, v)| match serde_json::from_str(&v) {
                Ok(l) => Some((k, l)),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an unreadable rate limit");
                    None
                }
            })
            .collect();
        let loaded = Arc::new(Snapshot {
            version: tables.version,
            tokens: tables.tokens,
            limits,
        });
        // Reloads run concurrently (each admin change reloads at once, and
        // the poller): never replace a newer copy with an older one, or a
        // token created a moment ago would be refused until the next poll.
        self.table.rcu(|current| match current {
            Some(c) if c.version > loaded.version => Some(c.clone()),
            _ => Some(loaded.clone()),
        });
        Ok(())
    }

    /// Writes a copy of the tables back into an admin Redis that lost them
    /// (restarted without persistence, or flushed), with a newer version:
    /// tenants keep their tokens. Fields that exist are kept (a token made
    /// since the loss, or another gateway's restore), so the result is the
    /// union. A deletion made just before the loss may come back.
    async fn restore(&self, redis: &Shard, t: &Snapshot) -> Result<(), EngineError> {
        tracing::error!(
            had_version = t.version,
            tokens = t.tokens.len(),
            limits = t.limits.len(),
            "the admin Redis has no token table (restarted without its data, or flushed); \
             writing this gateway's copy back"
        );
        let tables = AdminTables {
            version: t.version,
            tokens: t.tokens.clone(),
            limits: t
                .limits
                .iter()
                .map(|(f, l)| (f.clone(), serde_json::to_string(l).unwrap_or_default()))
                .collect(),
        };
        redis.restore_admin_tables(&tables).await
    }

    /// Polls the version until `shutdown`. With `follow` (the tables live
    /// on the default pool's first shard, no admin Redis of their own), the
    /// store moves to that shard's connection when a reload replaces it.
    pub async fn run(
        self: Arc<Self>,
        follow: Option<Arc<LiveTopology>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = follow.as_ref().map(|l| l.changes());
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(Ok(())) = async { Some(changes.as_mut()?.changed().await) } => {}
                () = shutdown.cancelled() => return,
            }
            // Also on a tick: a poller started again after a panic would
            // not see a change made before it subscribed.
            if let Some(shard) = follow.as_ref().and_then(|l| default_shard(l)) {
                self.set_redis(shard);
            }
            match self.reload().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("token table reachable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot refresh the token table; keeping the cached one");
                }
                Err(_) => {}
            }
        }
    }
}

/// The first shard of the default pool: where the tables live when there is
/// no admin Redis.
pub fn default_shard(live: &LiveTopology) -> Option<Shard> {
    live.topology()
        .pool(crate::token::DEFAULT_POOL)
        .and_then(|p| p.shards().next().cloned())
}
