//! Room for a new connection on a full listener ([`Room`]): the open
//! connections that have no request in flight (never sent one, or idle
//! between keep-alive requests) may be closed to let it in, the one that
//! waited longest first. So clients that open connections and send
//! nothing cannot keep a health probe out until their head timeout: the
//! probe's connection closes the oldest of theirs. Connections with a
//! request in flight (a long poll among them) are never closed for room.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio_util::sync::CancellationToken;

use super::activity::Activity;

/// The open connections of one listener, each with the token that closes
/// it.
#[derive(Debug, Default)]
pub(super) struct Room {
    next: AtomicU64,
    open: Mutex<HashMap<u64, (Arc<Activity>, CancellationToken)>>,
}

/// A connection's place in the [`Room`], given up when dropped.
pub(super) struct Place {
    room: Arc<Room>,
    id: u64,
    /// Cancelled when the connection is to close for room.
    pub(super) evicted: CancellationToken,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.room.open().remove(&self.id);
    }
}

impl Room {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Arc<Activity>, CancellationToken)>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a new connection.
    pub(super) fn enter(self: &Arc<Self>, activity: Arc<Activity>) -> Place {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        self.open().insert(id, (activity, evicted.clone()));
        Place {
            room: self.clone(),
            id,
            evicted,
        }
    }

    /// Tells the connection that has waited longest without a request in
    /// flight to close; whether there was one.
    pub(super) fn evict_one(&self) -> bool {
        let mut open = self.open();
        let oldest = open
            .iter()
            .filter_map(|(id, (a, _))| a.waiting_since().map(|since| (since, *id)))
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some((_, token)) = open.remove(&id) {
            token.cancel();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_waiting_longest_without_a_request_goes_first() {
        let room = Arc::new(Room::default());
        let pause = || std::thread::sleep(std::time::Duration::from_millis(3));
        let (first, busy, second) = (
            Arc::new(Activity::new()),
            Arc::new(Activity::new()),
            Arc::new(Activity::new()),
        );
        let p1 = room.enter(first.clone());
        pause();
        let p2 = room.enter(busy.clone());
        pause();
        let p3 = room.enter(second.clone());
        pause();
        // The oldest sends a request and finishes it: it waits anew, now.
        drop(first.begin());
        let in_flight = busy.begin();
        assert!(room.evict_one());
        assert!(p3.evicted.is_cancelled(), "the one waiting longest");
        assert!(!p1.evicted.is_cancelled());
        assert!(room.evict_one());
        assert!(p1.evicted.is_cancelled());
        // Only a connection with a request in flight is left: it stays.
        assert!(!room.evict_one());
        assert!(!p2.evicted.is_cancelled());
        drop(in_flight);
        assert!(room.evict_one());
        assert!(p2.evicted.is_cancelled());
        drop((p1, p2, p3));
        assert!(room.open().is_empty());
    }
}
