//! Tokens: stored in the admin Redis, replicated into every gateway.
//!
//! Every gateway holds the whole token table in memory, so authenticating a
//! request costs no round trip. Each change writes the table and bumps
//! [`keys::TOKENS_VERSION`] in one transaction; every gateway polls that
//! version every [`POLL`] and reloads the table when it moved. A deleted
//! token therefore stops working everywhere within about [`POLL`].

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::ArcSwapOption;
use fred::prelude::*;
use sundial_core::{EngineError, Shard, keys};
use sundial_router::Token;
use tokio_util::sync::CancellationToken;

/// How often each gateway checks the token table's version.
pub const POLL: Duration = Duration::from_millis(500);

/// The table: `<pool>/<ns>/<secret>` → description.
type Table = HashMap<String, String>;

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
    redis: Shard,
    table: ArcSwapOption<(i64, Table)>,
}

impl TokenStore {
    pub fn new(redis: Shard) -> Arc<Self> {
        Arc::new(Self {
            redis,
            table: ArcSwapOption::empty(),
        })
    }

    /// Whether `token` may act on `ns`.
    pub fn check(&self, token: &Token, ns: &str) -> Check {
        match &*self.table.load() {
            None => Check::Unknown,
            Some(t) if t.1.contains_key(&field(&token.pool, ns, &token.secret)) => Check::Valid,
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
        let tx = self.redis.client()?.multi();
        let _: () = tx
            .hsetnx(
                keys::TOKENS,
                field(&token.pool, ns, &token.secret),
                description,
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(self.commit(tx).await? > 0)
    }

    /// Deletes a token; `false` if there was none.
    pub async fn delete(&self, token: &Token, ns: &str) -> Result<bool, EngineError> {
        let tx = self.redis.client()?.multi();
        let _: () = tx
            .hdel(keys::TOKENS, field(&token.pool, ns, &token.secret))
            .await
            .map_err(|e| self.err(e))?;
        Ok(self.commit(tx).await? > 0)
    }

    /// Bumps the version in the same transaction as the change, runs it, and
    /// reloads this gateway's copy at once. Returns the change's reply.
    async fn commit(&self, tx: fred::clients::Transaction) -> Result<i64, EngineError> {
        let _: () = tx
            .incr(keys::TOKENS_VERSION)
            .await
            .map_err(|e| self.err(e))?;
        let (changed, _version): (i64, i64) = tx.exec(true).await.map_err(|e| self.err(e))?;
        self.reload().await?;
        Ok(changed)
    }

    /// The tokens of a namespace in a pool: token (as clients present it) →
    /// description. Read from Redis, not the cache, so it is exact.
    pub async fn list(&self, pool: &str, ns: &str) -> Result<Vec<(Token, String)>, EngineError> {
        let c = self.redis.client()?;
        let all: HashMap<String, String> =
            c.hgetall(keys::TOKENS).await.map_err(|e| self.err(e))?;
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

    /// Loads the table if its version moved (or was never loaded).
    pub async fn reload(&self) -> Result<(), EngineError> {
        let c = self.redis.client()?;
        let version: Option<i64> = c.get(keys::TOKENS_VERSION).await.map_err(|e| self.err(e))?;
        let version = version.unwrap_or(0);
        if let Some(t) = &*self.table.load()
            && t.0 == version
        {
            return Ok(());
        }
        // Read the table and its version together so a change in between
        // is caught by the next poll rather than lost.
        let tx = c.multi();
        let _: () = tx
            .get(keys::TOKENS_VERSION)
            .await
            .map_err(|e| self.err(e))?;
        let _: () = tx.hgetall(keys::TOKENS).await.map_err(|e| self.err(e))?;
        let (version, table): (Option<i64>, Table) =
            tx.exec(true).await.map_err(|e| self.err(e))?;
        self.table
            .store(Some(Arc::new((version.unwrap_or(0), table))));
        Ok(())
    }

    /// Polls the version until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
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

    fn err(&self, e: fred::error::Error) -> EngineError {
        self.redis.err(e)
    }
}
