//! Operations over a whole queue in one slot (a queue spans one slot per
//! lane; the gateway visits each). Batches of at most [`BATCH`] jobs, each
//! one atomic script call.

use fred::{prelude::*, types::Value};

use super::{
    decode::{Fields, JobView},
    keysets,
};
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// How many stale list entries a peek skips before giving up.
const PEEK_SCAN: i64 = 64;
/// How many list entries one destroy or dead-letter batch handles at most.
const BATCH: u64 = 500;

/// A dead job, as the dead-letter listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadJob {
    pub id: String,
    /// Tries left (0 for a job that used them all).
    pub tries_left: u16,
    pub published_ms: u64,
    /// When it died (ms, shard clock); `None` for a job that died before
    /// records kept it.
    pub died_ms: Option<u64>,
    /// When it expires (ms, shard clock); 0 = never.
    pub expire_ms: u64,
    /// Attributes as JSON text; empty when the job has none.
    pub attrs: String,
    pub body: bytes::Bytes,
}

/// A part of a queue's dead letter in one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadPage {
    /// Entries in the slot's dead list (stale ones included).
    pub entries: u64,
    /// How many entries this read passed (live or not).
    pub read: u64,
    /// The live dead jobs among them, oldest first.
    pub jobs: Vec<DeadJob>,
    /// The shard's clock when it was read (ms).
    pub now_ms: u64,
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

impl Shard {
    /// Counts a queue's live jobs per state in `slot` (one `HMGET`).
    pub async fn counts(&self, slot: u32, qualified: &str) -> Result<Counts, EngineError> {
        let fields: Vec<String> = ['l', 'r', 'f', 'd', 'P', 'C']
            .iter()
            .map(|c| format!("{c}{qualified}"))
            .collect();
        let key = SlotKeys::new(slot).counters();
        let v: Vec<Option<i64>> = self
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
    pub async fn ready_count(&self, slot: u32, qualified: &str) -> Result<u64, EngineError> {
        let (key, field) = (SlotKeys::new(slot).counters(), format!("r{qualified}"));
        let n: Option<i64> = self
            .conn()
            .idempotent(&key, |c| {
                let (key, field) = (&key, &field);
                async move { c.hget(key, field).await }
            })
            .await?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// The next ready job of a queue in `slot`, without taking it.
    pub async fn peek_queue(
        &self,
        slot: u32,
        qualified: &str,
    ) -> Result<Option<JobView>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
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
        Fields::new(self.conn(), v)?.view().map(Some)
    }

    /// Deletes every ready job of a queue in `slot`; returns how many went.
    pub async fn destroy(&self, slot: u32, qualified: &str) -> Result<u64, EngineError> {
        let k = SlotKeys::new(slot);
        let keys = keysets::release(&k, qualified);
        let mut deleted = 0;
        loop {
            let args: Vec<Value> = vec![(BATCH as i64).into(), qualified.into()];
            let v = self
                .conn()
                .eval(&SCRIPTS.destroy, keys.clone(), args)
                .await?;
            let mut f = Fields::new(self.conn(), v)?;
            let popped = f.uint()?;
            deleted += f.uint()?;
            if popped == 0 {
                return Ok(deleted);
            }
        }
    }

    /// The id and publish time (ms) of the job at the head of a queue's dead
    /// letter in `slot`.
    pub async fn dead_head(
        &self,
        slot: u32,
        qualified: &str,
    ) -> Result<Option<(String, u64)>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .conn()
            .eval(
                &SCRIPTS.dead_peek,
                keysets::dead_peek(&k, qualified),
                vec![PEEK_SCAN.into()],
            )
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        let mut f = Fields::new(self.conn(), v)?;
        Ok(Some((f.string()?, f.uint()?)))
    }

    /// Reads `count` entries of a queue's dead list in one slot, after
    /// passing `skip` from its oldest end; nothing changes.
    pub async fn dead_list(
        &self,
        slot: u32,
        qualified: &str,
        skip: u64,
        count: u64,
    ) -> Result<DeadPage, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .conn()
            .eval(
                &SCRIPTS.dead_list,
                keysets::dead_list(&k, qualified),
                vec![(skip as i64).into(), (count as i64).into()],
            )
            .await?;
        let mut f = Fields::new(self.conn(), v)?;
        let mut page = DeadPage {
            entries: f.uint()?,
            read: f.uint()?,
            now_ms: f.uint()?,
            jobs: Vec::new(),
        };
        while f.len() >= 2 {
            let id = f.string()?;
            let r = f.record()?;
            page.jobs.push(DeadJob {
                id,
                tries_left: r.tries,
                published_ms: r.published_ms,
                died_ms: r.died_ms,
                expire_ms: r.expire_ms,
                attrs: String::from_utf8_lossy(&r.attrs).into_owned(),
                body: r.body,
            });
        }
        Ok(page)
    }

    /// Respawns (`respawn`, with one try and a TTL of `ttl_ms`, 0 = never
    /// expire) or deletes (`delete`) the dead jobs `ids` of a queue in one
    /// slot. Returns, per id, whether it was a live dead job of the queue
    /// here and was handled.
    pub async fn dead_pick(
        &self,
        slot: u32,
        qualified: &str,
        mode: &str,
        ttl_ms: u64,
        ids: &[String],
    ) -> Result<Vec<bool>, EngineError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = vec![
            mode.into(),
            (ttl_ms as i64).into(),
            self.ready_channel(slot, qualified).into(),
            qualified.into(),
        ];
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        let v = self
            .conn()
            .eval(&SCRIPTS.dead_pick, keysets::dead_pick(&k, qualified), args)
            .await?;
        let mut f = Fields::new(self.conn(), v)?;
        let mut out = Vec::with_capacity(ids.len());
        for _ in ids {
            out.push(f.uint()? == 1);
        }
        Ok(out)
    }

    /// Moves up to `limit` dead jobs back to ready with one try and a TTL of
    /// `ttl_ms` (0 = never expire). Returns how many moved.
    pub async fn respawn(
        &self,
        slot: u32,
        qualified: &str,
        limit: u64,
        ttl_ms: u64,
    ) -> Result<u64, EngineError> {
        self.dead_move(slot, qualified, limit, "respawn", ttl_ms)
            .await
    }

    /// Deletes up to `limit` dead jobs. Returns how many went.
    pub async fn dead_delete(
        &self,
        slot: u32,
        qualified: &str,
        limit: u64,
    ) -> Result<u64, EngineError> {
        self.dead_move(slot, qualified, limit, "delete", 0).await
    }

    async fn dead_move(
        &self,
        slot: u32,
        qualified: &str,
        limit: u64,
        mode: &str,
        ttl_ms: u64,
    ) -> Result<u64, EngineError> {
        let k = SlotKeys::new(slot);
        let keys = keysets::dead_move(&k, qualified);
        let mut moved = 0;
        while moved < limit {
            let batch = (limit - moved).min(BATCH);
            let args: Vec<Value> = vec![
                (batch as i64).into(),
                mode.into(),
                (ttl_ms as i64).into(),
                self.ready_channel(slot, qualified).into(),
                qualified.into(),
            ];
            let v = self
                .conn()
                .eval(&SCRIPTS.dead_move, keys.clone(), args)
                .await?;
            let mut f = Fields::new(self.conn(), v)?;
            let popped = f.uint()?;
            moved += f.uint()?;
            if popped == 0 {
                break;
            }
        }
        Ok(moved)
    }
}
