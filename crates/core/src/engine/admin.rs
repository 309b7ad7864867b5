//! Admin operations: the token and limit tables, and rate counters.
//!
//! The tables are hashes keyed by `<pool>/<ns>/<secret>`: tokens hold a
//! description, limits a JSON object. [`keys::TOKENS_VERSION`] counts their
//! changes, so that gateways reload them only when it moved.

use std::collections::HashMap;

use fred::prelude::*;

use crate::{EngineError, Shard, keys, scripts::SCRIPTS};

/// The token and limit tables and their version, as read in one
/// transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminTables {
    /// 0 when the version key is missing.
    pub version: i64,
    /// Field → description.
    pub tokens: HashMap<String, String>,
    /// Field → the limit as JSON.
    pub limits: HashMap<String, String>,
}

impl Shard {
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

    /// The tables' version (`None` when the key is missing: a new admin
    /// Redis, or one that lost its data).
    pub async fn admin_version(&self) -> Result<Option<i64>, EngineError> {
        self.client()?
            .get(keys::TOKENS_VERSION)
            .await
            .map_err(|e| self.err(e))
    }

    /// Both tables and their version, read together, so that a change made
    /// in between shows in the next version rather than being lost.
    pub async fn admin_tables(&self) -> Result<AdminTables, EngineError> {
        let tx = self.client()?.multi();
        let _: () = tx
            .get(keys::TOKENS_VERSION)
            .await
            .map_err(|e| self.err(e))?;
        let _: () = tx.hgetall(keys::TOKENS).await.map_err(|e| self.err(e))?;
        let _: () = tx.hgetall(keys::LIMITS).await.map_err(|e| self.err(e))?;
        let (version, tokens, limits): (Option<i64>, _, _) =
            tx.exec(true).await.map_err(|e| self.err(e))?;
        Ok(AdminTables {
            version: version.unwrap_or(0),
            tokens,
            limits,
        })
    }

    /// The token table alone, read from Redis.
    pub async fn token_table(&self) -> Result<HashMap<String, String>, EngineError> {
        self.client()?
            .hgetall(keys::TOKENS)
            .await
            .map_err(|e| self.err(e))
    }

    /// Writes `tables` back into an admin Redis that lost them, keeping
    /// fields that exist (the result is the union), and sets the version to
    /// `tables.version + 1`, in one transaction.
    pub async fn restore_admin_tables(&self, tables: &AdminTables) -> Result<(), EngineError> {
        let tx = self.client()?.multi();
        for (table, fields) in [
            (keys::TOKENS, &tables.tokens),
            (keys::LIMITS, &tables.limits),
        ] {
            for (f, v) in fields {
                let _: () = tx
                    .hsetnx(table, f.as_str(), v.as_str())
                    .await
                    .map_err(|e| self.err(e))?;
            }
        }
        let _: () = tx
            .set(keys::TOKENS_VERSION, tables.version + 1, None, None, false)
            .await
            .map_err(|e| self.err(e))?;
        let _: fred::types::Value = tx.exec(true).await.map_err(|e| self.err(e))?;
        Ok(())
    }
}
