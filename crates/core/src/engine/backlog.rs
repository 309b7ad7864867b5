//! A namespace's backlog quota on the admin Redis (`lua/backlog.lua`, whose
//! header says how the estimate is kept): admissions checked against a
//! snapshot of the namespace's usage (read from its pool's slots: see
//! `engine::usage`) plus the admissions the snapshot may not hold yet.
//!
//! A gateway admits a publication's jobs and bytes before it stores them
//! (a pump, a slot's due fires), says how the write ended
//! ([`Admin::backlog_done`], [`Admin::backlog_stored`]), and takes a snapshot
//! when the one there is old ([`Admin::backlog_begin`], read the slots,
//! then [`Admin::backlog_snapshot`]).

use fred::types::Value;

use super::{Admin, keysets};
use crate::{EngineError, Usage, scripts::SCRIPTS};

/// What an admission found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admitted; `held` is the estimate before it.
    Admitted { held: Usage, age_ms: u64 },
    /// Refused over `bound` (`max_jobs` or `max_bytes`); nothing kept.
    Refused {
        bound: String,
        held: Usage,
        age_ms: u64,
    },
    /// No snapshot yet (a namespace's first admission, or an admin Redis
    /// that lost its data, or one idle for a day): take one and ask again.
    Unknown,
}

/// A publication's jobs and bytes, and the namespace's bounds (0: none).
#[derive(Debug, Clone, Copy)]
pub struct BacklogAsk {
    pub add: Usage,
    pub max_jobs: u64,
    pub max_bytes: u64,
    /// A pending admission whose writer never said how it ended goes
    /// after this long.
    pub stale_ms: u64,
}

impl Admin<'_> {
    async fn backlog(self, pool: &str, ns: &str, args: Vec<Value>) -> Result<Value, EngineError> {
        self.0
            .conn()
            .eval(&SCRIPTS.backlog, keysets::backlog(pool, ns), args)
            .await
    }

    /// Admits `ask.add` under the namespace's bounds, as entry `entry`
    /// (unique to this write).
    pub async fn backlog_admit(
        self,
        pool: &str,
        ns: &str,
        entry: &str,
        ask: BacklogAsk,
    ) -> Result<Admission, EngineError> {
        let args: Vec<Value> = vec![
            "admit".into(),
            entry.into(),
            (ask.add.jobs as i64).into(),
            (ask.add.bytes as i64).into(),
            (ask.max_jobs as i64).into(),
            (ask.max_bytes as i64).into(),
            (ask.stale_ms as i64).into(),
        ];
        let Value::Array(v) = self.backlog(pool, ns, args).await? else {
            return Err(EngineError::reply(self.0.name(), "backlog: not an array"));
        };
        let int = |i: usize| v.get(i).and_then(Value::as_i64).unwrap_or(0).max(0) as u64;
        Ok(match v.first().and_then(Value::as_i64) {
            Some(1) => Admission::Admitted {
                held: Usage {
                    jobs: int(1),
                    bytes: int(2),
                },
                age_ms: int(3),
            },
            Some(0) => Admission::Refused {
                bound: v.get(1).and_then(Value::as_string).unwrap_or_default(),
                held: Usage {
                    jobs: int(2),
                    bytes: int(3),
                },
                age_ms: int(4),
            },
            _ => Admission::Unknown,
        })
    }

    /// Says how the write of admission `entry` ended: `stored` when it
    /// stored its jobs or may have (a timeout), else they are given back.
    pub async fn backlog_done(
        self,
        pool: &str,
        ns: &str,
        entry: &str,
        stored: bool,
    ) -> Result<(), EngineError> {
        let flag = if stored { "1" } else { "0" };
        self.backlog(pool, ns, vec!["done".into(), entry.into(), flag.into()])
            .await?;
        Ok(())
    }

    /// Says that the write of admission `entry` stored `stored`, which may
    /// be less than it was admitted for (a pump's fire call): the entry
    /// keeps no more than that, and nothing when it stored nothing.
    pub async fn backlog_stored(
        self,
        pool: &str,
        ns: &str,
        entry: &str,
        stored: Usage,
    ) -> Result<(), EngineError> {
        if stored.jobs == 0 {
            return self.backlog_done(pool, ns, entry, false).await;
        }
        let args = vec![
            "done".into(),
            entry.into(),
            "1".into(),
            (stored.jobs as i64).into(),
            (stored.bytes as i64).into(),
        ];
        self.backlog(pool, ns, args).await?;
        Ok(())
    }

    /// The start of a snapshot: this Redis's time (µs), to give back to
    /// [`Self::backlog_snapshot`] once the slots were read after it.
    pub async fn backlog_begin(self, pool: &str, ns: &str) -> Result<u64, EngineError> {
        let v = self.backlog(pool, ns, vec!["begin".into()]).await?;
        Ok(v.as_u64().unwrap_or(0))
    }

    /// Keeps a snapshot of the namespace's usage, read after `began`;
    /// returns false when a snapshot begun later is there already.
    pub async fn backlog_snapshot(
        self,
        pool: &str,
        ns: &str,
        began: u64,
        usage: Usage,
    ) -> Result<bool, EngineError> {
        let args: Vec<Value> = vec![
            "snapshot".into(),
            (began as i64).into(),
            (usage.jobs as i64).into(),
            (usage.bytes as i64).into(),
        ];
        Ok(self.backlog(pool, ns, args).await?.as_i64() == Some(1))
    }
}
