//! The mechanism under every replicated admin table.
//!
//! The tables are hashes in the admin Redis ([`AdminTable`]), changed
//! together with one version: each change writes one field and, only when
//! the table really changed, bumps the version, in one script
//! ([`Replica::change`]). Every gateway holds a copy of every table, built
//! once per version into the typed form each table declares ([`Table`]),
//! and polls the version (see [`super::AdminStore::run`]): a change takes
//! effect everywhere within one poll. Readers load the copy without a round
//! trip ([`Replica::read`]); a table's readers can wait for it to change
//! ([`Replica::changes`]).
//!
//! An admin Redis that lost the tables (restarted without its data, or
//! flushed) shows a version older than the copy's, or none: the copy is
//! written back ([`Replica::reload`]), and [`Replica::losses`] tells those
//! who rebuild unversioned data (the queue index) to do it again.

use std::{
    any::{Any, TypeId},
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use arc_swap::{ArcSwap, ArcSwapOption};
use sundial_core::{AdminTables, EngineError, Shard, keys::AdminTable};
use tokio::sync::watch;

/// How many times [`Replica::update`] reads a field again that changed
/// between its read and its write before it gives up.
const UPDATE_TRIES: usize = 16;

/// One table's fields and values, as stored.
pub type Rows = HashMap<String, String>;

/// Every table's rows, as stored.
pub type RawTables = BTreeMap<AdminTable, Rows>;

/// The rows of `table` that `parse` reads, by field. A row it cannot read
/// (one written by a newer version, with a field this one does not know)
/// is left out, and logged as an unreadable `what`.
pub fn readable_rows<T, E: std::fmt::Display, C: FromIterator<(String, T)>>(
    tables: &RawTables,
    table: AdminTable,
    what: &str,
    parse: impl Fn(&str) -> Result<T, E>,
) -> C {
    let rows = tables.get(&table).into_iter().flatten();
    rows.filter_map(|(field, raw)| match parse(raw) {
        Ok(row) => Some((field.clone(), row)),
        Err(e) => {
            tracing::warn!(field, error = %e, table = what, "ignoring an unreadable row");
            None
        }
    })
    .collect()
}

/// A table as every gateway holds it: built from the rows of every table
/// at one version (a table may read another's, as tokens read their
/// limits). Rows a version cannot read are left out, and logged.
pub trait Table: Any + Send + Sync + Sized {
    fn build(tables: &RawTables) -> Self;
}

type Builder = fn(&RawTables) -> Arc<dyn Any + Send + Sync>;

/// One load of every table, at one version.
pub struct Loaded {
    pub version: i64,
    raw: RawTables,
    /// Each table's typed form, by its type: a handful, looked through in
    /// order (cheaper than hashing a type id on every token check).
    typed: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("version", &self.version)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl Loaded {
    /// The typed form of table `T`.
    pub fn get<T: Table>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        let (_, typed) = self.typed.iter().find(|(t, _)| *t == id)?;
        typed.downcast_ref()
    }

    /// A table's rows, as stored.
    pub fn rows(&self, table: AdminTable) -> Option<&Rows> {
        self.raw.get(&table)
    }
}

/// Every table's copy in this gateway, and the admin Redis it follows.
pub struct Replica {
    /// Swappable: when the tables live on the default pool's shard, a
    /// reload may give that shard a new address.
    redis: ArcSwap<Shard>,
    loaded: ArcSwapOption<Loaded>,
    builders: Vec<(TypeId, Builder)>,
    /// Per table: bumped when a reload changed its rows.
    changed: BTreeMap<AdminTable, watch::Sender<u64>>,
    /// Bumped when the admin Redis was found to have lost the tables.
    lost: watch::Sender<u64>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("redis", &self.redis.load().name())
            .field("loaded", &self.loaded.load().as_ref().map(|l| l.version))
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// A copy of no table yet, of the admin Redis `redis`.
    pub fn new(redis: Shard) -> Self {
        Self {
            redis: ArcSwap::from_pointee(redis),
            loaded: ArcSwapOption::empty(),
            builders: Vec::new(),
            changed: AdminTable::ALL
                .into_iter()
                .map(|t| (t, watch::Sender::new(0)))
                .collect(),
            lost: watch::Sender::new(0),
        }
    }

    /// Holds table `T` too, built at every load.
    pub fn with<T: Table>(mut self) -> Self {
        let build: Builder = |raw| Arc::new(T::build(raw));
        self.builders.push((TypeId::of::<T>(), build));
        self
    }

    /// Reads this gateway's copy (`None` while it has never been loaded).
    /// No round trip; never held across an `.await`.
    pub fn read<R>(&self, f: impl FnOnce(&Loaded) -> R) -> Option<R> {
        self.loaded.load().as_deref().map(f)
    }

    /// The admin Redis.
    pub fn redis(&self) -> Arc<Shard> {
        self.redis.load_full()
    }

    /// Points the copy at another connection (after a reload).
    pub fn set_redis(&self, shard: Shard) {
        if !self.redis.load().same(&shard) {
            self.redis.store(Arc::new(shard));
        }
    }

    /// Changes when a reload changes `table`'s rows.
    pub fn changes(&self, table: AdminTable) -> watch::Receiver<u64> {
        match self.changed.get(&table) {
            Some(tx) => tx.subscribe(),
            None => watch::Sender::new(0).subscribe(),
        }
    }

    /// Changes when the admin Redis was found to have lost the tables (and
    /// this gateway's copy was written back).
    pub fn losses(&self) -> watch::Receiver<u64> {
        self.lost.subscribe()
    }

    fn build(&self, read: AdminTables) -> Loaded {
        let typed = self
            .builders
            .iter()
            .map(|(id, build)| (*id, build(&read.tables)))
            .collect();
        Loaded {
            version: read.version,
            raw: read.tables,
            typed,
        }
    }

    /// Loads the tables if their version moved (or they were never
    /// loaded). When the admin Redis has lost them (their version is gone,
    /// or went back, while this gateway holds a newer one: it came back
    /// empty, and maybe took a change or two since), writes this gateway's
    /// copy back instead.
    pub async fn reload(&self) -> Result<(), EngineError> {
        let redis = self.redis();
        // The copy first, then the version: a copy loaded (by a concurrent
        // reload) after the version was read could be newer than it without
        // Redis having lost anything, and restoring it then would give two
        // different tables the same version.
        let cached = self.loaded.load_full();
        let version = redis.admin().version().await?.unwrap_or(0);
        if let Some(t) = &cached {
            if t.version > version {
                return self.restore(&redis, t).await;
            }
            if t.version == version {
                return Ok(());
            }
        }
        let loaded = Arc::new(self.build(redis.admin().tables().await?));
        // Reloads run concurrently (each admin change reloads at once, and
        // the poller): never replace a newer copy with an older one, or a
        // token created a moment ago would be refused until the next poll.
        let before = self.loaded.rcu(|current| match current {
            Some(c) if c.version > loaded.version => Some(c.clone()),
            _ => Some(loaded.clone()),
        });
        let after = self.loaded.load();
        for (table, tx) in &self.changed {
            // A table missing from a load is an empty one.
            let rows = |l: Option<&Arc<Loaded>>| {
                l.and_then(|l| l.raw.get(table))
                    .cloned()
                    .unwrap_or_default()
            };
            if rows(before.as_ref()) != rows(after.as_ref()) {
                tx.send_modify(|n| *n += 1);
            }
        }
        Ok(())
    }

    /// Writes a copy of the tables back into an admin Redis that lost them
    /// (restarted without persistence, or flushed), with a newer version:
    /// tenants keep their tokens. Fields that exist are kept (a token made
    /// since the loss, or another gateway's restore), so the result is the
    /// union. A deletion made just before the loss may come back.
    async fn restore(&self, redis: &Shard, t: &Loaded) -> Result<(), EngineError> {
        let count = |table| t.raw.get(&table).map_or(0, HashMap::len);
        tracing::error!(
            had_version = t.version,
            tokens = count(AdminTable::Tokens),
            limits = count(AdminTable::Limits),
            "the admin Redis has no token table (restarted without its data, or flushed); \
             writing this gateway's copy back"
        );
        let tables = AdminTables {
            version: t.version,
            tables: t.raw.clone(),
        };
        redis.admin().restore_tables(&tables).await?;
        self.lost.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Changes one field of `table` (`op`: see `sundial_core`'s
    /// `table_change`) and, only if that changed anything, the version
    /// (one script), then reloads this gateway's copy at once. Returns
    /// whether it changed.
    pub async fn change(
        &self,
        table: AdminTable,
        op: &str,
        field: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        let changed = self
            .redis()
            .admin()
            .table_change(table, op, field, value)
            .await?;
        if changed {
            self.reload().await?;
        }
        Ok(changed)
    }

    /// Sets `field` of `table` to `new` (`None`: deletes it), only if what
    /// it holds now in Redis (`None`: nothing) is what `expected` accepts;
    /// returns whether it changed. The write (a set or a delete) is
    /// compared and swapped against that read in one script, so a change
    /// made meanwhile is not overwritten.
    pub async fn compare_and_set(
        &self,
        table: AdminTable,
        field: &str,
        expected: impl FnOnce(Option<&str>) -> bool,
        new: Option<&str>,
    ) -> Result<bool, EngineError> {
        let redis = self.redis();
        let current = redis.admin().table_field(table, field).await?;
        if !expected(current.as_deref()) {
            return Ok(false);
        }
        let was = current.unwrap_or_default();
        let changed = match new {
            Some(value) => {
                redis
                    .admin()
                    .table_change_if(table, "cas", field, value, &was)
                    .await?
            }
            None if was.is_empty() => false,
            None => {
                redis
                    .admin()
                    .table_change_if(table, "cad", field, "", &was)
                    .await?
            }
        };
        if changed {
            self.reload().await?;
        }
        Ok(changed)
    }

    /// Sets `field` of `table` to what `change` makes of what the field
    /// holds in Redis now (`None`: nothing; a `None` made deletes it). The
    /// write is compared and swapped against that read, so a change made
    /// in between (by another operator, on any gateway) is read again and
    /// kept, never overwritten. Returns whether the table changed.
    pub async fn update(
        &self,
        table: AdminTable,
        field: &str,
        change: impl Fn(Option<&str>) -> Option<String>,
    ) -> Result<bool, EngineError> {
        let redis = self.redis();
        for _ in 0..UPDATE_TRIES {
            let current = redis.admin().table_field(table, field).await?;
            let new = change(current.as_deref());
            if new == current {
                return Ok(false);
            }
            let was = current.as_deref().unwrap_or_default();
            let (op, value) = match &new {
                Some(value) => ("cas", value.as_str()),
                None => ("cad", ""),
            };
            if redis
                .admin()
                .table_change_if(table, op, field, value, was)
                .await?
            {
                // Stored: a copy that fails to load now catches up at the
                // next change notice or reload, and the caller's answer
                // stays true.
                if let Err(e) = self.reload().await {
                    tracing::warn!(error = %e, "admin table changed; reloading this gateway's copy failed");
                }
                return Ok(true);
            }
        }
        // Others kept changing the field: nothing was written, so the
        // caller may retry (a 503, not a 500).
        Err(EngineError::contended(
            redis.name(),
            format!("{field} changed {UPDATE_TRIES} times while it was being updated"),
        ))
    }

    /// One table's rows, read from Redis rather than the copy (exact).
    pub async fn rows_now(&self, table: AdminTable) -> Result<Rows, EngineError> {
        self.redis().admin().table_rows(table).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_tests::{RedisServer, wait_until_async};

    use super::*;
    use crate::{
        Grant, Token,
        admin::{AdminStore, records::Limit, testing::store, tokens::Check},
    };

    fn version(redis: &RedisServer) -> Option<i64> {
        redis::cmd("GET")
            .arg("sd:tokens:version")
            .query(&mut redis.client())
            .expect("version")
    }

    #[tokio::test]
    async fn a_change_bumps_the_version_only_when_it_changes_something() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let r = &store.replica;
        assert!(
            r.change(AdminTable::Limits, "add", "f", "{}")
                .await
                .expect("add")
        );
        assert_eq!(version(&redis), Some(1));
        assert!(
            !r.change(AdminTable::Limits, "add", "f", "{}")
                .await
                .expect("again")
        );
        assert!(
            !r.change(AdminTable::Limits, "set", "f", "{}")
                .await
                .expect("same")
        );
        assert_eq!(
            version(&redis),
            Some(1),
            "nothing changed, nothing to reload"
        );
        assert_eq!(r.read(|l| l.version), Some(1));
        assert!(
            r.change(AdminTable::Limits, "del", "f", "")
                .await
                .expect("del")
        );
        assert_eq!(r.read(|l| l.version), Some(2), "a change reloads at once");
    }

    #[tokio::test]
    async fn every_gateway_sees_a_change_within_a_poll_and_hears_its_table_changed() {
        let redis = RedisServer::start();
        let (a, b) = (store(&redis).await, store(&redis).await);
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(b.clone().run(None, stop.clone()));
        let mut homes = b.replica.changes(AdminTable::Homes);
        let token = Token::mint("default");
        a.tokens()
            .create(&token, "ns", "t", &Grant::full())
            .await
            .expect("create");
        wait_until_async(
            Duration::from_secs(5),
            "the other gateway knows the token",
            || async { matches!(b.tokens().check(&token, "ns"), Check::Valid(_)) },
        )
        .await;
        assert!(
            !homes.has_changed().expect("open"),
            "the homes did not change"
        );
        a.replica
            .change(AdminTable::Homes, "set", "default/ns", "{}")
            .await
            .expect("home");
        tokio::time::timeout(Duration::from_secs(5), homes.changed())
            .await
            .expect("told within a poll")
            .expect("open");
        stop.cancel();
    }

    #[tokio::test]
    async fn tables_lost_with_their_redis_come_back_from_a_gateway_copy() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let token = Token::mint("default");
        store
            .tokens()
            .create(&token, "ns", "kept", &Grant::full())
            .await
            .expect("create");
        let limit = Limit {
            read: 1,
            write: 2,
            interval: 3,
        };
        let named = crate::admin::records::TokenRef::Secret(token.clone());
        store
            .limits()
            .set(&named, "ns", limit, false)
            .await
            .expect("limit");
        let losses = store.losses();
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut redis.client())
            .expect("flush");
        store.reload().await.expect("restore");
        assert!(losses.has_changed().expect("open"), "the loss is told");
        // Another gateway that starts now finds both tables as they were.
        let fresh = AdminStore::new(crate::admin::testing::shard(&redis, "other").await);
        fresh.reload().await.expect("load");
        assert!(matches!(
            fresh.tokens().check(&token, "ns"),
            Check::Valid(_)
        ));
        assert_eq!(fresh.limits().get(&named, "ns"), Some(limit));
        assert!(version(&redis) > Some(0));
    }
}
