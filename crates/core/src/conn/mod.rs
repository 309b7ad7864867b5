//! The Redis connection layer: how Sundial reaches one shard, below the job
//! engine ([`crate::engine`]), of which it knows nothing. It runs what the
//! engine asks (scripts, and commands that may run twice) where a shard's
//! keys live, and classifies what fails ([`EngineError`](crate::EngineError)).
//!
//! - `options`: how to connect ([`ShardOptions`], [`ReplicaWait`], the
//!   defaults); `tls`: the operator's TLS files ([`TlsFiles`]).
//! - `node`: the pooled connections to one Redis server: a standalone
//!   server, a Sentinel-managed master, or one primary of a cluster.
//! - `cluster`: a Redis Cluster shard: a node per primary, the cluster's
//!   hash slot map, routing by hash slot, `MOVED` followed at once.
//! - `connection`: [`Connection`], one shard's connections (a node, or a
//!   cluster), shared by its clones; what the cluster looks like
//!   ([`ClusterPrimary`]); errors classified once.
//! - `eval` and `replicated`: the script runner (`EVALSHA`, reloaded on
//!   `NOSCRIPT`; writes confirmed by replicas with `WAIT`); `resend`:
//!   commands that may run twice, and scripts a cluster refused unrun,
//!   sent again while their hash slot moves.
//! - `health`: waiting for a shard, probing it, loading the scripts.
//! - `pubsub`: the shard's one subscriber, shared by every listener in
//!   the process.
//!
//! Words: a *hash slot* is one of a Redis Cluster's 16,384 (what `MOVED`,
//! `ASK` and `CLUSTER SLOTS` speak of); a *slot* alone is a pool slot
//! ([`crate::keys`]), which this layer never needs to know.

mod address;
mod cluster;
mod connection;
mod eval;
mod health;
mod node;
mod options;
mod pubsub;
mod replicated;
mod resend;
mod tls;

pub use address::unix_database;
pub use connection::{ClusterPrimary, Connection};
pub use health::Probe;
pub use options::{DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECTIONS, ReplicaWait, ShardOptions};
pub use pubsub::{Handler, Heard, Listening, PubSub};
pub use tls::{TlsFiles, url_uses_tls};
