//! Group commit of publishes: publications of one queue in one slot that
//! arrive while a call for that queue runs are stored together by the next
//! call, so under load a script call (and its `EVALSHA`, its `TIME`, its
//! counter writes and its `PUBLISH`) serves many requests.
//!
//! No timer is involved: the first publication of an idle queue is sent at
//! once, and what queues up behind a running call goes in the next one, so
//! a batch is as large as the load makes it and a lone request waits for
//! nothing. Each publication stays all or nothing on its own: one that
//! fails (an id that exists) changes nothing for the others in its batch.
//! The calls run in a task of their own, so a request that goes away does
//! not take its batch's other requests with it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sundial_core::{EngineError, Publication, Shard};
use tokio::sync::oneshot;

/// Publications one call carries at most.
const MAX_PUBLICATIONS: usize = 128;
/// Body bytes one call carries at most (a publication larger than this goes
/// alone).
const MAX_BYTES: usize = 1024 * 1024;

/// (shard, slot, qualified queue).
type Key = (String, u32, String);

/// The queues of publications waiting for a call, per queue in a slot.
#[derive(Debug, Default)]
pub struct Publishes {
    lines: Arc<Mutex<HashMap<Key, Arc<Line>>>>,
}

/// One queue's line: what waits, and whether a call is running.
#[derive(Debug)]
struct Line {
    shard: Shard,
    slot: u32,
    qualified: String,
    state: Mutex<LineState>,
}

#[derive(Debug, Default)]
struct LineState {
    waiting: Vec<Waiting>,
    running: bool,
}

#[derive(Debug)]
struct Waiting {
    publication: Publication,
    answer: oneshot::Sender<Result<bool, EngineError>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Publishes {
    /// Stores `publication` (jobs of `qualified` in `slot` on `shard`), in a
    /// call of its own or with others that wait for the same queue.
    pub async fn publish(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        publication: Publication,
    ) -> Result<(), EngineError> {
        let line = self.line(shard, slot, qualified);
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut st = lock(&line.state);
            st.waiting.push(Waiting {
                publication,
                answer,
            });
            !std::mem::replace(&mut st.running, true)
        };
        if lead {
            tokio::spawn(run(line, self.lines.clone()));
        }
        match answered.await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(EngineError::Exists {
                shard: shard.name().to_owned(),
            }),
            Ok(Err(e)) => Err(e),
            // The call's task ended without answering: it panicked.
            Err(_) => Err(EngineError::Reply {
                shard: shard.name().to_owned(),
                what: "the publish call ended without an answer".to_owned(),
            }),
        }
    }

    fn line(&self, shard: &Shard, slot: u32, qualified: &str) -> Arc<Line> {
        let key = (shard.name().to_owned(), slot, qualified.to_owned());
        let mut lines = lock(&self.lines);
        if let Some(l) = lines.get(&key)
            && l.shard.same(shard)
        {
            return l.clone();
        }
        // New, or on a connection a reload replaced.
        let line = Arc::new(Line {
            shard: shard.clone(),
            slot,
            qualified: qualified.to_owned(),
            state: Mutex::default(),
        });
        lines.insert(key, line.clone());
        line
    }

    /// Queues with publications waiting or a call running (for tests).
    pub fn lines(&self) -> usize {
        lock(&self.lines).len()
    }
}

/// Runs calls for `line` until nothing waits, then leaves the map.
async fn run(line: Arc<Line>, lines: Arc<Mutex<HashMap<Key, Arc<Line>>>>) {
    let _leave = Leave {
        line: line.clone(),
        lines,
    };
    loop {
        let batch = {
            let mut st = lock(&line.state);
            if st.waiting.is_empty() {
                st.running = false;
                break;
            }
            take(&mut st.waiting)
        };
        let publications: Vec<Publication> = batch.iter().map(|w| w.publication.clone()).collect();
        let result = line
            .shard
            .publish_many(line.slot, &line.qualified, &publications)
            .await;
        match result {
            Ok(stored) => {
                for (w, ok) in batch.into_iter().zip(stored) {
                    let _ = w.answer.send(Ok(ok));
                }
            }
            Err(e) => {
                for w in batch {
                    let _ = w.answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Takes a line's task out of the map when it ends. If it ends by a panic,
/// the line is stopped first: what waits is answered with an error (its
/// senders dropped) instead of waiting for a call that will never run, and
/// the next publication of the queue starts a new line.
struct Leave {
    line: Arc<Line>,
    lines: Arc<Mutex<HashMap<Key, Arc<Line>>>>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let line = &self.line;
        if std::thread::panicking() {
            let mut st = lock(&line.state);
            st.running = false;
            st.waiting.clear();
        }
        let key = (
            line.shard.name().to_owned(),
            line.slot,
            line.qualified.clone(),
        );
        let mut map = lock(&self.lines);
        // Only if nothing came since (a publication that found this line
        // before it left sets `running` again and runs it itself).
        if map.get(&key).is_some_and(|l| Arc::ptr_eq(l, line)) && !lock(&line.state).running {
            map.remove(&key);
        }
    }
}

/// The next batch: publications in arrival order, within the bounds.
fn take(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
    let mut bytes = 0;
    let mut n = 0;
    for w in waiting.iter() {
        let size: usize = w.publication.jobs.iter().map(|j| j.body.len()).sum();
        if n > 0 && (n >= MAX_PUBLICATIONS || bytes + size > MAX_BYTES) {
            break;
        }
        bytes += size;
        n += 1;
    }
    waiting.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use sundial_core::ShardOptions;

    use super::*;

    #[tokio::test]
    async fn a_line_whose_task_panics_answers_its_waiters_and_leaves() {
        // Nothing listens on port 1: the shard is never used, only named.
        let shard = Shard::connect("s", &ShardOptions::new("redis://127.0.0.1:1/")).expect("shard");
        let publishes = Publishes::default();
        let line = publishes.line(&shard, 7, "ns/q");
        let (answer, answered) = oneshot::channel();
        {
            let mut st = lock(&line.state);
            st.running = true;
            st.waiting.push(Waiting {
                publication: Publication {
                    schedule: sundial_core::Schedule {
                        delay_ms: 0,
                        ttl_ms: 0,
                        tries: 1,
                    },
                    jobs: Vec::new(),
                },
                answer,
            });
        }
        let lines = publishes.lines.clone();
        let task = tokio::spawn(async move {
            let _leave = Leave { line, lines };
            panic!("a call panicked");
        });
        assert!(task.await.is_err(), "the task panicked");
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), answered)
            .await
            .expect("the waiter is answered, not left waiting");
        assert!(answer.is_err(), "answered by the dropped sender");
        assert_eq!(publishes.lines(), 0, "the line left the map");
        // The queue works again: a new line, not running.
        let line = publishes.line(&shard, 7, "ns/q");
        assert!(!lock(&line.state).running);
    }
}
