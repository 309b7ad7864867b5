//! Bucket leases: which pump process may move a bucket's timers. A lease
//! has one owner at a time; the pump script checks it (fencing), so a
//! process whose lease expired moves nothing.

use fred::types::Value;

use crate::{EngineError, Shard, keys, keys::BucketKeys, scripts::SCRIPTS};

/// What a lease call asks for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take it if free, renew it if ours.
    Acquire,
    /// Give it up if ours.
    Release,
}

impl Shard {
    /// Keeps a pump process's leases on this shard in one call: one op per
    /// (namespace, bucket), and a heartbeat. Returns which buckets it holds
    /// afterwards (same order) and the live pump processes.
    pub async fn leases(
        &self,
        owner: &str,
        ttl_ms: u64,
        ops: &[(&str, u32, LeaseOp)],
    ) -> Result<(Vec<bool>, Vec<String>), EngineError> {
        let mut keys = vec![keys::PUMPS.to_owned()];
        keys.extend(ops.iter().map(|(ns, b, _)| BucketKeys::new(ns, *b).lease()));
        // A process drops out of the live set after 0.7 of the lease TTL
        // without a heartbeat (it renews every quarter, so it may miss two):
        // short enough that, by the round after a dead process's leases
        // expire, the others already rank first for its buckets and take
        // them; long enough not to flap on a busy machine.
        let member_ttl = (ttl_ms * 7 / 10).max(1);
        let mut args: Vec<Value> = vec![
            owner.into(),
            (ttl_ms as i64).into(),
            (member_ttl as i64).into(),
        ];
        args.extend(ops.iter().map(|(_, _, op)| {
            Value::from(match op {
                LeaseOp::Acquire => "a",
                LeaseOp::Release => "r",
            })
        }));
        let v = self.eval(&SCRIPTS.lease, keys, args).await?;
        let mut parts = match v {
            Value::Array(parts) if parts.len() == 2 => parts.into_iter(),
            other => return Err(self.bad_reply(format!("lease answered {other:?}"))),
        };
        let flags = parts.next().map(Value::into_array).unwrap_or_default();
        let owners = parts.next().map(Value::into_array).unwrap_or_default();
        let held = flags.iter().map(|f| f.as_i64() == Some(1)).collect();
        let live = owners.into_iter().filter_map(|o| o.into_string()).collect();
        Ok((held, live))
    }

    /// Releases a pump process's leases among `buckets` and removes it from
    /// the live pumps (its shutdown). Returns how many leases it released.
    pub async fn drop_leases(
        &self,
        owner: &str,
        buckets: &[(&str, u32)],
    ) -> Result<u64, EngineError> {
        let mut keys = vec![keys::PUMPS.to_owned()];
        keys.extend(
            buckets
                .iter()
                .map(|(ns, b)| BucketKeys::new(ns, *b).lease()),
        );
        let v = self
            .eval(&SCRIPTS.lease_drop, keys, vec![owner.into()])
            .await?;
        Ok(v.as_i64().unwrap_or(0).max(0) as u64)
    }
}
