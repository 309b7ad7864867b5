//! The job API's answers as types: each is serialised as it is sent, and
//! its schema in the OpenAPI document is derived from it
//! (`crate::openapi`), so that the two cannot drift. lmstfy's shapes.
//! Errors are in [`errors`].

pub mod errors;
pub mod schedules;

pub use errors::{ErrorBody, Msg};

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Type,
        schema::{ObjectBuilder, OneOfBuilder, Schema},
    },
};

/// The schema of a string that is one of `names`.
pub fn names_schema<'n>(
    description: &str,
    names: impl IntoIterator<Item = &'n str>,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(names))
        .into()
}

/// A 26-character ULID (canonical: upper-case Crockford base32), or `1`
/// followed by a ULID (27 characters) for a job published with
/// `Enable-Job-Version: YES`.
#[derive(Debug)]
pub struct JobId;

impl PartialSchema for JobId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "A 26-character ULID (canonical: upper-case Crockford base32), or `1` \
                 followed by a ULID (27 characters) for a job published with \
                 `Enable-Job-Version: YES`.",
            ))
            .pattern(Some("^1?[0-7][0-9A-HJKMNP-TV-Z]{25}$"))
            .examples(["01JD3M6Y7ZQ8K5X4W2V1T0S9R8", "101JD3M6Y7ZQ8K5X4W2V1T0S9R8"])
            .into()
    }
}

impl ToSchema for JobId {}

/// The job's attributes: an object of the `Job-Attr-<Key>` headers given
/// at publish (key lower-cased and cut to 32 bytes, value cut to 128
/// bytes, at most 16) with `Enable-Job-Version: YES`; `null` when there
/// are none.
#[derive(Debug)]
pub struct Attributes;

impl PartialSchema for Attributes {
    fn schema() -> RefOr<Schema> {
        let map = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
            .max_properties(Some(16));
        OneOfBuilder::new()
            .description(Some(
                "The job's attributes: an object of the `Job-Attr-<Key>` headers given at \
                 publish (key lower-cased and cut to 32 bytes, value cut to 128 bytes, at \
                 most 16) with `Enable-Job-Version: YES`; `null` when there are none.",
            ))
            .item(map)
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .into()
    }
}

impl ToSchema for Attributes {}

/// A job as peek shows it (lmstfy's shape).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"namespace": "ns", "queue": "q",
    "job_id": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8", "data": "aGVsbG8=", "ttl": 86398,
    "elapsed_ms": 2002, "remain_tries": 0, "attributes": null, "delivery": 1,
    "reason": null}))]
pub struct Job<'a> {
    pub namespace: &'a str,
    pub queue: &'a str,
    #[schema(value_type = JobId)]
    pub job_id: &'a str,
    /// The job's body, base64 (standard alphabet, padded).
    #[schema(content_encoding = "base64")]
    pub data: String,
    /// Seconds until the job expires, rounded up; 0 = never.
    pub ttl: u64,
    /// Milliseconds since the job was published (Redis clock).
    pub elapsed_ms: u64,
    /// Deliveries left (after this one, for a consume).
    #[schema(maximum = 65535)]
    pub remain_tries: u16,
    /// The attributes as the job stored them (JSON text), or `null`.
    #[schema(value_type = Attributes)]
    pub attributes: Option<&'a RawValue>,
    /// The job's deliveries so far: a consume answers with this delivery's
    /// number (1 for the first, one more with each), which fences its ack,
    /// touch and release (`?delivery=N`). Sundial's extension.
    pub delivery: u32,
    /// Why the job last failed: a release's `reason`, or `ttr expired`;
    /// `null` when it never failed. Sundial's extension.
    pub reason: Option<&'a str>,
    /// The job's priority (`priority` at publish), left out when 0: a
    /// client that never sets one never sees it. Sundial's extension.
    #[serde(skip_serializing_if = "crate::is_zero")]
    #[schema(minimum = 1, maximum = 255)]
    pub priority: u8,
}

/// `msg` of a delivered job.
#[derive(Debug, Serialize, ToSchema)]
pub enum NewJob {
    #[serde(rename = "new job")]
    NewJob,
}

/// A job as consume hands it out: the peek shape plus `msg: "new job"`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveredJob<'a> {
    #[schema(inline)]
    pub msg: NewJob,
    #[serde(flatten)]
    pub job: Job<'a>,
}

/// `msg` of a touch.
#[derive(Debug, Serialize, ToSchema)]
pub enum TouchedMsg {
    #[serde(rename = "touched")]
    Touched,
}

/// A reservation extended by a touch.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"msg": "touched", "job_id": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8",
    "ttr_ms": 30000}))]
pub struct Touched<'a> {
    #[schema(inline)]
    pub msg: TouchedMsg,
    #[schema(value_type = JobId)]
    pub job_id: &'a str,
    /// Milliseconds until the job's new TTR runs out: the TTR asked for,
    /// or less when the job expires (its TTL) before that.
    pub ttr_ms: u64,
}

/// `msg` of a release.
#[derive(Debug, Serialize, ToSchema)]
pub enum ReleasedMsg {
    #[serde(rename = "released")]
    Released,
}

/// Where a released job went.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReleasedTo {
    /// Ready again now, at the back of its queue.
    Ready,
    /// Waiting out its delay.
    Delayed,
    /// In the dead letter: the release left it no try.
    Dead,
}

/// A job given back by its worker.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"msg": "released", "job_id": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8",
    "state": "delayed", "delay_ms": 30000}))]
pub struct Released<'a> {
    #[schema(inline)]
    pub msg: ReleasedMsg,
    #[schema(value_type = JobId)]
    pub job_id: &'a str,
    pub state: ReleasedTo,
    /// How long it waits before it is ready again (0 unless delayed).
    pub delay_ms: u64,
}

/// `msg` of a publish.
#[derive(Debug, Serialize, ToSchema)]
pub enum PublishedMsg {
    #[serde(rename = "published")]
    Published,
}

/// A published job.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"msg": "published", "job_id": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8"}))]
pub struct Published<'a> {
    #[schema(inline)]
    pub msg: PublishedMsg,
    #[schema(value_type = JobId)]
    pub job_id: &'a str,
    /// Present (`true`) when the publish's idempotency key named a job
    /// published before, whose id `job_id` is: nothing was stored.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Present (`true`) when the key named a pending delayed job (debounce)
    /// that took this publish's body and schedule, and kept its id.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replaced: bool,
}

/// Jobs published by one bulk call.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkPublished<'a> {
    #[schema(inline)]
    pub msg: PublishedMsg,
    /// In the order of the request's elements.
    #[schema(value_type = Vec<JobId>, min_items = 1, max_items = 64)]
    pub job_ids: Vec<&'a str>,
    /// With idempotency keys: the places (from 0) of the elements whose
    /// key named a job published before (its id is in `job_ids`): nothing
    /// was stored for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<Vec<usize>>,
    /// With keys in debounce mode: the places of the elements whose key
    /// named a pending delayed job, which took the element's body and
    /// schedule and kept its id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Vec<usize>>,
}

/// A queue's ready jobs, or its dead letter's jobs.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"namespace": "ns", "queue": "q", "size": 3}))]
pub struct QueueSize<'a> {
    pub namespace: &'a str,
    pub queue: &'a str,
    pub size: u64,
}

/// A queue's dead letter: its size and its oldest job.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"namespace": "ns", "queue": "q", "deadletter_size": 2,
    "deadletter_head": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8"}))]
pub struct DeadLetterPeek<'a> {
    pub namespace: &'a str,
    pub queue: &'a str,
    pub deadletter_size: u64,
    /// The id of the oldest dead job; `""` when there is none.
    pub deadletter_head: String,
}

/// `msg` of a respawn.
#[derive(Debug, Serialize, ToSchema)]
pub enum RespawnedMsg {
    #[serde(rename = "respawned")]
    Respawned,
}

/// Dead jobs made ready again.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"msg": "respawned", "count": 1}))]
pub struct Respawned {
    #[schema(inline)]
    pub msg: RespawnedMsg,
    pub count: u64,
}

/// Per second, since this gateway's previous sample of the queue's running
/// totals (taken at least a second earlier); `null` until there is one.
#[derive(Debug)]
pub struct Rate;

impl PartialSchema for Rate {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
                Type::Number,
                Type::Null,
            ]))
            .minimum(Some(0))
            .description(Some(
                "Per second, since this gateway's previous sample of the queue's running \
                 totals (taken at least a second earlier); `null` until there is one.",
            ))
            .into()
    }
}

impl ToSchema for Rate {}

/// A queue's live jobs per state, its running totals and its rates
/// (Sundial's extension). Shared by `GET /api/{ns}/{queue}/stats` (plus
/// `namespace`), the admin queue list and `GET
/// /namespaces/{ns}/queues/{queue}` (plus `pool`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Stats<'a> {
    pub queue: &'a str,
    pub ready: u64,
    pub delayed: u64,
    pub reserved: u64,
    pub dead: u64,
    /// Jobs ever published to the queue (only grows).
    pub published_total: u64,
    /// Deliveries ever made from the queue (a retried job counts each
    /// time).
    pub consumed_total: u64,
    #[schema(value_type = Rate)]
    pub publish_rate: Option<f64>,
    #[schema(value_type = Rate)]
    pub consume_rate: Option<f64>,
    /// Whether the queue is paused, itself or with its namespace: its
    /// consumers get no job (Sundial's extension; its backlog stays).
    pub paused: bool,
}

/// `GET /api/{ns}/{queue}/stats`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"namespace": "ns", "queue": "q", "ready": 12, "delayed": 3,
    "reserved": 1, "dead": 0, "published_total": 1200, "consumed_total": 1185,
    "publish_rate": 2.5, "consume_rate": 2.4, "paused": false}))]
pub struct JobQueueStats<'a> {
    pub namespace: &'a str,
    #[serde(flatten)]
    pub stats: Stats<'a>,
}
