//! What the pumps say about themselves, for health checks: per shard, when
//! its lease loop last ran and last reached Redis, how many leases it holds,
//! and whether it hears timer announcements.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// Shared between the pump loops (which write) and the admin listener
/// (which reads). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PumpStatus {
    shards: Arc<Mutex<BTreeMap<String, ShardStatus>>>,
}

/// One shard's pump loop, as last recorded.
#[derive(Debug, Clone)]
pub struct ShardStatus {
    pub pool: String,
    /// When the loop last ran a lease round (whatever its outcome).
    pub last_round: Option<Instant>,
    /// When a lease call last succeeded.
    pub last_ok: Option<Instant>,
    /// The last lease call's error, if it failed.
    pub error: Option<String>,
    pub leases_held: usize,
    pub subscribed: bool,
}

impl PumpStatus {
    /// Starts over with these (pool, shard) pairs, none of which has run.
    pub(crate) fn reset(&self, shards: impl Iterator<Item = (String, String)>) {
        let mut map = self.lock();
        map.clear();
        for (pool, shard) in shards {
            map.insert(
                shard,
                ShardStatus {
                    pool,
                    last_round: None,
                    last_ok: None,
                    error: None,
                    leases_held: 0,
                    subscribed: false,
                },
            );
        }
    }

    /// Records one lease round of `shard`.
    pub(crate) fn round(&self, shard: &str, result: Result<usize, String>, subscribed: bool) {
        let now = Instant::now();
        if let Some(s) = self.lock().get_mut(shard) {
            s.last_round = Some(now);
            s.subscribed = subscribed;
            match result {
                Ok(held) => {
                    s.last_ok = Some(now);
                    s.leases_held = held;
                    s.error = None;
                }
                Err(e) => s.error = Some(e),
            }
        }
    }

    /// Every shard's status, by shard name.
    pub fn shards(&self) -> BTreeMap<String, ShardStatus> {
        self.lock().clone()
    }

    /// Whether the pumps work: every shard's lease loop ran within `stale`
    /// (none is stuck), and at least one shard answered within `stale`.
    pub fn healthy(&self, stale: Duration) -> bool {
        let map = self.lock();
        let fresh = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() <= stale);
        !map.is_empty()
            && map.values().all(|s| fresh(s.last_round))
            && map.values().any(|s| fresh(s.last_ok))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ShardStatus>> {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_needs_every_loop_running_and_one_shard_answering() {
        let s = PumpStatus::default();
        assert!(!s.healthy(Duration::from_secs(5)), "nothing ran yet");
        s.reset(
            [("p", "p/a"), ("p", "p/b")]
                .into_iter()
                .map(|(p, s)| (p.to_owned(), s.to_owned())),
        );
        s.round("p/a", Ok(3), true);
        assert!(!s.healthy(Duration::from_secs(5)), "p/b's loop never ran");
        s.round("p/b", Err("down".to_owned()), false);
        assert!(
            s.healthy(Duration::from_secs(5)),
            "one shard down is not a stuck loop"
        );
        s.round("p/a", Err("down".to_owned()), false);
        let a = &s.shards()["p/a"];
        assert_eq!(a.error.as_deref(), Some("down"));
        assert_eq!(a.leases_held, 3, "a failed round changes no count");
        assert!(
            s.healthy(Duration::from_secs(5)),
            "p/a answered a moment ago"
        );
        assert!(!s.healthy(Duration::ZERO), "nothing answered within 0 s");
    }
}
