//! The topology in force, swappable as one value, and the signal that it
//! changed.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::Topology;

/// The current topology. Requests load it once and finish on it; a reload
/// stores a new one whole. Those that follow it (pumps, the admin store)
/// watch [`LiveTopology::changes`].
#[derive(Debug)]
pub struct LiveTopology {
    current: ArcSwap<Topology>,
    /// Bumped on every store.
    generation: watch::Sender<u64>,
}

impl LiveTopology {
    pub fn new(topology: Topology) -> Self {
        Self {
            current: ArcSwap::from_pointee(topology),
            generation: watch::Sender::new(0),
        }
    }

    /// The topology now. Hold the `Arc` (not a guard) across `.await`.
    pub fn topology(&self) -> Arc<Topology> {
        self.current.load_full()
    }

    /// Replaces the topology in one store; requests in flight finish on the
    /// one they loaded.
    pub fn store(&self, topology: Topology) {
        self.current.store(Arc::new(topology));
        self.generation.send_modify(|g| *g += 1);
    }

    /// A receiver that sees every store (its value is the generation).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// How many times the topology was replaced.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }
}
