//! The timer announcements of one shard ([`Shard::timer_channels`]: one
//! channel on a standalone shard, one per slot on a cluster), heard on the
//! shard's shared subscriber by a task of their own, so that the lease loop
//! never waits on a subscribe.
//!
//! fred resubscribes after a reconnect only to channels whose SUBSCRIBE once
//! succeeded, so until one has, the task tries again every
//! [`RESUBSCRIBE`]. Without a subscription pumps still run, on their
//! deadlines and idle timer; they only miss the early wake-ups, and the
//! task says so ([`Heard::Subscribed`]) once it has one, so that its owner
//! looks again at what it may have missed.

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
    let mut listening = Vec::new();
    for channel in shard.timer_channels(slots) {
        listening.push(loop {
            let listened = match shard.pubsub() {
                Ok(p) => p.listen(&channel, handler.clone()).await,
                Err(e) => Err(e),
            };
            match listened {
                Ok(l) => break l,
                Err(e) => {
                    tracing::warn!(shard = shard.name(), error = %e, "cannot subscribe to timer announcements yet; retrying");
                    tokio::time::sleep(RESUBSCRIBE).await;
                }
            }
        });
    }
    tracing::info!(shard = shard.name(), "subscribed to timer announcements");
    if tx.send(Heard::Subscribed).await.is_err() {
        return;
    }
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
