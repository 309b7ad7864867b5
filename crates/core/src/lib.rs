//! Sundial's job model and Lua engine.
//!
//! - [`job`]: job ids, names, limits and the validation of what a client sends.
//! - [`keys`]: every Redis key and channel name, with the data structure behind
//!   it and its invariant. Nothing else in the workspace spells a key.
//! - [`scripts`]: the Lua scripts (`lua/*.lua`), loaded with `EVALSHA` and
//!   reloaded on `NOSCRIPT`.
//! - [`engine`]: one [`engine::Shard`] (a Redis deployment) and the job
//!   operations that run on it, each of them one script call; its shared
//!   subscriber ([`engine::PubSub`]).
//!
//! Invariants kept here:
//! - every state change of a job is one script on one shard;
//! - all times come from the shard's clock (`TIME` inside the scripts), in ms;
//! - a script validates before it writes, so an error reply means no change.
//!
//! Errors: this crate returns [`EngineError`]; whether a fault means "Redis is
//! unreachable" (503) or something else (500) is decided here, once.

pub mod engine;
pub mod error;
pub mod job;
pub mod keys;
pub mod scripts;

pub use engine::{
    AdminTables, ClusterPrimary, Copied, Counts, DeadJob, DeadPage, Delivery, ExportPage, Handler,
    Heard, InTransit, JobView, Listening, Mark, MoveMode, NewJob, PAGE_BYTES, PageSize,
    PortableJob, PubSub, Publication, PumpOutcome, PumpProcess, ReplicaWait, Schedule, Served,
    Shard, ShardCheck, ShardOptions, Taken, Want, state,
};
pub use error::EngineError;
pub use job::{JobId, Limits};
