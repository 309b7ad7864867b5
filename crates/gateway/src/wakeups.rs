//! Long-poll wake-ups through Redis pub/sub.
//!
//! Scripts that make jobs ready publish a count on the queue's ready channel
//! ([`Shard::ready_channel`]: one per queue on a standalone shard, one per
//! queue and slot on a cluster), whichever gateway or pump ran them. A
//! gateway listens on a shard's ready channel, through the shard's shared subscriber
//! ([`sundial_core::PubSub`]), while some consumer of this gateway waits on
//! that queue and for [`LINGER`] after the last one left: workers that poll
//! again and again keep one subscription rather than subscribing and
//! unsubscribing per request, and queues nobody waits on cost nothing.
//!
//! All waiters of one queue on one shard connection share one listener and
//! one `Notify`, and a message wakes as many of them as jobs became ready.
//! A waiter registers (and the SUBSCRIBE is confirmed) before it checks
//! Redis, so a job that becomes ready in between is never missed. After a
//! reconnect, when messages may have been lost, every waiter re-checks.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use sundial_core::{EngineError, Heard, Listening, Shard};
use tokio::sync::Notify;

/// How long a channel stays subscribed after its last waiter left.
pub const LINGER: Duration = Duration::from_secs(30);

/// (shard, channel) → the waiters' shared listener.
type Channels = Arc<Mutex<HashMap<(String, String), Arc<Shared>>>>;

/// The wake-ups of this gateway, per shard connection and ready channel.
#[derive(Debug, Default)]
pub struct Wakeups {
    channels: Channels,
}

/// What the waiters of one channel share.
#[derive(Debug)]
struct Shared {
    /// The connection listened on (a reload may give a shard a new one).
    shard: Shard,
    notify: Arc<Notify>,
    /// Waiters registered now (changed under the map's lock).
    waiters: AtomicUsize,
    /// Whether a sweep of this channel is already scheduled.
    sweeping: AtomicBool,
    _listening: Listening,
}

/// A waiter's registration.
#[derive(Debug)]
pub struct Watch {
    shared: Arc<Shared>,
    key: (String, String),
    channels: Channels,
}

impl Watch {
    pub fn notify(&self) -> &Notify {
        &self.shared.notify
    }
}

impl Drop for Watch {
    /// The last waiter of a channel left: unsubscribe after [`LINGER`]
    /// unless another waiter came meanwhile.
    fn drop(&mut self) {
        let last = {
            let _map = lock(&self.channels);
            self.shared.waiters.fetch_sub(1, Ordering::AcqRel) == 1
        };
        if !last || self.shared.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (key, channels, shared) = (
            std::mem::take(&mut self.key),
            self.channels.clone(),
            Arc::downgrade(&self.shared),
        );
        rt.spawn(async move {
            loop {
                tokio::time::sleep(LINGER).await;
                let mut map = lock(&channels);
                let Some(current) = shared.upgrade() else {
                    return;
                };
                if current.waiters.load(Ordering::Acquire) == 0 {
                    if map.get(&key).is_some_and(|s| Arc::ptr_eq(s, &current)) {
                        map.remove(&key);
                    }
                    return;
                }
                drop(map);
                // Waiters are back; the last of them schedules no sweep
                // while this one runs, so look again later.
                drop(current);
            }
        });
    }
}

fn lock(
    m: &Mutex<HashMap<(String, String), Arc<Shared>>>,
) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Shared>>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Wakeups {
    /// Watches a ready channel (see [`Shard::ready_channel`]) on `shard`;
    /// returns once subscribed.
    pub async fn watch(&self, shard: &Shard, channel: String) -> Result<Watch, EngineError> {
        let key = (shard.name().to_owned(), channel);
        {
            let map = lock(&self.channels);
            if let Some(shared) = map.get(&key)
                && shared.shard.same(shard)
            {
                shared.waiters.fetch_add(1, Ordering::AcqRel);
                return Ok(self.registered(key, shared.clone()));
            }
        }
        // Two first waiters of a channel may both get here: each then has a
        // listener of its own (the map keeps the later one), which is
        // correct, only not shared.
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
            waiters: AtomicUsize::new(1),
            sweeping: AtomicBool::new(false),
            _listening: listening,
        });
        lock(&self.channels).insert(key.clone(), shared.clone());
        Ok(self.registered(key, shared))
    }

    /// A waiter's handle on `shared` (its count already taken).
    fn registered(&self, key: (String, String), shared: Arc<Shared>) -> Watch {
        Watch {
            shared,
            key,
            channels: self.channels.clone(),
        }
    }
}
