//! One subscriber connection per shard, shared by everything in the process
//! that listens to the shard: the pumps' timer announcements
//! ([`keys::TIMER_CHANNEL`](crate::keys::TIMER_CHANNEL)) and the gateway's
//! long-poll wake-ups (ready channels).
//!
//! - A channel is subscribed while at least one [`Listening`] holds it;
//!   dropping the last one unsubscribes.
//! - Subscribes and unsubscribes go through one task per shard, in order,
//!   so an unsubscribe never overtakes a later subscribe to the same
//!   channel. [`PubSub::listen`] returns once the SUBSCRIBE is confirmed.
//! - The connection reconnects by itself and fred resubscribes what was
//!   subscribed; since messages may have been lost meanwhile, every listener
//!   then hears [`Heard::MaybeLost`] (also when a slow dispatcher lagged).
//! - The subscriber is made on first use and closed when the shard's last
//!   clone and the last listener are gone.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use fred::{clients::SubscriberClient, prelude::*, types::Value};
use tokio::sync::{broadcast::error::RecvError, mpsc, oneshot};

use crate::{EngineError, Shard};

/// What a listener hears on its channel.
#[derive(Debug)]
pub enum Heard<'a> {
    /// A message published on the channel.
    Message(&'a Value),
    /// Messages may have been lost (a reconnect, or a slow reader): look
    /// again at whatever the channel announces.
    MaybeLost,
}

/// Called for each message of a channel, on the shard's dispatcher task:
/// it must not block.
pub type Handler = Arc<dyn Fn(Heard<'_>) + Send + Sync>;

type Listeners = Arc<Mutex<HashMap<String, Vec<(u64, Handler)>>>>;

enum Command {
    Listen {
        channel: String,
        id: u64,
        handler: Handler,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    Unlisten {
        channel: String,
        id: u64,
    },
}

/// A shard's shared subscriber (see the module's docs).
#[derive(Debug)]
pub struct PubSub {
    shard: String,
    commands: mpsc::UnboundedSender<Command>,
    next_id: std::sync::atomic::AtomicU64,
}

/// A listener's hold on a channel; dropping it stops the handler (and
/// unsubscribes if it was the channel's last).
#[derive(Debug)]
pub struct Listening {
    channel: String,
    id: u64,
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unlisten {
            channel: std::mem::take(&mut self.channel),
            id: self.id,
        });
    }
}

impl Shard {
    /// The shard's shared subscriber, made (and its task started) on first
    /// use. Needs a Tokio runtime.
    pub fn pubsub(&self) -> Result<&PubSub, EngineError> {
        if let Some(p) = self.pubsub_cell().get() {
            return Ok(p);
        }
        let sub = self
            .builder()
            .build_subscriber_client()
            .map_err(|e| self.err(e))?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| EngineError::Unsafe {
            shard: self.name().to_owned(),
            what: "pub/sub needs a Tokio runtime".to_owned(),
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let made = PubSub {
            shard: self.name().to_owned(),
            commands: tx,
            next_id: std::sync::atomic::AtomicU64::new(0),
        };
        let mut fresh = false;
        let p = self.pubsub_cell().get_or_init(|| {
            fresh = true;
            made
        });
        if fresh {
            rt.spawn(run(self.name().to_owned(), sub, rx));
        }
        Ok(p)
    }
}

impl PubSub {
    /// Calls `handler` for every message of `channel` until the returned
    /// [`Listening`] is dropped. Returns once the channel is subscribed.
    pub async fn listen(&self, channel: &str, handler: Handler) -> Result<Listening, EngineError> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let closed = || EngineError::Unavailable {
            shard: self.shard.clone(),
            source: fred::error::Error::new(
                fred::error::ErrorKind::Canceled,
                "the subscriber task stopped",
            ),
        };
        self.commands
            .send(Command::Listen {
                channel: channel.to_owned(),
                id,
                handler,
                reply,
            })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())??;
        Ok(Listening {
            channel: channel.to_owned(),
            id,
            commands: self.commands.clone(),
        })
    }
}

/// The shard's subscriber task: applies commands in order until every
/// sender is gone, then closes the connection.
async fn run(shard: String, sub: SubscriberClient, mut commands: mpsc::UnboundedReceiver<Command>) {
    let _conn = sub.connect();
    let _manage = sub.manage_subscriptions();
    let listeners: Listeners = Arc::default();
    let dispatcher = tokio::spawn(dispatch(sub.clone(), listeners.clone()));
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Command::Listen {
                channel,
                id,
                handler,
                reply,
            } => {
                let result = add(&sub, &listeners, channel.clone(), id, handler).await;
                let added = result.is_ok();
                let answered = reply
                    .send(result.map_err(|e| EngineError::from_redis(&shard, e)))
                    .is_ok();
                // Its caller gave up (a client that hung up while the
                // SUBSCRIBE was in flight): nobody will drop a `Listening`
                // for it, so take it out now.
                if added && !answered {
                    remove(&shard, &sub, &listeners, channel, id).await;
                }
            }
            Command::Unlisten { channel, id } => {
                remove(&shard, &sub, &listeners, channel, id).await;
            }
        }
    }
    dispatcher.abort();
    let _ = sub.quit().await;
}

/// Adds a listener, subscribing first if it is the channel's first.
async fn add(
    sub: &SubscriberClient,
    listeners: &Listeners,
    channel: String,
    id: u64,
    handler: Handler,
) -> Result<(), fred::error::Error> {
    let subscribed = listeners
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&channel);
    if !subscribed {
        sub.subscribe(channel.as_str()).await?;
    }
    listeners
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(channel)
        .or_default()
        .push((id, handler));
    Ok(())
}

/// Removes a listener, unsubscribing if it was the channel's last.
async fn remove(
    shard: &str,
    sub: &SubscriberClient,
    listeners: &Listeners,
    channel: String,
    id: u64,
) {
    let last = {
        let mut map = listeners.lock().unwrap_or_else(|p| p.into_inner());
        let emptied = map.get_mut(&channel).is_some_and(|l| {
            l.retain(|(i, _)| *i != id);
            l.is_empty()
        });
        if emptied {
            map.remove(&channel);
        }
        emptied
    };
    if last && let Err(e) = sub.unsubscribe(channel.as_str()).await {
        tracing::debug!(shard, error = %e, channel, "unsubscribe failed");
    }
}

/// Hands each message to its channel's listeners; tells every listener
/// when messages may have been lost.
async fn dispatch(sub: SubscriberClient, listeners: Listeners) {
    let mut messages = sub.message_rx();
    let mut reconnects = sub.reconnect_rx();
    let handlers = |channel: Option<&str>| -> Vec<Handler> {
        let map = listeners.lock().unwrap_or_else(|p| p.into_inner());
        match channel {
            Some(c) => map
                .get(c)
                .map(|l| l.iter().map(|(_, h)| h.clone()).collect())
                .unwrap_or_default(),
            None => map.values().flatten().map(|(_, h)| h.clone()).collect(),
        }
    };
    loop {
        tokio::select! {
            m = messages.recv() => match m {
                Ok(m) => {
                    for h in handlers(Some(&m.channel)) {
                        h(Heard::Message(&m.value));
                    }
                }
                Err(RecvError::Lagged(_)) => handlers(None).iter().for_each(|h| h(Heard::MaybeLost)),
                Err(RecvError::Closed) => return,
            },
            r = reconnects.recv() => match r {
                Ok(_) | Err(RecvError::Lagged(_)) => handlers(None).iter().for_each(|h| h(Heard::MaybeLost)),
                Err(RecvError::Closed) => return,
            },
        }
    }
}
