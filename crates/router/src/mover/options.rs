//! How the mover works: batch size, how many slots at once, how long each
//! batch waits between its steps, and how long its lease on a slot lasts.

use std::time::Duration;

/// How the mover works.
#[derive(Debug, Clone)]
pub struct MoverOptions {
    /// Jobs per batch (each batch is one script call at each shard).
    pub batch: u32,
    /// Slots this gateway moves at once.
    pub slots_at_once: usize,
    /// How long each batch waits between its steps: long enough for what
    /// one step wrote to reach the shard's disk (`appendfsync everysec`
    /// writes each second) before the next relies on it, so that a restart
    /// of either Redis cannot lose the only copy of a job, or bring back
    /// one that was taken out.
    pub settle: Duration,
    /// How long a mover's lease on a slot lasts unless a batch renews it:
    /// how soon another gateway goes on with a slot whose mover died.
    pub lease: Duration,
}

impl Default for MoverOptions {
    fn default() -> Self {
        Self {
            batch: 500,
            slots_at_once: 8,
            settle: Duration::from_secs(2),
            lease: Duration::from_secs(30),
        }
    }
}
