//! The quota table: `sd:quotas` (`<pool>/<ns>` → the [`Quota`] fields a
//! namespace sets over its pool's), replicated with the other tables, so
//! that a change is in force on every gateway within one poll.
//!
//! A row holds only what an operator set for the namespace; what a request
//! is held to is that over its pool's quota from the config
//! ([`Quotas::effective`]).

use std::collections::HashMap;

use sundial_core::{EngineError, keys::AdminTable};
use tokio::sync::watch;

use super::replica::{RawTables, Replica, Table, readable_rows};
use crate::quota::{Quota, QuotaPatch};

/// The table's field for the namespace `ns` of `pool`.
fn field(pool: &str, ns: &str) -> String {
    format!("{pool}/{ns}")
}

/// The quota table as a gateway holds it: `<pool>/<ns>` → its quota.
#[derive(Debug, Default)]
pub struct QuotaTable {
    quotas: HashMap<String, Quota>,
}

impl Table for QuotaTable {
    /// A row of a newer version is left out: the namespace is held to its
    /// pool's quota here.
    fn build(tables: &RawTables) -> Self {
        let quotas = readable_rows(
            tables,
            AdminTable::Quotas,
            "namespace quota",
            Quota::from_json,
        );
        Self { quotas }
    }
}

/// The quota table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Quotas<'a>(pub(super) &'a Replica);

impl Quotas<'_> {
    /// What the namespace `ns` of `pool` sets over its pool's quota, from
    /// this gateway's copy (empty when nothing).
    pub fn get(&self, pool: &str, ns: &str) -> Quota {
        self.0
            .read(|l| l.get::<QuotaTable>()?.quotas.get(&field(pool, ns)).copied())
            .flatten()
            .unwrap_or_default()
    }

    /// What the namespace is held to: its own fields over `pool_quota`.
    pub fn effective(&self, pool: &str, ns: &str, pool_quota: &Quota) -> Quota {
        self.get(pool, ns).over(pool_quota)
    }

    /// Replaces what the namespace sets (an empty quota removes its row);
    /// returns whether the table changed. Every gateway reloads it.
    pub async fn set(&self, pool: &str, ns: &str, quota: &Quota) -> Result<bool, EngineError> {
        if quota.is_empty() {
            return self.clear(pool, ns).await;
        }
        let json = serde_json::to_string(quota).unwrap_or_default();
        self.0
            .change(AdminTable::Quotas, "set", &field(pool, ns), &json)
            .await
    }

    /// Changes some of what the namespace sets, over what its row holds in
    /// the admin Redis at that moment (not this gateway's copy), so that
    /// two changes made at once both hold. Returns whether the table
    /// changed. Every gateway reloads it.
    pub async fn patch(
        &self,
        pool: &str,
        ns: &str,
        patch: &QuotaPatch,
    ) -> Result<bool, EngineError> {
        self.0
            .update(AdminTable::Quotas, &field(pool, ns), |row| patch.apply(row))
            .await
    }

    /// Removes what the namespace sets; `false` if it set nothing.
    pub async fn clear(&self, pool: &str, ns: &str) -> Result<bool, EngineError> {
        self.0
            .change(AdminTable::Quotas, "del", &field(pool, ns), "")
            .await
    }

    /// Every namespace that sets a quota: (`pool`, `ns`, quota), sorted.
    pub fn all(&self) -> Vec<(String, String, Quota)> {
        let mut out: Vec<(String, String, Quota)> = self
            .0
            .read(|l| {
                l.get::<QuotaTable>()
                    .into_iter()
                    .flat_map(|t| &t.quotas)
                    .filter_map(|(f, q)| {
                        let (pool, ns) = f.split_once('/')?;
                        Some((pool.to_owned(), ns.to_owned(), *q))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Changes when the quotas do.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes(AdminTable::Quotas)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_tests::RedisServer;

    use super::*;
    use crate::admin::testing::{polling, shard, store};

    #[tokio::test]
    async fn a_quota_is_set_read_over_its_pools_and_cleared() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let quotas = store.quotas();
        let mut changes = quotas.changes();
        let pool_quota = Quota {
            publish_rate: Some(100),
            max_body: Some(1_000),
            ..Quota::default()
        };
        assert_eq!(quotas.effective("p", "ns", &pool_quota), pool_quota);

        let own = Quota {
            publish_rate: Some(10),
            max_tries: Some(2),
            ..Quota::default()
        };
        assert!(quotas.set("p", "ns", &own).await.expect("set"));
        assert!(
            !quotas.set("p", "ns", &own).await.expect("set"),
            "unchanged"
        );
        tokio::time::timeout(Duration::from_secs(1), changes.changed())
            .await
            .expect("told")
            .expect("open");
        let held = quotas.effective("p", "ns", &pool_quota);
        assert_eq!(
            (held.publish_rate, held.max_body, held.max_tries),
            (Some(10), Some(1_000), Some(2))
        );
        assert_eq!(
            quotas.get("p", "other"),
            Quota::default(),
            "another namespace"
        );
        assert_eq!(quotas.all(), [("p".to_owned(), "ns".to_owned(), own)]);

        let patch =
            QuotaPatch::from_json(r#"{"max_body": 9, "publish_rate": null}"#).expect("patch");
        assert!(quotas.patch("p", "ns", &patch).await.expect("patch"));
        assert!(
            !quotas.patch("p", "ns", &patch).await.expect("patch"),
            "no change twice"
        );
        let patched = Quota {
            publish_rate: None,
            max_body: Some(9),
            ..own
        };
        assert_eq!(quotas.get("p", "ns"), patched);
        assert!(quotas.set("p", "ns", &own).await.expect("set back"));

        assert!(quotas.clear("p", "ns").await.expect("clear"));
        assert!(!quotas.clear("p", "ns").await.expect("clear"), "gone");
        assert_eq!(quotas.get("p", "ns"), Quota::default());
        assert!(!quotas.set("p", "ns", &Quota::default()).await.expect("set"));
    }

    #[tokio::test]
    async fn patches_made_at_once_on_two_gateways_all_hold() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let two = super::super::AdminStore::new(shard(&redis, "admin").await);
        two.reload().await.expect("load");
        // Each bound set by its own patch, the two gateways' patches
        // interleaved: a read-modify-write would keep only some of them.
        let patches = crate::quota::Bound::ALL.iter().enumerate().map(|(i, b)| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            let text = format!("{{\"{}\": {}}}", b.name(), i + 1);
            async move {
                let patch = QuotaPatch::from_json(&text).expect("patch");
                store
                    .quotas()
                    .patch("p", "ns", &patch)
                    .await
                    .expect("patch")
            }
        });
        let changed = futures::future::join_all(patches).await;
        assert!(changed.iter().all(|&c| c), "each patch changed the row");
        one.reload().await.expect("reload");
        let q = one.quotas().get("p", "ns");
        for (i, &b) in crate::quota::Bound::ALL.iter().enumerate() {
            assert_eq!(q.get(b), Some(i as u64 + 1), "{}", b.name());
        }
    }

    #[tokio::test]
    async fn another_gateway_holds_a_changed_quota_within_a_poll() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let (two, stop) = polling(&redis).await;
        let mut changes = two.quotas().changes();
        let q = Quota {
            publish_rate: Some(5),
            ..Quota::default()
        };
        one.quotas().set("p", "ns", &q).await.expect("set");
        tokio::time::timeout(super::super::POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        assert_eq!(two.quotas().get("p", "ns"), q);
        stop.cancel();
    }
}
