//! The last minutes of each queue's backlog and rates, for the dashboard's
//! charts, from what the gateway already reads: every time the admin API
//! reads a queue's counters (the dashboard, `sundial queue list|stats`),
//! the reading is kept, at most one per [`INTERVAL_MS`], for
//! [`WINDOW_MS`]. Nothing is read for it alone: a queue nobody looks at
//! costs nothing and has no history. In memory, per gateway; bounded by
//! [`MAX_QUEUES`].

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use serde::Serialize;
use sundial_core::engine::Counts;

/// Least time between two kept readings of a queue.
pub const INTERVAL_MS: u64 = 5_000;
/// How long a reading is kept.
pub const WINDOW_MS: u64 = 10 * 60 * 1_000;
/// Queues with a history at most; past it, the tenth read longest ago give
/// their place. A queue holds at most 120 readings of 72 bytes (in a
/// buffer of 128): about 9 KB, so about 19 MB in all.
pub const MAX_QUEUES: usize = 2_000;

/// One reading of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = HistoryPoint)]
pub struct Point {
    /// Unix ms when the reading was taken (this gateway's clock).
    pub t: u64,
    pub ready: u64,
    pub delayed: u64,
    pub reserved: u64,
    pub dead: u64,
    /// Jobs/s published and delivered since the gateway's previous reading
    /// of the queue (`None`: no earlier reading to compare with).
    #[schema(value_type = crate::api::answers::Rate)]
    pub publish_rate: Option<f64>,
    #[schema(value_type = crate::api::answers::Rate)]
    pub consume_rate: Option<f64>,
}

impl Point {
    pub fn new(t: u64, c: &Counts, rates: Option<(f64, f64)>) -> Self {
        Self {
            t,
            ready: c.ready,
            delayed: c.delayed,
            reserved: c.reserved,
            dead: c.dead,
            publish_rate: rates.map(|r| r.0),
            consume_rate: rates.map(|r| r.1),
        }
    }
}

#[derive(Debug, Default)]
pub struct History {
    queues: Mutex<HashMap<String, VecDeque<Point>>>,
}

impl History {
    /// Keeps `p` as the reading of `key` (`<pool>/<ns>/<queue>`), unless
    /// the last one kept is less than [`INTERVAL_MS`] older.
    pub fn record(&self, key: &str, p: Point) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(points) = queues.get_mut(key) {
            if points.back().is_some_and(|l| p.t < l.t + INTERVAL_MS) {
                return;
            }
            points.push_back(p);
            expire(points, p.t);
            return;
        }
        if queues.len() >= MAX_QUEUES {
            // Once per tenth of the bound at most, not per new queue.
            queues.retain(|_, points| points.back().is_some_and(|l| l.t + WINDOW_MS > p.t));
            if queues.len() >= MAX_QUEUES {
                let mut last: Vec<u64> = queues
                    .values()
                    .map(|points| points.back().map_or(0, |l| l.t))
                    .collect();
                let tenth = MAX_QUEUES / 10;
                let (_, cut, _) = last.select_nth_unstable(tenth - 1);
                let cut = *cut;
                let mut left = tenth;
                queues.retain(|_, points| {
                    let old = left > 0 && points.back().map_or(0, |l| l.t) <= cut;
                    left -= usize::from(old);
                    !old
                });
            }
        }
        queues.insert(key.to_owned(), VecDeque::from([p]));
    }

    /// The readings of `key` within the window before `now_ms`, oldest first.
    pub fn points(&self, key: &str, now_ms: u64) -> Vec<Point> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.get(key).map_or_else(Vec::new, |points| {
            points
                .iter()
                .filter(|p| p.t + WINDOW_MS > now_ms)
                .copied()
                .collect()
        })
    }
}

fn expire(points: &mut VecDeque<Point>, now_ms: u64) {
    while points.front().is_some_and(|p| p.t + WINDOW_MS <= now_ms) {
        points.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64, ready: u64) -> Point {
        let c = Counts {
            ready,
            ..Counts::default()
        };
        Point::new(t, &c, Some((1.0, 2.0)))
    }

    #[test]
    fn keeps_one_reading_per_interval_for_the_window() {
        let h = History::default();
        h.record("p/ns/q", at(0, 1));
        h.record("p/ns/q", at(INTERVAL_MS - 1, 2));
        h.record("p/ns/q", at(INTERVAL_MS, 3));
        assert_eq!(
            h.points("p/ns/q", INTERVAL_MS)
                .iter()
                .map(|p| p.ready)
                .collect::<Vec<_>>(),
            [1, 3]
        );
        // Past the window, the first reading is gone, on reading and on
        // the next record.
        assert_eq!(h.points("p/ns/q", WINDOW_MS).len(), 1);
        h.record("p/ns/q", at(WINDOW_MS + INTERVAL_MS, 4));
        assert_eq!(
            h.points("p/ns/q", WINDOW_MS + INTERVAL_MS)
                .iter()
                .map(|p| p.ready)
                .collect::<Vec<_>>(),
            [4]
        );
        assert!(h.points("p/ns/other", 0).is_empty());
    }

    #[test]
    fn the_queues_read_longest_ago_give_their_place() {
        let h = History::default();
        for i in 0..MAX_QUEUES as u64 {
            h.record(&format!("p/ns/q{i}"), at(1_000 + i, i));
        }
        h.record("p/ns/new", at(1_000 + MAX_QUEUES as u64, 0));
        let queues = h.queues.lock().expect("lock");
        assert_eq!(queues.len(), MAX_QUEUES - MAX_QUEUES / 10 + 1);
        let tenth = MAX_QUEUES / 10;
        assert!(
            (0..tenth).all(|i| !queues.contains_key(&format!("p/ns/q{i}"))),
            "the oldest tenth went"
        );
        assert!(queues.contains_key(&format!("p/ns/q{tenth}")) && queues.contains_key("p/ns/new"));
    }

    #[test]
    fn readings_out_of_the_window_free_their_place_first() {
        let h = History::default();
        for i in 0..MAX_QUEUES as u64 {
            h.record(&format!("p/ns/q{i}"), at(i, i));
        }
        h.record("p/ns/new", at(WINDOW_MS + 10, 0));
        let queues = h.queues.lock().expect("lock");
        // Readings at 0..=10 are out of the window: only those went.
        assert_eq!(queues.len(), MAX_QUEUES - 11 + 1);
        assert!(!queues.contains_key("p/ns/q10") && queues.contains_key("p/ns/q11"));
    }
}
