//! How the pumps behave.

use std::time::Duration;

/// How the pumps behave.
#[derive(Debug, Clone)]
pub struct PumpOptions {
    /// Timer entries one pump call handles at most.
    pub batch: u32,
    /// How long an idle slot sleeps before it checks again anyway.
    pub idle_check: Duration,
    /// How long to wait after a failed pump call.
    pub retry_after: Duration,
    /// How long a pump process's heartbeat lasts unless renewed (renewed
    /// every quarter of it); a dead process's slots are taken over about
    /// this long after its last heartbeat.
    pub lease_ttl: Duration,
    /// How often the backlog gauges of the held slots are refreshed.
    pub metrics_interval: Duration,
    /// Pump calls this process has in flight on one Redis server at most
    /// (a shard, or a primary of a cluster shard: `crate::permits`). Two
    /// keep the server busy while a backlog drains (one runs while the
    /// other travels), and a request waits behind at most that many pump
    /// calls, not behind one per draining slot.
    pub in_flight: usize,
}

impl Default for PumpOptions {
    fn default() -> Self {
        Self {
            batch: 500,
            idle_check: Duration::from_secs(30),
            retry_after: Duration::from_millis(500),
            lease_ttl: Duration::from_secs(3),
            metrics_interval: Duration::from_secs(5),
            in_flight: 2,
        }
    }
}
