//! The pump calls this process has in flight on one shard: at most
//! [`PumpOptions::in_flight`](crate::PumpOptions::in_flight) per Redis
//! server. That is per shard on a standalone or Sentinel shard, and per
//! primary on a Redis Cluster shard, so that the calls that hang on a dead
//! or paused primary (each until the shard's `timeout_ms`) hold up only
//! that primary's slots, and the other primaries' timers fire on time.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sundial_core::{Shard, keys::SlotKeys};
use tokio::sync::Semaphore;

/// The permits of one shard's pump calls. Cheap to share.
#[derive(Debug)]
pub(crate) struct CallPermits {
    in_flight: usize,
    /// A standalone or Sentinel shard's, and a cluster slot's whose
    /// primary is not known yet.
    shard: Arc<Semaphore>,
    /// A cluster's, by primary address (made on first use).
    primaries: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl CallPermits {
    pub(crate) fn new(in_flight: usize) -> Arc<Self> {
        Arc::new(Self {
            in_flight,
            shard: Arc::new(Semaphore::new(in_flight)),
            primaries: Mutex::default(),
        })
    }

    /// The permits a pump call of `slot` takes now: those of the server
    /// that serves it.
    pub(crate) fn of(&self, shard: &Shard, slot: u32) -> Arc<Semaphore> {
        if !shard.is_cluster() {
            return self.shard.clone();
        }
        let Some(primary) = shard.conn().cluster_node_of(&SlotKeys::new(slot).jobs()) else {
            return self.shard.clone();
        };
        self.primaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(primary)
            .or_insert_with(|| Arc::new(Semaphore::new(self.in_flight)))
            .clone()
    }
}
