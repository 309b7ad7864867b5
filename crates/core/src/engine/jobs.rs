//! Operations on single jobs and on what a consumer takes.

use bytes::Bytes;
use fred::types::Value;

use super::{
    decode::{Delivery, Fields, JobView, state::RESERVED},
    keysets,
};
use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// When and how often a job is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub delay_ms: u64,
    /// 0 = the job never expires.
    pub ttl_ms: u64,
    /// Deliveries allowed, at least 1.
    pub tries: u16,
}

/// A job to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub id: JobId,
    /// Attributes as JSON text; empty for none.
    pub attrs: String,
    pub body: Bytes,
}

fn schedule_args(
    shard: &Shard,
    qualified: &str,
    s: &Schedule,
    slot: u32,
    k: &SlotKeys,
) -> Vec<Value> {
    vec![
        qualified.into(),
        (s.delay_ms as i64).into(),
        (s.ttl_ms as i64).into(),
        i64::from(s.tries).into(),
        shard.ready_channel(slot, qualified).into(),
        shard.timer_channel(slot).into(),
        i64::from(slot).into(),
        k.prefix().into(),
    ]
}

/// What one consumer asks of a queue in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// Jobs at most.
    pub count: u32,
    /// How long each job stays reserved for it.
    pub ttr_ms: u64,
}

/// What one [`Shard::serve`] call answered.
#[derive(Debug, Default)]
pub struct Served {
    /// Per ack, in order: whether its job existed (in that queue).
    pub acked: Vec<bool>,
    /// Per want, in order: the jobs reserved for it.
    pub taken: Vec<Vec<Delivery>>,
}

/// One publication: the jobs of one request (one job, or a bulk), stored
/// all or nothing, with their schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub schedule: Schedule,
    pub jobs: Vec<NewJob>,
}

impl Shard {
    /// Publishes jobs of one queue that all belong to `slot`, all or
    /// nothing. `qualified` is `<ns>/<queue>` ([`crate::keys::qualified`]).
    pub async fn publish(
        &self,
        slot: u32,
        qualified: &str,
        schedule: &Schedule,
        jobs: &[NewJob],
    ) -> Result<(), EngineError> {
        let one = [Publication {
            schedule: *schedule,
            jobs: jobs.to_vec(),
        }];
        match self.publish_many(slot, qualified, &one).await?.first() {
            Some(true) => Ok(()),
            _ => Err(EngineError::Exists {
                shard: self.name().to_owned(),
            }),
        }
    }

    /// Publishes several publications of one queue in `slot` in one script
    /// call (group commit). Each is all or nothing on its own; the answer
    /// says, per publication in order, whether it was stored (`false`: one
    /// of its ids exists already, and nothing of it was stored).
    pub async fn publish_many(
        &self,
        slot: u32,
        qualified: &str,
        publications: &[Publication],
    ) -> Result<Vec<bool>, EngineError> {
        let k = SlotKeys::new(slot);
        let jobs: usize = publications.iter().map(|p| p.jobs.len()).sum();
        let mut args: Vec<Value> = Vec::with_capacity(5 + 4 * publications.len() + 3 * jobs);
        args.extend([
            qualified.into(),
            self.ready_channel(slot, qualified).into(),
            self.timer_channel(slot).into(),
            i64::from(slot).into(),
            k.prefix().into(),
        ]);
        for p in publications {
            args.push((p.schedule.delay_ms as i64).into());
            args.push((p.schedule.ttl_ms as i64).into());
            args.push(i64::from(p.schedule.tries).into());
            args.push((p.jobs.len() as i64).into());
            for job in &p.jobs {
                args.push(job.id.as_str().into());
                args.push(job.attrs.as_str().into());
                args.push(job.body.clone().into());
            }
        }
        let v = self
            .conn()
            .eval_replicated(&SCRIPTS.publish, keysets::publish(&k, qualified), args)
            .await?;
        let mut f = Fields::new(self.conn(), v)?;
        if f.len() != publications.len() {
            return Err(self
                .conn()
                .bad_reply("publish answered for another number of publications"));
        }
        publications
            .iter()
            .map(|p| Ok(f.uint()? as usize == p.jobs.len()))
            .collect()
    }

    /// Deletes `old` (if it still exists in the queue) and publishes `new`,
    /// atomically; both are in `slot`. Returns whether the old job existed.
    pub async fn republish(
        &self,
        slot: u32,
        qualified: &str,
        old: &JobId,
        schedule: &Schedule,
        new: &NewJob,
    ) -> Result<bool, EngineError> {
        let k = SlotKeys::new(slot);
        let mut args = schedule_args(self, qualified, schedule, slot, &k);
        args.push(old.as_str().into());
        args.push(new.id.as_str().into());
        args.push(new.attrs.as_str().into());
        args.push(new.body.clone().into());
        let v = self
            .conn()
            .eval_replicated(&SCRIPTS.republish, keysets::republish(&k, qualified), args)
            .await?;
        Ok(v.as_i64() == Some(1))
    }

    /// Takes up to `count` ready jobs of one queue in `slot`, each reserved
    /// for `ttr_ms` with one try spent, in one script call.
    pub async fn consume(
        &self,
        slot: u32,
        qualified: &str,
        count: u32,
        ttr_ms: u64,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut served = self
            .serve(slot, qualified, &[], &[Want { count, ttr_ms }])
            .await?;
        Ok(served.taken.pop().unwrap_or_default())
    }

    /// Serves the workers of one queue in `slot` in one script call (group
    /// commit): first the `acks` (deletes by id of jobs in any state, each
    /// found or not on its own), then the `wants`, in order, each up to its
    /// `count` jobs reserved for its `ttr_ms` with one try spent. The first
    /// wants are served first; once the queue is empty the rest get none.
    pub async fn serve(
        &self,
        slot: u32,
        qualified: &str,
        acks: &[JobId],
        wants: &[Want],
    ) -> Result<Served, EngineError> {
        if acks.is_empty() && wants.iter().all(|w| w.count == 0) {
            return Ok(Served {
                acked: Vec::new(),
                taken: wants.iter().map(|_| Vec::new()).collect(),
            });
        }
        let k = SlotKeys::new(slot);
        let keys = keysets::serve(&k, qualified);
        let mut args: Vec<Value> = Vec::with_capacity(4 + acks.len() + 2 * wants.len());
        args.extend([
            qualified.into(),
            self.timer_channel(slot).into(),
            i64::from(slot).into(),
            (acks.len() as i64).into(),
        ]);
        args.extend(acks.iter().map(|id| Value::from(id.as_str())));
        for w in wants {
            args.push(i64::from(w.count).into());
            args.push((w.ttr_ms as i64).into());
        }
        let reply = self.conn().eval(&SCRIPTS.serve, keys, args).await?;
        let mut f = Fields::new(self.conn(), reply)?;
        let now = f.uint()?;
        let mut acked = Vec::with_capacity(acks.len());
        for _ in acks {
            acked.push(f.uint()? > 0);
        }
        let mut taken = Vec::with_capacity(wants.len());
        for w in wants {
            let deadline_ms = f.uint()?;
            let n = f.uint()?;
            if n > u64::from(w.count) {
                return Err(self.conn().bad_reply("serve answered more jobs than asked"));
            }
            let mut jobs = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let id = f.string()?;
                // The record as it was: reserved now, with one try spent.
                let r = f.record()?;
                let attrs = String::from_utf8(r.attrs.to_vec())
                    .map_err(|_| self.conn().bad_reply("attributes are not utf-8"))?;
                jobs.push(Delivery {
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
                    },
                    slot,
                    deadline_ms,
                    first: !r.delivered,
                });
            }
            taken.push(jobs);
        }
        if f.len() != 0 {
            return Err(self
                .conn()
                .bad_reply("serve answered for more consumers than asked"));
        }
        Ok(Served { acked, taken })
    }

    /// Gives a reserved job back (its consumer went away before it could be
    /// answered): back to the head of its queue, its try restored. Fenced on
    /// the reservation, so a job that moved on since is left alone.
    pub async fn release(&self, d: &Delivery) -> Result<bool, EngineError> {
        let k = SlotKeys::new(d.slot);
        let keys = keysets::release(&k, &d.job.queue);
        let args: Vec<Value> = vec![
            d.job.id.as_str().into(),
            (d.deadline_ms as i64).into(),
            self.ready_channel(d.slot, &d.job.queue).into(),
            d.job.queue.as_str().into(),
        ];
        let v = self.conn().eval(&SCRIPTS.release, keys, args).await?;
        Ok(v.as_i64() == Some(1))
    }

    /// Deletes (acknowledges) a job in any state. Returns whether it existed.
    pub async fn delete(
        &self,
        slot: u32,
        qualified: &str,
        id: &JobId,
    ) -> Result<bool, EngineError> {
        let served = self
            .serve(slot, qualified, std::slice::from_ref(id), &[])
            .await?;
        Ok(served.acked.first().copied().unwrap_or(false))
    }

    /// Reads a job by id, in any state; `None` when it does not exist in the
    /// queue or has expired.
    pub async fn peek_job(
        &self,
        slot: u32,
        qualified: &str,
        id: &JobId,
    ) -> Result<Option<JobView>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .conn()
            .eval(
                &SCRIPTS.peek_job,
                keysets::peek_job(&k),
                vec![qualified.into(), id.as_str().into()],
            )
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self.conn(), v)?.view().map(Some)
    }
}
