//! Long-poll wake-ups through Redis pub/sub.
//!
//! Scripts that make jobs ready publish a count on the queue's ready channel
//! ([`keys::ready_channel`]), whichever gateway or pump ran them. Each
//! gateway keeps one subscriber connection per shard and subscribes to a
//! channel only while some consumer of this gateway waits on that queue, so
//! idle waiters cost Redis nothing and publishes to queues nobody waits on
//! cost one hash lookup.
//!
//! Subscribes and unsubscribes go through one task per shard, in order, so
//! an unsubscribe can never overtake a later subscribe to the same channel.
//! A waiter registers (and the SUBSCRIBE is confirmed) before it checks
//! Redis, so a job that becomes ready in between is never missed. After a
//! reconnect, when messages may have been lost, every waiter re-checks.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use fred::{clients::SubscriberClient, prelude::*};
use sundial_core::{EngineError, Shard, keys};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

enum Command {
    Watch(String, oneshot::Sender<Result<Arc<Notify>, EngineError>>),
    Unwatch(String),
}

/// The wake-ups of one shard.
#[derive(Debug, Clone)]
pub struct Wakeups {
    shard: String,
    commands: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Watch(c, _) => write!(f, "Watch({c})"),
            Self::Unwatch(c) => write!(f, "Unwatch({c})"),
        }
    }
}

/// A registration; dropping it unwatches.
#[derive(Debug)]
pub struct Watch {
    channel: String,
    notify: Arc<Notify>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Watch {
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unwatch(self.channel.clone()));
    }
}

type Channels = Arc<Mutex<HashMap<String, (Arc<Notify>, usize)>>>;

impl Wakeups {
    /// Starts the subscriber of `shard`; runs until `shutdown`.
    pub fn start(shard: &Shard, shutdown: CancellationToken) -> Result<Self, EngineError> {
        let sub = shard.subscriber()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let channels: Channels = Arc::default();
        tokio::spawn(run(shard.clone(), sub, rx, channels, shutdown));
        Ok(Self {
            shard: shard.name().to_owned(),
            commands: tx,
        })
    }

    /// Watches the ready channel of `ns`/`queue`; returns once subscribed.
    pub async fn watch(&self, ns: &str, queue: &str) -> Result<Watch, EngineError> {
        let channel = keys::ready_channel(ns, queue);
        let (tx, rx) = oneshot::channel();
        let closed = || EngineError::Unavailable {
            shard: self.shard.clone(),
            source: fred::error::Error::new(
                fred::error::ErrorKind::Canceled,
                "wake-up task stopped",
            ),
        };
        self.commands
            .send(Command::Watch(channel.clone(), tx))
            .map_err(|_| closed())?;
        let notify = rx.await.map_err(|_| closed())??;
        Ok(Watch {
            channel,
            notify,
            commands: self.commands.clone(),
        })
    }
}

async fn run(
    shard: Shard,
    sub: SubscriberClient,
    mut commands: mpsc::UnboundedReceiver<Command>,
    channels: Channels,
    shutdown: CancellationToken,
) {
    let _conn = sub.init().await;
    let _manage = sub.manage_subscriptions();
    let dispatcher = tokio::spawn(dispatch(sub.clone(), channels.clone()));
    loop {
        let cmd = tokio::select! {
            c = commands.recv() => c,
            () = shutdown.cancelled() => None,
        };
        let Some(cmd) = cmd else { break };
        match cmd {
            Command::Watch(channel, reply) => {
                let existing = {
                    let mut map = channels.lock().unwrap_or_else(|p| p.into_inner());
                    map.get_mut(&channel).map(|(n, count)| {
                        *count += 1;
                        n.clone()
                    })
                };
                let result = match existing {
                    Some(n) => Ok(n),
                    None => match sub.subscribe(channel.as_str()).await {
                        Ok(()) => {
                            let n = Arc::new(Notify::new());
                            channels
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(channel.clone(), (n.clone(), 1));
                            Ok(n)
                        }
                        Err(e) => Err(shard.err(e)),
                    },
                };
                let _ = reply.send(result);
            }
            Command::Unwatch(channel) => {
                let last = {
                    let mut map = channels.lock().unwrap_or_else(|p| p.into_inner());
                    match map.get_mut(&channel) {
                        Some((_, count)) if *count > 1 => {
                            *count -= 1;
                            false
                        }
                        Some(_) => {
                            map.remove(&channel);
                            true
                        }
                        None => false,
                    }
                };
                if last && let Err(e) = sub.unsubscribe(channel.as_str()).await {
                    tracing::debug!(error = %e, channel, "unsubscribe failed");
                }
            }
        }
    }
    dispatcher.abort();
    let _ = sub.quit().await;
}

/// Hands each announcement to as many waiters as jobs became ready.
async fn dispatch(sub: SubscriberClient, channels: Channels) {
    let mut messages = sub.message_rx();
    let mut reconnects = sub.reconnect_rx();
    loop {
        tokio::select! {
            m = messages.recv() => match m {
                Ok(m) => {
                    let n = m.value.as_u64().unwrap_or(1).clamp(1, 1024);
                    let notify = channels
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&*m.channel)
                        .map(|(n, _)| n.clone());
                    if let Some(notify) = notify {
                        for _ in 0..n {
                            notify.notify_one();
                        }
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => wake_all(&channels),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            r = reconnects.recv() => match r {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => wake_all(&channels),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

fn wake_all(channels: &Channels) {
    for (n, _) in channels.lock().unwrap_or_else(|p| p.into_inner()).values() {
        n.notify_waiters();
        n.notify_one();
    }
}
