//! Which namespaces and queues a shard holds, and how many jobs: what
//! admin endpoints, drains and pumps enumerate. Not for hot paths, except
//! `register`, which a gateway calls once per queue.

use fred::{prelude::*, types::Value};

use crate::{EngineError, Shard, keys};

impl Shard {
    /// Whether this shard holds any job, in any state, of any namespace
    /// (read from the per-bucket counters of every registered namespace; an
    /// admin-time check, not for hot paths).
    pub async fn holds_jobs(&self, buckets: u32) -> Result<bool, EngineError> {
        let client = self.client()?;
        let namespaces: Vec<String> = client
            .smembers(keys::NAMESPACES)
            .await
            .map_err(|e| self.err(e))?;
        let all: Vec<u32> = (0..buckets).collect();
        for ns in namespaces {
            // Only the per-state counts say what is held (the running
            // totals only grow).
            let counts = self.queue_counts(&ns, &all).await?;
            if counts.values().flatten().any(|n| *n > 0) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// How many jobs each of `buckets` of `ns` holds here (records in any
    /// state).
    pub async fn bucket_jobs(&self, ns: &str, buckets: &[u32]) -> Result<Vec<u64>, EngineError> {
        if buckets.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for b in buckets {
            let _: () = pipe
                .hlen(keys::BucketKeys::new(ns, *b).jobs())
                .await
                .map_err(|e| self.err(e))?;
        }
        pipe.all().await.map_err(|e| self.err(e))
    }

    /// The per-state counters of `buckets` of `ns`, summed per queue:
    /// queue → [delayed, ready, reserved, dead]. O(buckets × queues).
    pub async fn queue_counts(
        &self,
        ns: &str,
        buckets: &[u32],
    ) -> Result<std::collections::BTreeMap<String, [u64; 4]>, EngineError> {
        let mut out = std::collections::BTreeMap::new();
        if buckets.is_empty() {
            return Ok(out);
        }
        let client = self.client()?;
        let pipe = client.pipeline();
        for b in buckets {
            let _: () = pipe
                .hgetall(keys::BucketKeys::new(ns, *b).counters())
                .await
                .map_err(|e| self.err(e))?;
        }
        let all: Vec<std::collections::HashMap<String, i64>> =
            pipe.all().await.map_err(|e| self.err(e))?;
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
                let entry: &mut [u64; 4] = out.entry(chars.as_str().to_owned()).or_default();
                entry[state] += n.max(0) as u64;
            }
        }
        Ok(out)
    }

    /// Records that a namespace has a queue on this shard (idempotent). The
    /// gateway calls this before the first publish to a queue, so a job never
    /// exists in a queue the registry does not list.
    pub async fn register(&self, ns: &str, queue: &str) -> Result<(), EngineError> {
        let client = self.client()?;
        let pipe = client.pipeline();
        let _: () = pipe
            .sadd(keys::NAMESPACES, ns)
            .await
            .map_err(|e| self.err(e))?;
        let _: () = pipe
            .sadd(keys::queues(ns), queue)
            .await
            .map_err(|e| self.err(e))?;
        let _: Vec<Value> = pipe.all().await.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The namespaces registered on this shard.
    pub async fn namespaces(&self) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        client
            .smembers(keys::NAMESPACES)
            .await
            .map_err(|e| self.err(e))
    }

    /// The queues of a namespace registered on this shard.
    pub async fn queues(&self, ns: &str) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        client
            .smembers(keys::queues(ns))
            .await
            .map_err(|e| self.err(e))
    }
}
