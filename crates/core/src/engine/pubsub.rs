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
//! - The connection reconnects by itself and the task subscribes again to
//!   every channel that has listeners (fred's own `manage_subscriptions`
//!   sends empty `SUBSCRIBE`s, whose errors a cluster client hands to the
//!   next command); since messages may have been lost meanwhile, every
//!   listener then hears [`Heard::MaybeLost`] (also when a slow dispatcher
//!   lagged).
//! - The subscriber is made on first use and closed when the shard's last
//!   clone and the last listener are gone.
//! - On a Redis Cluster the channels are sharded (`SSUBSCRIBE`; see
//!   [`crate::keys`]), each heard on the node that serves its slot. When a
//!   slot moves (resharding, or a failover), that node drops its
//!   subscribers without fred noticing, so the task reads the cluster's
//!   slot map every [`CLUSTER_CHECK`], subscribes again to every channel
//!   whose slot changed node, and tells their listeners
//!   [`Heard::MaybeLost`].

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

/// On a cluster: the node each subscribed channel was subscribed on, as the
/// subscriber's slot map said right after the subscribe.
type Served = Arc<Mutex<HashMap<String, fred::types::config::Server>>>;

/// How often a cluster shard's subscriber reads the slot map (one
/// `CLUSTER SLOTS` to one node) to follow channels whose slot moved.
pub(crate) const CLUSTER_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

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
            rt.spawn(run(self.name().to_owned(), self.is_cluster(), sub, rx));
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

/// What the subscriber task does besides its callers' commands: subscribe
/// again, so that every SUBSCRIBE and UNSUBSCRIBE goes out in order from
/// this one task.
enum Again {
    /// The connection came back: every channel that has listeners.
    Reconnected,
    /// These channels' slots moved to another node (cluster shards): those
    /// that still have listeners.
    Moved(Vec<String>),
}

/// The shard's subscriber task: applies commands in order until every
/// sender is gone, then closes the connection.
async fn run(
    shard: String,
    cluster: bool,
    sub: SubscriberClient,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let _conn = sub.connect();
    let listeners: Listeners = Arc::default();
    let served: Served = Arc::default();
    let (again_tx, mut again) = mpsc::unbounded_channel();
    let dispatcher = tokio::spawn(dispatch(sub.clone(), listeners.clone(), again_tx.clone()));
    let follower =
        cluster.then(|| tokio::spawn(follow_slots(sub.clone(), served.clone(), again_tx)));
    let s = Subscriber {
        shard: &shard,
        cluster,
        sub: &sub,
        listeners: &listeners,
        served: &served,
    };
    loop {
        let cmd = tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(cmd) => cmd,
                None => break,
            },
            Some(first) = again.recv() => {
                // A cluster reconnects node by node: one round for all the
                // reconnects that queued up.
                let mut reconnected = false;
                let mut next = Some(first);
                while let Some(a) = next {
                    match a {
                        Again::Reconnected => reconnected = true,
                        Again::Moved(channels) => s.subscribe_again(channels).await,
                    }
                    next = again.try_recv().ok();
                }
                if reconnected {
                    s.subscribe_again(subscribed(&listeners)).await;
                }
                continue;
            }
        };
        match cmd {
            Command::Listen {
                channel,
                id,
                handler,
                reply,
            } => {
                let result = s.add(channel.clone(), id, handler).await;
                let added = result.is_ok();
                let answered = reply
                    .send(result.map_err(|e| EngineError::from_redis(&shard, e)))
                    .is_ok();
                // Its caller gave up (a client that hung up while the
                // SUBSCRIBE was in flight): nobody will drop a `Listening`
                // for it, so take it out now.
                if added && !answered {
                    s.remove(channel, id).await;
                }
            }
            Command::Unlisten { channel, id } => {
                s.remove(channel, id).await;
            }
        }
    }
    dispatcher.abort();
    if let Some(f) = follower {
        f.abort();
    }
    let _ = sub.quit().await;
}

/// The channels that have listeners.
fn subscribed(listeners: &Listeners) -> Vec<String> {
    listeners
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect()
}

/// What the subscriber task's helpers work on.
struct Subscriber<'a> {
    shard: &'a str,
    cluster: bool,
    sub: &'a SubscriberClient,
    listeners: &'a Listeners,
    served: &'a Served,
}

impl Subscriber<'_> {
    /// Subscribes to `channel`: sharded on a cluster, where the node it went
    /// to is recorded for [`follow_slots`].
    async fn subscribe(&self, channel: &str) -> Result<(), fred::error::Error> {
        if !self.cluster {
            return self.sub.subscribe(channel).await;
        }
        if let Err(e) = self.sub.ssubscribe(channel).await {
            // A slot that moved since the client last read the slot map:
            // the old node answers `MOVED`, which fred does not follow on
            // a cluster shard (see `Shard::connect`; it has read the new
            // slot map by then). Send it once more.
            tracing::debug!(shard = self.shard, error = %e, channel, "SSUBSCRIBE failed; once more");
            use fred::interfaces::ClusterInterface;
            self.sub.sync_cluster().await?;
            self.sub.ssubscribe(channel).await?;
        }
        let node = self
            .sub
            .cached_cluster_state()
            .and_then(|r| r.get_server(crate::keys::cluster_slot(channel)).cloned());
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        match node {
            Some(n) => served.insert(channel.to_owned(), n),
            None => served.remove(channel),
        };
        Ok(())
    }

    /// Subscribes again to those of `channels` that still have listeners,
    /// then tells their listeners that messages may have been lost.
    async fn subscribe_again(&self, mut channels: Vec<String>) {
        let listened = subscribed(self.listeners);
        channels.retain(|c| listened.contains(c));
        if self.cluster {
            // One command per channel: channels of different slots live on
            // different nodes. One that fails stays recorded at its old
            // node, so the next slot check sends it again.
            for c in &channels {
                if let Err(e) = self.subscribe(c).await {
                    tracing::warn!(shard = self.shard, error = %e, channel = c, "subscribing again failed");
                }
            }
        } else if !channels.is_empty()
            && let Err(e) = self.sub.subscribe(channels.clone()).await
        {
            tracing::warn!(shard = self.shard, error = %e, "subscribing again failed");
        }
        let handlers: Vec<Handler> = {
            let map = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
            channels
                .iter()
                .filter_map(|c| map.get(c))
                .flatten()
                .map(|(_, h)| h.clone())
                .collect()
        };
        for h in handlers {
            h(Heard::MaybeLost);
        }
    }

    /// Adds a listener, subscribing first if it is the channel's first.
    async fn add(
        &self,
        channel: String,
        id: u64,
        handler: Handler,
    ) -> Result<(), fred::error::Error> {
        let subscribed = self
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&channel);
        if !subscribed {
            self.subscribe(&channel).await?;
        }
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel)
            .or_default()
            .push((id, handler));
        Ok(())
    }

    /// Removes a listener, unsubscribing if it was the channel's last.
    async fn remove(&self, channel: String, id: u64) {
        let last = {
            let mut map = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
            let emptied = map.get_mut(&channel).is_some_and(|l| {
                l.retain(|(i, _)| *i != id);
                l.is_empty()
            });
            if emptied {
                map.remove(&channel);
            }
            emptied
        };
        if !last {
            return;
        }
        let done = if self.cluster {
            self.served
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&channel);
            self.sub.sunsubscribe(channel.as_str()).await
        } else {
            self.sub.unsubscribe(channel.as_str()).await
        };
        if let Err(e) = done {
            tracing::debug!(shard = self.shard, error = %e, channel, "unsubscribe failed");
        }
    }
}

/// A cluster shard's subscriptions follow their slots (see the module's
/// docs): every [`CLUSTER_CHECK`], the slot map is read again, and the
/// channels whose slot is now served by another node than the one they were
/// subscribed on go to the subscriber task, which subscribes to them again
/// there.
async fn follow_slots(sub: SubscriberClient, served: Served, again: mpsc::UnboundedSender<Again>) {
    use fred::interfaces::ClusterInterface;
    let mut tick = tokio::time::interval(CLUSTER_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !sub.is_connected() {
            continue;
        }
        if let Err(e) = sub.sync_cluster().await {
            tracing::debug!(error = %e, "reading the cluster's slot map failed");
            continue;
        }
        let Some(routing) = sub.cached_cluster_state() else {
            continue;
        };
        let moved: Vec<String> = served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(c, at)| routing.get_server(crate::keys::cluster_slot(c)) != Some(*at))
            .map(|(c, _)| c.clone())
            .collect();
        if moved.is_empty() {
            continue;
        }
        tracing::info!(
            channels = moved.len(),
            "cluster slots moved: subscribing again where they live now"
        );
        if again.send(Again::Moved(moved)).is_err() {
            return;
        }
    }
}

/// Hands each message to its channel's listeners; tells every listener
/// when messages may have been lost.
async fn dispatch(
    sub: SubscriberClient,
    listeners: Listeners,
    again: mpsc::UnboundedSender<Again>,
) {
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
                // The subscriber task subscribes again, then tells the
                // listeners.
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if again.send(Again::Reconnected).is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}
