//! The timer announcements of one shard ([`keys::TIMER_CHANNEL`]), heard by
//! a task of their own so that the lease loop never waits on a subscriber.
//!
//! The subscriber client is made once per shard and reconnects by itself;
//! fred resubscribes after a reconnect only to channels whose SUBSCRIBE once
//! succeeded, so until one has, the task tries again every
//! [`RESUBSCRIBE`]. Without a subscription pumps still run, on their
//! deadlines and idle timer; they only miss the early wake-ups, and the
//! task says so ([`Heard::Subscribed`]) once it has one, so that its owner
//! looks again at what it may have missed.

use std::time::Duration;

use fred::{clients::SubscriberClient, prelude::*};
use sundial_core::{Shard, keys};
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_util::sync::CancellationToken;

/// How long one SUBSCRIBE attempt may take.
const ATTEMPT: Duration = Duration::from_secs(3);
/// How long to wait between failed attempts (and before a restart).
pub(crate) const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// What a shard's timer channel said.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A script announced that this bucket tag became due sooner.
    Due(String),
    /// The subscription was made: announcements before it were missed.
    Subscribed,
    /// Announcements may have been lost (a reconnect, or a slow reader).
    MaybeLost,
}

/// Starts hearing `shard`'s announcements, after `after`, until `stop` or
/// until the receiver is dropped. The receiver yields `None` if the task
/// ended otherwise (its subscriber closed): its owner starts another.
pub(crate) fn start(
    shard: Shard,
    stop: CancellationToken,
    after: Duration,
) -> mpsc::Receiver<Heard> {
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(after) => {}
            () = stop.cancelled() => return,
        }
        let sub = loop {
            match shard.subscriber() {
                Ok(sub) => break sub,
                Err(e) => {
                    tracing::error!(shard = shard.name(), error = %e, "cannot make a subscriber for timer announcements");
                    tokio::select! {
                        () = tokio::time::sleep(RESUBSCRIBE) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
        };
        tokio::select! {
            () = hear(&shard, &sub, &tx) => {}
            () = stop.cancelled() => {}
            () = tx.closed() => {}
        }
        // It would reconnect forever otherwise.
        let _ = tokio::time::timeout(ATTEMPT, sub.quit()).await;
    });
    rx
}

async fn hear(shard: &Shard, sub: &SubscriberClient, tx: &mpsc::Sender<Heard>) {
    let _conn = sub.connect();
    let _manage = sub.manage_subscriptions();
    let mut messages = sub.message_rx();
    let mut reconnects = sub.reconnect_rx();
    subscribe(shard, sub).await;
    let _ = tx.send(Heard::Subscribed).await;
    loop {
        let heard = tokio::select! {
            m = messages.recv() => match m {
                Ok(m) => match m.value.as_string() {
                    Some(tag) => Heard::Due(tag),
                    None => continue,
                },
                Err(RecvError::Lagged(_)) => Heard::MaybeLost,
                Err(RecvError::Closed) => return,
            },
            r = reconnects.recv() => match r {
                Ok(_) | Err(RecvError::Lagged(_)) => Heard::MaybeLost,
                Err(RecvError::Closed) => return,
            },
        };
        if tx.send(heard).await.is_err() {
            return;
        }
    }
}

/// Subscribes, trying until it works.
async fn subscribe(shard: &Shard, sub: &SubscriberClient) {
    loop {
        match tokio::time::timeout(ATTEMPT, sub.subscribe(keys::TIMER_CHANNEL)).await {
            Ok(Ok(())) => {
                tracing::info!(shard = shard.name(), "subscribed to timer announcements");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(shard = shard.name(), error = %e, "cannot subscribe to timer announcements yet; retrying");
            }
            Err(_) => {
                tracing::warn!(
                    shard = shard.name(),
                    "subscribing to timer announcements timed out; retrying"
                );
            }
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}
