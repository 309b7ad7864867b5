//! What a shard's slots hold, read in bulk: for drains, backlog gauges and
//! admin listings. O(slots), pipelined; never on a request's hot path.

use std::collections::{BTreeMap, HashMap};

use fred::prelude::*;

use crate::{EngineError, Shard, keys::SlotKeys};

impl Shard {
    /// Whether any of `0..slots` holds a job here, in any state.
    pub async fn holds_jobs(&self, slots: u32) -> Result<bool, EngineError> {
        let all: Vec<u32> = (0..slots).collect();
        Ok(self.slot_jobs(&all).await?.iter().any(|n| *n > 0))
    }

    /// How many jobs (records in any state) each of `slots` holds here.
    pub async fn slot_jobs(&self, slots: &[u32]) -> Result<Vec<u64>, EngineError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for s in slots {
            let _: () = pipe
                .hlen(SlotKeys::new(*s).jobs())
                .await
                .map_err(|e| self.err(e))?;
        }
        pipe.all().await.map_err(|e| self.err(e))
    }

    /// The qualified queues that have been published to in `slots` here
    /// (whether or not they hold jobs now).
    pub async fn slot_queues(
        &self,
        slots: &[u32],
    ) -> Result<std::collections::BTreeSet<String>, EngineError> {
        let mut out = std::collections::BTreeSet::new();
        if slots.is_empty() {
            return Ok(out);
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for s in slots {
            let _: () = pipe
                .hkeys(SlotKeys::new(*s).counters())
                .await
                .map_err(|e| self.err(e))?;
        }
        let all: Vec<Vec<String>> = pipe.all().await.map_err(|e| self.err(e))?;
        for fields in all {
            out.extend(
                fields
                    .into_iter()
                    .filter(|f| f.starts_with('P'))
                    .map(|f| f[1..].to_owned()),
            );
        }
        Ok(out)
    }

    /// The per-state counters of `slots`, per qualified queue:
    /// `<ns>/<queue>` → [delayed, ready, reserved, dead]. Queues whose
    /// counts are all 0 are left out.
    pub async fn slot_counts(
        &self,
        slots: &[u32],
    ) -> Result<BTreeMap<String, [u64; 4]>, EngineError> {
        let mut out = BTreeMap::new();
        if slots.is_empty() {
            return Ok(out);
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for s in slots {
            let _: () = pipe
                .hgetall(SlotKeys::new(*s).counters())
                .await
                .map_err(|e| self.err(e))?;
        }
        let all: Vec<HashMap<String, i64>> = pipe.all().await.map_err(|e| self.err(e))?;
        for fields in all {
            for (field, n) in fields {
                let mut chars = field.chars();
                let state = match chars.next() {
                    Some('l') => 0,
                    Some('r') => 1,
                    Some('f') => 2,
                    Some('d') => 3,
                    _ => continue,
                };
                if n <= 0 {
                    continue;
                }
                let entry: &mut [u64; 4] = out.entry(chars.as_str().to_owned()).or_default();
                entry[state] += n as u64;
            }
        }
        Ok(out)
    }
}
