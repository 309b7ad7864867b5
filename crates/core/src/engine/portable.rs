//! Jobs out of and into a shard for export and import (NDJSON, by the
//! gateway), on [`Portable`] (`shard.portable()`): each job with its times relative to the moment it was read,
//! so that it can be stored again on any shard, whose clock may differ.
//!
//! An export reads, per slot, the namespace's delayed and reserved jobs
//! (HSCAN of the jobs hash), its jobs in transit to another shard (HSCAN of
//! the transit hash) and then each queue's ready and dead lists newest
//! first; an import stores jobs as the mover stores its copies
//! (`move_in.lua`, without copy marks): a job whose id exists is skipped,
//! and ready and dead
//! jobs are appended at the consuming end in the order given, so a list
//! exported newest first is imported in its order.

use bytes::{BufMut, Bytes, BytesMut};
use fred::types::Value;

use super::{
    PackedPolicy,
    decode::{Fields, state},
    keysets,
    mover::{Copied, InTransit},
};
use crate::{EngineError, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// A shard's export and import: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Portable<'a>(&'a Shard);

impl Shard {
    /// Jobs read for an export and stored by an import.
    pub fn portable(&self) -> Portable<'_> {
        Portable(self)
    }
}

/// A job as an export carries it, times relative to when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortableJob {
    pub id: String,
    /// The qualified queue, `<ns>/<queue>`.
    pub queue: String,
    /// One of [`state`]'s values.
    pub state: u8,
    /// Whether it has been delivered at least once.
    pub delivered: bool,
    /// Deliveries left.
    pub tries: u16,
    /// Since it was published, ms.
    pub age_ms: u64,
    /// Until it expires, ms; 0 = never.
    pub ttl_ms: u64,
    /// Delayed: until it is due, ms (0: due already).
    pub due_in_ms: u64,
    /// Reserved: until its TTR runs out, ms.
    pub ttr_ms: u64,
    /// Dead: since it died, ms, when known.
    pub dead_for_ms: Option<u64>,
    /// Attributes as JSON text; empty for none.
    pub attrs: String,
    pub body: Bytes,
    /// Its deliveries so far (1 or more when `delivered`).
    pub delivery: u32,
    /// Why it last failed; empty for none.
    pub reason: String,
    /// Its retry policy, as its record packs it; `None` for none.
    pub policy: Option<PackedPolicy>,
    /// Its idempotency key; empty for none.
    pub key: String,
    /// Until its key's window ends, ms; 0: the key lasts as long as the job.
    pub key_ttl_ms: u64,
    /// Its priority (0 to 255).
    pub priority: u8,
}

/// One page of an export.
#[derive(Debug, Clone, Default)]
pub struct ExportPage {
    /// Where the next page starts: a hash cursor (`"0"` at the end) or
    /// list entries passed (`None` at the end).
    pub next: Option<String>,
    pub jobs: Vec<PortableJob>,
}

impl ExportPage {
    /// Bytes of its jobs' bodies and attributes.
    pub fn bytes(&self) -> usize {
        self.jobs.iter().map(|j| j.body.len() + j.attrs.len()).sum()
    }
}

/// The clock an import's records are written on before `move_in.lua`
/// moves them onto the shard's (any value far from 0 and from overflow).
const BASE_MS: u64 = 1 << 40;

impl PortableJob {
    /// The fields of an extended record (delivery, policy, reason), and
    /// of a keyed one (its key's window end and the key), as
    /// `lua/lib/record.lua` lays them out; `None` when a field is too long.
    fn put_extension(&self, raw: &mut BytesMut, now: u64) -> Option<()> {
        raw.put_u32(self.delivery);
        match &self.policy {
            Some(p) => {
                raw.put_u8(p.len() as u8);
                raw.put_slice(p);
            }
            None => raw.put_u8(0),
        }
        raw.put_u16(u16::try_from(self.reason.len()).ok()?);
        raw.put_slice(self.reason.as_bytes());
        if !self.key.is_empty() {
            let end = if self.key_ttl_ms == 0 {
                0
            } else {
                now + self.key_ttl_ms
            };
            raw.put_slice(&end.to_be_bytes()[2..]);
            raw.put_u16(u16::try_from(self.key.len()).ok()?);
            raw.put_slice(self.key.as_bytes());
        }
        Some(())
    }

    /// The job as a transit entry (see `transit_pack` in `lua/lib/transit.lua`) on
    /// a clock that reads [`BASE_MS`] now.
    fn entry(&self) -> Option<InTransit> {
        let now = BASE_MS;
        // Extended (flag 64) when it has a delivery count, a reason or a
        // policy to keep, as `lua/lib/record.lua` lays it out.
        // Keyed (flag 128, extended too) when it has a key.
        let keyed = !self.key.is_empty();
        let extended =
            keyed || self.delivery > 0 || !self.reason.is_empty() || self.policy.is_some();
        let flags = self.state
            + if self.delivered { 16 } else { 0 }
            + if extended { 64 } else { 0 }
            + if keyed { 128 } else { 0 }
            + if self.priority > 0 { 8 } else { 0 }
            + if self.dead_for_ms.is_some() && self.state == state::DEAD {
                32
            } else {
                0
            };
        let expire = if self.ttl_ms == 0 {
            0
        } else {
            now + self.ttl_ms
        };
        let due = match (self.state, self.dead_for_ms) {
            (state::DELAYED, _) => now + self.due_in_ms,
            (state::DEAD, Some(ago)) => now.saturating_sub(ago),
            _ => 0,
        };
        let deadline = if self.state == state::RESERVED {
            now + self.ttr_ms
        } else {
            0
        };
        let attrs_len = u16::try_from(self.attrs.len()).ok()?;
        let mut raw =
            BytesMut::with_capacity(40 + self.reason.len() + self.attrs.len() + self.body.len());
        raw.put_u8(flags);
        raw.put_u16(self.tries);
        for t in [now.saturating_sub(self.age_ms), expire, due] {
            raw.put_slice(&t.to_be_bytes()[2..]);
        }
        raw.put_slice(&[0, 0, 0]); // the queue number: the shard gives it
        if extended {
            self.put_extension(&mut raw, now)?;
        }
        if self.priority > 0 {
            raw.put_u8(self.priority);
        }
        raw.put_u16(attrs_len);
        raw.put_slice(self.attrs.as_bytes());
        raw.put_slice(&self.body);
        // Unmarked (an import skips only the jobs there already): no tag,
        // no destination.
        InTransit::pack(self.id.clone(), deadline, 0, &self.queue, "", &raw)
    }
}

impl Portable<'_> {
    /// A page of `ns`'s delayed and reserved jobs in `slot` (with
    /// `transit`: its jobs in transit to another shard, in any state), from
    /// the hash cursor `cursor` (`"0"` to start), about `count` read.
    pub async fn export_scan(
        self,
        slot: u32,
        ns: &str,
        transit: bool,
        cursor: &str,
        count: u32,
    ) -> Result<ExportPage, EngineError> {
        let k = SlotKeys::new(slot);
        let args: Vec<Value> = vec![
            if transit { "transit" } else { "scan" }.into(),
            cursor.into(),
            i64::from(count.max(1)).into(),
            format!("{ns}/").into(),
        ];
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.export, keysets::export(&k), args)
            .await?;
        let (next, jobs) = self.page(v)?;
        Ok(ExportPage {
            next: (next != "0").then_some(next),
            jobs,
        })
    }

    /// A page of the ready (or, with `dead`, the dead) list of a queue in
    /// `slot`, newest first, after `passed` entries.
    pub async fn export_list(
        self,
        slot: u32,
        qualified: &str,
        dead: bool,
        passed: u64,
        count: u32,
    ) -> Result<ExportPage, EngineError> {
        let k = SlotKeys::new(slot);
        let (list, st) = if dead {
            (k.dead(qualified), state::DEAD)
        } else {
            (k.ready(qualified), state::READY)
        };
        let args: Vec<Value> = vec![
            "list".into(),
            (passed as i64).into(),
            i64::from(count.max(1)).into(),
            list.into(),
            i64::from(st).into(),
            qualified.into(),
        ];
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.export, keysets::export(&k), args)
            .await?;
        let (next, jobs) = self.page(v)?;
        Ok(ExportPage {
            next: (next != "-1").then_some(next),
            jobs,
        })
    }

    /// The reply of `export.lua`: where to go on, and the jobs (times
    /// made relative to the reply's).
    fn page(self, v: Value) -> Result<(String, Vec<PortableJob>), EngineError> {
        let mut f = Fields::new(self.0.conn(), v)?;
        let now = f.uint()?;
        let next = f.string()?;
        let mut jobs = Vec::with_capacity(f.len() / 4);
        while f.len() > 0 {
            let id = f.string()?;
            let queue = f.string()?;
            let deadline = f.uint()?;
            let raw = f.bytes()?;
            let due = raw
                .get(15..21)
                .map_or(0, |b| b.iter().fold(0u64, |n, &x| (n << 8) | u64::from(x)));
            let r = super::decode::Record::unpack(raw)
                .ok_or_else(|| self.0.conn().bad_reply("a job record too short"))?;
            jobs.push(PortableJob {
                id,
                queue,
                state: r.state,
                delivered: r.delivered,
                tries: r.tries,
                age_ms: now.saturating_sub(r.published_ms),
                ttl_ms: if r.expire_ms == 0 {
                    0
                } else {
                    r.expire_ms.saturating_sub(now).max(1)
                },
                due_in_ms: if r.state == state::DELAYED {
                    due.saturating_sub(now)
                } else {
                    0
                },
                ttr_ms: if r.state == state::RESERVED {
                    deadline.saturating_sub(now)
                } else {
                    0
                },
                dead_for_ms: r.died_ms.map(|d| now.saturating_sub(d)),
                attrs: String::from_utf8(r.attrs.to_vec())
                    .map_err(|_| self.0.conn().bad_reply("attributes are not utf-8"))?,
                body: r.body,
                delivery: r.delivery,
                reason: String::from_utf8_lossy(&r.reason).into_owned(),
                policy: r.policy.as_ref().try_into().ok(),
                key: String::from_utf8_lossy(&r.key).into_owned(),
                key_ttl_ms: if r.keyend_ms == 0 {
                    0
                } else {
                    r.keyend_ms.saturating_sub(now).max(1)
                },
                priority: r.priority,
            });
        }
        Ok((next, jobs))
    }

    /// Stores `jobs` (all of `slot`) as they were exported, each with its
    /// state, tries, attributes, body and times; a job whose id is here
    /// already is skipped.
    pub async fn import(self, slot: u32, jobs: &[PortableJob]) -> Result<Copied, EngineError> {
        let entries: Vec<InTransit> = jobs
            .iter()
            .map(|j| {
                j.entry().ok_or_else(|| {
                    self.0
                        .conn()
                        .bad_reply("a job's queue or attributes are too long")
                })
            })
            .collect::<Result<_, _>>()?;
        self.0.mover().store(slot, BASE_MS, &entries, false).await
    }
}
