//! One shard (a Redis deployment) and the job operations that run on it.
//!
//! Each operation is one script call (queue-wide operations that may touch
//! many jobs, like destroy or respawn, are one call per batch; each batch is
//! atomic). Operations take the namespace and the buckets of that namespace
//! that live on this shard; which buckets those are is the router's business.

mod admin;
mod checks;
mod decode;
mod jobs;
mod lease;
mod pins;
mod pubsub;
mod pump;
mod queue;
mod registry;
mod shard;

pub use admin::AdminTables;
pub use checks::ShardCheck;
pub use decode::{Delivery, JobView};
pub use jobs::{NewJob, Schedule};
pub use lease::LeaseOp;
pub use pubsub::{Handler, Heard, Listening, PubSub};
pub use pump::PumpOutcome;
pub use queue::Counts;
pub use shard::{DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECTIONS, Shard, ShardOptions};
