//! What a listener holds: the shard's [`PubSub`], through which it
//! listens, and its [`Listening`], which unsubscribes when dropped; and
//! what its handler hears ([`Heard`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use fred::types::Value;
use tokio::sync::{mpsc, oneshot};

use crate::EngineError;

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

/// Each subscribed channel's listeners, by id.
pub(super) type Listeners = Arc<Mutex<HashMap<String, Vec<(u64, Handler)>>>>;

/// What callers ask of the subscriber task.
pub(super) enum Command {
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

impl PubSub {
    /// A subscriber of shard `shard`, and the commands its task is to
    /// apply.
    pub(super) fn new(shard: &str) -> (Self, mpsc::UnboundedReceiver<Command>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let made = PubSub {
            shard: shard.to_owned(),
            commands: tx,
            next_id: std::sync::atomic::AtomicU64::new(0),
        };
        (made, rx)
    }

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
