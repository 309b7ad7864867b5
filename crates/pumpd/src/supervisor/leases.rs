//! A shard's lease rounds (the scheme is in the parent module's doc): one
//! heartbeat, then the claims and gives that make the slots held match
//! the slots this process ranks first for; and the leases given back when
//! the pumps stop.

use sundial_core::EngineError;
use xxhash_rust::xxh3::xxh3_64;

use super::ShardPumps;

impl ShardPumps {
    /// One heartbeat; then claim the wanted slots not held, and give up
    /// the held ones another live process ranks first for; start and stop
    /// slot tasks to match.
    pub(super) async fn lease_round(&mut self) {
        let ttl = self.opts.lease_ttl.as_millis() as u64;
        // A process drops out of the live set after 0.7 of the lease TTL
        // without a heartbeat (it beats every quarter, so it may miss two):
        // short enough that a dead process's slots pass within about that
        // long, long enough not to flap on a busy machine.
        let member_ttl = (ttl * 7 / 10).max(1);
        if !self.heartbeat(member_ttl).await {
            return;
        }
        let failed = self.lease_calls(member_ttl).await;
        if let Some((slot, e)) = failed.last() {
            tracing::warn!(shard = self.shard.name(), slots = failed.len(), last_slot = slot, error = %e, "lease calls failed; trying again next round");
        }
        self.status
            .round(self.shard.name(), Ok(self.held.len()), self.subscribed);
        self.leases.set(self.held.len(), &self.lags);
    }

    /// Sends the heartbeat and takes the live set it answers; whether it
    /// did (a failure is logged and reported, and keeps what is held).
    async fn heartbeat(&mut self, member_ttl: u64) -> bool {
        // A heartbeat that answers after its own TTL proves nothing: bound it
        // by that, so a hung shard shows as an error, not as a stuck loop.
        let beat = tokio::time::timeout(
            std::time::Duration::from_millis(member_ttl),
            self.shard.leases().heartbeat(&self.owner, member_ttl),
        )
        .await
        .map_err(|_| "the heartbeat timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()));
        match beat {
            Ok((live, rejoined)) => {
                self.live = live;
                if rejoined && !self.held.is_empty() {
                    // This process was gone from the live set (paused, cut
                    // off): others may have taken its slots. Each held slot
                    // pumps now, and one that passed finds itself fenced.
                    self.wake_all();
                }
                true
            }
            Err(e) => {
                tracing::warn!(shard = self.shard.name(), error = %e, "heartbeat failed; keeping what is held");
                self.status
                    .round(self.shard.name(), Err(e), self.subscribed);
                false
            }
        }
    }

    /// The lease call each slot needs, in turn; the calls that failed.
    async fn lease_calls(&mut self, member_ttl: u64) -> Vec<(u32, EngineError)> {
        let slots = self.slots.clone();
        let round = std::time::Instant::now();
        let mut failed = Vec::new();
        for &slot in slots.iter() {
            if let Err(e) = self.lease_call(slot).await {
                // A call refused at once (on a cluster, a dead master
                // refuses only its own slots'): go on with the other slots
                // while the round is young. One that took long (a hung
                // shard) would be followed by as slow ones: try again next
                // round rather than hold up the heartbeat.
                failed.push((slot, e));
                if round.elapsed() < std::time::Duration::from_millis(member_ttl / 2) {
                    continue;
                }
                break;
            }
        }
        failed
    }

    /// Claims `slot` (and starts its task) if this process ranks first for
    /// it and does not hold it; gives it to the process that does if this
    /// one holds it and does not; else nothing.
    async fn lease_call(&mut self, slot: u32) -> Result<(), EngineError> {
        let first = self.first_for(slot).to_owned();
        let mine = first == self.owner;
        let held = self.held.contains_key(&slot);
        if mine && !held {
            match self.shard.leases().claim(slot, &self.owner).await {
                Ok(taken) => {
                    if taken {
                        self.leases.acquired.increment(1);
                    }
                    self.start(slot);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else if !mine && held {
            if let Some(h) = self.held.remove(&slot) {
                h.stop.cancel();
            }
            // Given up or not (a failed call), the process that ranks
            // first takes it.
            // To the process that ranks first, which believes it should
            // hold it: a lease deleted instead could sit unpumped under
            // a process that thinks it holds it already.
            self.shard
                .leases()
                .give(slot, &self.owner, Some(&first))
                .await
        } else {
            Ok(())
        }
    }

    /// Counts and logs a lease this process held and lost without giving
    /// it up.
    pub(super) fn lease_lost(&self, slot: u32, why: &str) {
        tracing::info!(
            shard = self.shard.name(),
            slot,
            why,
            "pump lease lost; the slot is pumped again as soon as its lease is held"
        );
        metrics::counter!("sundial_pump_leases_lost_total", "pool" => self.pool.name().to_owned())
            .increment(1);
    }

    /// The live process that ranks first for `slot`.
    fn first_for(&self, slot: u32) -> &str {
        let score = |owner: &str| xxh3_64(format!("{owner}/{slot}").as_bytes());
        self.live
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(self.owner.as_str()))
            .max_by_key(|o| (score(o), *o))
            .unwrap_or(self.owner.as_str())
    }

    /// Gives back every lease (the topology changed, or the process stops).
    /// When the process stops it also leaves the live set, so others take
    /// over at once rather than when its heartbeat lapses; on a topology
    /// change it stays, so nobody else claims its slots meanwhile.
    pub(super) async fn release_all(&mut self) {
        let held: Vec<u32> = self.held.keys().copied().collect();
        let mut released = 0;
        for slot in held {
            match self.shard.leases().give(slot, &self.owner, None).await {
                Ok(()) => released += 1,
                Err(e) => {
                    tracing::warn!(shard = self.shard.name(), error = %e, "cannot release pump leases; others take them once this process's heartbeat lapses");
                    break;
                }
            }
        }
        if self.process.is_cancelled() {
            let _ = self.shard.leases().leave(&self.owner).await;
        }
        tracing::info!(shard = self.shard.name(), released, "pump leases released");
        self.held.clear();
    }
}
