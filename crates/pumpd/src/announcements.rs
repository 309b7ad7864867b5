//! The timer announcements of one shard ([`Shard::timer_channels`]: one
//! channel on a standalone shard, one per slot on a cluster), heard on the
//! shard's shared subscriber by a task of their own, so that the lease loop
//! never waits on a subscribe.
//!
//! fred resubscribes after a reconnect only to channels whose SUBSCRIBE once
//! succeeded, so until each has, the task tries it again every
//! [`RESUBSCRIBE`], and a channel on a node that is down does not hold up
//! the others (a cluster's other primaries). Without a subscription pumps
//! still run, on their deadlines and idle timer; they only miss the early
//! wake-ups, and the task says so ([`Heard::Subscribed`]) after each round
//! that subscribed, so that its owner looks again at what it may have
//! missed.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use sundial_core::Shard;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// How long to wait between failed attempts (and before a restart).
pub(crate) const RESUBSCRIBE: Duration = Duration::from_secs(1);
/// Announcements queued for the lease loop at most; beyond, they are
/// dropped and the loop is told that some were lost.
const QUEUED: usize = 1024;

/// What a shard's timer channel said.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A script announced that this slot became due sooner.
    Due(u32),
    /// The subscription was made: announcements before it were missed.
    Subscribed,
    /// Announcements may have been lost (a reconnect, or a slow reader).
    MaybeLost,
}

/// Starts hearing `shard`'s announcements of `slots`, after `after`, until
/// `stop` or until the receiver is dropped. The receiver yields `None` if
/// the task ended otherwise: its owner starts another.
pub(crate) fn start(
    shard: Shard,
    slots: Arc<[u32]>,
    stop: CancellationToken,
    after: Duration,
) -> mpsc::Receiver<Heard> {
    let (tx, rx) = mpsc::channel(QUEUED);
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(after) => {}
            () = stop.cancelled() => return,
        }
        tokio::select! {
            () = hear(&shard, &slots, &tx) => {}
            () = stop.cancelled() => {}
            () = tx.closed() => {}
        }
    });
    rx
}

/// Listens (trying until it can), then forwards what is heard until the
/// receiver goes away.
async fn hear(shard: &Shard, slots: &[u32], tx: &mpsc::Sender<Heard>) {
    let lost = Arc::new(AtomicBool::new(false));
    let overflow = Arc::new(Notify::new());
    let queue = tx.clone();
    let (dropped, overflowed) = (lost.clone(), overflow.clone());
    let handler = Arc::new(move |heard: sundial_core::Heard<'_>| {
        let heard = match heard {
            sundial_core::Heard::Message(v) => match v.as_u64() {
                Some(slot) => Heard::Due(u32::try_from(slot).unwrap_or(u32::MAX)),
                None => return,
            },
            sundial_core::Heard::MaybeLost => Heard::MaybeLost,
        };
        if queue.try_send(heard).is_err() {
            dropped.store(true, Ordering::Release);
            overflowed.notify_one();
        }
    });
    let handler: sundial_core::Handler = handler;
    let Some(_listening) = subscribe(shard, slots, &handler, tx).await else {
        return;
    };
    // Announcements dropped on a full queue: say so as soon as there is
    // room, so that every held slot looks at its timer again.
    loop {
        tokio::select! {
            () = overflow.notified() => {}
            () = tx.closed() => return,
        }
        if lost.swap(false, Ordering::AcqRel) && tx.send(Heard::MaybeLost).await.is_err() {
            return;
        }
    }
}

/// Subscribes every timer channel of `slots`, in rounds: one on a node that
/// is down waits for the next round without holding up the others, and
/// each round that subscribed some tells `tx` ([`Heard::Subscribed`]).
/// `None` once `tx` is gone.
async fn subscribe(
    shard: &Shard,
    slots: &[u32],
    handler: &sundial_core::Handler,
    tx: &mpsc::Sender<Heard>,
) -> Option<Vec<sundial_core::Listening>> {
    let mut listening = Vec::new();
    let mut pending: Vec<String> = shard.timer_channels(slots);
    loop {
        let mut failed = Vec::new();
        let mut last_error = None;
        let before = listening.len();
        for channel in pending {
            let listened = match shard.pubsub() {
                Ok(p) => p.listen(&channel, handler.clone()).await,
                Err(e) => Err(e),
            };
            match listened {
                Ok(l) => listening.push(l),
                Err(e) => {
                    last_error = Some(e);
                    failed.push(channel);
                }
            }
        }
        if failed.is_empty() {
            tracing::info!(shard = shard.name(), "subscribed to timer announcements");
        } else if let Some(e) = last_error {
            tracing::warn!(shard = shard.name(), channels = failed.len(), error = %e, "cannot subscribe to some timer announcements yet; retrying");
        }
        if listening.len() > before && tx.send(Heard::Subscribed).await.is_err() {
            return None;
        }
        if failed.is_empty() {
            return Some(listening);
        }
        pending = failed;
        tokio::select! {
            () = tokio::time::sleep(RESUBSCRIBE) => {}
            () = tx.closed() => return None,
        }
    }
}
