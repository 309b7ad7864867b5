//! Sundial's control plane: which Redis holds what, and keeping every
//! process in step when that changes.
//!
//! - [`token`]: the `pool:secret` token format that routes a tenant to a pool.
//! - [`admin`]: the admin Redis's tables (tokens, limits, namespace homes,
//!   quotas), each typed, replicated into every gateway; the queue index.
//! - [`quota`]: a namespace's bounds, as the config, a pool and the quota
//!   table set them.
//! - [`usage`]: what namespaces hold in a pool (jobs, bytes), from the
//!   slots.
//! - [`backlog`]: a namespace's backlog quota admitted before a write, on
//!   snapshots of its usage.
//! - [`scope`]: what a token may do, and on which queues.
//! - [`schedule`]: when a schedule fires (cron in a time zone, or an
//!   interval), and what it does with fires it missed.
//! - [`push`]: push delivery's parts (being built): how a push request
//!   is signed, and which addresses a push may reach.
//! - [`config`]: what the operator writes about pools and shards.
//! - [`layout`]: a pool's ring membership, and how shards pin it.
//! - [`ring`]: consistent hashing of a pool's slots over its shards.
//! - [`topology`]: the connected pools, and which shard holds which slot.
//! - [`prepare`]: checking shards and building a topology, at start and on
//!   reload.
//! - [`live`]: the topology in force ([`LiveTopology`]) and its change signal.
//! - [`reload`]: hot reload on a file change, SIGHUP or the admin API.
//! - [`view`]: what gateways tell each other through the shards (their
//!   views), and this process's name in them.
//! - [`writes`]: which layout of a pool writes go to while gateways' configs
//!   differ.
//! - [`placement`]: where a job, a slot or a namespace's jobs may be, and in
//!   which order to look.
//! - [`announce`]: what this gateway announces in its view.
//! - [`drain`]: the loop that announces views, follows them and retires
//!   drained layouts; drain progress.
//! - [`mover`]: copying the jobs of moved slots to their new shard, and of
//!   namespaces to their new pool.
//! - [`health`]: every shard probed each second, for `/ready` and metrics.
//! - [`headroom`]: shards near their `maxmemory` refuse the publishes of
//!   namespaces that hold more than their share of them.
//!
//! A topology is immutable once built: a reload prepares a new one and
//! stores it whole, while requests in flight finish on the one they started
//! with. Nothing here speaks HTTP.
//!
//! Errors: [`RouterError`] for an invalid topology; startup and reload code
//! return `anyhow` chains for the operator to read.

pub mod admin;
mod announce;
pub mod backlog;
pub mod config;
pub mod drain;
pub mod headroom;
pub mod health;
pub mod layout;
pub mod live;
pub mod mover;
pub mod placement;
pub mod policy;
pub mod prepare;
pub mod push;
pub mod quota;
pub mod reload;
pub mod ring;
pub mod schedule;
pub mod scope;
pub mod token;
pub mod topology;
pub mod usage;
pub mod view;
pub mod writes;

pub use config::{PoolConfig, SentinelConfig, ShardConfig};
pub use layout::{Layout, Pins};
pub use live::LiveTopology;
pub use scope::{Grant, Scope};
pub use token::Token;
pub use topology::{Pool, RouterError, Topology};
