//! A schedule as the job API takes it (`PUT /api/{ns}/{queue}/schedules/{name}`)
//! and answers it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sundial_router::{
    policy::RetryPolicy,
    schedule::{JobTemplate, Missed, ScheduleDef, spec::DEFAULT_GRACE_MS},
};
use utoipa::ToSchema;

/// What a schedule does with the fires it missed while nothing could fire
/// them (a Redis outage longer than its grace): `"skip"` them, fire
/// `"once"` for all of them, or `{"catch_up": n}`, the latest `n` (1 to
/// 100), oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    Skip,
    Once,
    CatchUp(u16),
}

impl From<MissedPolicy> for Missed {
    fn from(m: MissedPolicy) -> Self {
        match m {
            MissedPolicy::Skip => Missed::Skip,
            MissedPolicy::Once => Missed::Once,
            MissedPolicy::CatchUp(n) => Missed::CatchUp(n),
        }
    }
}

impl From<Missed> for MissedPolicy {
    fn from(m: Missed) -> Self {
        match m {
            Missed::Skip => MissedPolicy::Skip,
            Missed::Once => MissedPolicy::Once,
            Missed::CatchUp(n) => MissedPolicy::CatchUp(n),
        }
    }
}

/// The job a schedule publishes at each fire: ready at the fire's time
/// (written 50 ms ahead as a delayed job, unless it has a key), with the
/// attributes `schedule` (its name) and `scheduled-at` (the fire's time,
/// Unix ms) beside its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The body, base64 (empty when absent).
    #[serde(default)]
    pub data: String,
    /// Seconds before the job expires; 0 never (as a publish's `ttl`; the
    /// config's default when absent, lowered to the namespace's quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
    /// Deliveries it gets (the config's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tries: Option<u16>,
    /// 0 to 255: consumed before lower ones (as a publish's `priority`).
    #[serde(default)]
    pub priority: u8,
    /// At most 14, beside the two of the fire's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Over the queue's retry policy, as a publish's fields are.
    #[serde(default, skip_serializing_if = "RetryPolicy::is_empty")]
    pub policy: RetryPolicy,
    /// An idempotency key (as a publish's `dedup`) each fire's job is
    /// published with: a fire while the key names a job publishes
    /// nothing. The schedule then lives in the key's lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<String>,
    /// Seconds the key holds after each publish, however the job ended (1
    /// to 2,592,000; as a publish's `dedup_ttl`); until the job is done
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ttl: Option<u64>,
}

impl JobSpec {
    /// A schedule's job as the API shows it: TTL and tries filled in.
    pub fn of(job: &JobTemplate) -> Self {
        Self {
            data: job.data.clone(),
            ttl: Some(job.ttl),
            tries: Some(job.tries),
            priority: job.priority,
            attributes: job.attributes.clone(),
            policy: job.policy,
            dedup: job.dedup.clone(),
            dedup_ttl: job.dedup_ttl,
        }
    }
}

/// A schedule, as `PUT` takes it: `cron` (5 or 6 fields, with `tz`, an
/// IANA time zone, UTC when absent) or `every` (seconds, at least 1),
/// never both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// No fire before this time (Unix ms); an interval counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// No fire after this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// Each fire waits a random 0 to this many ms after its time (at most
    /// an hour, and under half the time between fires).
    #[serde(default)]
    pub jitter_ms: u64,
    /// For fires missed longer than `grace_ms`: `"once"` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<MissedPolicy>,
    /// How late a fire may be and still fire (1,000 to 86,400,000 ms;
    /// 60,000 when absent); later, it is missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    pub job: JobSpec,
}

impl ScheduleSpec {
    /// What `PUT` takes to make `def` again (an export writes it).
    pub fn of(def: &ScheduleDef) -> Self {
        Self {
            cron: def.cron.clone(),
            tz: def.tz.clone(),
            every: def.every,
            start_ms: def.start_ms,
            end_ms: def.end_ms,
            jitter_ms: def.jitter_ms,
            missed: Some(def.missed.into()),
            grace_ms: Some(def.grace_ms),
            job: JobSpec::of(&def.job),
        }
    }

    /// The definition this asks for, `ttl` and `tries` as given (the
    /// handler fills in what is absent first).
    pub fn definition(&self, ttl: u32, tries: u16) -> ScheduleDef {
        ScheduleDef {
            rev: 0,
            cron: self.cron.clone(),
            tz: self.tz.clone(),
            every: self.every,
            anchor_ms: 0,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            jitter_ms: self.jitter_ms,
            missed: self.missed.unwrap_or(MissedPolicy::Once).into(),
            grace_ms: self.grace_ms.unwrap_or(DEFAULT_GRACE_MS),
            paused: false,
            job: JobTemplate {
                data: self.job.data.clone(),
                ttl,
                tries,
                priority: self.job.priority,
                attributes: self.job.attributes.clone(),
                policy: self.job.policy,
                dedup: self.job.dedup.clone(),
                dedup_ttl: self.job.dedup_ttl,
            },
            created_ms: 0,
            updated_ms: 0,
        }
    }
}

/// A schedule's last fire.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LastFire {
    /// The time it was for (Unix ms).
    pub at_ms: u64,
    /// When its job was published (Unix ms, the shard's clock); for one
    /// written ahead, when it was due to be ready.
    pub published_ms: u64,
    pub job_id: String,
}

/// A schedule, as the API answers it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleAnswer {
    pub namespace: String,
    pub queue: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    pub jitter_ms: u64,
    pub missed: MissedPolicy,
    pub grace_ms: u64,
    pub paused: bool,
    pub job: JobSpec,
    /// The row's revision: at least the time it was last changed (ms).
    pub rev: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Its next fires' times (Unix ms, before their jitter), at most 5;
    /// none while paused or once it has no fire left.
    pub next_ms: Vec<u64>,
    /// Fires published, and fires missed and skipped, as its slot counts
    /// them (absent until its slot holds it: within about 0.5 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fired: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_fires: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<LastFire>,
}

/// A queue's schedules, by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleAnswer>,
}
