//! What each namespace holds on a shard: its jobs and their bytes, summed
//! over the slots' usage hashes (`sd:T:u`, kept by the scripts: see `use`
//! in `lua/lib/counts.lua`). For quotas on a backlog, `sundial usage` and the
//! usage gauges; O(slots), pipelined, never on a request's hot path.
//!
//! A shard whose data predates the usage hash has it counted once, at its
//! startup check ([`Shard::count_usage_once`]).

use std::collections::BTreeMap;

use fred::{prelude::*, types::Value};

use crate::{EngineError, Shard, keys, scripts::SCRIPTS};

/// A namespace's jobs and their bytes (ids and records, attributes and
/// bodies included; Redis's own overhead per key and entry is not in it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub jobs: u64,
    pub bytes: u64,
}

impl Usage {
    /// Adds `other` to this usage.
    pub fn add(&mut self, other: Usage) {
        self.jobs += other.jobs;
        self.bytes += other.bytes;
    }
}

/// A namespace's running totals: jobs published, deliveries, jobs acked
/// (the per-queue totals of the slots' counters, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub published: u64,
    pub consumed: u64,
    pub acked: u64,
}

impl Totals {
    /// Adds `other` to these totals.
    pub fn add(&mut self, other: Totals) {
        self.published += other.published;
        self.consumed += other.consumed;
        self.acked += other.acked;
    }
}

impl super::Slots<'_> {
    /// The running totals of every namespace in `slots` here: one
    /// `HGETALL` of each slot's counters (O(queues): for the admin API).
    pub async fn totals(self, slots: &[u32]) -> Result<BTreeMap<String, Totals>, EngineError> {
        let all: Vec<BTreeMap<String, i64>> = self
            .per_slot("HGETALL", slots, keys::SlotKeys::counters)
            .await?;
        let mut out: BTreeMap<String, Totals> = BTreeMap::new();
        for (field, n) in all.into_iter().flatten() {
            let Some((kind, queue)) = field.split_at_checked(1) else {
                continue;
            };
            let Some((ns, _)) = keys::parse_qualified(queue) else {
                continue;
            };
            let t = out.entry(ns.to_owned()).or_default();
            let n = n.max(0) as u64;
            match kind {
                "P" => t.published += n,
                "C" => t.consumed += n,
                "A" => t.acked += n,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The usage of every namespace that holds jobs in `slots` here.
    pub async fn usage(self, slots: &[u32]) -> Result<BTreeMap<String, Usage>, EngineError> {
        let all: Vec<BTreeMap<String, i64>> = self
            .per_slot("HGETALL", slots, keys::SlotKeys::usage)
            .await?;
        let mut out: BTreeMap<String, Usage> = BTreeMap::new();
        for (field, n) in all.into_iter().flatten() {
            let n = n.max(0) as u64;
            match field.split_at_checked(1) {
                Some(("j", ns)) => out.entry(ns.to_owned()).or_default().jobs += n,
                Some(("b", ns)) => out.entry(ns.to_owned()).or_default().bytes += n,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The usage of one namespace in `slots` here: two fields per slot.
    pub async fn namespace_usage(self, slots: &[u32], ns: &str) -> Result<Usage, EngineError> {
        let fields = vec![format!("j{ns}"), format!("b{ns}")];
        let all: Vec<(Option<i64>, Option<i64>)> = self
            .per_slot_args("HMGET", slots, keys::SlotKeys::usage, &fields)
            .await?;
        let mut out = Usage::default();
        for (jobs, bytes) in all {
            out.jobs += jobs.unwrap_or(0).max(0) as u64;
            out.bytes += bytes.unwrap_or(0).max(0) as u64;
        }
        Ok(out)
    }
}

impl Shard {
    /// Counts the usage of `0..slots` afresh (`usage_build.lua`, one
    /// atomic call per slot) on a shard whose `sd:meta` does not say it was
    /// counted, then says so there. A shard written only by builds that
    /// keep the usage hash is counted once, when it holds nothing.
    pub(super) async fn count_usage_once(&self, slots: u32) -> Result<(), EngineError> {
        let counted: Option<String> = self
            .conn()
            .idempotent(keys::META, |c| async move {
                c.hget(keys::META, keys::META_USAGE).await
            })
            .await?;
        if counted.is_some() {
            return Ok(());
        }
        let mut jobs = 0u64;
        for slot in 0..slots {
            let k = keys::SlotKeys::new(slot);
            let n = self
                .conn()
                .eval(
                    &SCRIPTS.usage_build,
                    super::keysets::usage_build(&k),
                    Vec::<Value>::new(),
                )
                .await?;
            jobs += n.as_u64().unwrap_or(0);
        }
        if jobs > 0 {
            tracing::info!(shard = %self.name(), jobs, "counted the usage of jobs written before usage counts");
        }
        let _: i64 = self
            .conn()
            .idempotent(keys::META, |c| async move {
                c.hset(keys::META, (keys::META_USAGE, 1)).await
            })
            .await?;
        Ok(())
    }
}
