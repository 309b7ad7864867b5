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
//!   for now is sent again every [`CLUSTER_CHECK`]); since messages may
//!   have been lost meanwhile, those listeners then hear
//!   [`Heard::MaybeLost`] (as every listener does when a slow dispatcher
//!   lagged).
//! - The subscribers are made on first use and closed when the shard's
//!   last clone and the last listener are gone.
//! - On a Redis Cluster the channels are sharded (`SSUBSCRIBE`; see
//!   [`crate::keys`]), each heard on the primary that serves its slot,
//!   through a subscriber connection to that primary alone: a dead primary
//!   silences only its own slots' channels. When a slot moves (resharding,
//!   or a failover), its old node drops its subscribers, so every
//!   [`CLUSTER_CHECK`] the task compares each channel's node with the
//!   shard's slot map, subscribes again where the slot lives now, and
//!   tells the channel's listeners [`Heard::MaybeLost`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use fred::{clients::SubscriberClient, prelude::*, types::Value};
use tokio::sync::{broadcast::error::RecvError, mpsc, oneshot};

use super::{
    nodes::{Cluster, Node},
    shard::Conns,
};
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

/// How often a subscriber sends again what it failed to subscribe to
/// again, and a cluster shard's compares its channels' nodes with the
/// shard's slot map, to follow channels whose slot moved.
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
        let subs = match self.conns() {
            Conns::Single(node) => Subs::Single(node_subscriber(node).map_err(|e| self.err(e))?),
            Conns::Cluster(c) => Subs::Cluster {
                cluster: c.clone(),
                nodes: HashMap::new(),
                served: HashMap::new(),
            },
        };
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
            rt.spawn(run(self.name().to_owned(), subs, rx));
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
    /// A subscriber connection came back: every channel it served (that of
    /// the cluster node named, or the shard's only one) that has listeners.
    Reconnected(Option<String>),
}

/// A shard's subscriber connections.
enum Subs {
    /// A standalone or Sentinel-managed shard: one connection.
    Single(SubscriberClient),
    /// A cluster: one per primary that serves a subscribed channel.
    Cluster {
        cluster: Arc<Cluster>,
        /// By node address.
        nodes: HashMap<String, NodeSub>,
        /// Channel → the address of the node it was subscribed on.
        served: HashMap<String, String>,
    },
}

/// The subscriber connection to one cluster node, and the task that
/// hands out its messages.
struct NodeSub {
    sub: SubscriberClient,
    dispatcher: tokio::task::JoinHandle<()>,
    /// The client's connection task, ended on drop as `Node`'s are.
    connection: tokio::task::JoinHandle<Result<(), fred::error::Error>>,
}

impl Drop for NodeSub {
    fn drop(&mut self) {
        self.dispatcher.abort();
        let connection = self.connection.abort_handle();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let sub = self.sub.clone();
                rt.spawn(async move {
                    let quit = sub.quit();
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), quit).await;
                    connection.abort();
                });
            }
            Err(_) => connection.abort(),
        }
    }
}

/// A subscriber client with the node's connection settings.
fn node_subscriber(node: &Node) -> Result<SubscriberClient, fred::error::Error> {
    node.builder.build_subscriber_client()
}

/// The shard's subscriber task: applies commands in order until every
/// sender is gone, then closes the connections.
async fn run(shard: String, subs: Subs, mut commands: mpsc::UnboundedReceiver<Command>) {
    let listeners: Listeners = Arc::default();
    let (again_tx, mut again) = mpsc::unbounded_channel();
    let single = match &subs {
        Subs::Single(sub) => {
            let _conn = sub.connect();
            Some(tokio::spawn(dispatch(
                sub.clone(),
                listeners.clone(),
                again_tx.clone(),
                None,
            )))
        }
        Subs::Cluster { .. } => None,
    };
    let cluster = matches!(subs, Subs::Cluster { .. });
    let mut s = Subscriber {
        shard: &shard,
        subs,
        failed: Vec::new(),
        listeners: &listeners,
        again: again_tx,
    };
    let mut tick = tokio::time::interval(CLUSTER_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let cmd = tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(cmd) => cmd,
                None => break,
            },
            Some(first) = again.recv() => {
                // Connections reconnect one by one: one round for all the
                // reconnects that queued up.
                let mut nodes: Vec<Option<String>> = Vec::new();
                let mut next = Some(first);
                while let Some(Again::Reconnected(node)) = next {
                    if !nodes.contains(&node) {
                        nodes.push(node);
                    }
                    next = again.try_recv().ok();
                }
                for node in nodes {
                    let channels = s.served_by(node.as_deref());
                    s.subscribe_again(channels).await;
                }
                continue;
            }
            _ = tick.tick(), if cluster || !s.failed.is_empty() => {
                let failed = std::mem::take(&mut s.failed);
                s.subscribe_again(failed).await;
                s.follow_slots().await;
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
                let answered = reply.send(result).is_ok();
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
    if let Some(d) = single {
        d.abort();
    }
    if let Subs::Single(sub) = &s.subs {
        let _ = sub.quit().await;
    }
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

/// What the subscriber task works on.
struct Subscriber<'a> {
    shard: &'a str,
    subs: Subs,
    /// Channels whose subscribing again failed, to send again.
    failed: Vec<String>,
    listeners: &'a Listeners,
    again: mpsc::UnboundedSender<Again>,
}

impl Subscriber<'_> {
    fn err(&self, e: fred::error::Error) -> EngineError {
        EngineError::from_redis(self.shard, e)
    }

    /// The channels subscribed through the connection to `node` (the only
    /// one when `None`).
    fn served_by(&self, node: Option<&str>) -> Vec<String> {
        match (&self.subs, node) {
            (Subs::Cluster { served, .. }, Some(node)) => served
                .iter()
                .filter(|(_, at)| at.as_str() == node)
                .map(|(c, _)| c.clone())
                .collect(),
            _ => subscribed(self.listeners),
        }
    }

    /// Subscribes to `channel`: on a cluster, sharded, through the
    /// connection to the primary that serves its slot, which is recorded
    /// for [`Self::follow_slots`].
    async fn subscribe(&mut self, channel: &str) -> Result<(), EngineError> {
        let shard = self.shard;
        let (listeners, again) = (self.listeners.clone(), self.again.clone());
        let (cluster, nodes, served) = match &mut self.subs {
            Subs::Single(sub) => {
                return sub
                    .subscribe(channel)
                    .await
                    .map_err(|e| EngineError::from_redis(shard, e));
            }
            Subs::Cluster {
                cluster,
                nodes,
                served,
            } => (cluster, nodes, served),
        };
        let slot = crate::keys::cluster_slot(channel);
        for attempt in 0..2 {
            let node = cluster.route(slot).await?;
            if !node.is_connected() {
                return Err(super::nodes::not_connected(shard, &node.addr));
            }
            let sub = match nodes.get(&node.addr) {
                Some(s) => s.sub.clone(),
                None => {
                    let sub =
                        node_subscriber(&node).map_err(|e| EngineError::from_redis(shard, e))?;
                    let connection = sub.connect();
                    let dispatcher = tokio::spawn(dispatch(
                        sub.clone(),
                        listeners.clone(),
                        again.clone(),
                        Some(node.addr.clone()),
                    ));
                    nodes.insert(
                        node.addr.clone(),
                        NodeSub {
                            sub: sub.clone(),
                            dispatcher,
                            connection,
                        },
                    );
                    sub
                }
            };
            match sub.ssubscribe(channel).await {
                Ok(()) => {
                    served.insert(channel.to_owned(), node.addr.clone());
                    return Ok(());
                }
                // The slot moved since the slot map was read: follow the
                // `MOVED` once.
                Err(e) if attempt == 0 && e.details().starts_with("MOVED ") => {
                    tracing::debug!(shard, error = %e, channel, "SSUBSCRIBE moved; once more");
                    cluster.moved(e.details());
                }
                Err(e) => return Err(EngineError::from_redis(shard, e)),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Subscribes again to those of `channels` that still have listeners,
    /// then tells their listeners that messages may have been lost.
    async fn subscribe_again(&mut self, mut channels: Vec<String>) {
        let listened = subscribed(self.listeners);
        channels.retain(|c| listened.contains(c));
        if channels.is_empty() {
            return;
        }
        // A server that just came back may refuse for a while (`LOADING`,
        // or `CLUSTERDOWN` until a restarted node rejoins its cluster):
        // what fails is sent again every `CLUSTER_CHECK` until it is
        // subscribed, and its listeners look again then.
        match &self.subs {
            Subs::Single(sub) => {
                if let Err(e) = sub.subscribe(channels.clone()).await {
                    tracing::warn!(shard = self.shard, error = %e, "subscribing again failed; retrying");
                    self.failed.extend(channels.iter().cloned());
                }
            }
            // One command per channel: channels of different slots live on
            // different nodes.
            Subs::Cluster { .. } => {
                for c in &channels {
                    if let Err(e) = self.subscribe(c).await {
                        tracing::warn!(shard = self.shard, error = %e, channel = c, "subscribing again failed; retrying");
                        self.failed.push(c.clone());
                    }
                }
            }
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

    /// A cluster shard's subscriptions follow their slots (see the module's
    /// docs): the channels whose slot the shard's slot map now puts on
    /// another node than the one they were subscribed on are subscribed
    /// again there. Connections to nodes that serve neither a channel nor
    /// a slot any more are closed.
    async fn follow_slots(&mut self) {
        let Subs::Cluster {
            cluster,
            nodes,
            served,
        } = &mut self.subs
        else {
            return;
        };
        let moved: Vec<String> = served
            .iter()
            .filter(|(c, at)| {
                cluster
                    .owner(crate::keys::cluster_slot(c))
                    .is_some_and(|n| n.addr != **at)
            })
            .map(|(c, _)| c.clone())
            .collect();
        let live = cluster.nodes();
        nodes.retain(|addr, _| {
            served.values().any(|a| a == addr) || live.iter().any(|n| n.addr == *addr)
        });
        if moved.is_empty() {
            return;
        }
        tracing::info!(
            shard = self.shard,
            channels = moved.len(),
            "cluster slots moved: subscribing again where they live now"
        );
        self.subscribe_again(moved).await;
    }

    /// Adds a listener, subscribing first if it is the channel's first.
    async fn add(&mut self, channel: String, id: u64, handler: Handler) -> Result<(), EngineError> {
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
    async fn remove(&mut self, channel: String, id: u64) {
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
        let done = match &mut self.subs {
            Subs::Single(sub) => sub.unsubscribe(channel.as_str()).await,
            Subs::Cluster { nodes, served, .. } => {
                match served.remove(&channel).and_then(|at| nodes.get(&at)) {
                    // A node that is down forgot it anyway.
                    Some(n) if n.sub.is_connected() => n.sub.sunsubscribe(channel.as_str()).await,
                    _ => Ok(()),
                }
            }
        };
        if let Err(e) = done {
            tracing::debug!(shard = self.shard, error = %self.err(e), channel, "unsubscribe failed");
        }
    }
}

/// Hands each message of one subscriber connection to its channel's
/// listeners; when the connection comes back, asks the subscriber task to
/// subscribe again (`node` names the connection's cluster node).
async fn dispatch(
    sub: SubscriberClient,
    listeners: Listeners,
    again: mpsc::UnboundedSender<Again>,
    node: Option<String>,
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
                    if again.send(Again::Reconnected(node.clone())).is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}
