//! Operations over a whole queue in one slot, on [`Queues`]
//! (`shard.queues()`): its counts, its next ready job, and its ready jobs
//! destroyed (a queue spans one slot per lane; the gateway visits each).
//! Batches of at most [`BATCH`] jobs, each one atomic script call.

use fred::{prelude::*, types::Value};

use super::{
    decode::{Fields, JobView},
    keysets,
};
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// How many stale list entries a peek skips before giving up.
pub(super) const PEEK_SCAN: i64 = 64;
/// How many list entries one destroy or dead-letter batch handles at most.
pub(super) const BATCH: u64 = 500;

/// A shard's queue-wide operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Queues<'a>(pub(super) &'a Shard);

impl Shard {
    /// Operations over a whole queue in one slot: counts, peek, destroy.
    pub fn queues(&self) -> Queues<'_> {
        Queues(self)
    }
}

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

impl Queues<'_> {
    /// Counts a queue's live jobs per state in `slot` (one `HMGET`).
    pub async fn counts(self, slot: u32, qualified: &str) -> Result<Counts, EngineError> {
        let fields: Vec<String> = ['l', 'r', 'f', 'd', 'P', 'C']
            .iter()
            .map(|c| format!("{c}{qualified}"))
            .collect();
        let key = SlotKeys::new(slot).counters();
        let v: Vec<Option<i64>> = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let (key, fields) = (&key, &fields);
                async move { c.hmget(key, fields.clone()).await }
            })
            .await?;
        let n = |i: usize| v.get(i).copied().flatten().unwrap_or(0).max(0) as u64;
        Ok(Counts {
            delayed: n(0),
            ready: n(1),
            reserved: n(2),
            dead: n(3),
            published: n(4),
            delivered: n(5),
        })
    }

    /// How many ready jobs of a queue `slot` holds (one `HGET` of its
    /// counter, no script): a consume asks this of a queue's lanes first,
    /// and skips those with none.
    pub async fn ready_count(self, slot: u32, qualified: &str) -> Result<u64, EngineError> {
        let (key, field) = (SlotKeys::new(slot).counters(), format!("r{qualified}"));
        let n: Option<i64> = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let (key, field) = (&key, &field);
                async move { c.hget(key, field).await }
            })
            .await?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// The next ready job of a queue in `slot`, without taking it.
    pub async fn peek(self, slot: u32, qualified: &str) -> Result<Option<JobView>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.peek_queue,
                keysets::peek_queue(&k, qualified),
                vec![PEEK_SCAN.into(), qualified.into()],
            )
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self.0.conn(), v)?.view().map(Some)
    }

    /// Deletes every ready job of a queue in `slot`; returns how many went.
    pub async fn destroy(self, slot: u32, qualified: &str) -> Result<u64, EngineError> {
        let k = SlotKeys::new(slot);
        let keys = keysets::destroy(&k, qualified);
        let mut deleted = 0;
        loop {
            let args: Vec<Value> = vec![(BATCH as i64).into(), qualified.into()];
            let v = self
                .0
                .conn()
                .eval(&SCRIPTS.destroy, keys.clone(), args)
                .await?;
            let mut f = Fields::new(self.0.conn(), v)?;
            let popped = f.uint()?;
            deleted += f.uint()?;
            if popped == 0 {
                return Ok(deleted);
            }
        }
    }
}
