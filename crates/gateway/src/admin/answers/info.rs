//! The pools, their shards and drains, the version, and the probes.

use std::collections::BTreeMap;

use serde::Serialize;
use sundial_router::{
    Layout, drain::LayoutReport, drain::PoolReport, health::ShardHealth, mover::MoverStatus,
};
use utoipa::ToSchema;

/// The names of the pools in this gateway's config.
#[derive(Debug, Serialize, ToSchema)]
#[serde(transparent)]
#[schema(example = json!(["default"]))]
pub struct PoolNames(pub Vec<String>);

/// The pool's namespaces, each with its queues (sorted) that hold jobs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(transparent)]
#[schema(example = json!({"ns": ["emails", "reports"]}))]
pub struct Info(pub BTreeMap<String, Vec<String>>);

/// Every pool's layouts and drains.
#[derive(Debug, Serialize, ToSchema)]
pub struct Drains {
    pub pools: Vec<PoolReport>,
}

/// In place of a part that could not be read (the shard is down or timed
/// out).
#[derive(Debug, Serialize, ToSchema)]
pub struct ShardError {
    pub error: String,
}

/// A process that holds (or held) pump leases on a shard.
#[derive(Debug, Serialize, ToSchema)]
pub struct PumpProcess {
    pub id: String,
    /// `false` for a process that stopped without leaving, until the next
    /// heartbeat clears it.
    pub live: bool,
    /// When its heartbeat runs out (ms, shard clock); `null` for a lease
    /// holder the membership no longer lists.
    #[schema(required = true)]
    pub expires_at_ms: Option<u64>,
    /// How many of the shard's slot leases it holds.
    pub leases: u64,
}

/// A shard's pump processes and its slots that no process holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct Pumps {
    pub processes: Vec<PumpProcess>,
    pub unleased: u64,
}

/// What could be read of a part, or why not.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum OrError<T> {
    Read(T),
    Failed(ShardError),
}

impl<T> OrError<T> {
    pub fn failed(e: impl std::fmt::Display) -> Self {
        Self::Failed(ShardError {
            error: e.to_string(),
        })
    }
}

/// A Redis Cluster shard's primary.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterPrimary {
    /// `host:port`.
    pub addr: String,
    pub connected: bool,
    #[schema(maximum = 16384)]
    pub hash_slots: u32,
    /// How many of the pool's slots it serves.
    pub pool_slots: u64,
}

/// `single` for standalone or Sentinel, `cluster` for Redis Cluster.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShardKind {
    Single,
    Cluster,
}

/// One shard of a pool.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShardStatus<'a> {
    /// `<pool>/<shard>`.
    pub name: &'a str,
    pub kind: ShardKind,
    pub weight: u32,
    /// The pool's slots it holds now.
    pub slots: usize,
    /// Plus moved slots still draining from it.
    pub slots_held: usize,
    /// As in `/ready`; `null` before the first probe.
    #[schema(required = true)]
    pub health: Option<ShardHealth>,
    pub pumps: OrError<Pumps>,
    /// Cluster shards only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_primaries: Option<Vec<ClusterPrimary>>,
}

/// A pool: its shards, layout, drains and mover.
#[derive(Debug, Serialize, ToSchema)]
pub struct PoolStatus<'a> {
    pub pool: &'a str,
    #[schema(minimum = 1)]
    pub slots: u32,
    #[schema(minimum = 1)]
    pub lanes: u32,
    pub layout: &'a Layout,
    pub shards: Vec<ShardStatus<'a>>,
    /// `GET /drains`'s list for the pool, or `{"error"}` when a shard
    /// cannot be read.
    pub draining: OrError<Vec<LayoutReport>>,
    pub mover: MoverStatus,
}

/// The build.
#[derive(Debug, Serialize, ToSchema)]
pub struct Version {
    #[schema(examples("0.1.0"))]
    pub version: &'static str,
    /// `unknown` unless set at build time.
    pub build_commit: &'static str,
    /// `unknown` unless set at build time.
    pub build_date: &'static str,
}

/// `msg` of a reload.
#[derive(Debug, Serialize, ToSchema)]
pub enum ReloadedMsg {
    #[serde(rename = "reloaded")]
    Reloaded,
}

/// A reload that took.
#[derive(Debug, Serialize, ToSchema)]
pub struct Reloaded {
    #[schema(inline)]
    pub msg: ReloadedMsg,
    /// What changed, in words.
    pub changes: String,
}

/// `status` of a live process.
#[derive(Debug, Serialize, ToSchema)]
pub enum LiveStatus {
    #[serde(rename = "ok")]
    Ok,
}

/// The process answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Live {
    #[schema(inline)]
    pub status: LiveStatus,
    /// The process's id: which process holds the port.
    #[schema(minimum = 1)]
    pub pid: u32,
}

/// Whether this gateway serves.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReadyStatus {
    Ready,
    Degraded,
    Unavailable,
    Starting,
    Draining,
}

/// This gateway's readiness and every shard's last probe.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    pub status: ReadyStatus,
    /// Pool → shard name → its health.
    pub pools: BTreeMap<String, BTreeMap<String, ShardHealth>>,
}
