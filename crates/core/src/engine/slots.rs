//! What a shard's slots hold, read in bulk, on [`Slots`] (`shard.slots()`):
//! for drains, backlog gauges and admin listings. O(slots), pipelined;
//! never on a request's hot path.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fred::{
    prelude::*,
    types::{ClusterHash, CustomCommand, FromValue, Value},
};

use super::keysets;
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// Stale entries (deleted or expired jobs) `ready_age.lua` skips at most at
/// the consume end of a ready list before it gives up on that list.
const READY_AGE_SCAN: u32 = 16;

/// A slot's counters hash as `<ns>/<queue>` → [delayed, ready, reserved,
/// dead], leaving out other fields and counts at or below 0.
fn by_queue(fields: HashMap<String, i64>) -> BTreeMap<String, [u64; 4]> {
    let mut out = BTreeMap::new();
    for (field, n) in fields {
        let mut chars = field.chars();
        let state = match chars.next() {
            Some('l') => 0,
            Some('r') => 1,
            Some('f') => 2,
            Some('d') => 3,
            _ => continue,
        };
        if n <= 0 {
            continue;
        }
        let entry: &mut [u64; 4] = out.entry(chars.as_str().to_owned()).or_default();
        entry[state] += n as u64;
    }
    out
}

/// What some slots hold here ([`Slots::backlog`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotBacklog {
    /// Per qualified queue: [delayed, ready, reserved, dead], summed over
    /// the slots (queues at 0 left out).
    pub counts: BTreeMap<String, [u64; 4]>,
    /// Each slot with ready jobs, and its queues that have some.
    pub ready: Vec<(u32, Vec<String>)>,
}

/// A shard's bulk reads of its slots: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Slots<'a>(&'a Shard);

impl Shard {
    /// What this shard's slots hold, read in bulk.
    pub fn slots(&self) -> Slots<'_> {
        Slots(self)
    }
}

impl Slots<'_> {
    /// Whether any of `0..slots` holds a job here, in any state.
    pub async fn hold_jobs(self, slots: u32) -> Result<bool, EngineError> {
        let all: Vec<u32> = (0..slots).collect();
        Ok(self.jobs(&all).await?.iter().any(|n| *n > 0))
    }

    /// How many jobs each of `slots` holds here: records in any state,
    /// and jobs in transit to another shard (whose copy may not be safe
    /// yet: see `engine::mover`).
    pub async fn jobs(self, slots: &[u32]) -> Result<Vec<u64>, EngineError> {
        let (held, moving): (Vec<u64>, Vec<u64>) = futures::future::try_join(
            self.per_slot("HLEN", slots, SlotKeys::jobs),
            self.per_slot("HLEN", slots, SlotKeys::transit),
        )
        .await?;
        Ok(held.iter().zip(&moving).map(|(h, m)| h + m).collect())
    }

    /// The schedules `slots` hold here, per slot, in the order given.
    pub async fn schedules(self, slots: &[u32]) -> Result<Vec<u64>, EngineError> {
        self.per_slot("HLEN", slots, SlotKeys::schedules).await
    }

    /// The qualified queues whose jobs `slots` here have ever held (their
    /// queue tables), whether or not they hold any now.
    pub async fn queue_names(self, slots: &[u32]) -> Result<BTreeSet<String>, EngineError> {
        let all: Vec<Vec<String>> = self.per_slot("HKEYS", slots, SlotKeys::queues).await?;
        Ok(all
            .into_iter()
            .flatten()
            .filter(|f| !f.starts_with('#'))
            .collect())
    }

    /// Whether a mover holds each of `slots` here (its lease, which goes
    /// when the mover has cleared the slot, or expires).
    pub async fn movers(self, slots: &[u32]) -> Result<Vec<bool>, EngineError> {
        self.per_slot("EXISTS", slots, SlotKeys::mover).await
    }

    /// How many transit entries (jobs on their way to another shard, or
    /// marks of jobs acked in transit) each of `slots` holds here.
    pub async fn transit(self, slots: &[u32]) -> Result<Vec<u64>, EngineError> {
        self.per_slot("HLEN", slots, SlotKeys::transit).await
    }

    /// The qualified queues that have been published to in `slots` here
    /// (whether or not they hold jobs now).
    pub async fn queues(self, slots: &[u32]) -> Result<BTreeSet<String>, EngineError> {
        let all: Vec<Vec<String>> = self.per_slot("HKEYS", slots, SlotKeys::counters).await?;
        Ok(all
            .into_iter()
            .flatten()
            .filter_map(|f| f.strip_prefix('P').map(str::to_owned))
            .collect())
    }

    /// The per-state counters of `slots`, per qualified queue:
    /// `<ns>/<queue>` → [delayed, ready, reserved, dead]. Queues whose
    /// counts are all 0 are left out.
    pub async fn counts(self, slots: &[u32]) -> Result<BTreeMap<String, [u64; 4]>, EngineError> {
        Ok(self.backlog(slots).await?.counts)
    }

    /// [`Self::counts`], and for each of `slots` the queues with ready jobs
    /// there: what [`Self::ready_ages`] reads.
    pub async fn backlog(self, slots: &[u32]) -> Result<SlotBacklog, EngineError> {
        let mut out = SlotBacklog::default();
        for (slot, per_slot) in slots.iter().zip(self.counts_per_slot(slots).await?) {
            let ready: Vec<String> = per_slot
                .iter()
                .filter(|(_, c)| c[1] > 0)
                .map(|(q, _)| q.clone())
                .collect();
            if !ready.is_empty() {
                out.ready.push((*slot, ready));
            }
            for (queue, c) in per_slot {
                let entry: &mut [u64; 4] = out.counts.entry(queue).or_default();
                for (sum, n) in entry.iter_mut().zip(c) {
                    *sum += n;
                }
            }
        }
        Ok(out)
    }

    /// [`Self::counts`] of each of `slots`, in their order.
    pub async fn counts_per_slot(
        self,
        slots: &[u32],
    ) -> Result<Vec<BTreeMap<String, [u64; 4]>>, EngineError> {
        let all: Vec<HashMap<String, i64>> =
            self.per_slot("HGETALL", slots, SlotKeys::counters).await?;
        Ok(all.into_iter().map(by_queue).collect())
    }

    /// How long the next ready job of each queue has been ready, ms: for
    /// each `(slot, queues)`, the queues' ready lists in that slot (one
    /// read-only script call per slot, all in flight at once); per queue,
    /// the oldest over its slots. A queue whose lists hold no live job is
    /// left out.
    pub async fn ready_ages(
        self,
        lists: &[(u32, Vec<String>)],
    ) -> Result<BTreeMap<String, u64>, EngineError> {
        let calls = lists.iter().map(|(slot, queues)| {
            let keys = keysets::ready_age(&SlotKeys::new(*slot), queues);
            let args: Vec<Value> = vec![(READY_AGE_SCAN as i64).into()];
            async move {
                let v = self.0.conn().eval(&SCRIPTS.ready_age, keys, args).await?;
                let ages: Vec<i64> = v
                    .convert()
                    .map_err(|_| EngineError::reply(self.0.name(), "ready_age: not integers"))?;
                Ok::<_, EngineError>(queues.iter().zip(ages).collect::<Vec<_>>())
            }
        });
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (queue, age) in futures::future::try_join_all(calls)
            .await?
            .into_iter()
            .flatten()
        {
            if age >= 0 {
                let oldest = out.entry(queue.clone()).or_default();
                *oldest = (*oldest).max(age as u64);
            }
        }
        Ok(out)
    }

    /// One read-only command per slot on one of its keys, all in flight at
    /// once (each to the node that serves its key on a cluster); the
    /// answers in the order of `slots`.
    pub(super) async fn per_slot<R: FromValue>(
        self,
        command: &'static str,
        slots: &[u32],
        key: fn(&SlotKeys) -> String,
    ) -> Result<Vec<R>, EngineError> {
        self.per_slot_args(command, slots, key, &[]).await
    }

    /// [`Self::per_slot`], with `args` after the key.
    pub(super) async fn per_slot_args<R: FromValue>(
        self,
        command: &'static str,
        slots: &[u32],
        key: fn(&SlotKeys) -> String,
        args: &[String],
    ) -> Result<Vec<R>, EngineError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = slots.iter().map(|s| key(&SlotKeys::new(*s))).collect();
        futures::future::try_join_all(keys.iter().map(|k| {
            self.0.conn().idempotent(k, move |c| async move {
                let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
                let mut all = Vec::with_capacity(1 + args.len());
                all.push(k.clone());
                all.extend(args.iter().cloned());
                c.custom(cmd, all).await
            })
        }))
        .await
    }
}
