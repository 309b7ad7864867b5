//! Handing a subscriber connection's messages to its channels' listeners,
//! and telling the subscriber task when the connection came back.

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tokio::sync::{broadcast::error::RecvError, mpsc};

use super::handle::{Handler, Heard, Listeners};

/// What the subscriber task does besides its callers' commands: subscribe
/// again, so that every SUBSCRIBE and UNSUBSCRIBE goes out in order from
/// this one task.
pub(super) enum Again {
    /// A subscriber connection came back: every channel it served (that of
    /// the cluster node named, or the shard's only one) that has listeners.
    Reconnected(Option<String>),
}

/// Hands each message of one subscriber connection to its channel's
/// listeners; when the connection comes back, asks the subscriber task to
/// subscribe again (`node` names the connection's cluster node).
pub(super) async fn dispatch(
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
