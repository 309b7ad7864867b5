//! [`Shard`]: the engine's handle of one shard, over its [`Connection`].
//!
//! What every user of a shard asks of the shard itself is here: its name
//! and identity (`same`), whether it is up (`is_connected`,
//! `wait_connected`, `probe`), `load_scripts`, its shared subscriber and
//! the channels it announces on. The connection's details (a cluster's
//! primaries, the node that serves a key, the replicas a publish waits
//! for) are asked of [`Shard::conn`]. The job operations are grouped by
//! concern on handles, in the sibling files (see [`crate::engine`]).

use std::time::Duration;

use crate::{
    EngineError,
    conn::{Connection, PubSub, ShardOptions},
    keys::{self, SlotKeys},
};

/// A connected shard. Cheap to clone: clones share its connection.
#[derive(Clone, Debug)]
pub struct Shard {
    conn: Connection,
}

impl Shard {
    /// Builds the connection pools and starts connecting in the background.
    /// The shard is usable at once: while it is not connected, operations
    /// fail fast with [`EngineError::Unavailable`], and it reconnects by itself.
    pub fn connect(name: impl Into<String>, opts: &ShardOptions) -> Result<Self, EngineError> {
        Ok(Self {
            conn: Connection::connect(name, opts)?,
        })
    }

    /// The shard's connection.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    pub fn name(&self) -> &str {
        self.conn.name()
    }

    /// Whether both are the same connection (a reload that changes nothing
    /// about a shard keeps its connection).
    pub fn same(&self, other: &Shard) -> bool {
        self.conn.same(&other.conn)
    }

    /// Whether the shard is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Whether the shard can be reached (see [`Connection::is_connected`]).
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    /// Waits until the shard is connected, up to `timeout` (see
    /// [`Connection::wait_connected`]).
    pub async fn wait_connected(&self, timeout: Duration) -> Result<(), EngineError> {
        self.conn.wait_connected(timeout).await
    }

    /// One round trip: how long it took, whether the shard holds
    /// Sundial's metadata, and which primaries of a cluster did not answer
    /// (see [`Connection::probe`]).
    pub async fn probe(&self) -> Result<crate::conn::Probe, EngineError> {
        self.conn.probe().await
    }

    /// Loads every script, so that the first requests need no reload.
    pub async fn load_scripts(&self) -> Result<(), EngineError> {
        self.conn.load_scripts().await
    }

    /// The shard's shared subscriber, made (and its task started) on first
    /// use. Needs a Tokio runtime.
    pub fn pubsub(&self) -> Result<&PubSub, EngineError> {
        self.conn.pubsub()
    }

    /// The channel on which this shard announces the newly ready jobs of a
    /// queue (`<ns>/<queue>`) in `slot`: one channel per queue on a
    /// standalone shard, a sharded channel of the slot on a cluster (see
    /// [`crate::keys`]).
    pub fn ready_channel(&self, slot: u32, qualified: &str) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).ready_channel(qualified)
        } else {
            keys::ready_channel_of(qualified)
        }
    }

    /// What [`Self::ready_channel`] puts before the queue's name.
    pub fn ready_channel_prefix(&self, slot: u32) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).ready_channel_prefix()
        } else {
            keys::READY_CHANNEL_PREFIX.to_owned()
        }
    }

    /// The channel on which this shard announces that `slot` became due
    /// sooner: one for all slots on a standalone shard, one per slot on a
    /// cluster.
    pub fn timer_channel(&self, slot: u32) -> String {
        if self.is_cluster() {
            SlotKeys::new(slot).timer_channel()
        } else {
            keys::TIMER_CHANNEL.to_owned()
        }
    }

    /// The timer channels that announce `slots`, each once.
    pub fn timer_channels(&self, slots: &[u32]) -> Vec<String> {
        if self.is_cluster() {
            slots.iter().map(|s| self.timer_channel(*s)).collect()
        } else {
            vec![keys::TIMER_CHANNEL.to_owned()]
        }
    }
}
