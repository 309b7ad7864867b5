//! When jobs of one queue became ready, as Redis counts them: a thread
//! reads the queue's counters in its slots about once a millisecond, and
//! keeps each time the count of jobs that have been made ready so far
//! grew. That count is the queue's ready jobs plus its deliveries so far
//! (a running total), read in one command per slot: a job counts from
//! the moment it is ready, whether a consumer took it since or not, as
//! long as none is deleted, expires or is retried while it is read.
//!
//! The reads cost Redis a few µs each (about 1,000 a second while it
//! reads), so a watch reads only while `reading(now_ms)` says jobs may
//! come due.
//!
//! A job's time is the time the read that first counted it came back: no
//! earlier than it became ready, and about a millisecond later at most
//! (the reads' interval). So a lateness from it is never less than the
//! job's own, and one that came back before the job's due time proves the
//! job early.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::now_ms;

/// How often the counters are read.
const EVERY: Duration = Duration::from_millis(1);

/// A running watch; [`Watch::stop`] ends it.
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<Counted>>,
}

/// What a watch saw: the count when it started, then (time, count) each
/// time the count grew.
pub(crate) struct Counted {
    base: u64,
    grew: Vec<(u64, u64)>,
    /// Reads made.
    pub(crate) reads: u64,
}

impl Watch {
    /// Watches queue `qualified` (`<ns>/<queue>`) in slots `slots` of the
    /// Redis at `url`, at the times `reading` allows.
    pub(crate) fn start(
        url: &str,
        slots: Vec<u32>,
        qualified: &str,
        reading: impl Fn(u64) -> bool + Send + 'static,
    ) -> anyhow::Result<Self> {
        let mut c = redis::Client::open(url)?.get_connection()?;
        let (ready, delivered) = (format!("r{qualified}"), format!("C{qualified}"));
        let mut read = move || -> anyhow::Result<u64> {
            let mut pipe = redis::pipe();
            for s in &slots {
                pipe.cmd("HMGET")
                    .arg(format!("sd:{{{s}}}:c"))
                    .arg(&ready)
                    .arg(&delivered);
            }
            let counts: Vec<Vec<Option<u64>>> = pipe.query(&mut c)?;
            Ok(counts.iter().flatten().map(|n| n.unwrap_or(0)).sum())
        };
        let base = read()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut grew, mut last, mut reads) = (Vec::new(), base, 0);
            while !stopped.load(Ordering::Relaxed) {
                if reading(now_ms()) {
                    let n = read()?;
                    reads += 1;
                    if n > last {
                        grew.push((now_ms(), n));
                        last = n;
                    }
                }
                std::thread::sleep(EVERY);
            }
            Ok(Counted { base, grew, reads })
        });
        Ok(Self { stop, thread })
    }

    pub(crate) fn stop(self) -> anyhow::Result<Counted> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the watch panicked"))?
    }
}

impl Counted {
    /// The time each job counted since the start became ready, in the
    /// order they did.
    pub(crate) fn ready_times(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut before = self.base;
        for &(at, n) in &self.grew {
            out.extend(std::iter::repeat_n(at, (n - before) as usize));
            before = n;
        }
        out
    }
}
