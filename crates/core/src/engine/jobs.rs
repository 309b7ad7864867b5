//! Operations on single jobs and on what a consumer takes.

use bytes::Bytes;
use fred::types::Value;

use super::decode::{Delivery, Fields, JobView};
use crate::{EngineError, JobId, Shard, keys, keys::BucketKeys, scripts::SCRIPTS};

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

fn schedule_args(queue: &str, s: &Schedule, ns: &str, bucket: u32, k: &BucketKeys) -> Vec<Value> {
    vec![
        queue.into(),
        (s.delay_ms as i64).into(),
        (s.ttl_ms as i64).into(),
        i64::from(s.tries).into(),
        keys::ready_channel(ns, queue).into(),
        keys::TIMER_CHANNEL.into(),
        keys::bucket_tag(ns, bucket).into(),
        k.prefix().into(),
    ]
}

impl Shard {
    /// Publishes jobs that all belong to `bucket`, all or nothing.
    pub async fn publish(
        &self,
        ns: &str,
        bucket: u32,
        queue: &str,
        schedule: &Schedule,
        jobs: &[NewJob],
    ) -> Result<(), EngineError> {
        let k = BucketKeys::new(ns, bucket);
        let mut args = schedule_args(queue, schedule, ns, bucket, &k);
        for job in jobs {
            args.push(job.id.as_str().into());
            args.push(job.attrs.as_str().into());
            args.push(job.body.clone().into());
        }
        let keys = vec![k.jobs(), k.timer(), k.counters(), k.ready(queue), k.slots()];
        let n = self.eval(&SCRIPTS.publish, keys, args).await?;
        match n.as_i64() {
            Some(n) if n as usize == jobs.len() => Ok(()),
            _ => Err(self.bad_reply(format!("publish answered {n:?}"))),
        }
    }

    /// Deletes `old` (if it still exists in `queue`) and publishes `new`,
    /// atomically; `new.id` must be in the same bucket as `old`. Returns
    /// whether the old job existed.
    pub async fn republish(
        &self,
        ns: &str,
        bucket: u32,
        queue: &str,
        old: &JobId,
        schedule: &Schedule,
        new: &NewJob,
    ) -> Result<bool, EngineError> {
        let k = BucketKeys::new(ns, bucket);
        let mut args = schedule_args(queue, schedule, ns, bucket, &k);
        args.push(old.as_str().into());
        args.push(new.id.as_str().into());
        args.push(new.attrs.as_str().into());
        args.push(new.body.clone().into());
        let keys = vec![
            k.jobs(),
            k.timer(),
            k.counters(),
            k.ready(queue),
            k.slots(),
            k.dead(queue),
        ];
        let v = self.eval(&SCRIPTS.republish, keys, args).await?;
        Ok(v.as_i64() == Some(1))
    }

    /// Takes up to `count` ready jobs from `queues` (in priority order) over
    /// this shard's `buckets` of the namespace, each reserved for `ttr_ms`
    /// with one try spent, in one script call.
    pub async fn consume(
        &self,
        ns: &str,
        buckets: &[u32],
        queues: &[&str],
        count: u32,
        ttr_ms: u64,
    ) -> Result<Vec<Delivery>, EngineError> {
        if buckets.is_empty() || queues.is_empty() || count == 0 {
            return Ok(Vec::new());
        }
        let bks: Vec<BucketKeys> = buckets.iter().map(|b| BucketKeys::new(ns, *b)).collect();
        let mut keys = Vec::with_capacity(bks.len() * (3 + queues.len()));
        for k in &bks {
            keys.extend([k.jobs(), k.timer(), k.counters()]);
        }
        for q in queues {
            keys.extend(bks.iter().map(|k| k.ready(q)));
        }
        let start = rand::random_range(0..buckets.len());
        let mut args: Vec<Value> = vec![
            (buckets.len() as i64).into(),
            (queues.len() as i64).into(),
            i64::from(count).into(),
            (ttr_ms as i64).into(),
            (start as i64).into(),
            keys::TIMER_CHANNEL.into(),
        ];
        args.extend(
            buckets
                .iter()
                .map(|b| Value::from(keys::bucket_tag(ns, *b))),
        );
        let reply = self.eval(&SCRIPTS.consume, keys, args).await?;
        let mut f = Fields::new(self, reply)?;
        let n = f.len().saturating_sub(1) / 10;
        let mut out = Vec::with_capacity(n);
        let mut pending = Vec::with_capacity(n);
        for _ in 0..n {
            let job = f.view()?;
            let idx = f.uint()? as usize;
            let bucket = *buckets
                .get(idx.wrapping_sub(1))
                .ok_or_else(|| self.bad_reply("consume named an unknown bucket"))?;
            let first = f.uint()? == 1;
            pending.push((job, bucket, first));
        }
        let deadline_ms = f.uint()?;
        for (job, bucket, first) in pending {
            out.push(Delivery {
                job,
                bucket,
                deadline_ms,
                first,
            });
        }
        Ok(out)
    }

    /// Gives a reserved job back (its consumer went away before it could be
    /// answered): back to the head of its queue, its try restored. Fenced on
    /// the reservation, so a job that moved on since is left alone.
    pub async fn release(&self, ns: &str, d: &Delivery) -> Result<bool, EngineError> {
        let k = BucketKeys::new(ns, d.bucket);
        let keys = vec![k.jobs(), k.timer(), k.counters(), k.ready(&d.job.queue)];
        let args: Vec<Value> = vec![
            d.job.id.as_str().into(),
            (d.deadline_ms as i64).into(),
            keys::ready_channel(ns, &d.job.queue).into(),
        ];
        let v = self.eval(&SCRIPTS.release, keys, args).await?;
        Ok(v.as_i64() == Some(1))
    }

    /// Deletes (acknowledges) a job in any state. Returns whether it existed.
    pub async fn delete(
        &self,
        ns: &str,
        bucket: u32,
        queue: &str,
        id: &JobId,
    ) -> Result<bool, EngineError> {
        let k = BucketKeys::new(ns, bucket);
        let keys = vec![
            k.jobs(),
            k.timer(),
            k.counters(),
            k.ready(queue),
            k.dead(queue),
        ];
        let v = self
            .eval(
                &SCRIPTS.delete,
                keys,
                vec![queue.into(), id.as_str().into()],
            )
            .await?;
        Ok(v.as_i64().unwrap_or(0) > 0)
    }

    /// Reads a job by id, in any state; `None` when it does not exist in
    /// `queue` or has expired.
    pub async fn peek_job(
        &self,
        ns: &str,
        bucket: u32,
        queue: &str,
        id: &JobId,
    ) -> Result<Option<JobView>, EngineError> {
        let k = BucketKeys::new(ns, bucket);
        let v = self
            .eval(
                &SCRIPTS.peek_job,
                vec![k.jobs()],
                vec![queue.into(), id.as_str().into()],
            )
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self, v)?.view().map(Some)
    }
}
