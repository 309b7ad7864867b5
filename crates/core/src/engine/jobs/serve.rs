//! What workers take and give back: `serve` (acks and consumes of one
//! queue in one script call, group commit), and `consume` and `delete`,
//! its single forms.

use fred::types::Value;

use super::{
    super::{
        decode::{Delivery, Fields, JobView, state::RESERVED},
        keysets,
    },
    Jobs,
};
use crate::{EngineError, JobId, conn::Connection, keys::SlotKeys, scripts::SCRIPTS};

/// What one consumer asks of a queue in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// Jobs at most.
    pub count: u32,
    /// How long each job stays reserved for it.
    pub ttr_ms: u64,
}

/// An ack: delete job `id`; with a fence, only while delivery `delivery`
/// holds it (reserved, not delivered again since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub id: JobId,
    /// The delivery the worker acks (`?delivery=N`); `None` deletes the
    /// job in any state, as lmstfy does.
    pub delivery: Option<u32>,
}

impl Ack {
    /// An ack without a fence.
    pub fn any(id: JobId) -> Self {
        Self { id, delivery: None }
    }
}

/// How an [`Ack`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acked {
    /// The job is deleted.
    Deleted,
    /// No such job in that queue here.
    Missing,
    /// The job exists but is not reserved by the delivery the ack named:
    /// nothing changed.
    Fenced,
}

/// A touch: job `id`'s reservation extended to `ttr_ms` from now; with a
/// fence, only while delivery `delivery` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    pub id: JobId,
    pub delivery: Option<u32>,
    pub ttr_ms: u64,
}

/// How a [`Touch`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touched {
    /// The job stays reserved until `deadline_ms` (shard clock): now plus
    /// the TTR, or its expiry when sooner; `left_ms` from now.
    Extended { deadline_ms: u64, left_ms: u64 },
    /// No such job in that queue here.
    Missing,
    /// The job is not reserved.
    NotReserved,
    /// The job exists but the delivery the touch named does not hold it.
    Fenced,
    /// The job is in transit to another shard: retry shortly.
    Moving,
}

/// What one [`Jobs::serve`] call answered.
#[derive(Debug, Default)]
pub struct Served {
    /// Per ack, in order: how it ended.
    pub acked: Vec<Acked>,
    /// Per touch, in order: how it ended.
    pub touched: Vec<Touched>,
    /// Per want, in order: the jobs reserved for it.
    pub taken: Vec<Vec<Delivery>>,
}

impl Jobs<'_> {
    /// Takes up to `count` ready jobs of one queue in `slot`, each reserved
    /// for `ttr_ms` with one try spent, in one script call.
    pub async fn consume(
        self,
        slot: u32,
        qualified: &str,
        count: u32,
        ttr_ms: u64,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut served = self
            .serve(slot, qualified, &[], &[], &[Want { count, ttr_ms }])
            .await?;
        Ok(served.taken.pop().unwrap_or_default())
    }

    /// Deletes (acknowledges) a job in any state. Returns whether it existed.
    pub async fn delete(self, slot: u32, qualified: &str, id: &JobId) -> Result<bool, EngineError> {
        let ack = self.ack(slot, qualified, Ack::any(id.clone())).await?;
        Ok(ack == Acked::Deleted)
    }

    /// Acknowledges a job, fenced or not: see [`Ack`].
    pub async fn ack(self, slot: u32, qualified: &str, ack: Ack) -> Result<Acked, EngineError> {
        let served = self.serve(slot, qualified, &[ack], &[], &[]).await?;
        Ok(served.acked.first().copied().unwrap_or(Acked::Missing))
    }

    /// Extends a reserved job's hold: see [`Touch`].
    pub async fn touch(
        self,
        slot: u32,
        qualified: &str,
        touch: Touch,
    ) -> Result<Touched, EngineError> {
        let served = self.serve(slot, qualified, &[], &[touch], &[]).await?;
        Ok(served.touched.first().copied().unwrap_or(Touched::Missing))
    }

    /// Serves the workers of one queue in `slot` in one script call (group
    /// commit): first the `acks` (deletes by id, each on its own: of a job
    /// in any state, or fenced on a delivery), then the `touches`, then
    /// the `wants`, in order, each up to its
    /// `count` jobs reserved for its `ttr_ms` with one try spent. The first
    /// wants are served first; once the queue is empty the rest get none.
    pub async fn serve(
        self,
        slot: u32,
        qualified: &str,
        acks: &[Ack],
        touches: &[Touch],
        wants: &[Want],
    ) -> Result<Served, EngineError> {
        if acks.is_empty() && touches.is_empty() && wants.iter().all(|w| w.count == 0) {
            return Ok(Served {
                taken: wants.iter().map(|_| Vec::new()).collect(),
                ..Served::default()
            });
        }
        let conn = self.0.conn();
        let k = SlotKeys::new(slot);
        let keys = keysets::serve(&k, qualified);
        let args = serve_args(
            self.0.timer_channel(slot),
            slot,
            qualified,
            acks,
            touches,
            wants,
        );
        let reply = conn.eval(&SCRIPTS.serve, keys, args).await?;
        let mut f = Fields::new(conn, reply)?;
        let now = f.uint()?;
        let acked = acks
            .iter()
            .map(|_| acked(&mut f))
            .collect::<Result<_, _>>()?;
        let touched = touches
            .iter()
            .map(|_| touched(conn, &mut f, now))
            .collect::<Result<_, _>>()?;
        let mut taken = Vec::with_capacity(wants.len());
        for w in wants {
            let deadline_ms = f.uint()?;
            let n = f.uint()?;
            if n > u64::from(w.count) {
                return Err(conn.bad_reply("serve answered more jobs than asked"));
            }
            let mut jobs = Vec::with_capacity(n as usize);
            for _ in 0..n {
                jobs.push(delivery(conn, &mut f, qualified, slot, now, deadline_ms)?);
            }
            taken.push(jobs);
        }
        if f.len() != 0 {
            return Err(conn.bad_reply("serve answered for more consumers than asked"));
        }
        Ok(Served {
            acked,
            touched,
            taken,
        })
    }
}

/// The arguments of a `serve.lua` call (see the script).
fn serve_args(
    timer_channel: String,
    slot: u32,
    qualified: &str,
    acks: &[Ack],
    touches: &[Touch],
    wants: &[Want],
) -> Vec<Value> {
    let mut args: Vec<Value> =
        Vec::with_capacity(5 + 2 * acks.len() + 3 * touches.len() + 2 * wants.len());
    args.extend([
        qualified.into(),
        timer_channel.into(),
        i64::from(slot).into(),
        (acks.len() as i64).into(),
        (touches.len() as i64).into(),
    ]);
    for a in acks {
        args.push(a.id.as_str().into());
        args.push(i64::from(a.delivery.unwrap_or(0)).into());
    }
    for t in touches {
        args.push(t.id.as_str().into());
        args.push(i64::from(t.delivery.unwrap_or(0)).into());
        args.push((t.ttr_ms as i64).into());
    }
    for w in wants {
        args.push(i64::from(w.count).into());
        args.push((w.ttr_ms as i64).into());
    }
    args
}

/// The answer to an ack in a `serve.lua` reply.
fn acked(f: &mut Fields<'_>) -> Result<Acked, EngineError> {
    Ok(match f.int()? {
        0 => Acked::Missing,
        n if n < 0 => Acked::Fenced,
        _ => Acked::Deleted,
    })
}

/// The answer to a touch in a `serve.lua` reply, at `now`.
fn touched(conn: &Connection, f: &mut Fields<'_>, now: u64) -> Result<Touched, EngineError> {
    Ok(match f.int()? {
        0 => Touched::Missing,
        -1 => Touched::Fenced,
        -2 => Touched::Moving,
        -3 => Touched::NotReserved,
        n if n > 0 => Touched::Extended {
            deadline_ms: n as u64,
            left_ms: (n as u64).saturating_sub(now),
        },
        n => return Err(conn.bad_reply(format!("a touch answered {n}"))),
    })
}

/// The next job of a `serve.lua` reply (its id, then its record as it was:
/// reserved now, with one try spent), taken at `now` until `deadline_ms`.
fn delivery(
    conn: &Connection,
    f: &mut Fields<'_>,
    qualified: &str,
    slot: u32,
    now: u64,
    deadline_ms: u64,
) -> Result<Delivery, EngineError> {
    let id = f.string()?;
    let r = f.record()?;
    let attrs = String::from_utf8(r.attrs.to_vec())
        .map_err(|_| conn.bad_reply("attributes are not utf-8"))?;
    Ok(Delivery {
        job: JobView {
            queue: qualified.to_owned(),
            id,
            elapsed_ms: now.saturating_sub(r.published_ms),
            ttl_ms: if r.expire_ms == 0 {
                0
            } else {
                r.expire_ms.saturating_sub(now)
            },
            tries_left: r.tries.saturating_sub(1),
            attrs,
            body: r.body,
            state: RESERVED,
            // `deliver` counted this one.
            delivery: r.delivery.saturating_add(1),
            reason: String::from_utf8_lossy(&r.reason).into_owned(),
            priority: r.priority,
        },
        slot,
        deadline_ms,
        first: !r.delivered,
    })
}
