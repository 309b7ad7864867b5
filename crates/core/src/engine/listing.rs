//! One queue's jobs in one state, page by page, for operators (the admin
//! API's job listing and `sundial job list`): `job_list.lua` reads a
//! bounded number of entries of one slot per call and says where to go on,
//! so that a listing never scans a whole slot, let alone a pool, at once.

use bytes::Bytes;
use fred::types::Value;

use super::{decode::Fields, keysets, queues::Queues};
use crate::{EngineError, keys::SlotKeys, scripts::SCRIPTS};

/// The state a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListState {
    Ready,
    Delayed,
    Reserved,
    Dead,
}

impl ListState {
    pub const ALL: [Self; 4] = [Self::Ready, Self::Delayed, Self::Reserved, Self::Dead];

    pub fn name(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Delayed => "delayed",
            Self::Reserved => "reserved",
            Self::Dead => "dead",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A job as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedJob {
    pub id: String,
    pub tries_left: u16,
    pub published_ms: u64,
    /// 0 = never.
    pub expire_ms: u64,
    /// The time of its state (ms, shard clock): ready, since when (its
    /// publication, or its return after a delay, retry or respawn);
    /// delayed, when it is due; reserved, when its TTR runs out; dead,
    /// when it died (0 for a job that died before records kept it).
    pub at_ms: u64,
    /// Attributes as JSON text; empty when the job has none.
    pub attrs: String,
    /// The first bytes of its body, as many as asked.
    pub body_preview: Bytes,
    pub body_size: u64,
    /// Its deliveries so far.
    pub delivery: u32,
    /// Why it last failed; empty when no reason was recorded.
    pub reason: String,
    /// Its priority (0 to 255).
    pub priority: u8,
}

/// What one call of a listing reads: which jobs, from where, how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListAsk {
    pub state: ListState,
    /// Where to go on: `(0, 0)` at first, then the last page's `next`.
    pub at: (u64, u64),
    /// Jobs to return at most.
    pub want: u64,
    /// Entries to read at most.
    pub budget: u64,
    /// Body bytes to return per job.
    pub preview: u64,
}

/// A part of one queue's jobs in one state in one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPage {
    pub jobs: Vec<ListedJob>,
    /// Where the next call goes on; `None` when the slot has no more.
    pub next: Option<(u64, u64)>,
    /// The shard's clock when read (ms).
    pub now_ms: u64,
}

impl Queues<'_> {
    /// Jobs of `qualified` in `slot` as `ask` says: at most `want` in
    /// `state`, going on from `at`, reading at most `budget` entries, each
    /// with at most `preview` bytes of its body. A page read while jobs
    /// change state may show a job twice or pass one.
    pub async fn list_jobs(
        self,
        slot: u32,
        qualified: &str,
        ask: ListAsk,
    ) -> Result<JobPage, EngineError> {
        let k = SlotKeys::new(slot);
        let state = ask.state;
        let args: Vec<Value> = vec![
            state.name().into(),
            qualified.into(),
            (ask.at.0 as i64).into(),
            (ask.at.1 as i64).into(),
            (ask.want.max(1) as i64).into(),
            (ask.budget.max(1) as i64).into(),
            (ask.preview as i64).into(),
            k.prefix().into(),
        ];
        let conn = self.0.conn();
        let v = conn
            .eval(&SCRIPTS.job_list, keysets::job_list(&k, qualified), args)
            .await?;
        let mut f = Fields::new(conn, v)?;
        let done = f.uint()? == 1;
        let next = (f.uint()?, f.uint()?);
        let now_ms = f.uint()?;
        let mut jobs = Vec::new();
        while f.len() >= 4 {
            let id = f.string()?;
            let r = f.record()?;
            let body_size = f.uint()?;
            let deadline = f.uint()?;
            let at_ms = match state {
                ListState::Ready => r.published_ms.max(r.due_ms),
                ListState::Delayed => r.due_ms,
                ListState::Reserved => deadline,
                ListState::Dead => r.died_ms.unwrap_or(0),
            };
            jobs.push(ListedJob {
                id,
                tries_left: r.tries,
                published_ms: r.published_ms,
                expire_ms: r.expire_ms,
                at_ms,
                attrs: String::from_utf8_lossy(&r.attrs).into_owned(),
                body_preview: r.body,
                body_size,
                delivery: r.delivery,
                reason: String::from_utf8_lossy(&r.reason).into_owned(),
                priority: r.priority,
            });
        }
        Ok(JobPage {
            jobs,
            next: (!done).then_some(next),
            now_ms,
        })
    }
}
