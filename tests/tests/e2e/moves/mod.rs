//! Moves of jobs between places: shards added to and removed from a pool
//! while gateways disagree for a moment, drains that the mover carries out
//! (through kills, restarts, a Redis Cluster and a Sentinel failover),
//! namespaces moved to another pool, acks that race the mover, and
//! schedules that move with their slots and namespaces. One file
//! per kind of scenario; what they share is in `common.rs` and `load.rs`.

mod acks;
mod common;
mod drains;
mod keys;
mod load;
mod namespaces;
mod retire;
mod schedules;
mod shard_kinds;
mod shards;
mod skew;
