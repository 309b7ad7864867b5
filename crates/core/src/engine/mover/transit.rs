//! What the mover carries: a job in transit ([`InTransit`]) as a transit
//! entry packs it, what a take answered ([`Taken`]) and what a store did
//! ([`Copied`]).

use bytes::{BufMut, Bytes, BytesMut};
use fred::types::Value;

use super::super::decode::Fields;
use crate::{EngineError, conn::Connection};

/// What [`Mover::take`](super::Mover::take) does.
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

/// A job in transit, as [`Mover::take`](super::Mover::take) gave it.
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
    pub(super) entry: Bytes,
}

/// A copy's mark: the job's id and its take's tag ([`Mover::unmark`](super::Mover::unmark)).
pub type Mark = (String, u64);

/// What one [`Mover::take`](super::Mover::take) call answered.
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
    /// published, `C<queue>` deliveries), for [`Mover::add_totals`](super::Mover::add_totals) where
    /// the slot is now.
    pub totals: Vec<(String, u64)>,
}

/// What one [`Mover::store`](super::Mover::store) call did.
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
    /// Packs a transit entry as `transit_pack` in `lua/lib/transit.lua` does.
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
    /// (see `transit_pack` and `transit_acked` in `lua/lib/transit.lua`).
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

/// The reply of `move_out.lua`.
pub(super) fn taken(conn: &Connection, v: Value) -> Result<Result<Taken, String>, EngineError> {
    let mut f = Fields::new(conn, v)?;
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
                .ok_or_else(|| conn.bad_reply("an unreadable transit entry"))?,
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
