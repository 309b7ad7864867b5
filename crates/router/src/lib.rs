//! Tokens, pools and the live topology.
//!
//! - [`token`]: the `pool:secret` token format that routes a tenant to a pool.
//! - [`config`]: what the operator writes about pools and shards.
//! - [`topology`]: the connected pools, and which shard holds which bucket.
//!
//! The topology is immutable once built; the gateway holds the current one
//! behind an `arc-swap` ([`Router`]) so that a reload can replace it whole
//! while requests in flight finish on the one they started with.
//!
//! Errors: [`RouterError`] (invalid configuration, unreachable shard at
//! build time) for startup and reload code to report.

pub mod config;
pub mod ring;
pub mod token;
pub mod topology;

pub use config::{PoolConfig, SentinelConfig, ShardConfig};
pub use token::Token;
pub use topology::{Pool, Router, RouterError, Topology};
