//! One subscriber connection per shard (per primary on a Redis Cluster),
//! shared by everything in the process that listens to the shard: the
//! pumps' timer announcements ([`keys::TIMER_CHANNEL`](crate::keys::TIMER_CHANNEL))
//! and the gateway's long-poll wake-ups (ready channels).
//!
//! - A channel is subscribed while at least one [`Listening`] holds it;
//!   dropping the last one unsubscribes.
//! - Subscribes and unsubscribes go through one task per shard, in order,
//!   so an unsubscribe never overtakes a later subscribe to the same
//!   channel. [`PubSub::listen`] returns once the SUBSCRIBE is confirmed.
//! - A connection reconnects by itself and the task subscribes again to
//!   every channel it served that has listeners (one the server refuses
//!   for now is sent again every [`CLUSTER_CHECK`](task::CLUSTER_CHECK));
//!   since messages may have been lost meanwhile, those listeners then
//!   hear [`Heard::MaybeLost`] (as every listener does when a slow
//!   dispatcher lagged).
//! - The subscribers are made on first use and closed when the shard's
//!   last clone and the last listener are gone.
//! - On a Redis Cluster the channels are sharded (`SSUBSCRIBE`; see
//!   [`crate::keys`]), each heard on the primary that serves its hash
//!   slot, through a subscriber connection to that primary alone: a dead
//!   primary silences only its own hash slots' channels. When a hash slot
//!   moves (resharding, or a failover), its old node drops its
//!   subscribers, so every [`CLUSTER_CHECK`](task::CLUSTER_CHECK) the task
//!   compares each channel's node with the shard's hash slot map,
//!   subscribes again where the hash slot lives now, and tells the
//!   channel's listeners [`Heard::MaybeLost`].
//!
//! Files: `handle` (what callers hold: [`PubSub`], [`Listening`]), `task`
//! (the subscriber task, one per shard), `subscriber` (its connections and
//! what it does with them), `dispatch` (handing messages to listeners).

mod dispatch;
mod handle;
mod subscriber;
mod task;

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
};

pub use handle::{Handler, Heard, Listening, PubSub};

use self::subscriber::{Subs, node_subscriber};
use super::{cluster::Cluster, node::Node};
use crate::EngineError;

/// What a shard's subscriber connects to.
pub(crate) enum Source<'a> {
    /// The one node of a standalone or Sentinel-managed shard.
    Single(&'a Node),
    /// A cluster's primaries, each as its channels need it.
    Cluster(&'a Arc<Cluster>),
}

/// The shard's shared subscriber, kept in `cell`: made (and its task
/// started) on first use. Needs a Tokio runtime.
pub(crate) fn shared<'c>(
    cell: &'c OnceLock<PubSub>,
    shard: &str,
    source: Source<'_>,
) -> Result<&'c PubSub, EngineError> {
    if let Some(p) = cell.get() {
        return Ok(p);
    }
    let subs = match source {
        Source::Single(node) => {
            Subs::Single(node_subscriber(node).map_err(|e| EngineError::from_redis(shard, e))?)
        }
        Source::Cluster(c) => Subs::Cluster {
            cluster: c.clone(),
            nodes: HashMap::new(),
            served: HashMap::new(),
        },
    };
    let rt = tokio::runtime::Handle::try_current().map_err(|_| EngineError::Unsafe {
        shard: shard.to_owned(),
        what: "pub/sub needs a Tokio runtime".to_owned(),
    })?;
    let (made, commands) = PubSub::new(shard);
    let mut fresh = false;
    let p = cell.get_or_init(|| {
        fresh = true;
        made
    });
    if fresh {
        rt.spawn(task::run(shard.to_owned(), subs, commands));
    }
    Ok(p)
}
