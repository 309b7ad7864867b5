//! Admin operations, on [`Admin`] (`shard.admin()`): the replicated admin
//! tables, rate counters, and the namespaces' queue indexes.
//!
//! The tables ([`AdminTable`]) are hashes of text fields and values, whose
//! meaning is the router's (`sundial_router::admin`). A version key counts
//! their changes, so that gateways reload them only when it moved. Their
//! names depend on whether the admin Redis is a cluster ([`AdminKeys`]).

use std::collections::{BTreeMap, HashMap};

use fred::prelude::*;

use super::keysets;
use crate::{
    EngineError, Shard,
    keys::{AdminKeys, AdminTable},
    scripts::SCRIPTS,
};

/// A shard's admin operations (on the admin Redis): see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Admin<'a>(pub(super) &'a Shard);

impl Shard {
    /// The admin tables, rate counters and queue indexes this Redis holds
    /// when it is the admin Redis.
    pub fn admin(&self) -> Admin<'_> {
        Admin(self)
    }
}

/// How a rate-quota call takes from its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateTake {
    /// All the jobs asked, or none (a publish).
    All,
    /// As many as the bucket holds, up to the jobs asked (a consume).
    Some,
    /// Gives back jobs taken and not used.
    Refund,
}

/// What a rate-quota call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateGrant {
    /// Jobs taken from the bucket (0 when refused, and for a refund).
    pub granted: u64,
    /// When refused: how long until the jobs asked would be granted.
    pub retry_after_ms: u64,
    /// Jobs drawn ahead of the rate after this call: a second's worth when
    /// the bucket is empty.
    pub drawn: u64,
}

/// Every admin table and their version, as read in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminTables {
    /// 0 when the version key is missing.
    pub version: i64,
    /// Each table's fields and values, as stored.
    pub tables: BTreeMap<AdminTable, HashMap<String, String>>,
}

impl Admin<'_> {
    /// The names of the admin tables on this Redis.
    pub fn keys(self) -> &'static AdminKeys {
        AdminKeys::of(self.0.is_cluster())
    }

    /// Changes one field of an admin table and bumps the tables' version
    /// only when the table changed: `add` (only if absent), `set`, `xset`
    /// (only if present), `del` (`value` unused), `cas` (only if the field
    /// holds `expected`, or is absent when `expected` is empty), or `cad`
    /// (delete, only if the field holds `expected`). Returns whether it
    /// changed.
    pub async fn table_change(
        self,
        table: AdminTable,
        op: &str,
        field: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        self.table_change_if(table, op, field, value, "").await
    }

    /// [`Self::table_change`] with `expected` for `cas` and `cad`.
    pub async fn table_change_if(
        self,
        table: AdminTable,
        op: &str,
        field: &str,
        value: &str,
        expected: &str,
    ) -> Result<bool, EngineError> {
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.table_change,
                keysets::table_change(self.keys(), table),
                vec![op.into(), field.into(), value.into(), expected.into()],
            )
            .await?;
        Ok(v.as_i64().unwrap_or(0) > 0)
    }

    /// Rewrites a plaintext token field as its hashed field (`value`), with
    /// its limit, in one script; `false` if the plaintext field was gone.
    pub async fn token_rehash(
        self,
        plain: &str,
        hashed: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.token_rehash,
                keysets::token_rehash(self.keys()),
                vec![plain.into(), hashed.into(), value.into()],
            )
            .await?;
        Ok(v.as_i64().unwrap_or(0) > 0)
    }

    /// Counts one request on a fixed-window counter (`delta` 1), or refunds
    /// one (`delta` -1); returns the count in the current window and the
    /// milliseconds until it ends.
    pub async fn rate(
        self,
        key: &str,
        window_ms: u64,
        delta: i64,
    ) -> Result<(u64, u64), EngineError> {
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.rate,
                keysets::rate(key),
                vec![(window_ms as i64).into(), delta.into()],
            )
            .await?;
        let int = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0).max(0) as u64;
        let parts = v.into_array();
        Ok((int(parts.first()), int(parts.get(1))))
    }

    /// Takes `n` jobs from a namespace's rate bucket (`rate` jobs per
    /// second; see `lua/quota_rate.lua`), or gives back jobs taken and not
    /// used.
    pub async fn quota_rate(
        self,
        bucket: &str,
        rate: u64,
        n: u64,
        take: RateTake,
    ) -> Result<RateGrant, EngineError> {
        let mode = match take {
            RateTake::All => "all",
            RateTake::Some => "some",
            RateTake::Refund => "refund",
        };
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.quota_rate,
                keysets::quota_rate(bucket),
                vec![(rate as i64).into(), (n as i64).into(), mode.into()],
            )
            .await?;
        let n = |i: usize| match &v {
            Value::Array(a) => a.get(i).and_then(Value::as_i64).unwrap_or(0).max(0) as u64,
            _ => 0,
        };
        Ok(RateGrant {
            granted: n(0),
            retry_after_ms: n(1),
            drawn: n(2),
        })
    }

    /// The tables' version (`None` when the key is missing: a new admin
    /// Redis, or one that lost its data).
    pub async fn version(self) -> Result<Option<i64>, EngineError> {
        let key = self.keys().version;
        self.0
            .conn()
            .idempotent(key, |c| async move { c.get(key).await })
            .await
    }

    /// Both tables and their version, read together, so that a change made
    /// in between shows in the next version rather than being lost.
    pub async fn tables(self) -> Result<AdminTables, EngineError> {
        let names = self.keys();
        let (version, rows): (Option<i64>, Vec<HashMap<String, String>>) = self
            .0
            .conn()
            .idempotent(names.version, |c| async move {
                let tx = c.multi();
                let _: () = tx.get(names.version).await?;
                for table in AdminTable::ALL {
                    let _: () = tx.hgetall(names.table(table)).await?;
                }
                let mut replies: Vec<fred::types::Value> = tx.exec(true).await?;
                let rows = replies
                    .split_off(1)
                    .into_iter()
                    .map(fred::types::Value::convert)
                    .collect::<Result<Vec<HashMap<String, String>>, _>>()?;
                let version = match replies.pop() {
                    Some(v) => v.convert()?,
                    None => None,
                };
                Ok((version, rows))
            })
            .await?;
        Ok(AdminTables {
            version: version.unwrap_or(0),
            tables: AdminTable::ALL.into_iter().zip(rows).collect(),
        })
    }

    /// One field of a table, read from Redis.
    pub async fn table_field(
        self,
        table: AdminTable,
        field: &str,
    ) -> Result<Option<String>, EngineError> {
        let key = self.keys().table(table);
        self.0
            .conn()
            .idempotent(key, |c| async move { c.hget(key, field).await })
            .await
    }

    /// One table, read from Redis.
    pub async fn table_rows(
        self,
        table: AdminTable,
    ) -> Result<HashMap<String, String>, EngineError> {
        let key = self.keys().table(table);
        self.0
            .conn()
            .idempotent(key, |c| async move { c.hgetall(key).await })
            .await
    }

    /// Writes `tables` back into an admin Redis that lost them, keeping
    /// fields that exist (the result is the union), and sets the version to
    /// `tables.version + 1`, in one transaction.
    pub async fn restore_tables(self, tables: &AdminTables) -> Result<(), EngineError> {
        let names = self.keys();
        // Running it twice writes the same: the union, and the same version.
        let _: fred::types::Value = self
            .0
            .conn()
            .idempotent(names.version, |c| async move {
                let tx = c.multi();
                for (table, fields) in &tables.tables {
                    for (f, v) in fields {
                        let key = names.table(*table);
                        let _: () = tx.hsetnx(key, f.as_str(), v.as_str()).await?;
                    }
                }
                let _: () = tx
                    .set(names.version, tables.version + 1, None, None, false)
                    .await?;
                tx.exec(true).await
            })
            .await?;
        Ok(())
    }
}
