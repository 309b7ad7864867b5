//! The subscriber task, one per shard: applies its callers' commands in
//! order, subscribes again after reconnects, and on a cluster follows
//! channels whose hash slot moved.

use std::sync::Arc;

use fred::prelude::*;
use tokio::{sync::mpsc, task::JoinHandle};

use super::{
    dispatch::{Again, dispatch},
    handle::{Command, Listeners},
    subscriber::{Subs, Subscriber},
};

/// How often a subscriber sends again what it failed to subscribe to
/// again, and a cluster shard's compares its channels' nodes with the
/// shard's hash slot map, to follow channels whose hash slot moved.
pub(crate) const CLUSTER_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The shard's subscriber task: applies commands in order until every
/// sender is gone, then closes the connections.
pub(super) async fn run(shard: String, subs: Subs, mut commands: mpsc::UnboundedReceiver<Command>) {
    let listeners: Listeners = Arc::default();
    let (again_tx, mut again) = mpsc::unbounded_channel();
    let single = start_single(&subs, &listeners, &again_tx);
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
                s.reconnected(first, &mut again).await;
                continue;
            }
            _ = tick.tick(), if cluster || !s.failed.is_empty() => {
                let failed = std::mem::take(&mut s.failed);
                s.subscribe_again(failed).await;
                s.follow_hash_slots().await;
                continue;
            }
        };
        s.apply(cmd).await;
    }
    if let Some(d) = single {
        d.abort();
    }
    if let Subs::Single(sub) = &s.subs {
        let _ = sub.quit().await;
    }
}

/// A standalone or Sentinel shard's one subscriber connection: connects it
/// and starts its dispatcher (`None` on a cluster, whose connections are
/// made per node as channels need them).
fn start_single(
    subs: &Subs,
    listeners: &Listeners,
    again: &mpsc::UnboundedSender<Again>,
) -> Option<JoinHandle<()>> {
    match subs {
        Subs::Single(sub) => {
            let _conn = sub.connect();
            Some(tokio::spawn(dispatch(
                sub.clone(),
                listeners.clone(),
                again.clone(),
                None,
            )))
        }
        Subs::Cluster { .. } => None,
    }
}

impl Subscriber<'_> {
    /// Subscribes again to what the connections that came back served:
    /// `first`, and every reconnect queued up behind it (connections
    /// reconnect one by one: one round for all of them).
    async fn reconnected(&mut self, first: Again, again: &mut mpsc::UnboundedReceiver<Again>) {
        let mut nodes: Vec<Option<String>> = Vec::new();
        let mut next = Some(first);
        while let Some(Again::Reconnected(node)) = next {
            if !nodes.contains(&node) {
                nodes.push(node);
            }
            next = again.try_recv().ok();
        }
        for node in nodes {
            let channels = self.served_by(node.as_deref());
            self.subscribe_again(channels).await;
        }
    }

    /// Applies a caller's command.
    async fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Listen {
                channel,
                id,
                handler,
                reply,
            } => {
                let result = self.add(channel.clone(), id, handler).await;
                let added = result.is_ok();
                let answered = reply.send(result).is_ok();
                // Its caller gave up (a client that hung up while the
                // SUBSCRIBE was in flight): nobody will drop a `Listening`
                // for it, so take it out now.
                if added && !answered {
                    self.remove(channel, id).await;
                }
            }
            Command::Unlisten { channel, id } => {
                self.remove(channel, id).await;
            }
        }
    }
}
