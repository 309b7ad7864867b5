//! Jobs of a queue as the admin API lists them: any state, with a preview
//! of the body.

use serde::Serialize;
use serde_json::value::RawValue;
use sundial_core::ListState;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{RefOr, schema::Schema},
};

use crate::api::answers::{Attributes, JobId, names_schema};

/// A job's state, as the listing names it.
#[derive(Debug)]
pub struct JobState;

impl PartialSchema for JobState {
    fn schema() -> RefOr<Schema> {
        names_schema("A job's state.", ListState::ALL.map(ListState::name))
    }
}

impl ToSchema for JobState {}

impl JobSummary {
    /// `attrs` is the stored JSON text (empty: none), `preview` the bytes
    /// shown of the body.
    pub fn new(
        job_id: String,
        tries_left: u16,
        ttl: u64,
        attrs: &str,
        body_size: u64,
        preview: &[u8],
    ) -> Self {
        use base64::Engine as _;
        Self {
            job_id,
            remain_tries: tries_left,
            ttl,
            attributes: RawValue::from_string(attrs.to_owned()).ok(),
            body_size,
            body_preview: base64::engine::general_purpose::STANDARD.encode(preview),
            delivery: 0,
            reason: None,
            priority: 0,
        }
    }

    /// With its priority.
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// With its deliveries and its last failure's reason (empty: none).
    pub fn with_history(mut self, delivery: u32, reason: &str) -> Self {
        self.delivery = delivery;
        self.reason = (!reason.is_empty()).then(|| reason.to_owned());
        self
    }
}

/// What every listed job shows.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobSummary {
    #[schema(value_type = JobId)]
    pub job_id: String,
    #[schema(maximum = 65535)]
    pub remain_tries: u16,
    /// Seconds left, rounded up; 0 = never expires.
    pub ttl: u64,
    #[schema(value_type = Attributes)]
    pub attributes: Option<Box<RawValue>>,
    /// The whole body's size in bytes.
    pub body_size: u64,
    /// The first `preview` bytes of the body, base64.
    #[schema(content_encoding = "base64")]
    pub body_preview: String,
    /// Its deliveries so far.
    pub delivery: u32,
    /// Why it last failed: a release's reason, or `ttr expired`; `null`
    /// when no reason was recorded.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// Its priority, 0 to 255: of a queue's ready jobs, the highest is
    /// consumed first.
    #[schema(maximum = 255)]
    pub priority: u8,
}

/// When a listed job entered its state, or will leave it: the one field of
/// its listing's state (Unix ms, Redis clock).
#[derive(Debug, Serialize, ToSchema)]
pub enum StateTime {
    /// Ready jobs: since when: its publication, or its return after a
    /// delay, a retry or a respawn.
    #[serde(rename = "ready_since_ms")]
    ReadySince(Option<u64>),
    /// Delayed jobs: when it falls due.
    #[serde(rename = "due_at_ms")]
    DueAt(Option<u64>),
    /// Reserved jobs: when its time to run ends and it comes back, or dies
    /// on its last try.
    #[serde(rename = "ttr_deadline_ms")]
    TtrDeadline(Option<u64>),
    /// Dead jobs: `null` for a job that died under a gateway from before it
    /// was recorded.
    #[serde(rename = "died_at_ms")]
    DiedAt(Option<u64>),
}

/// A listed job.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueJob {
    #[serde(flatten)]
    pub job: JobSummary,
    /// Unix ms, Redis clock.
    pub published_at_ms: u64,
    #[serde(flatten)]
    pub at: StateTime,
}

/// A page of a queue's jobs in one state.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueJobList<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    pub queue: &'a str,
    #[schema(value_type = JobState)]
    pub state: &'a str,
    /// In each of the queue's slots' order (see the operation).
    pub jobs: Vec<QueueJob>,
    /// `<place>.<a>.<b>`; `null` at the end.
    #[schema(required = true, pattern = r"^[0-9]+\.[0-9]+\.[0-9]+$")]
    pub next_cursor: Option<String>,
}

/// One job of a queue, looked up by id.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueJobFound<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    pub queue: &'a str,
    #[schema(value_type = JobState)]
    pub state: &'a str,
    /// Since its publication, ms (Redis clock).
    pub elapsed_ms: u64,
    #[serde(flatten)]
    pub job: JobSummary,
}

/// A dead job as the dead-letter listing shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadJob {
    #[serde(flatten)]
    pub job: JobSummary,
    /// Unix ms, Redis clock.
    pub published_at_ms: u64,
    /// Unix ms, Redis clock; `null` for a job that died under a gateway
    /// from before it was recorded.
    #[schema(required = true)]
    pub died_at_ms: Option<u64>,
}

/// A page of a queue's dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadJobList<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    pub queue: &'a str,
    /// Oldest first within each of the queue's slots.
    pub jobs: Vec<DeadJob>,
    /// `<place>.<skip>`; `null` at the end.
    #[schema(required = true, pattern = r"^[0-9]+\.[0-9]+$")]
    pub next_cursor: Option<String>,
}

/// Dead jobs respawned by id or all.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadRespawned {
    pub respawned: u64,
    /// Ids named that are not dead jobs of the queue.
    pub not_found: Vec<String>,
    /// Dead jobs left.
    pub deadletter_size: u64,
}

/// Dead jobs deleted by id or all.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadDeleted {
    pub deleted: u64,
    /// Ids named that are not dead jobs of the queue.
    pub not_found: Vec<String>,
    /// Dead jobs left.
    pub deadletter_size: u64,
}
