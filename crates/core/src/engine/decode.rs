//! Turning script replies into Rust values.

use bytes::Bytes;
use fred::types::Value;

use crate::{EngineError, Shard};

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
    /// 1 delayed, 2 ready, 3 reserved, 4 dead.
    pub state: u8,
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
    /// When its TTR runs out (ms, shard clock); fences [`Shard::release`].
    pub deadline_ms: u64,
    /// Whether this is the job's first delivery.
    pub first: bool,
}

/// Reads the fields of a reply array in order.
pub(crate) struct Fields<'a> {
    shard: &'a Shard,
    items: std::vec::IntoIter<Value>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(shard: &'a Shard, v: Value) -> Result<Self, EngineError> {
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

    /// The 8 fields of the `view` shape in `lua/lib.lua`.
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
