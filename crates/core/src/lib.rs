//! Sundial's job model and Lua engine.
//!
//! - [`job`]: job ids, names, limits and the validation of what a client sends.
//! - [`keys`]: every Redis key and channel name, with the data structure behind
//!   it and its invariant. Nothing else in the workspace spells a key.
//! - [`scripts`]: the Lua scripts (`lua/*.lua`), loaded with `EVALSHA` and
//!   reloaded on `NOSCRIPT`.
//! - [`conn`]: the Redis connection layer, below the engine: a shard's
//!   connections ([`conn::Connection`]: standalone, Sentinel or cluster),
//!   the script runner, and the shared subscriber ([`conn::PubSub`]).
//! - [`engine`]: one [`engine::Shard`] (a Redis deployment) and the job
//!   operations that run on it, each of them one script call.
//!
//! Invariants kept here:
//! - every state change of a job is one script on one shard;
//! - all times come from the shard's clock (`TIME` inside the scripts), in ms;
//! - a script validates before it writes, so an error reply means no change.
//!
//! Errors: this crate returns [`EngineError`]; whether a fault means "Redis is
//! unreachable" (503) or something else (500) is decided here, once.

pub mod conn;
pub mod engine;
pub mod error;
pub mod job;
pub mod keys;
pub mod scripts;

pub use conn::{
    ClusterPrimary, Connection, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECTIONS, Handler, Heard,
    Listening, PubSub, ReplicaWait, ShardOptions, TlsFiles, url_uses_tls,
};
pub use engine::{
    AdminTables, Copied, Counts, DeadJob, DeadPage, Delivery, ExportPage, InTransit, JobView, Mark,
    MoveMode, NewJob, PAGE_BYTES, PageSize, PortableJob, Publication, PumpOutcome, PumpProcess,
    Schedule, Served, Shard, ShardCheck, Taken, Want, state,
};
pub use error::EngineError;
pub use job::{JobId, Limits};
