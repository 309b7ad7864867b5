//! Publishing: a job, a bulk (all or nothing), several publications of a
//! queue in one call (group commit), and a job replaced by another.

use bytes::Bytes;
use fred::types::Value;

use super::{
    super::{decode::Fields, keysets},
    Jobs,
    dedup::{KeyHit, Keys, Outcome},
};
use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

/// A job's retry policy as its record keeps it (see `policy` in
/// `lua/lib/record.lua`; `sundial_router::policy` packs it).
pub type PackedPolicy = [u8; 16];

/// When and how often a job is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub delay_ms: u64,
    /// 0 = the job never expires.
    pub ttl_ms: u64,
    /// Deliveries allowed, at least 1.
    pub tries: u16,
    /// 0 (the default, and lmstfy's only) to 255: of a queue's ready jobs
    /// in a slot, the highest priority is consumed first, and first in,
    /// first out within one.
    pub priority: u8,
    /// How a failed delivery is retried; `None`: ready again at once, as
    /// in lmstfy (and the job's record stays plain until its first
    /// delivery).
    pub policy: Option<PackedPolicy>,
}

/// The policy as a script argument: its bytes, or "" for none.
fn policy_arg(s: &Schedule) -> Value {
    match &s.policy {
        Some(p) => Value::Bytes(Bytes::copy_from_slice(p)),
        None => "".into(),
    }
}

/// The jobs that a publication's keys answered: its answer after the
/// count stored, triples of place (from 1), id, and `d` or `r`.
fn key_hits(conn: &crate::Connection, answer: Value) -> Result<Vec<KeyHit>, EngineError> {
    let mut f = Fields::new(conn, answer)?;
    f.uint()?;
    let mut hits = Vec::with_capacity(f.len() / 3);
    while f.len() >= 3 {
        let place = f.uint()? as usize;
        let id = f.bytes()?;
        let how = f.bytes()?;
        let id = std::str::from_utf8(&id)
            .ok()
            .and_then(|s| JobId::parse(s).ok())
            .ok_or_else(|| conn.bad_reply("a key named an id that is not one"))?;
        hits.push(KeyHit {
            place: place.saturating_sub(1),
            id,
            replaced: how.as_ref() == b"r",
        });
    }
    Ok(hits)
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

/// One publication: the jobs of one request (one job, or a bulk), stored
/// all or nothing, with their schedule, and their idempotency keys if
/// they have some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub schedule: Schedule,
    pub jobs: Vec<NewJob>,
    /// One key per job, or none.
    pub keys: Option<Keys>,
}

impl Jobs<'_> {
    /// Publishes jobs of one queue that all belong to `slot`, all or
    /// nothing. `qualified` is `<ns>/<queue>` ([`crate::keys::qualified`]).
    pub async fn publish(
        self,
        slot: u32,
        qualified: &str,
        schedule: &Schedule,
        jobs: &[NewJob],
    ) -> Result<(), EngineError> {
        let one = [Publication {
            schedule: *schedule,
            jobs: jobs.to_vec(),
            keys: None,
        }];
        match self.publish_many(slot, qualified, &one).await?.first() {
            Some(Outcome::Stored(_)) => Ok(()),
            _ => Err(EngineError::Exists {
                shard: self.0.name().to_owned(),
            }),
        }
    }

    /// Publishes several publications of one queue in `slot` in one script
    /// call (group commit). Each is all or nothing on its own; the answer
    /// says, per publication in order, what it came to. The keys of a
    /// publication must all belong to `slot` ([`super::key_lane`]).
    pub async fn publish_many(
        self,
        slot: u32,
        qualified: &str,
        publications: &[Publication],
    ) -> Result<Vec<Outcome>, EngineError> {
        let k = SlotKeys::new(slot);
        let jobs: usize = publications.iter().map(|p| p.jobs.len()).sum();
        let mut args: Vec<Value> = Vec::with_capacity(5 + 5 * publications.len() + 3 * jobs);
        args.extend([
            qualified.into(),
            self.0.ready_channel(slot, qualified).into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
            k.prefix().into(),
        ]);
        for p in publications {
            args.push((p.schedule.delay_ms as i64).into());
            args.push((p.schedule.ttl_ms as i64).into());
            args.push(i64::from(p.schedule.tries).into());
            args.push(i64::from(p.schedule.priority).into());
            args.push(policy_arg(&p.schedule));
            args.push(
                p.keys
                    .as_ref()
                    .map_or(String::new(), |k| k.mode.arg())
                    .into(),
            );
            args.push((p.jobs.len() as i64).into());
            for (i, job) in p.jobs.iter().enumerate() {
                args.push(job.id.as_str().into());
                args.push(job.attrs.as_str().into());
                args.push(job.body.clone().into());
                if let Some(k) = &p.keys {
                    args.push(k.keys.get(i).map_or("", String::as_str).into());
                }
            }
        }
        let v = self
            .0
            .conn()
            .eval_replicated(&SCRIPTS.publish, keysets::publish(&k, qualified), args)
            .await?;
        let conn = self.0.conn();
        let Value::Array(answers) = v else {
            return Err(conn.bad_reply("publish answered no array"));
        };
        if answers.len() != publications.len() {
            return Err(conn.bad_reply("publish answered for another number of publications"));
        }
        publications
            .iter()
            .zip(answers)
            .map(|(p, answer)| match answer {
                Value::Array(_) => Ok(Outcome::Stored(key_hits(conn, answer)?)),
                n if n.as_i64() == Some(p.jobs.len() as i64) => Ok(Outcome::Stored(Vec::new())),
                _ => Ok(Outcome::Exists),
            })
            .collect()
    }

    /// Deletes `old` (if it still exists in the queue) and publishes `new`,
    /// atomically; both are in `slot`. Returns whether the old job existed.
    pub async fn republish(
        self,
        slot: u32,
        qualified: &str,
        old: &JobId,
        schedule: &Schedule,
        new: &NewJob,
    ) -> Result<bool, EngineError> {
        let k = SlotKeys::new(slot);
        let mut args = schedule_args(self.0, qualified, schedule, slot, &k);
        args.push(old.as_str().into());
        args.push(new.id.as_str().into());
        args.push(new.attrs.as_str().into());
        args.push(new.body.clone().into());
        args.push(policy_arg(schedule));
        args.push(i64::from(schedule.priority).into());
        let v = self
            .0
            .conn()
            .eval_replicated(&SCRIPTS.republish, keysets::republish(&k, qualified), args)
            .await?;
        Ok(v.as_i64() == Some(1))
    }
}
