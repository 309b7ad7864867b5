//! Operations over a whole queue: they cover every bucket of the namespace
//! that this shard holds, in one script call per batch.

use fred::types::Value;

use super::decode::{Fields, JobView};
use crate::{EngineError, Shard, keys, keys::BucketKeys, scripts::SCRIPTS};

/// How many stale list entries a peek skips per bucket before giving up.
const PEEK_SCAN: i64 = 64;
/// How many list entries one destroy or dead-letter batch handles at most.
const BATCH: u64 = 500;

/// A queue's live jobs per state, and its running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
    /// Jobs ever published to the queue (only grows).
    pub published: u64,
    /// Deliveries ever made from the queue (only grows; a retried job counts
    /// each time).
    pub delivered: u64,
}

impl Counts {
    /// Jobs that exist, in any state.
    pub fn live(&self) -> u64 {
        self.delayed + self.ready + self.reserved + self.dead
    }

    pub fn add(&mut self, o: &Counts) {
        self.delayed += o.delayed;
        self.ready += o.ready;
        self.reserved += o.reserved;
        self.dead += o.dead;
        self.published += o.published;
        self.delivered += o.delivered;
    }
}

fn per_bucket(ns: &str, buckets: &[u32], f: impl Fn(&BucketKeys) -> Vec<String>) -> Vec<String> {
    buckets
        .iter()
        .flat_map(|b| f(&BucketKeys::new(ns, *b)))
        .collect()
}

impl Shard {
    /// Counts a queue's live jobs per state.
    pub async fn counts(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
    ) -> Result<Counts, EngineError> {
        if buckets.is_empty() {
            return Ok(Counts::default());
        }
        let keys = per_bucket(ns, buckets, |k| vec![k.counters()]);
        let v = self.eval(&SCRIPTS.counts, keys, vec![queue.into()]).await?;
        let mut f = Fields::new(self, v)?;
        Ok(Counts {
            delayed: f.uint()?,
            ready: f.uint()?,
            reserved: f.uint()?,
            dead: f.uint()?,
            published: f.uint()?,
            delivered: f.uint()?,
        })
    }

    /// The next ready job of a queue, without taking it.
    pub async fn peek_queue(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
    ) -> Result<Option<JobView>, EngineError> {
        if buckets.is_empty() {
            return Ok(None);
        }
        let keys = per_bucket(ns, buckets, |k| vec![k.jobs(), k.ready(queue)]);
        let args: Vec<Value> = vec![(buckets.len() as i64).into(), PEEK_SCAN.into()];
        let v = self.eval(&SCRIPTS.peek_queue, keys, args).await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self, v)?.view().map(Some)
    }

    /// Deletes every ready job of a queue; returns how many jobs went.
    pub async fn destroy(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
    ) -> Result<u64, EngineError> {
        if buckets.is_empty() {
            return Ok(0);
        }
        let keys = per_bucket(ns, buckets, |k| {
            vec![k.jobs(), k.timer(), k.counters(), k.ready(queue)]
        });
        let mut deleted = 0;
        loop {
            let args: Vec<Value> = vec![(buckets.len() as i64).into(), (BATCH as i64).into()];
            let v = self.eval(&SCRIPTS.destroy, keys.clone(), args).await?;
            let mut f = Fields::new(self, v)?;
            let popped = f.uint()?;
            deleted += f.uint()?;
            if popped == 0 {
                return Ok(deleted);
            }
        }
    }

    /// The id of the job at the head of a queue's dead letter.
    pub async fn dead_head(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
    ) -> Result<Option<String>, EngineError> {
        if buckets.is_empty() {
            return Ok(None);
        }
        let keys = per_bucket(ns, buckets, |k| vec![k.jobs(), k.dead(queue)]);
        let args: Vec<Value> = vec![(buckets.len() as i64).into(), PEEK_SCAN.into()];
        let v = self.eval(&SCRIPTS.dead_peek, keys, args).await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self, Value::Array(vec![v]))?.string().map(Some)
    }

    /// Moves up to `limit` dead jobs back to ready with one try and a TTL of
    /// `ttl_ms` (0 = never expire). Returns how many moved.
    pub async fn respawn(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
        limit: u64,
        ttl_ms: u64,
    ) -> Result<u64, EngineError> {
        self.dead_move(ns, buckets, queue, limit, "respawn", ttl_ms)
            .await
    }

    /// Deletes up to `limit` dead jobs. Returns how many went.
    pub async fn dead_delete(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
        limit: u64,
    ) -> Result<u64, EngineError> {
        self.dead_move(ns, buckets, queue, limit, "delete", 0).await
    }

    async fn dead_move(
        &self,
        ns: &str,
        buckets: &[u32],
        queue: &str,
        limit: u64,
        mode: &str,
        ttl_ms: u64,
    ) -> Result<u64, EngineError> {
        if buckets.is_empty() {
            return Ok(0);
        }
        let keys = per_bucket(ns, buckets, |k| {
            vec![
                k.jobs(),
                k.timer(),
                k.counters(),
                k.dead(queue),
                k.ready(queue),
            ]
        });
        let mut moved = 0;
        while moved < limit {
            let batch = (limit - moved).min(BATCH);
            let args: Vec<Value> = vec![
                (buckets.len() as i64).into(),
                (batch as i64).into(),
                mode.into(),
                (ttl_ms as i64).into(),
                keys::ready_channel(ns, queue).into(),
            ];
            let v = self.eval(&SCRIPTS.dead_move, keys.clone(), args).await?;
            let mut f = Fields::new(self, v)?;
            let popped = f.uint()?;
            moved += f.uint()?;
            if popped == 0 {
                break;
            }
        }
        Ok(moved)
    }
}
