//! Whole namespaces: imported, moved, or needing a look.

use serde::Serialize;
use sundial_router::admin::homes::{Home, MoveState};
use utoipa::ToSchema;

use super::queues::MoveStateName;

/// What an import stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct ImportResult<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    /// Jobs stored.
    pub imported: u64,
    /// Jobs skipped: their id was there already (or the mover copied it
    /// there in the last two minutes).
    pub existing: u64,
    /// Schedules stored, paused (a schedule of the same name is revised).
    pub schedules: u64,
}

/// A namespace's move to another pool.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamespaceMove<'a> {
    /// The pool of the namespace's tokens.
    pub pool: &'a str,
    pub namespace: &'a str,
    /// The pool it moves from.
    pub from: &'a str,
    /// The pool it moves (or moved) to.
    pub to: &'a str,
    #[schema(value_type = MoveStateName)]
    pub state: MoveState,
    /// When this state began (Unix ms).
    pub since_ms: u64,
    /// Jobs still in `from` (null in the answer that starts a move).
    #[schema(required = true)]
    pub jobs_left: Option<u64>,
    /// Jobs this gateway's mover carried to `to`.
    pub jobs_moved: u64,
}

impl<'a> NamespaceMove<'a> {
    pub fn new(pool: &'a str, ns: &'a str, home: &'a Home) -> Self {
        Self {
            pool,
            namespace: ns,
            from: &home.from,
            to: &home.to,
            state: home.state,
            since_ms: home.since_ms,
            jobs_left: None,
            jobs_moved: 0,
        }
    }
}

/// A queue that needs a look: dead jobs, or ready jobs waiting long.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttentionQueue<'a> {
    pub namespace: &'a str,
    pub queue: &'a str,
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
    /// How long its next ready job has waited (0 with none ready).
    pub oldest_ready_s: u64,
}

/// The queues of a pool that need a look, dead letters first, then the
/// longest waits.
#[derive(Debug, Serialize, ToSchema)]
pub struct Attention<'a> {
    pub pool: &'a str,
    pub min_age_s: u64,
    pub queues: Vec<AttentionQueue<'a>>,
    /// More than 500 queues need a look; the first 500 are listed.
    pub truncated: bool,
}
