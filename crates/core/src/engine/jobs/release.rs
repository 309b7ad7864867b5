//! A reserved job given back: by its worker (`release`, a nack), or by the
//! gateway when the consumer it was reserved for went away (`give_back`).
//! One `release.lua` call on the job's slot.

use fred::types::Value;

use super::{
    super::{
        decode::{Delivery, Fields},
        keysets,
    },
    Jobs,
};
use crate::{EngineError, keys::SlotKeys, scripts::SCRIPTS};

/// A worker's release of the job it holds (or, with `reason: None` and
/// no try spent, a job given back for a consumer that went away).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The job's id (a [`JobId`] as text).
    pub id: String,
    /// Only while this delivery holds the job (`?delivery=N`).
    pub delivery: Option<u32>,
    /// How long the job waits before it is ready again (0: ready now);
    /// `None`: as its retry policy says, else [`Self::default_delay_ms`].
    pub delay_ms: Option<u64>,
    /// With no `delay_ms` and no retry policy on the job: how long it
    /// waits (0: ready now, as a worker's release in lmstfy; a pusher
    /// gives its request timeout, the TTR a failed push would have run
    /// out).
    pub default_delay_ms: u64,
    /// Whether the delivery counts as a try (by default it does): a job
    /// released with no try left goes to the dead letter.
    pub spend_try: bool,
    /// Why, kept with the job as its last failure's reason (at most 1
    /// KiB: the caller checks); `None` keeps the reason it has.
    pub reason: Option<String>,
}

/// How a [`Release`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Ready again now, at the back of its queue.
    Ready,
    /// Delayed: ready once its delay (ms) passes.
    Delayed(u64),
    /// It had no try left: in the dead letter, with its reason.
    Dead,
    /// No such job in that queue here, or one past its TTL.
    Missing,
    /// The job is not reserved.
    NotReserved,
    /// The delivery the release named does not hold the job.
    Fenced,
    /// The job is in transit to another shard: retry shortly.
    Moving,
}

impl Jobs<'_> {
    /// Releases a reserved job: see [`Release`].
    pub async fn release(
        self,
        slot: u32,
        qualified: &str,
        r: &Release,
    ) -> Result<Released, EngineError> {
        Ok(match self.call_release(slot, qualified, r, false).await? {
            (2, _) => Released::Ready,
            (1, delay) => Released::Delayed(delay),
            (4, _) => Released::Dead,
            (-1, _) => Released::Fenced,
            (-2, _) => Released::Moving,
            (-3, _) => Released::NotReserved,
            _ => Released::Missing,
        })
    }

    /// Gives a reserved job back (its consumer went away before it could be
    /// answered): back to the head of its queue, its try restored, its
    /// reason kept. Fenced on the delivery, so a job that moved on since is
    /// left alone. Whether it was given back.
    pub async fn give_back(self, d: &Delivery) -> Result<bool, EngineError> {
        let r = Release {
            id: d.job.id.clone(),
            delivery: Some(d.number()),
            delay_ms: Some(0),
            default_delay_ms: 0,
            spend_try: false,
            reason: None,
        };
        Ok(self.call_release(d.slot, &d.job.queue, &r, true).await?.0 > 0)
    }

    /// One `release.lua` call (`front`: to the head of the ready list); its
    /// answer (see the script): a code, and a delay.
    async fn call_release(
        self,
        slot: u32,
        qualified: &str,
        r: &Release,
        front: bool,
    ) -> Result<(i64, u64), EngineError> {
        let k = SlotKeys::new(slot);
        let flag = |b: bool| Value::from(i64::from(b));
        let args: Vec<Value> = vec![
            qualified.into(),
            r.id.as_str().into(),
            i64::from(r.delivery.unwrap_or(0)).into(),
            r.delay_ms.map_or(-1, |d| d as i64).into(),
            flag(r.spend_try),
            flag(front),
            r.reason.as_deref().unwrap_or_default().into(),
            flag(r.reason.is_some()),
            self.0.ready_channel(slot, qualified).into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
            k.prefix().into(),
            i64::try_from(r.default_delay_ms).unwrap_or(i64::MAX).into(),
        ];
        let keys = keysets::release(&k, qualified);
        let v = self.0.conn().eval(&SCRIPTS.release, keys, args).await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        let code = f.int()?;
        let delay = if f.len() > 0 { f.uint()? } else { 0 };
        Ok((code, delay))
    }
}
