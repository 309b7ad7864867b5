//! Writes that must be on the replicas before anything relies on them
//! (publishes and republishes, which a client is then told are stored, and
//! each step of the mover), confirmed with `WAIT` when the shard is set to
//! wait for them.

use std::time::Duration;

use fred::{
    prelude::*,
    types::{Value, config::Options},
};

use super::connection::Connection;
use crate::{EngineError, scripts::Named};

/// How long a shard with `wait` refuses publishes (storing nothing) after
/// its replicas failed to confirm one (see [`Connection::eval_replicated`]).
pub(crate) const WAIT_BACKOFF: Duration = Duration::from_secs(1);

impl Connection {
    /// [`eval`](Self::eval) of a script whose writes must be on the
    /// replicas before anything relies on them (publish and republish,
    /// then answered as stored; the mover's steps). When the shard is configured
    /// to (`wait`), the script runs on connections of their own, and then
    /// waits on the same connection to the same master until that many
    /// replicas hold every write made on it so far (`WAIT`); it fails with
    /// [`EngineError::NotReplicated`] if they do not within the timeout
    /// (the write stays on the master). For [`WAIT_BACKOFF`] after that,
    /// publishes to that master are refused as unavailable before anything
    /// is stored, so that a replica outage costs each publish nothing
    /// rather than a `WAIT` timeout each (on a cluster, the other masters'
    /// publishes go on).
    ///
    /// A connection that drops between the script and its `WAIT` gives the
    /// `WAIT` a fresh connection with nothing to wait for: that `WAIT`
    /// confirms at once. The script's own write may then be lost with its
    /// master, as without `wait`.
    pub(crate) async fn eval_replicated(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        use std::sync::atomic::Ordering;
        let Some(wait) = self.inner.wait else {
            return self.eval(script, keys, args).await;
        };
        let node = self
            .route(keys.first().map_or(0, |k| self.hash_slot_of(k)))
            .await?;
        let now_ms = || node.born.elapsed().as_millis() as u64 + 1;
        let last_short = node.last_short_ms.load(Ordering::Acquire);
        if last_short != 0 && now_ms().saturating_sub(last_short) < WAIT_BACKOFF.as_millis() as u64
        {
            return Err(self.unavailable(
                "the replicas confirmed no write in the last second: nothing stored",
            ));
        }
        // The connection that ran the script, to the master that serves
        // its keys' hash slot.
        let (value, client) = self.eval_on(true, script, keys, args).await?;
        let start = std::time::Instant::now();
        let opts = Options {
            timeout: Some(wait.timeout + self.inner.command_timeout),
            fail_fast: true,
            ..Options::default()
        };
        // A `WAIT` that fails leaves the job stored and unconfirmed, as one
        // that times out does.
        let acked: i64 = client
            .with_options(&opts)
            .wait(
                i64::from(wait.replicas),
                wait.timeout.as_millis().max(1) as i64,
            )
            .await
            .unwrap_or(0);
        let confirmed = acked >= i64::from(wait.replicas);
        if let Some((seconds, results)) = &self.inner.wait_metrics {
            seconds.record(start.elapsed().as_secs_f64());
            results[usize::from(!confirmed)].increment(1);
        }
        if confirmed {
            node.last_short_ms.store(0, Ordering::Release);
            Ok(value)
        } else {
            node.last_short_ms.store(now_ms(), Ordering::Release);
            Err(EngineError::NotReplicated {
                shard: self.inner.name.clone(),
                acked,
                wanted: wait.replicas,
            })
        }
    }
}
