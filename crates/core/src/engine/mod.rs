//! The job engine: one [`Shard`] (a Redis deployment, over its
//! [`Connection`](crate::conn::Connection)) and the job operations that run
//! on it.
//!
//! Each operation is one script call (queue-wide operations that may touch
//! many jobs, like destroy or respawn, are one call per batch; each batch is
//! atomic), and every script works on the keys of one slot. Operations take
//! the slot; which shard holds which slot is the router's business.
//!
//! The operations are grouped by concern, each on a handle that borrows the
//! shard (`shard.jobs().publish(..)`) and costs nothing to make:
//!
//! | handle | file | what |
//! | --- | --- | --- |
//! | [`Shard::jobs`] | `jobs/` | publish, serve (consume, ack by `delete`), republish, release, peek by id |
//! | [`Shard::queues`] | `queues.rs` | a queue's counts, its next ready job, destroy |
//! | [`Shard::dead_letter`] | `dead_letter.rs` | a queue's dead letter: head, list, pick, respawn, delete |
//! | [`Shard::timers`] | `timers.rs` | the pump step of a slot |
//! | [`Shard::fires`] | `fires/` | schedules in their slots: definitions applied, due fires fired, plans stored |
//! | [`Shard::leases`] | `leases.rs` | pump processes' heartbeats and slot leases |
//! | [`Shard::mover`] | `mover/` | a moved slot's jobs taken out, read, stored, let go |
//! | [`Shard::slots`] | `slots.rs`, `usage.rs` | what the shard's slots hold, in bulk; each namespace's jobs and bytes |
//! | [`Shard::layouts`] | `layouts.rs` | pinned layouts, gateway views |
//! | [`Shard::admin`] | `admin.rs`, `backlog.rs`, `queue_index.rs` | admin tables, rate counters, backlog quotas, queue indexes |
//! | [`Shard::portable`] | `portable.rs` | jobs read for an export, stored by an import |
//!
//! On [`Shard`] itself (`shard.rs`): what a user asks of the shard as a
//! whole (its name, whether it is up, its subscriber and channels), and in
//! their own files the startup check (`checks.rs`) and the wipe of a shard
//! that left its pool (`wipe.rs`). Beside them: the keys each script is
//! called with (`keysets.rs`), script replies decoded (`decode.rs`), and
//! page sizes of walks over a slot (`paging.rs`).

mod admin;
mod backlog;
mod checks;
mod dead_letter;
mod decode;
mod fires;
mod jobs;
mod keysets;
mod layouts;
mod leases;
mod listing;
mod memory;
mod mover;
mod paging;
mod portable;
mod queue_index;
mod queues;
mod refusals;
mod shard;
mod slots;
mod timers;
mod usage;
mod wipe;

pub use admin::{Admin, AdminTables, RateGrant, RateTake};
pub use backlog::{Admission, BacklogAsk};
pub use checks::ShardCheck;
pub use dead_letter::{DeadJob, DeadLetter, DeadPage};
pub use decode::{Delivery, JobView, state};
pub use fires::{
    FIRE_AHEAD_MS, FireDef, FireOutcome, FireState, Fires, LastFire, Plan, PlannedFire, QueueFires,
    Room, ToPlan,
};
pub use jobs::{
    Ack, Acked, BadKey, Jobs, KeyHit, KeyMode, Keys, MAX_KEY_BYTES, MAX_KEY_WINDOW_SECS, NewJob,
    Outcome, PackedPolicy, Publication, Release, Released, Schedule, Served, Touch, Touched, Want,
    check_key, key_lane,
};
pub use layouts::Layouts;
pub use leases::{Leases, PumpProcess};
pub use listing::{JobPage, ListAsk, ListState, ListedJob};
pub use memory::Memory;
pub use mover::{Copied, InTransit, Mark, MoveMode, Mover, Taken};
pub use paging::{PAGE_BYTES, PageSize};
pub use portable::{ExportPage, Portable, PortableJob};
pub use queues::{Counts, Queues};
pub use shard::Shard;
pub use slots::{SlotBacklog, Slots};
pub use timers::{PumpOutcome, Timers};
pub use usage::{Totals, Usage};
pub use wipe::Wiped;
