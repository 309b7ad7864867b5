//! A namespace's queue index on the admin Redis (`sd:queues:<pool>/<ns>`,
//! a sorted set of names, score 0, paged by name): the queues it holds
//! jobs in or published to lately, for the admin listing, exports and the
//! `max_queues` quota (`lua/queue_index.lua`).

use fred::{prelude::*, types::Value};

use super::{Admin, keysets};
use crate::{EngineError, scripts::SCRIPTS};

impl Admin<'_> {
    /// Adds queues to a namespace's queue index (a queue already there
    /// stays as it is).
    pub async fn index_queues(
        self,
        pool: &str,
        ns: &str,
        queues: &[String],
    ) -> Result<(), EngineError> {
        if queues.is_empty() {
            return Ok(());
        }
        let key = self.keys().queues(pool, ns);
        let members: Vec<(f64, String)> = queues.iter().map(|q| (0.0, q.clone())).collect();
        self.0
            .conn()
            .idempotent(&key, |c| {
                let (key, members) = (key.clone(), members.clone());
                async move {
                    c.zadd::<(), _, _>(key, None, None, false, false, members)
                        .await
                }
            })
            .await
    }

    /// Up to `limit` queue names of a namespace's index, in name order,
    /// after `after` (from the first when `None`).
    pub async fn indexed_queues(
        self,
        pool: &str,
        ns: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<String>, EngineError> {
        let key = self.keys().queues(pool, ns);
        let from = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        self.0
            .conn()
            .idempotent(&key, |c| {
                let (key, from) = (key.clone(), from.clone());
                async move {
                    let cmd = fred::types::CustomCommand::new_static(
                        "ZRANGE",
                        fred::types::ClusterHash::FirstKey,
                        false,
                    );
                    let args: Vec<fred::types::Value> = vec![
                        key.into(),
                        from.into(),
                        "+".into(),
                        "BYLEX".into(),
                        "LIMIT".into(),
                        0.into(),
                        (limit as i64).into(),
                    ];
                    c.custom(cmd, args).await
                }
            })
            .await
    }

    /// Every queue name of a namespace's index, a page of 1,000 at a time.
    pub async fn all_indexed_queues(
        self,
        pool: &str,
        ns: &str,
    ) -> Result<Vec<String>, EngineError> {
        let mut all: Vec<String> = Vec::new();
        loop {
            let page = self
                .indexed_queues(pool, ns, all.last().map(String::as_str), 1000)
                .await?;
            let full = page.len() == 1000;
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    /// Adds `queue` to a namespace's index unless it would make the index
    /// hold more than `max` queues (0: no bound). Returns whether it is
    /// there now, and how many queues the index holds.
    pub async fn index_queue_within(
        self,
        pool: &str,
        ns: &str,
        queue: &str,
        max: u64,
    ) -> Result<(bool, u64), EngineError> {
        let key = self.keys().queues(pool, ns);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.queue_index,
                keysets::queue_index(&key),
                vec![queue.into(), (max as i64).into()],
            )
            .await?;
        let n = |i: usize| match &v {
            Value::Array(a) => a.get(i).and_then(Value::as_i64).unwrap_or(0).max(0) as u64,
            _ => 0,
        };
        Ok((n(0) == 1, n(1)))
    }

    /// Removes queues from a namespace's index.
    pub async fn unindex_queues(
        self,
        pool: &str,
        ns: &str,
        queues: &[String],
    ) -> Result<(), EngineError> {
        if queues.is_empty() {
            return Ok(());
        }
        let key = self.keys().queues(pool, ns);
        self.0
            .conn()
            .idempotent(&key, |c| {
                let (key, queues) = (key.clone(), queues.to_vec());
                async move { c.zrem::<(), _, _>(key, queues).await }
            })
            .await
    }

    /// How many queues a namespace's index holds.
    pub async fn indexed_count(self, pool: &str, ns: &str) -> Result<u64, EngineError> {
        let key = self.keys().queues(pool, ns);
        self.0
            .conn()
            .idempotent(&key, |c| {
                let key = key.clone();
                async move { c.zcard(key).await }
            })
            .await
    }
}
