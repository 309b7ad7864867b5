//! Moving a slot's jobs from a shard the slot left to the shard that holds
//! it now, a batch at a time. The router decides which slots move, when,
//! and where (`sundial_router::mover`); these are its three steps, each
//! one script on one shard:
//!
//! 1. [`Shard::move_out`] on the old shard takes a batch out of the slot:
//!    each job leaves its lists, timer and counts and waits in the slot's
//!    transit hash, where peek and ack by id still find it (an ack there
//!    leaves a mark). The mover's lease on the slot fences it. Each take
//!    tags its entries (its time, in µs).
//! 2. Once the entries are safe at the old shard (on its disk and
//!    replicas), [`Shard::move_read`] reads them again (a job acked in
//!    transit meanwhile is left out), and [`Shard::move_in`] on the new
//!    shard stores the copies, each with its state, tries, attributes and
//!    body and its times moved onto the new shard's clock, and marks each
//!    copy with its take's tag: a copy of the same take sent again (after
//!    a crash, or by a mover that lost its lease) is skipped; a later take
//!    of the same job (moved away and back) is not.
//! 3. Once the copies are safe, [`Shard::move_done`] on the old shard lets
//!    the transit entries go, and returns the jobs acked in transit, whose
//!    copies the mover deletes ([`Shard::move_forget`] then drops their
//!    entries).
//! 4. Once that is safe too, [`Shard::move_unmark`] removes the copies'
//!    marks (those of the same take): no transit entry of theirs is left
//!    to be copied again.
//!
//! A crash between any two steps loses nothing and doubles nothing: the
//! transit entries stay until step 3, the marks until step 4, and a mover
//! that takes the lease over reads the entries back ([`MoveMode::Pending`])
//! and copies them again (step 2 skips those already there).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fred::{
    interfaces::{HashesInterface, TransactionInterface},
    types::Value,
};

use super::{decode::Fields, keysets};

use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// What [`Shard::move_out`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveMode {
    /// Takes up to `limit` jobs out of the slot, and no more once their
    /// records hold [`crate::PAGE_BYTES`] (clears the slot when it holds
    /// none, here or in transit).
    Take,
    /// Reads back up to about `limit` transit entries, from `cursor` (a
    /// mover that starts on a slot finishes what an earlier one left).
    Pending,
}

/// A job in transit, as [`Shard::move_out`] gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InTransit {
    pub id: String,
    /// The qualified queue, `<ns>/<queue>`.
    pub queue: String,
    /// Where it is copied to: a shard's name, or `@<pool>`.
    pub dest: String,
    /// Deleted (acked) in transit: not to be copied, and a copy made
    /// before must go.
    pub acked: bool,
    /// The take's tag (0 for a job deleted in transit).
    pub tag: u64,
    /// The transit entry, as `move_in.lua` reads it.
    entry: Bytes,
}

/// A copy's mark: the job's id and its take's tag ([`Shard::move_unmark`]).
pub type Mark = (String, u64);

/// What one [`Shard::move_out`] call answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// The old shard's time (ms), by which the copies' times are moved.
    pub now_ms: u64,
    /// Where the next call goes on (`"0"`: the walk is complete).
    pub cursor: String,
    /// The slot held nothing, here or in transit, and is now clear (never
    /// with a queue prefix).
    pub cleared: bool,
    /// Transit entries the slot holds after the call (any mover's).
    pub in_transit: u64,
    pub jobs: Vec<InTransit>,
    /// Cleared: the running totals its queues had here (`P<queue>` jobs
    /// published, `C<queue>` deliveries), for [`Shard::add_totals`] where
    /// the slot is now.
    pub totals: Vec<(String, u64)>,
}

/// What one [`Shard::move_in`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub copied: u64,
    /// Jobs already there (copied before), or deleted in transit.
    pub skipped: u64,
}

fn be(b: &[u8]) -> usize {
    b.iter().fold(0, |n, &x| (n << 8) | usize::from(x))
}

fn utf8(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

impl InTransit {
    /// Packs a transit entry as `transit_pack` in `lua/lib.lua` does.
    pub(crate) fn pack(
        id: String,
        deadline_ms: u64,
        tag: u64,
        queue: &str,
        dest: &str,
        raw: &[u8],
    ) -> Option<Self> {
        let mut e = BytesMut::with_capacity(17 + queue.len() + dest.len() + raw.len());
        e.put_slice(&deadline_ms.to_be_bytes()[2..]);
        e.put_slice(&tag.to_be_bytes()[1..]);
        e.put_u16(u16::try_from(queue.len()).ok()?);
        e.put_slice(queue.as_bytes());
        e.put_u16(u16::try_from(dest.len()).ok()?);
        e.put_slice(dest.as_bytes());
        e.put_slice(raw);
        Self::parse(id, e.freeze())
    }

    /// Unpacks a transit entry or the mark of a job deleted in transit
    /// (see `transit_pack` and `transit_acked` in `lua/lib.lua`).
    pub(crate) fn parse(id: String, entry: Bytes) -> Option<Self> {
        if let Some(rest) = entry.strip_prefix(b"x") {
            let qlen = be(rest.get(..2)?);
            return Some(Self {
                id,
                queue: utf8(rest.get(2..2 + qlen)?)?,
                dest: utf8(rest.get(2 + qlen..)?)?,
                acked: true,
                tag: 0,
                entry,
            });
        }
        let tag = be(entry.get(6..13)?) as u64;
        let qlen = be(entry.get(13..15)?);
        let queue = entry.get(15..15 + qlen)?;
        let dlen = be(entry.get(15 + qlen..17 + qlen)?);
        let dest = entry.get(17 + qlen..17 + qlen + dlen)?;
        Some(Self {
            queue: utf8(queue)?,
            dest: utf8(dest)?,
            acked: false,
            tag,
            id,
            entry,
        })
    }

    /// Bytes of its transit entry (its record with a few more).
    pub fn size(&self) -> usize {
        self.entry.len()
    }

    /// The mark its copy leaves.
    pub fn mark(&self) -> Mark {
        (self.id.clone(), self.tag)
    }
}

impl Shard {
    /// Step 1 (see the module): takes jobs of `slot` (of the queues that
    /// start with `only`, when not empty: `<ns>/`) out on their way to
    /// `dest` (a shard's name, or `@<pool>` for a namespace moving to
    /// that pool), or reads back those in transit, for mover `owner`,
    /// whose lease on the slot this call takes or renews for `lease`.
    /// `Err(holder)` inside: another mover holds the lease.
    #[allow(clippy::too_many_arguments)]
    pub async fn move_out(
        &self,
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
            (super::PAGE_BYTES as i64).into(),
        ];
        // Taken jobs wait at this shard until it has them on its replicas,
        // when it is set to wait for them (and on disk, by the mover's
        // settle time).
        let v = self
            .conn()
            .eval_replicated(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        self.taken(v)
    }

    /// The reply of `move_out.lua`.
    fn taken(&self, v: Value) -> Result<Result<Taken, String>, EngineError> {
        let mut f = Fields::new(self.conn(), v)?;
        let now = f.int()?;
        if now < 0 {
            return Ok(Err(f.string()?));
        }
        let cursor = f.string()?;
        let cleared = f.uint()? == 1;
        let in_transit = f.uint()?;
        let mut jobs = Vec::with_capacity(f.len() / 2);
        let mut totals = Vec::new();
        while cleared && f.len() > 0 {
            totals.push((f.string()?, f.uint()?));
        }
        while f.len() > 0 {
            let id = f.string()?;
            let entry = f.bytes()?;
            jobs.push(
                InTransit::parse(id, entry)
                    .ok_or_else(|| self.conn().bad_reply("an unreadable transit entry"))?,
            );
        }
        Ok(Ok(Taken {
            now_ms: now as u64,
            cursor,
            cleared,
            in_transit,
            jobs,
            totals,
        }))
    }

    /// Step 2's read: the transit entries of `ids` as they are now (a job
    /// acked in transit shows as its mark; one whose entry went is left
    /// out), with the old shard's time, under the lease as
    /// [`Self::move_out`].
    pub async fn move_read(
        &self,
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
            .conn()
            .eval(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        self.taken(v)
    }

    /// Step 4: removes the copy marks `marks` left in `slot` here (a mark
    /// of the same job by a later take stays).
    pub async fn move_unmark(&self, slot: u32, marks: &[Mark]) -> Result<(), EngineError> {
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
        self.conn()
            .eval(&SCRIPTS.move_done, keysets::move_unmark(&k), args)
            .await?;
        Ok(())
    }

    /// Adds the running totals of a slot cleared elsewhere
    /// ([`Taken::totals`]) to `slot` here, in one transaction (sent again
    /// only when a cluster refused it unrun).
    pub async fn add_totals(&self, slot: u32, totals: &[(String, u64)]) -> Result<(), EngineError> {
        if totals.is_empty() {
            return Ok(());
        }
        let key = SlotKeys::new(slot).counters();
        let _: Value = self
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
    pub async fn move_release(&self, slot: u32, owner: &str) -> Result<(), EngineError> {
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
        self.conn()
            .eval(&SCRIPTS.move_out, keysets::move_out(&k), args)
            .await?;
        Ok(())
    }

    /// Step 2: stores copies of `jobs` (read from a shard whose time was
    /// `from_now_ms`) in `slot` here, skipping those already here, those
    /// copied before (with `mark`: marking each copy until
    /// [`Self::move_unmark`]) and those deleted in transit. When the shard
    /// is configured to wait for replicas, it waits as a publish does.
    pub async fn move_in(
        &self,
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
            self.timer_channel(slot).into(),
            i64::from(slot).into(),
            self.ready_channel_prefix(slot).into(),
            (from_now_ms as i64).into(),
            if mark { "1" } else { "0" }.into(),
        ]);
        for j in jobs {
            args.push(j.id.as_str().into());
            args.push(j.entry.clone().into());
        }
        let v = self
            .conn()
            .eval_replicated(&SCRIPTS.move_in, keysets::move_in(&k), args)
            .await?;
        let mut f = Fields::new(self.conn(), v)?;
        Ok(Copied {
            copied: f.uint()?,
            skipped: f.uint()?,
        })
    }

    /// Step 3: lets the transit entries of `ids` go; returns how many
    /// went (jobs whose move is complete), and the jobs among `ids` that
    /// were deleted in transit (with their queue and where their copy
    /// went), whose marks stay until [`Shard::move_forget`].
    pub async fn move_done(
        &self,
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
            .conn()
            .eval_replicated(&SCRIPTS.move_done, keysets::move_done(&k), args)
            .await?;
        let mut f = Fields::new(self.conn(), v)?;
        let went = f.uint()?;
        let mut out = Vec::new();
        while f.len() > 0 {
            let raw_id = f.string()?;
            let entry = f.bytes()?;
            let id = JobId::parse(&raw_id).map_err(|_| {
                self.conn()
                    .bad_reply(format!("a transit entry of a bad id {raw_id:?}"))
            })?;
            let mark = InTransit::parse(raw_id, entry)
                .filter(|t| t.acked)
                .ok_or_else(|| {
                    self.conn()
                        .bad_reply("an unreadable mark of a job acked in transit")
                })?;
            out.push((id, mark));
        }
        Ok((went, out))
    }

    /// Drops the transit entries of `ids`, whatever they hold.
    pub async fn move_forget(&self, slot: u32, ids: &[String]) -> Result<(), EngineError> {
        if ids.is_empty() {
            return Ok(());
        }
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = Vec::with_capacity(1 + ids.len());
        args.push("forget".into());
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        self.conn()
            .eval_replicated(&SCRIPTS.move_done, keysets::move_done(&k), args)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transit_entries_unpack_as_lua_packs_them() {
        // struct.pack('>I6I7H', 1234, 5, 4) .. 'ns/q' .. struct.pack('>H', 3) .. 'p/b' .. 'RAW'
        let mut e = vec![0, 0, 0, 0, 0x04, 0xd2, 0, 0, 0, 0, 0, 0, 5, 0, 4];
        e.extend(b"ns/q");
        e.extend([0, 3]);
        e.extend(b"p/bRAW");
        let t = InTransit::parse("id".into(), Bytes::from(e.clone())).expect("entry");
        assert_eq!(
            (t.queue.as_str(), t.dest.as_str(), t.tag, t.acked),
            ("ns/q", "p/b", 5, false)
        );
        let packed = InTransit::pack("id".into(), 1234, 5, "ns/q", "p/b", b"RAW").expect("pack");
        assert_eq!(packed, t);
        // 'x' .. struct.pack('>H', 4) .. 'ns/q' .. '@p2'
        let t = InTransit::parse("id".into(), Bytes::from_static(b"x\0\x04ns/q@p2")).expect("mark");
        assert_eq!(
            (t.queue.as_str(), t.dest.as_str(), t.acked),
            ("ns/q", "@p2", true)
        );
        assert_eq!(
            InTransit::parse(
                "id".into(),
                Bytes::from_static(b"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x09ns")
            ),
            None
        );
        assert_eq!(
            InTransit::parse("id".into(), Bytes::from_static(b"x\0\x09ns")),
            None
        );
    }
}
