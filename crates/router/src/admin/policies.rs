//! The policy table: `sd:policies` (`<pool>/<ns>/<queue>` → a queue's
//! [`RetryPolicy`]), replicated with the other tables, so that a change is
//! in force on every gateway within one poll. A publish reads its queue's
//! policy from this gateway's copy, puts its own fields over it, and packs
//! the result into each job's record: a change holds for jobs published
//! after it.

use std::collections::HashMap;

use sundial_core::{EngineError, keys::AdminTable};
use tokio::sync::watch;

use super::replica::{RawTables, Replica, Table, readable_rows};
use crate::policy::RetryPolicy;

/// The table's field for queue `queue` of namespace `ns` of `pool`.
fn field(pool: &str, ns: &str, queue: &str) -> String {
    format!("{pool}/{ns}/{queue}")
}

/// The policy table as a gateway holds it: `<pool>/<ns>/<queue>` → policy.
#[derive(Debug, Default)]
pub struct PolicyTable {
    policies: HashMap<String, RetryPolicy>,
}

impl Table for PolicyTable {
    /// A row of a newer version is left out: the queue's jobs get no
    /// policy from this one.
    fn build(tables: &RawTables) -> Self {
        let policies = readable_rows(
            tables,
            AdminTable::Policies,
            "retry policy",
            RetryPolicy::from_json,
        );
        Self { policies }
    }
}

/// The policy table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Policies<'a>(pub(super) &'a Replica);

impl Policies<'_> {
    /// The policy of queue `queue` of namespace `ns` of `pool`, from this
    /// gateway's copy (empty when it has none).
    pub fn get(&self, pool: &str, ns: &str, queue: &str) -> RetryPolicy {
        self.0
            .read(|l| {
                l.get::<PolicyTable>()?
                    .policies
                    .get(&field(pool, ns, queue))
                    .copied()
            })
            .flatten()
            .unwrap_or_default()
    }

    /// Replaces the queue's policy (an empty one removes its row); returns
    /// whether the table changed. Every gateway reloads it.
    pub async fn set(
        &self,
        pool: &str,
        ns: &str,
        queue: &str,
        policy: &RetryPolicy,
    ) -> Result<bool, EngineError> {
        if policy.is_empty() {
            return self.clear(pool, ns, queue).await;
        }
        let json = serde_json::to_string(policy).unwrap_or_default();
        self.0
            .change(AdminTable::Policies, "set", &field(pool, ns, queue), &json)
            .await
    }

    /// Removes the queue's policy; `false` if it had none.
    pub async fn clear(&self, pool: &str, ns: &str, queue: &str) -> Result<bool, EngineError> {
        self.0
            .change(AdminTable::Policies, "del", &field(pool, ns, queue), "")
            .await
    }

    /// Changes when the policies do.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes(AdminTable::Policies)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_tests::RedisServer;

    use super::*;
    use crate::admin::testing::{polling, store};
    use crate::policy::BackoffKind;

    #[tokio::test]
    async fn a_policy_is_set_read_on_another_gateway_within_a_poll_and_cleared() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let (two, stop) = polling(&redis).await;
        let mut changes = two.policies().changes();
        let p = RetryPolicy {
            backoff: Some(BackoffKind::Exponential),
            initial_delay_ms: Some(1_000),
            tries: Some(5),
            ..RetryPolicy::default()
        };
        assert!(one.policies().set("p", "ns", "q", &p).await.expect("set"));
        assert!(
            !one.policies().set("p", "ns", "q", &p).await.expect("set"),
            "unchanged"
        );
        tokio::time::timeout(super::super::POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        assert_eq!(two.policies().get("p", "ns", "q"), p);
        assert_eq!(
            two.policies().get("p", "ns", "other"),
            RetryPolicy::default()
        );
        assert!(one.policies().clear("p", "ns", "q").await.expect("clear"));
        assert!(
            !one.policies().clear("p", "ns", "q").await.expect("clear"),
            "gone"
        );
        tokio::time::timeout(Duration::from_secs(1), changes.changed())
            .await
            .expect("told")
            .expect("open");
        assert_eq!(two.policies().get("p", "ns", "q"), RetryPolicy::default());
        stop.cancel();
    }
}
