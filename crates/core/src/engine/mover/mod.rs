//! Moving a slot's jobs from a shard the slot left to the shard that holds
//! it now, a batch at a time, on [`Mover`] (`shard.mover()`). The router
//! decides which slots move, when, and where (`sundial_router::mover`);
//! these are its four steps, each one script on one shard:
//!
//! 1. [`Mover::take`] on the old shard takes a batch out of the slot:
//!    each job leaves its lists, timer and counts and waits in the slot's
//!    transit hash, where peek and ack by id still find it (an ack there
//!    leaves a mark). The mover's lease on the slot fences it. Each take
//!    tags its entries (its time, in µs).
//! 2. Once the entries are safe at the old shard (on its disk and
//!    replicas), [`Mover::read`] reads them again (a job acked in
//!    transit meanwhile is left out), and [`Mover::store`] on the new
//!    shard stores the copies, each with its state, tries, attributes and
//!    body and its times moved onto the new shard's clock, and marks each
//!    copy with its take's tag: a copy of the same take sent again (after
//!    a crash, or by a mover that lost its lease) is skipped; a later take
//!    of the same job (moved away and back) is not.
//! 3. Once the copies are safe, [`Mover::done`] on the old shard lets
//!    the transit entries go, and returns the jobs acked in transit, whose
//!    copies the mover deletes ([`Mover::forget`] then drops their
//!    entries).
//! 4. Once that is safe too, [`Mover::unmark`] removes the copies'
//!    marks (those of the same take): no transit entry of theirs is left
//!    to be copied again.
//!
//! A crash between any two steps loses nothing and doubles nothing: the
//! transit entries stay until step 3, the marks until step 4, and a mover
//! that takes the lease over reads the entries back ([`MoveMode::Pending`])
//! and copies them again (step 2 skips those already there).
//!
//! What a take carries ([`InTransit`], [`Taken`]) is in `transit`.
mod transit;

use std::time::Duration;

use fred::{
    interfaces::{HashesInterface, TransactionInterface},
    types::Value,
};

use self::transit::taken;
use super::{decode::Fields, keysets};
use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

pub use transit::{Copied, InTransit, Mark, MoveMode, Taken};

/// A shard's mover operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Mover<'a>(&'a Shard);

impl Shard {
    /// The mover's steps on this shard: take, read, store, done, forget,
    /// unmark, release, add_totals.
    pub fn mover(&self) -> Mover<'_> {
        Mover(self)
    }
}

impl Mover<'_> {
    /// Step 1 (see the module): takes jobs of `slot` (of the queues that
    /// start with `only`, when not empty: `<ns>/`) out on their way to
    /// `dest` (a shard's name, or `@<pool>` for a namespace moving to
    /// that pool), or reads back those in transit, for mover `owner`,
    /// whose lease on the slot this call takes or renews for `lease`.
    /// `Err(holder)` inside: another mover holds the lease.
    #[allow(clippy::too_many_arguments)]
    pub async fn take(
        self,
        slot: u32,
        owner: &str,
        lease: Duration,
        mode: MoveMode,
        limit: u32,
        dest: &str,
        cursor: &str,
        only: &str,
    ) -> Result<Result<Taken, String>, EngineError> {
        let k = SlotKeys::new(slot);
        let mode = match mode {
            MoveMode::Take => "take",
            MoveMode::Pending => "pending",
        };
        let args: Vec<Value> = vec![
            owner.into(),
            (lease.as_millis().max(1) as i64).into(),
            mode.into(),
            i64::from(limit).into(),
            dest.into(),
            k.prefix().into(),
            cursor.into(),
            only.into(),
            (super::paging::PAGE_BYTES as i64).into(),
        ];
        // Taken jobs wait at this shard until it has them on its replicas,
        // when it is set to wait for them (and on disk, by the mover's
        // settle time).
        let v = self
            .0
            .conn()
            .eval_replicated(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        taken(self.0.conn(), v)
    }

    /// Step 2's read: the transit entries of `ids` as they are now (a job
    /// acked in transit shows as its mark; one whose entry went is left
    /// out), with the old shard's time, under the lease as
    /// [`Self::take`].
    pub async fn read(
        self,
        slot: u32,
        owner: &str,
        lease: Duration,
        ids: &[String],
    ) -> Result<Result<Taken, String>, EngineError> {
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = vec![
            owner.into(),
            (lease.as_millis().max(1) as i64).into(),
            "read".into(),
            0.into(),
            "".into(),
            k.prefix().into(),
            "0".into(),
            "".into(),
            0.into(),
        ];
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        taken(self.0.conn(), v)
    }

    /// Step 4: removes the copy marks `marks` left in `slot` here (a mark
    /// of the same job by a later take stays).
    pub async fn unmark(self, slot: u32, marks: &[Mark]) -> Result<(), EngineError> {
        if marks.is_empty() {
            return Ok(());
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = Vec::with_capacity(1 + 2 * marks.len());
        args.push("unmark".into());
        for (id, tag) in marks {
            args.push(id.as_str().into());
            args.push((*tag as i64).into());
        }
        self.0
            .conn()
            .eval(&SCRIPTS.move_done, keysets::move_unmark(&k), args)
            .await?;
        Ok(())
    }

    /// Adds the running totals of a slot cleared elsewhere
    /// ([`Taken::totals`]) to `slot` here, in one transaction (sent again
    /// only when a cluster refused it unrun).
    pub async fn add_totals(self, slot: u32, totals: &[(String, u64)]) -> Result<(), EngineError> {
        if totals.is_empty() {
            return Ok(());
        }
        let key = SlotKeys::new(slot).counters();
        let _: Value = self
            .0
            .conn()
            .idempotent(&key, |c| {
                let key = &key;
                async move {
                    let tx = c.multi();
                    for (field, n) in totals {
                        let n = i64::try_from(*n).unwrap_or(i64::MAX);
                        let _: () = tx.hincrby(key, field.as_str(), n).await?;
                    }
                    tx.exec(true).await
                }
            })
            .await?;
        Ok(())
    }

    /// Gives up the mover's lease on `slot`, if `owner` holds it.
    pub async fn release(self, slot: u32, owner: &str) -> Result<(), EngineError> {
        let k = SlotKeys::new(slot);
        let args: Vec<Value> = vec![
            owner.into(),
            1.into(),
            "release".into(),
            0.into(),
            "".into(),
            k.prefix().into(),
            "0".into(),
            "".into(),
        ];
        self.0
            .conn()
            .eval(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        Ok(())
    }

    /// Step 2: stores copies of `jobs` (read from a shard whose time was
    /// `from_now_ms`) in `slot` here, skipping those already here, those
    /// copied before (with `mark`: marking each copy until
    /// [`Self::unmark`]) and those deleted in transit. When the shard
    /// is configured to wait for replicas, it waits as a publish does.
    pub async fn store(
        self,
        slot: u32,
        from_now_ms: u64,
        jobs: &[InTransit],
        mark: bool,
    ) -> Result<Copied, EngineError> {
        if jobs.is_empty() {
            return Ok(Copied::default());
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = Vec::with_capacity(6 + 2 * jobs.len());
        args.extend([
            k.prefix().into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
            self.0.ready_channel_prefix(slot).into(),
            (from_now_ms as i64).into(),
            if mark { "1" } else { "0" }.into(),
        ]);
        for j in jobs {
            args.push(j.id.as_str().into());
            args.push(j.entry.clone().into());
        }
        let v = self
            .0
            .conn()
            .eval_replicated(&SCRIPTS.move_in, keysets::move_in(&k), args)
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        Ok(Copied {
            copied: f.uint()?,
            skipped: f.uint()?,
        })
    }

    /// Step 3: lets the transit entries of `ids` go; returns how many
    /// went (jobs whose move is complete), and the jobs among `ids` that
    /// were deleted in transit (with their queue and where their copy
    /// went), whose marks stay until [`Self::forget`].
    pub async fn done(
        self,
        slot: u32,
        ids: &[String],
    ) -> Result<(u64, Vec<(JobId, InTransit)>), EngineError> {
        if ids.is_empty() {
            return Ok((0, Vec::new()));
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = Vec::with_capacity(1 + ids.len());
        args.push("done".into());
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        // Once the entries are gone, step 4 removes the copies' marks: a
        // failover to a replica that still had the entries would copy them
        // again, unmarked. So step 3 waits for the replicas, when the shard
        // is set to wait for them.
        let v = self
            .0
            .conn()
            .eval_replicated(&SCRIPTS.move_done, keysets::move_done(&k), args)
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        let went = f.uint()?;
        let mut out = Vec::new();
        while f.len() > 0 {
            let raw_id = f.string()?;
            let entry = f.bytes()?;
            let id = JobId::parse(&raw_id).map_err(|_| {
                self.0
                    .conn()
                    .bad_reply(format!("a transit entry of a bad id {raw_id:?}"))
            })?;
            let mark = InTransit::parse(raw_id, entry)
                .filter(|t| t.acked)
                .ok_or_else(|| {
                    self.0
                        .conn()
                        .bad_reply("an unreadable mark of a job acked in transit")
                })?;
            out.push((id, mark));
        }
        Ok((went, out))
    }

    /// Drops the transit entries of `ids`, whatever they hold.
    pub async fn forget(self, slot: u32, ids: &[String]) -> Result<(), EngineError> {
        if ids.is_empty() {
            return Ok(());
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = Vec::with_capacity(1 + ids.len());
        args.push("forget".into());
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        self.0
            .conn()
            .eval_replicated(&SCRIPTS.move_done, keysets::move_done(&k), args)
            .await?;
        Ok(())
    }
}
