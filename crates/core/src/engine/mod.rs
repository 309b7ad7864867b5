//! One shard (a Redis deployment) and the job operations that run on it.
//!
//! Each operation is one script call (queue-wide operations that may touch
//! many jobs, like destroy or respawn, are one call per batch; each batch is
//! atomic), and every script works on the keys of one slot. Operations take
//! the slot; which shard holds which slot is the router's business.

mod admin;
mod checks;
mod decode;
mod jobs;
mod keysets;
mod lease;
mod mover;
mod paging;
mod pins;
mod portable;
mod pump;
mod queue;
mod shard;
mod slots;
mod wipe;

pub use admin::AdminTables;
pub use checks::ShardCheck;
pub use decode::{Delivery, JobView, state};
pub use jobs::{NewJob, Publication, Schedule, Served, Want};
pub use lease::PumpProcess;
pub use mover::{Copied, InTransit, Mark, MoveMode, Taken};
pub use paging::{PAGE_BYTES, PageSize};
pub use portable::{ExportPage, PortableJob};
pub use pump::PumpOutcome;
pub use queue::{Counts, DeadJob, DeadPage};
pub use shard::Shard;
pub use wipe::Wiped;
