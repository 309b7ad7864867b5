//! Turning script replies into Rust values.

use bytes::Bytes;
use fred::types::Value;

use crate::{EngineError, conn::Connection};

/// A job as a read (peek) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    /// The qualified queue, `<ns>/<queue>`.
    pub queue: String,
    pub id: String,
    /// Time since publish, ms (shard clock).
    pub elapsed_ms: u64,
    /// Time left before the job expires, ms; 0 when it never expires.
    pub ttl_ms: u64,
    /// Deliveries left.
    pub tries_left: u16,
    /// Attributes as JSON text; empty when the job has none.
    pub attrs: String,
    pub body: Bytes,
    /// One of [`state`]'s values.
    pub state: u8,
}

/// A job's states, numbered as the scripts store them (`lua/lib/record.lua`).
pub mod state {
    pub const DELAYED: u8 = 1;
    pub const READY: u8 = 2;
    pub const RESERVED: u8 = 3;
    pub const DEAD: u8 = 4;
}

impl JobView {
    /// The queue's own name (without its namespace).
    pub fn queue_name(&self) -> &str {
        crate::keys::parse_qualified(&self.queue).map_or(&self.queue, |(_, q)| q)
    }
}

/// A job handed to a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub job: JobView,
    /// The slot the job lives in.
    pub slot: u32,
    /// When its TTR runs out (ms, shard clock); fences
    /// [`Jobs::release`](crate::engine::Jobs::release).
    pub deadline_ms: u64,
    /// Whether this is the job's first delivery.
    pub first: bool,
}

/// The fields of a job record, as `lua/lib/record.lua` packs it (big-endian):
/// state `B` (plus 16 once delivered), tries `H`, publish time `I6`, expiry
/// `I6`, due time `I6`, queue number `I3`, attributes `Hc0`, then the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) state: u8,
    pub(crate) delivered: bool,
    pub(crate) tries: u16,
    pub(crate) published_ms: u64,
    /// 0 = never.
    pub(crate) expire_ms: u64,
    /// When a dead job died (ms, shard clock); `None` for other states and
    /// for jobs that died before records kept it.
    pub(crate) died_ms: Option<u64>,
    /// The due field as stored: a delayed job's due time; a ready job's
    /// return after a delay, retry or respawn (0 when published ready);
    /// a dead job's death when flagged (`died_ms`).
    pub(crate) due_ms: u64,
    pub(crate) attrs: Bytes,
    pub(crate) body: Bytes,
}

/// Bytes before a record's attributes.
const RECORD_HEAD: usize = 1 + 2 + 6 + 6 + 6 + 3 + 2;

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |n, &x| (n << 8) | u64::from(x))
}

impl Record {
    /// Unpacks `raw`, sharing its bytes (attributes and body are not
    /// copied); `None` when it is too short for what it says it holds.
    pub(crate) fn unpack(raw: Bytes) -> Option<Self> {
        if raw.len() < RECORD_HEAD {
            return None;
        }
        let attrs_len = be(&raw[24..26]) as usize;
        let body_at = RECORD_HEAD.checked_add(attrs_len)?;
        if raw.len() < body_at {
            return None;
        }
        Some(Self {
            state: raw[0] % 16,
            delivered: raw[0] % 32 >= 16,
            tries: be(&raw[1..3]) as u16,
            published_ms: be(&raw[3..9]),
            expire_ms: be(&raw[9..15]),
            died_ms: (raw[0] >= 32).then(|| be(&raw[15..21])),
            due_ms: be(&raw[15..21]),
            attrs: raw.slice(RECORD_HEAD..body_at),
            body: raw.slice(body_at..),
        })
    }
}

/// Reads the fields of a reply array in order.
pub(crate) struct Fields<'a> {
    shard: &'a Connection,
    items: std::vec::IntoIter<Value>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(shard: &'a Connection, v: Value) -> Result<Self, EngineError> {
        match v {
            Value::Array(items) => Ok(Self {
                shard,
                items: items.into_iter(),
            }),
            other => Err(shard.bad_reply(format!("expected an array, got {other:?}"))),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    fn next(&mut self) -> Result<Value, EngineError> {
        self.items
            .next()
            .ok_or_else(|| self.shard.bad_reply("reply too short"))
    }

    pub(crate) fn int(&mut self) -> Result<i64, EngineError> {
        let v = self.next()?;
        v.as_i64().ok_or_else(|| {
            self.shard
                .bad_reply(format!("expected an integer, got {v:?}"))
        })
    }

    pub(crate) fn uint(&mut self) -> Result<u64, EngineError> {
        Ok(self.int()?.max(0) as u64)
    }

    pub(crate) fn bytes(&mut self) -> Result<Bytes, EngineError> {
        match self.next()? {
            Value::Bytes(b) => Ok(b),
            Value::String(s) => Ok(s.into_inner()),
            Value::Null => Ok(Bytes::new()),
            other => Err(self
                .shard
                .bad_reply(format!("expected bytes, got {other:?}"))),
        }
    }

    pub(crate) fn string(&mut self) -> Result<String, EngineError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.shard.bad_reply("expected utf-8 text"))
    }

    /// A job record (see [`Record`]).
    pub(crate) fn record(&mut self) -> Result<Record, EngineError> {
        let raw = self.bytes()?;
        Record::unpack(raw).ok_or_else(|| self.shard.bad_reply("a job record too short"))
    }

    /// The 8 fields of the `view` shape in `lua/lib/slot.lua`.
    pub(crate) fn view(&mut self) -> Result<JobView, EngineError> {
        Ok(JobView {
            queue: self.string()?,
            id: self.string()?,
            elapsed_ms: self.uint()?,
            ttl_ms: self.uint()?,
            tries_left: u16::try_from(self.uint()?).unwrap_or(u16::MAX),
            attrs: self.string()?,
            body: self.bytes()?,
            state: u8::try_from(self.uint()?).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_unpacks_as_lua_packs_it() {
        // struct.pack('>BHI6I6I6I3Hc0', 2 + 16, 5, 1000, 2000, 0, 7, 2, '{}') .. 'body'
        let mut raw = vec![18, 0, 5];
        raw.extend([0, 0, 0, 0, 0x03, 0xe8]);
        raw.extend([0, 0, 0, 0, 0x07, 0xd0]);
        raw.extend([0; 6]);
        raw.extend([0, 0, 7, 0, 2]);
        raw.extend(b"{}body");
        let r = Record::unpack(Bytes::from(raw.clone())).expect("record");
        assert_eq!(
            r,
            Record {
                state: 2,
                delivered: true,
                tries: 5,
                published_ms: 1000,
                expire_ms: 2000,
                died_ms: None,
                due_ms: 0,
                attrs: Bytes::from_static(b"{}"),
                body: Bytes::from_static(b"body"),
            }
        );
        // A dead job that died at 3000 (`patch_dead`): state 4 + 16 + 32,
        // the time in the due field.
        let mut dead = raw.clone();
        dead[0] = 52;
        dead[15..21].copy_from_slice(&[0, 0, 0, 0, 0x0b, 0xb8]);
        let r = Record::unpack(Bytes::from(dead)).expect("record");
        assert_eq!((r.state, r.delivered, r.died_ms), (4, true, Some(3000)));
        // Attributes that run past the end, and a record cut short.
        raw[25] = 200;
        assert_eq!(Record::unpack(Bytes::from(raw)), None);
        assert_eq!(Record::unpack(Bytes::from_static(b"short")), None);
    }
}
