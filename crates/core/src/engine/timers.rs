//! The timers of one slot, on [`Timers`] (`shard.timers()`): one pump
//! step moves its due delayed jobs to ready and its expired reservations
//! back to ready or to the dead letter. The leases that fence it:
//! [`super::leases`].

use fred::types::Value;

use super::decode::Fields;
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// A shard's timer operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Timers<'a>(&'a Shard);

impl Shard {
    /// The timers of one slot: the pump.
    pub fn timers(&self) -> Timers<'_> {
        Timers(self)
    }
}

/// What one pump call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PumpOutcome {
    /// Entries handled: wheel entries opened (and one per wheel second
    /// that held none), then due timer entries; at most the batch limit in
    /// all. When a wheel second holds more than the call could open,
    /// `next_due_ms` is `now_ms`: the slot is due again at once.
    pub processed: u64,
    /// Delayed jobs made ready.
    pub to_ready: u64,
    /// Reservations whose TTR ran out, made ready again.
    pub retried: u64,
    /// Reservations whose TTR ran out with no try left, moved to the dead letter.
    pub dead: u64,
    /// Jobs dropped because their TTL ran out.
    pub expired: u64,
    /// The slot's next deadline after this call (ms, shard clock).
    pub next_due_ms: Option<u64>,
    /// The earliest deadline among the jobs handled: how late the pump was.
    pub oldest_due_ms: Option<u64>,
    /// The shard's clock when the call ran (ms).
    pub now_ms: u64,
    /// The slot's first planned fire of a schedule (ms, shard clock),
    /// which [`Fires::fire`](super::Fires::fire) fires.
    pub next_fire_ms: Option<u64>,
    /// The pump's lease was not held: nothing was moved.
    pub fenced: bool,
    /// Per qualified queue touched: [made ready, retried, dead-lettered,
    /// expired].
    pub per_queue: Vec<(String, [u64; 4])>,
}

impl Timers<'_> {
    /// Moves up to `limit` due timer entries of one slot. With an `owner`,
    /// only while that owner holds the slot's lease (else `fenced`).
    pub async fn pump(
        self,
        slot: u32,
        limit: u32,
        owner: Option<&str>,
    ) -> Result<PumpOutcome, EngineError> {
        let k = SlotKeys::new(slot);
        let keys = super::keysets::pump(&k);
        let args: Vec<Value> = vec![
            k.prefix().into(),
            i64::from(limit).into(),
            self.0.ready_channel_prefix(slot).into(),
            owner.unwrap_or_default().into(),
        ];
        let v = self.0.conn().eval(&SCRIPTS.pump, keys, args).await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        if f.len() == 1 {
            return Ok(PumpOutcome {
                fenced: true,
                ..Default::default()
            });
        }
        let opt = |v: i64| u64::try_from(v).ok();
        Ok(PumpOutcome {
            processed: f.uint()?,
            to_ready: f.uint()?,
            retried: f.uint()?,
            dead: f.uint()?,
            expired: f.uint()?,
            next_due_ms: opt(f.int()?),
            oldest_due_ms: opt(f.int()?),
            now_ms: f.uint()?,
            next_fire_ms: opt(f.int()?),
            fenced: false,
            per_queue: {
                let mut per = Vec::new();
                while f.len() >= 5 {
                    let q = f.string()?;
                    per.push((q, [f.uint()?, f.uint()?, f.uint()?, f.uint()?]));
                }
                per
            },
        })
    }
}
