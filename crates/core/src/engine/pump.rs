//! One pump step over one bucket.

use fred::types::Value;

use super::decode::Fields;
use crate::{EngineError, Shard, keys, keys::BucketKeys, scripts::SCRIPTS};

/// What one pump call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PumpOutcome {
    /// Timer entries handled (at most the batch limit).
    pub processed: u64,
    /// Delayed jobs made ready.
    pub to_ready: u64,
    /// Reservations whose TTR ran out, made ready again.
    pub retried: u64,
    /// Reservations whose TTR ran out with no try left, moved to the dead letter.
    pub dead: u64,
    /// Jobs dropped because their TTL ran out.
    pub expired: u64,
    /// The bucket's next deadline after this call (ms, shard clock).
    pub next_due_ms: Option<u64>,
    /// The deadline of the first entry handled: how late the pump was.
    pub oldest_due_ms: Option<u64>,
    /// The shard's clock when the call ran (ms).
    pub now_ms: u64,
    /// The pump's lease was not held: nothing was moved.
    pub fenced: bool,
    /// Per queue touched: [made ready, retried, dead-lettered, expired].
    pub per_queue: Vec<(String, [u64; 4])>,
}

/// What a lease call asks for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take it if free, renew it if ours.
    Acquire,
    /// Take it only if nobody holds it; renew it if ours.
    IfFree,
    /// Give it up if ours.
    Release,
}

impl Shard {
    /// Moves up to `limit` due timer entries of one bucket. With an `owner`,
    /// only while that owner holds the bucket's lease (else `fenced`).
    pub async fn pump(
        &self,
        ns: &str,
        bucket: u32,
        limit: u32,
        owner: Option<&str>,
    ) -> Result<PumpOutcome, EngineError> {
        let k = BucketKeys::new(ns, bucket);
        let keys = vec![k.jobs(), k.timer(), k.counters(), k.slots(), k.lease()];
        let args: Vec<Value> = vec![
            k.prefix().into(),
            i64::from(limit).into(),
            keys::ready_channel_prefix(ns).into(),
            owner.unwrap_or_default().into(),
        ];
        let v = self.eval(&SCRIPTS.pump, keys, args).await?;
        let mut f = Fields::new(self, v)?;
        if f.len() == 1 {
            return Ok(PumpOutcome {
                fenced: true,
                ..Default::default()
            });
        }
        let opt = |v: i64| u64::try_from(v).ok();
        Ok(PumpOutcome {
            processed: f.uint()?,
            to_ready: f.uint()?,
            retried: f.uint()?,
            dead: f.uint()?,
            expired: f.uint()?,
            next_due_ms: opt(f.int()?),
            oldest_due_ms: opt(f.int()?),
            now_ms: f.uint()?,
            fenced: false,
            per_queue: {
                let mut per = Vec::new();
                while f.len() >= 5 {
                    let q = f.string()?;
                    per.push((q, [f.uint()?, f.uint()?, f.uint()?, f.uint()?]));
                }
                per
            },
        })
    }

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
                LeaseOp::IfFree => "f",
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
