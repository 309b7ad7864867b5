//! Requests refused by namespace quotas, counted on the admin Redis for
//! the usage report (`sd:refusals:<pool>/<ns>`, a hash: quota → requests),
//! so that the count is the service's, not one gateway's.

use std::collections::BTreeMap;

use fred::prelude::*;

use super::Admin;
use crate::{EngineError, keys};

impl Admin<'_> {
    /// Adds `n` refusals of `quota` to a namespace's count.
    pub async fn add_refusals(
        self,
        pool: &str,
        ns: &str,
        quota: &str,
        n: u64,
    ) -> Result<(), EngineError> {
        let key = keys::refusals(pool, ns);
        let _: i64 = self
            .0
            .conn()
            // Sent again only when a cluster refused it unrun.
            .idempotent(&key, |c| {
                let key = key.clone();
                async move { c.hincrby(key, quota, n as i64).await }
            })
            .await?;
        Ok(())
    }

    /// A namespace's refusals, per quota.
    pub async fn refusals(
        self,
        pool: &str,
        ns: &str,
    ) -> Result<BTreeMap<String, u64>, EngineError> {
        let key = keys::refusals(pool, ns);
        self.0
            .conn()
            .idempotent(&key, |c| {
                let key = key.clone();
                async move { c.hgetall(key).await }
            })
            .await
    }
}
