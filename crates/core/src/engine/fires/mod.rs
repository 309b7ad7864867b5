//! Schedules in their slots, on [`Fires`] (`shard.fires()`): the pumps
//! that hold a slot's lease apply the schedule table's definitions to it
//! ([`Fires::apply`], [`Fires::remove`]), fire what is due
//! ([`Fires::fire`]: the job published and the next fire armed in one
//! script) and store the fires they planned ([`Fires::store_plans`]).
//! Every write is fenced by the slot's lease. The layout is in
//! `lua/lib/fires.lua`; what a schedule is, when it fires and what it does
//! with missed fires are the router's (`sundial_router::schedule`).

mod firing;
mod state;

use fred::{interfaces::HashesInterface, types::Value};

pub use firing::{FIRE_AHEAD_MS, FireOutcome, QueueFires, Room, ToPlan};
pub use state::{FireDef, FireState, LastFire, PlannedFire};

use super::decode::Fields;
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// A shard's schedule operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Fires<'a>(&'a Shard);

impl Shard {
    /// The schedules of the shard's slots: see [`Fires`].
    pub fn fires(&self) -> Fires<'_> {
        Fires(self)
    }
}

/// The fires planned for one schedule, from the state it asked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub member: String,
    /// The revision and cursor it was planned from: a schedule whose
    /// state moved since keeps its state.
    pub rev: u64,
    pub cursor_ms: u64,
    /// The cursor after the missed fires the plan skipped.
    pub new_cursor_ms: u64,
    /// Missed fires skipped.
    pub skipped: u64,
    /// In due order; none: the schedule has no fire left.
    pub fires: Vec<PlannedFire>,
}

impl Fires<'_> {
    /// Applies the definitions `defs` (member, definition, and the state
    /// to take over when the schedule is new here or parked: its state
    /// where it lived before a move) to `slot`, each over an older
    /// revision only (or a parked state), for `owner` (the lease holder;
    /// `None`: unfenced, for tests). Returns whether the slot holds each
    /// (applied, or held already); `None` when `owner` does not hold the
    /// lease.
    pub async fn apply(
        self,
        slot: u32,
        owner: Option<&str>,
        defs: &[(String, FireDef, Option<FireState>)],
    ) -> Result<Option<Vec<bool>>, EngineError> {
        let args = defs.iter().flat_map(|(member, def, adopt)| {
            [
                member.as_str().into(),
                def.rev.to_string().into(),
                Value::Bytes(def.pack()),
                adopt
                    .as_ref()
                    .map(FireState::text)
                    .unwrap_or_default()
                    .into(),
            ]
        });
        self.set(slot, owner, args.collect()).await
    }

    /// Removes the schedules `gone` (member, revision) from `slot`, each
    /// when the slot's revision is at most the one given.
    pub async fn remove(
        self,
        slot: u32,
        owner: Option<&str>,
        gone: &[(String, u64)],
    ) -> Result<Option<Vec<bool>>, EngineError> {
        let args = gone.iter().flat_map(|(member, rev)| {
            [
                member.as_str().into(),
                rev.to_string().into(),
                "".into(),
                "".into(),
            ]
        });
        self.set(slot, owner, args.collect()).await
    }

    /// Removes the schedules `gone` (member, revision) from `slot` only
    /// while they are parked there (and of that revision or older): what
    /// the place a schedule moved to does once it took its state over, so
    /// that a copy made active again meanwhile stays.
    pub async fn drop_parked(
        self,
        slot: u32,
        gone: &[(String, u64)],
    ) -> Result<Option<Vec<bool>>, EngineError> {
        let args = gone.iter().flat_map(|(member, rev)| {
            [
                member.as_str().into(),
                rev.to_string().into(),
                "drop".into(),
                "".into(),
            ]
        });
        self.set(slot, None, args.collect()).await
    }

    /// Parks the schedules `members` in `slot`: they fire nothing here, and
    /// keep their state for the place they moved to.
    pub async fn park(
        self,
        slot: u32,
        owner: Option<&str>,
        members: &[String],
    ) -> Result<Option<Vec<bool>>, EngineError> {
        let args = members
            .iter()
            .flat_map(|m| [m.as_str().into(), "0".into(), "park".into(), "".into()]);
        self.set(slot, owner, args.collect()).await
    }

    async fn set(
        self,
        slot: u32,
        owner: Option<&str>,
        items: Vec<Value>,
    ) -> Result<Option<Vec<bool>>, EngineError> {
        if items.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = vec![
            owner.unwrap_or_default().into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
        ];
        args.extend(items);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.schedule_set,
                super::keysets::schedule_set(&k),
                args,
            )
            .await?;
        answers(self.0, v)
    }

    /// Stores `plans` in `slot` for `owner`: each over the state it was
    /// planned from only. Returns the slot's next fire and whether each
    /// plan was stored; `None` when `owner` does not hold the lease.
    pub async fn store_plans(
        self,
        slot: u32,
        owner: Option<&str>,
        plans: &[Plan],
    ) -> Result<Option<(Option<u64>, Vec<bool>)>, EngineError> {
        if plans.is_empty() {
            return Ok(Some((None, Vec::new())));
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = vec![owner.unwrap_or_default().into()];
        for p in plans {
            args.extend([
                p.member.as_str().into(),
                p.rev.to_string().into(),
                p.cursor_ms.to_string().into(),
                p.new_cursor_ms.to_string().into(),
                p.skipped.to_string().into(),
                PlannedFire::join(&p.fires).into(),
            ]);
        }
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.schedule_times,
                super::keysets::schedule_times(&k),
                args,
            )
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        if f.len() == 1 {
            return Ok(None);
        }
        let next = u64::try_from(f.int()?).ok();
        let mut stored = Vec::with_capacity(plans.len());
        while f.len() > 0 {
            stored.push(f.int()? == 1);
        }
        Ok(Some((next, stored)))
    }

    /// The fire states of `slot`'s schedules, by member (a state that does
    /// not parse is left out).
    pub async fn states(self, slot: u32) -> Result<Vec<(String, FireState)>, EngineError> {
        let key = SlotKeys::new(slot).fire_states();
        let raw: Vec<(String, String)> = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let key = key.clone();
                async move {
                    let map: std::collections::HashMap<String, String> = c.hgetall(key).await?;
                    Ok(map.into_iter().collect())
                }
            })
            .await?;
        let mut states: Vec<(String, FireState)> = raw
            .into_iter()
            .filter_map(|(m, s)| Some((m, FireState::parse(&s)?)))
            .collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(states)
    }

    /// Schedule `member`'s fire state in `slot`, if the slot holds it.
    pub async fn state(self, slot: u32, member: &str) -> Result<Option<FireState>, EngineError> {
        let key = SlotKeys::new(slot).fire_states();
        let raw: Option<String> = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let (key, member) = (key.clone(), member.to_owned());
                async move { c.hget(key, member).await }
            })
            .await?;
        Ok(raw.and_then(|r| FireState::parse(&r)))
    }

    /// Schedule `member`'s definition in `slot`, if the slot holds it.
    pub async fn definition(self, slot: u32, member: &str) -> Result<Option<FireDef>, EngineError> {
        let key = SlotKeys::new(slot).schedules();
        let raw: Option<bytes::Bytes> = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let (key, member) = (key.clone(), member.to_owned());
                async move { c.hget(key, member).await }
            })
            .await?;
        Ok(raw.and_then(|r| FireDef::unpack(&r)))
    }
}

/// A `schedule_set.lua` answer: `None` when fenced, else per item whether
/// the slot holds what was asked (1 written, 2 held already; not 0).
fn answers(shard: &Shard, v: Value) -> Result<Option<Vec<bool>>, EngineError> {
    let mut f = Fields::new(shard.conn(), v)?;
    let mut out = Vec::with_capacity(f.len());
    while f.len() > 0 {
        match f.int()? {
            -1 => return Ok(None),
            n => out.push(n > 0),
        }
    }
    Ok(Some(out))
}
