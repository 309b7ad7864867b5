//! Sundial's job model and Lua engine.
//!
//! Rooms, each using only those above it:
//! - [`job`]: job ids, names, limits and the validation of what a client sends.
//! - [`keys`]: every Redis key and channel name, with the data structure behind
//!   it and its invariant. Nothing else in the workspace spells a key.
//! - [`scripts`]: the Lua scripts (`lua/*.lua`), loaded with `EVALSHA` and
//!   reloaded on `NOSCRIPT`; [`error`]: what a fault means.
//! - [`conn`]: the Redis connection layer. A shard's connections
//!   ([`Connection`]: a standalone server, a Sentinel-managed master, or a
//!   Redis Cluster with its hash slot map), the script runner (`EVALSHA`,
//!   `WAIT` for replicas, commands sent again while a hash slot moves), its
//!   health (wait, probe, load the scripts) and the shared subscriber
//!   ([`PubSub`]). It knows nothing of jobs and imports nothing from
//!   `engine`.
//! - [`engine`]: [`Shard`], the engine's cheap-to-clone handle of one shard
//!   over its `Connection`, and the job operations, each one script call,
//!   grouped by concern on handles that borrow the shard: `shard.jobs()`,
//!   `queues()`, `dead_letter()`, `timers()`, `leases()`, `mover()`,
//!   `slots()`, `layouts()`, `admin()`, `portable()` (see [`engine`]).
//!
//! What every user of a shard asks of the shard as a whole is on [`Shard`]
//! itself: `name`, `same`, `is_cluster`, `is_connected`, `wait_connected`,
//! `probe`, `load_scripts`, `pubsub` and the channel names, and the startup
//! `check` and `wipe`. The connection's own details (a cluster's primaries,
//! the node that serves a key, `is_connected_for`, `wait_replicas`) are
//! asked of [`Shard::conn`].
//!
//! Words: a *slot* is a pool slot ([`keys`]); a Redis Cluster's slot is a
//! *hash slot*; the timer wheel's unit is a *second*.
//!
//! Invariants kept here:
//! - every state change of a job is one script on one shard;
//! - all times come from the shard's clock (`TIME` inside the scripts), in ms;
//! - a script validates before it writes, so an error reply means no change;
//! - the engine's handles cost nothing: making one neither allocates nor
//!   awaits, so the hot paths (publish, consume, ack, pump) pay only their
//!   script call;
//! - imports inside the crate point one way: `engine` → `conn` →
//!   `scripts`, `keys`, `error`.
//!
//! Errors: this crate returns [`EngineError`]; whether a fault means "Redis is
//! unreachable" (503) or something else (500) is decided here, once.

pub mod conn;
pub mod engine;
pub mod error;
pub mod job;
pub mod keys;
pub mod scripts;
pub mod series;

pub use conn::{
    ClusterPrimary, Connection, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECTIONS, Handler, Heard,
    Listening, Probe, PubSub, ReplicaWait, ShardOptions, TlsFiles, url_uses_tls,
};
pub use engine::{
    Ack, Acked, AdminTables, Admission, BacklogAsk, BadKey, Copied, Counts, DeadJob, DeadPage,
    Delivery, ExportPage, FIRE_AHEAD_MS, FireDef, FireOutcome, FireState, Fires, InTransit,
    JobPage, JobView, KeyHit, KeyMode, Keys, ListAsk, ListState, ListedJob, MAX_KEY_BYTES,
    MAX_KEY_WINDOW_SECS, Mark, Memory, MoveMode, NewJob, Outcome, PAGE_BYTES, PackedPolicy,
    PageSize, Plan, PlannedFire, PortableJob, Publication, PumpOutcome, PumpProcess, QueueFires,
    RateGrant, RateTake, Release, Released, Room, Schedule, Served, Shard, ShardCheck, Taken,
    ToPlan, Totals, Touch, Touched, Usage, Want, check_key, key_lane, state,
};
pub use error::EngineError;
pub use job::{JobId, Limits};
