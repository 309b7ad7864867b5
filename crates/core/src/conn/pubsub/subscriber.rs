//! The subscriber task's connections ([`Subs`]) and what it does with
//! them ([`Subscriber`]): subscribe, unsubscribe, subscribe again after a
//! reconnect, and follow a cluster's channels to where their hash slot
//! lives now.

use std::{collections::HashMap, sync::Arc};

use fred::{clients::SubscriberClient, prelude::*};
use tokio::sync::mpsc;

use super::{
    dispatch::{Again, dispatch},
    handle::{Handler, Heard, Listeners},
};
use crate::{
    EngineError,
    conn::{
        cluster::Cluster,
        node::{Node, not_connected},
    },
};

/// A shard's subscriber connections.
pub(super) enum Subs {
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
pub(super) struct NodeSub {
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
pub(super) fn node_subscriber(node: &Node) -> Result<SubscriberClient, fred::error::Error> {
    node.builder.build_subscriber_client()
}

/// The subscriber connection to cluster node `node`, made (and its
/// dispatcher started) if it is new.
fn node_sub(
    nodes: &mut HashMap<String, NodeSub>,
    node: &Node,
    shard: &str,
    listeners: &Listeners,
    again: &mpsc::UnboundedSender<Again>,
) -> Result<SubscriberClient, EngineError> {
    if let Some(s) = nodes.get(&node.addr) {
        return Ok(s.sub.clone());
    }
    let sub = node_subscriber(node).map_err(|e| EngineError::from_redis(shard, e))?;
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
    Ok(sub)
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
pub(super) struct Subscriber<'a> {
    pub(super) shard: &'a str,
    pub(super) subs: Subs,
    /// Channels whose subscribing again failed, to send again.
    pub(super) failed: Vec<String>,
    pub(super) listeners: &'a Listeners,
    pub(super) again: mpsc::UnboundedSender<Again>,
}

impl Subscriber<'_> {
    fn err(&self, e: fred::error::Error) -> EngineError {
        EngineError::from_redis(self.shard, e)
    }

    /// The channels subscribed through the connection to `node` (the only
    /// one when `None`).
    pub(super) fn served_by(&self, node: Option<&str>) -> Vec<String> {
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
    /// connection to the primary that serves its hash slot, which is
    /// recorded for [`Self::follow_hash_slots`].
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
        let hash_slot = crate::keys::hash_slot(channel);
        for attempt in 0..2 {
            let node = cluster.route(hash_slot).await?;
            if !node.is_connected() {
                return Err(not_connected(shard, &node.addr));
            }
            let sub = node_sub(nodes, &node, shard, &listeners, &again)?;
            match sub.ssubscribe(channel).await {
                Ok(()) => {
                    served.insert(channel.to_owned(), node.addr.clone());
                    return Ok(());
                }
                // The hash slot moved since the hash slot map was read:
                // follow the `MOVED` once.
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
    pub(super) async fn subscribe_again(&mut self, mut channels: Vec<String>) {
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

    /// A cluster shard's subscriptions follow their hash slots (see the
    /// module's docs): the channels whose hash slot the shard's hash slot
    /// map now puts on another node than the one they were subscribed on
    /// are subscribed again there. Connections to nodes that serve neither
    /// a channel nor a hash slot any more are closed.
    pub(super) async fn follow_hash_slots(&mut self) {
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
                    .owner(crate::keys::hash_slot(c))
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
    pub(super) async fn add(
        &mut self,
        channel: String,
        id: u64,
        handler: Handler,
    ) -> Result<(), EngineError> {
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
    pub(super) async fn remove(&mut self, channel: String, id: u64) {
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
