//! A namespace's queues.

use serde::Serialize;
use sundial_router::admin::homes::{Home, MoveState};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{RefOr, schema::Schema},
};

use crate::api::answers::{Stats, names_schema};

/// `GET /namespaces/{ns}/queues/{queue}`: a queue as the listing shows
/// it, with its pool.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminQueue<'a> {
    pub pool: &'a str,
    #[serde(flatten)]
    pub stats: Stats<'a>,
}

/// A page of a namespace's queues.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueList<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    /// In name order.
    pub queues: Vec<Stats<'a>>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<&'a str>,
    /// The namespace's move to another pool, if its tokens of this pool
    /// ever moved (see `GET /namespaces/{ns}/move`).
    #[serde(rename = "move")]
    #[schema(required = true, extensions(("x-sundial-extension" = json!(true))))]
    pub moved: Option<MoveSummary<'a>>,
}

/// A namespace's move, in brief.
#[derive(Debug, Serialize, ToSchema)]
pub struct MoveSummary<'a> {
    pub from: &'a str,
    pub to: &'a str,
    #[schema(value_type = MoveStateName)]
    pub state: MoveState,
    /// When it entered that state, Unix ms.
    pub since_ms: u64,
}

impl<'a> From<&'a Home> for MoveSummary<'a> {
    fn from(h: &'a Home) -> Self {
        Self {
            from: &h.from,
            to: &h.to,
            state: h.state,
            since_ms: h.since_ms,
        }
    }
}

/// How far a namespace's move has come.
#[derive(Debug)]
pub struct MoveStateName;

impl PartialSchema for MoveStateName {
    fn schema() -> RefOr<Schema> {
        names_schema(
            "How far a namespace's move has come.",
            MoveState::ALL.map(MoveState::as_str),
        )
    }
}

impl ToSchema for MoveStateName {
    fn name() -> std::borrow::Cow<'static, str> {
        "MoveState".into()
    }
}

/// The namespaces of a pool.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"pool": "default", "namespaces": ["ns1", "ns2"]}))]
pub struct NamespaceList<'a> {
    pub pool: &'a str,
    /// Namespaces with at least one token in the pool, sorted.
    pub namespaces: Vec<String>,
}

/// The readings of a queue this gateway kept, for the dashboard's charts.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueHistory<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    pub queue: &'a str,
    /// At most one reading per this many seconds.
    pub interval_s: u64,
    /// Readings are kept this many seconds.
    pub window_s: u64,
    /// Oldest first.
    pub points: Vec<crate::history::Point>,
}
