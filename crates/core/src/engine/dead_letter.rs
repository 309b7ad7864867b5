//! A queue's dead letter in one slot, on [`DeadLetter`]
//! (`shard.dead_letter()`): its head, a page of it, and dead jobs
//! respawned or deleted, by id or from the oldest, in batches of at most
//! [`BATCH`], each one atomic script call.

use fred::types::Value;

use super::{
    decode::Fields,
    keysets,
    queues::{BATCH, PEEK_SCAN},
};
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// A shard's dead-letter operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct DeadLetter<'a>(&'a Shard);

impl Shard {
    /// Operations on a queue's dead letter in one slot: head, list, pick,
    /// respawn, delete.
    pub fn dead_letter(&self) -> DeadLetter<'_> {
        DeadLetter(self)
    }
}

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
    /// Its deliveries.
    pub delivery: u32,
    /// Why it last failed (a release's reason, `ttr expired`); empty when
    /// no reason was recorded.
    pub reason: String,
    /// Its priority (0 to 255), which a respawn keeps.
    pub priority: u8,
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

impl DeadLetter<'_> {
    /// The id and publish time (ms) of the job at the head of a queue's dead
    /// letter in `slot`.
    pub async fn head(
        self,
        slot: u32,
        qualified: &str,
    ) -> Result<Option<(String, u64)>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .0
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
        let mut f = Fields::new(self.0.conn(), v)?;
        Ok(Some((f.string()?, f.uint()?)))
    }

    /// Reads `count` entries of a queue's dead list in one slot, after
    /// passing `skip` from its oldest end; nothing changes.
    pub async fn list(
        self,
        slot: u32,
        qualified: &str,
        skip: u64,
        count: u64,
    ) -> Result<DeadPage, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.dead_list,
                keysets::dead_list(&k, qualified),
                vec![(skip as i64).into(), (count as i64).into()],
            )
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
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
                delivery: r.delivery,
                reason: String::from_utf8_lossy(&r.reason).into_owned(),
                priority: r.priority,
            });
        }
        Ok(page)
    }

    /// Respawns (`respawn`, with one try and a TTL of `ttl_ms`, 0 = never
    /// expire) or deletes (`delete`) the dead jobs `ids` of a queue in one
    /// slot. Returns, per id, whether it was a live dead job of the queue
    /// here and was handled.
    pub async fn pick(
        self,
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
            self.0.ready_channel(slot, qualified).into(),
            qualified.into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
        ];
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.dead_pick, keysets::dead_pick(&k, qualified), args)
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        let mut out = Vec::with_capacity(ids.len());
        for _ in ids {
            out.push(f.uint()? == 1);
        }
        Ok(out)
    }

    /// Moves up to `limit` dead jobs back to ready with one try and a TTL of
    /// `ttl_ms` (0 = never expire). Returns how many moved.
    pub async fn respawn(
        self,
        slot: u32,
        qualified: &str,
        limit: u64,
        ttl_ms: u64,
    ) -> Result<u64, EngineError> {
        self.dead_move(slot, qualified, limit, "respawn", ttl_ms)
            .await
    }

    /// Deletes up to `limit` dead jobs. Returns how many went.
    pub async fn delete(self, slot: u32, qualified: &str, limit: u64) -> Result<u64, EngineError> {
        self.dead_move(slot, qualified, limit, "delete", 0).await
    }

    /// Respawns or deletes up to `limit` dead jobs (`dead_move.lua`), a
    /// batch at a time; returns how many moved.
    async fn dead_move(
        self,
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
                self.0.ready_channel(slot, qualified).into(),
                qualified.into(),
                self.0.timer_channel(slot).into(),
                i64::from(slot).into(),
            ];
            let v = self
                .0
                .conn()
                .eval(&SCRIPTS.dead_move, keys.clone(), args)
                .await?;
            let mut f = Fields::new(self.0.conn(), v)?;
            let popped = f.uint()?;
            moved += f.uint()?;
            if popped == 0 {
                break;
            }
        }
        Ok(moved)
    }
}
