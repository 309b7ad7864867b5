//! A slot's due fires, fired ([`Fires::fire`]): the call and its answer.

use fred::types::Value;

use super::Fires;
use crate::{
    EngineError,
    engine::{decode::Fields, keysets},
    keys::SlotKeys,
    scripts::SCRIPTS,
};

/// A schedule that asked to be planned: it has one planned fire or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToPlan {
    /// `<ns>/<queue>/<name>`.
    pub member: String,
    /// The revision and cursor to plan from (see [`FireState`]).
    pub rev: u64,
    pub cursor_ms: u64,
    /// Its timing, as its definition holds it.
    pub timing: String,
    /// Its job's idempotency key, as its definition holds it ("" for
    /// none): the lane it was placed by, where its jobs' ids go.
    pub key: String,
}

/// What one fire call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireOutcome {
    /// Jobs published.
    pub fired: u64,
    /// The slot's next planned fire (ms, shard clock); `now_ms` when more
    /// are due than the call could fire.
    pub next_fire_ms: Option<u64>,
    pub now_ms: u64,
    /// The slot's lease was not held: nothing was fired.
    pub fenced: bool,
    /// Schedules to plan.
    pub to_plan: Vec<ToPlan>,
    /// How late each fire was published after it was due (ms).
    pub lateness_ms: Vec<u64>,
    /// Per qualified queue fired into: jobs published, and fires that
    /// published nothing because their job's idempotency key named a job.
    pub per_queue: Vec<(String, u64, u64)>,
}

impl Fires<'_> {
    /// Fires up to `limit` due fires of `slot`'s schedules, for `owner`.
    pub async fn fire(
        self,
        slot: u32,
        limit: u32,
        owner: Option<&str>,
    ) -> Result<FireOutcome, EngineError> {
        let k = SlotKeys::new(slot);
        let args: Vec<Value> = vec![
            k.prefix().into(),
            i64::from(limit).into(),
            self.0.ready_channel_prefix(slot).into(),
            owner.unwrap_or_default().into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
        ];
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.fire, keysets::fire(&k), args)
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        if f.len() == 1 {
            return Ok(FireOutcome {
                fenced: true,
                ..Default::default()
            });
        }
        let mut out = FireOutcome {
            fired: f.uint()?,
            next_fire_ms: u64::try_from(f.int()?).ok(),
            now_ms: f.uint()?,
            ..Default::default()
        };
        for _ in 0..f.uint()? {
            out.to_plan.push(ToPlan {
                member: f.string()?,
                rev: f
                    .string()?
                    .parse()
                    .map_err(|_| self.0.conn().bad_reply("a revision"))?,
                cursor_ms: f
                    .string()?
                    .parse()
                    .map_err(|_| self.0.conn().bad_reply("a cursor"))?,
                timing: f.string()?,
                key: f.string()?,
            });
        }
        for _ in 0..f.uint()? {
            out.lateness_ms.push(f.uint()?);
        }
        while f.len() >= 3 {
            out.per_queue.push((f.string()?, f.uint()?, f.uint()?));
        }
        Ok(out)
    }
}
