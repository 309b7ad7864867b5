//! Long-poll wake-ups through Redis pub/sub.
//!
//! Scripts that make jobs ready publish a count on the queue's ready channel
//! ([`keys::ready_channel`]), whichever gateway or pump ran them. A gateway
//! listens on a shard's ready channel, through the shard's shared subscriber
//! ([`sundial_core::PubSub`]), only while some consumer of this gateway
//! waits on that queue, so idle waiters cost Redis nothing and publishes to
//! queues nobody waits on cost one hash lookup.
//!
//! All waiters of one queue on one shard connection share one listener and
//! one `Notify`, and a message wakes as many of them as jobs became ready.
//! A waiter registers (and the SUBSCRIBE is confirmed) before it checks
//! Redis, so a job that becomes ready in between is never missed. After a
//! reconnect, when messages may have been lost, every waiter re-checks.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use sundial_core::{EngineError, Heard, Listening, Shard, keys};
use tokio::sync::Notify;

/// The wake-ups of this gateway, per shard connection and ready channel.
#[derive(Debug, Default)]
pub struct Wakeups {
    /// (shard, channel) → the waiters' shared listener, while any holds it.
    channels: Mutex<Channels>,
}

#[derive(Debug, Default)]
struct Channels {
    map: HashMap<(String, String), Weak<Shared>>,
    /// Entries whose waiters all left are swept when the map reaches this.
    sweep_at: usize,
}

/// What the waiters of one channel share.
#[derive(Debug)]
struct Shared {
    /// The connection listened on (a reload may give a shard a new one).
    shard: Shard,
    notify: Arc<Notify>,
    _listening: Listening,
}

/// A waiter's registration; dropping the last of a channel stops listening.
#[derive(Debug)]
pub struct Watch {
    shared: Arc<Shared>,
}

impl Watch {
    pub fn notify(&self) -> &Notify {
        &self.shared.notify
    }
}

impl Wakeups {
    /// Watches the ready channel of `ns`/`queue` on `shard`; returns once
    /// subscribed.
    pub async fn watch(&self, shard: &Shard, ns: &str, queue: &str) -> Result<Watch, EngineError> {
        let key = (shard.name().to_owned(), keys::ready_channel(ns, queue));
        if let Some(shared) = self.lock().map.get(&key).and_then(Weak::upgrade)
            && shared.shard.same(shard)
        {
            return Ok(Watch { shared });
        }
        // Two first waiters of a channel may both get here: each then has a
        // listener of its own, which is correct, only not shared.
        let notify = Arc::new(Notify::new());
        let woken = notify.clone();
        let handler = Arc::new(move |heard: Heard<'_>| match heard {
            Heard::Message(v) => {
                let n = v.as_u64().unwrap_or(1).clamp(1, 1024);
                for _ in 0..n {
                    woken.notify_one();
                }
            }
            Heard::MaybeLost => {
                woken.notify_waiters();
                woken.notify_one();
            }
        });
        let listening = shard.pubsub()?.listen(&key.1, handler).await?;
        let shared = Arc::new(Shared {
            shard: shard.clone(),
            notify,
            _listening: listening,
        });
        let mut channels = self.lock();
        if channels.map.len() >= channels.sweep_at {
            channels.map.retain(|_, w| w.strong_count() > 0);
            channels.sweep_at = (channels.map.len() * 2).max(1024);
        }
        channels.map.insert(key, Arc::downgrade(&shared));
        Ok(Watch { shared })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Channels> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }
}
