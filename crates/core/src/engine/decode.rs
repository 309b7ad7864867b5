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
    /// Its deliveries so far (consumes); a worker fences its acks with it.
    pub delivery: u32,
    /// Why it last failed (a release's reason, or `ttr expired`); empty
    /// when it never failed.
    pub reason: String,
    /// Its priority: 0 (lmstfy's jobs, and the default) to 255, consumed
    /// first.
    pub priority: u8,
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
    /// When its TTR runs out (ms, shard clock), unless a touch moves it.
    pub deadline_ms: u64,
    /// Whether this is the job's first delivery.
    pub first: bool,
}

impl Delivery {
    /// This delivery's number: 1 for the job's first, growing by one with
    /// each later one.
    pub fn number(&self) -> u32 {
        self.job.delivery
    }
}

/// The fields of a job record, as `lua/lib/record.lua` packs it (big-endian):
/// state `B` (plus 16 once delivered, 32 once died, 64 when extended, 128
/// when keyed, 8 when prioritized), tries `H`, publish time `I6`, expiry
/// `I6`, due time `I6`, queue number `I3`;
/// when extended, delivery `I4`, policy `Bc0` and reason `Hc0`; when
/// keyed, the key's window end `I6` and the key `Hc0`; when prioritized,
/// the priority `B`; then attributes `Hc0`, then the body.
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
    /// Deliveries so far (a plain record: 1 when delivered, else 0).
    pub(crate) delivery: u32,
    /// The packed retry policy; empty for none.
    pub(crate) policy: Bytes,
    /// Why the job last failed; empty when it never failed.
    pub(crate) reason: Bytes,
    /// Its idempotency key; empty for none.
    pub(crate) key: Bytes,
    /// When its key's window ends (ms, shard clock); 0: the key lasts as
    /// long as the job.
    pub(crate) keyend_ms: u64,
    /// 0 to 255; 0 when the record has no priority byte.
    pub(crate) priority: u8,
    pub(crate) attrs: Bytes,
    pub(crate) body: Bytes,
}

/// Bytes of a record's fixed fields, before its extension or attributes.
const FIXED: usize = 1 + 2 + 6 + 6 + 6 + 3;
/// Flag of the state byte: the record is extended.
const EXTENDED: u8 = 64;
/// Flag of the state byte: the record carries an idempotency key.
const KEYED: u8 = 128;
/// Flag of the state byte: the record carries a priority above 0.
const PRIORITIZED: u8 = 8;

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |n, &x| (n << 8) | u64::from(x))
}

/// The field of `raw` at `*at`: `width` bytes of length, then that many
/// bytes; moves `*at` past it. `None` when it runs past the end.
fn sized(raw: &Bytes, at: &mut usize, width: usize) -> Option<Bytes> {
    let start = at.checked_add(width)?;
    let len = be(raw.get(*at..start)?) as usize;
    let end = start.checked_add(len)?;
    raw.get(start..end)?;
    *at = end;
    Some(raw.slice(start..end))
}

impl Record {
    /// Unpacks `raw`, sharing its bytes (attributes and body are not
    /// copied); `None` when it is too short for what it says it holds.
    pub(crate) fn unpack(raw: Bytes) -> Option<Self> {
        if raw.len() < FIXED {
            return None;
        }
        let mut at = FIXED;
        let flags = raw[0];
        let delivered = flags % 32 >= 16;
        let (delivery, policy, reason) = if flags % 128 >= EXTENDED {
            let delivery = be(raw.get(FIXED..FIXED + 4)?) as u32;
            at += 4;
            (delivery, sized(&raw, &mut at, 1)?, sized(&raw, &mut at, 2)?)
        } else {
            (u32::from(delivered), Bytes::new(), Bytes::new())
        };
        let (key, keyend_ms) = if flags >= KEYED {
            let end = be(raw.get(at..at + 6)?);
            at += 6;
            (sized(&raw, &mut at, 2)?, end)
        } else {
            (Bytes::new(), 0)
        };
        let priority = if flags % 16 >= PRIORITIZED {
            at += 1;
            *raw.get(at - 1)?
        } else {
            0
        };
        let attrs = sized(&raw, &mut at, 2)?;
        Some(Self {
            state: flags % 8,
            delivered,
            tries: be(&raw[1..3]) as u16,
            published_ms: be(&raw[3..9]),
            expire_ms: be(&raw[9..15]),
            died_ms: (flags % 64 >= 32).then(|| be(&raw[15..21])),
            due_ms: be(&raw[15..21]),
            delivery,
            policy,
            reason,
            key,
            keyend_ms,
            priority,
            attrs,
            body: raw.slice(at..),
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

    /// The 11 fields of the `view` shape in `lua/lib/slot.lua`.
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
            delivery: u32::try_from(self.uint()?).unwrap_or(u32::MAX),
            reason: self.string()?,
            priority: u8::try_from(self.uint()?).unwrap_or(0),
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
                delivery: 1,
                policy: Bytes::new(),
                reason: Bytes::new(),
                key: Bytes::new(),
                keyend_ms: 0,
                priority: 0,
                attrs: Bytes::from_static(b"{}"),
                body: Bytes::from_static(b"body"),
            }
        );
        // The same job extended (`deliver`): flag 64, delivery 3, no
        // policy, reason "ttr expired".
        let mut ext = raw[..24].to_vec();
        ext[0] = 18 + 64;
        ext.extend([0, 0, 0, 3, 0, 0, 11]);
        ext.extend(b"ttr expired");
        ext.extend(&raw[24..]);
        let r = Record::unpack(Bytes::from(ext.clone())).expect("extended record");
        assert_eq!(
            (r.state, r.delivered, r.delivery, r.died_ms),
            (2, true, 3, None)
        );
        assert_eq!(r.reason, Bytes::from_static(b"ttr expired"));
        assert_eq!(
            (r.attrs.as_ref(), r.body.as_ref()),
            (&b"{}"[..], &b"body"[..])
        );
        // The same job keyed (flag 128): window end 5000, key "k-1".
        let mut keyed = ext[..42].to_vec();
        keyed[0] += 128;
        keyed.extend([0, 0, 0, 0, 0x13, 0x88, 0, 3]);
        keyed.extend(b"k-1");
        keyed.extend(&ext[42..]);
        let r = Record::unpack(Bytes::from(keyed.clone())).expect("keyed record");
        assert_eq!((r.state, r.delivery, r.keyend_ms), (2, 3, 5000));
        assert_eq!(r.key, Bytes::from_static(b"k-1"));
        assert_eq!(r.reason, Bytes::from_static(b"ttr expired"));
        assert_eq!(
            (r.attrs.as_ref(), r.body.as_ref()),
            (&b"{}"[..], &b"body"[..])
        );
        // The keyed job prioritized (flag 8): priority 200 right before
        // its attributes.
        let mut prio = keyed.clone();
        prio[0] += 8;
        let at = prio.len() - 8;
        prio.insert(at, 200);
        let r = Record::unpack(Bytes::from(prio)).expect("prioritized record");
        assert_eq!((r.state, r.priority, r.delivery), (2, 200, 3));
        assert_eq!(r.key, Bytes::from_static(b"k-1"));
        assert_eq!(
            (r.attrs.as_ref(), r.body.as_ref()),
            (&b"{}"[..], &b"body"[..])
        );
        // A reason that runs past the end.
        ext[30] = 200;
        assert_eq!(Record::unpack(Bytes::from(ext)), None);
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
