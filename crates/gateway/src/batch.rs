//! Group commit: operations on one queue in one slot that arrive while a
//! call for that queue runs are made together by the next call, so under
//! load one script call (and its `EVALSHA`, its `TIME`, its counter writes
//! and its `PUBLISH`) serves many requests. Publishes go this way, and so
//! do a queue's acks and consumes, together in one line (`Workers`).
//!
//! No timer is involved: the first operation on an idle queue is sent at
//! once, and what queues up behind a running call goes in the next one, so
//! a batch is as large as the load makes it and a lone request waits for
//! nothing. Once [`Op::SECOND_CALL_AT`] operations wait, a second call
//! takes them beside the first (never more than two at once), so the line
//! does not idle while the gateway answers a finished call. Two calls run
//! on different pooled connections, so operations whose requests
//! overlapped may reach Redis in either order, as they may from two
//! gateways. Each operation stays all or nothing on its own: a publication
//! that fails (an id that exists) changes nothing for the others in its
//! batch, and an ack finds its job or not on its own. The calls run in a
//! task of their own, so a request that goes away does not take its
//! batch's other requests with it; what a call made for a request that went
//! away is the operation's to undo (jobs reserved for a consumer that left
//! are released when their answer is dropped, see `Reserved`).

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
};

use sundial_core::{Delivery, EngineError, JobId, Publication, Shard, Want};
use tokio::sync::oneshot;

/// Operations one call carries at most.
const MAX_OPERATIONS: usize = 128;

/// An operation that goes to Redis in groups: one call for many.
pub trait Op: Send + Sync + 'static {
    type Item: Send + Sync + std::fmt::Debug + 'static;
    /// What one item's request is answered.
    type Out: Send + std::fmt::Debug + 'static;
    /// How much of a call's `LIMIT` an item takes (body bytes, jobs).
    fn size(item: &Self::Item) -> usize;
    /// What one call carries at most, in `size` units (an item larger than
    /// this goes alone).
    const LIMIT: usize;
    /// How many operations must wait behind a line's running call before a
    /// second call starts beside it. One call at a time makes the largest
    /// batches, but then the line idles while the gateway turns a call's
    /// answers around; a second call overlaps that, and starts only when
    /// the load would fill it, so a lightly loaded line keeps one call and
    /// its large batches.
    const SECOND_CALL_AT: usize = 8;
    /// One call for `items`; per item in order, its answer.
    fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Out>, EngineError>> + Send;
}

/// Publications, each all or nothing: `false` when one of its ids exists.
#[derive(Debug)]
pub struct PublishOp;

impl Op for PublishOp {
    type Item = Publication;
    type Out = bool;
    fn size(p: &Publication) -> usize {
        p.jobs.iter().map(|j| j.body.len()).sum()
    }
    /// Body bytes.
    const LIMIT: usize = 1024 * 1024;
    fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Publication],
    ) -> impl Future<Output = Result<Vec<bool>, EngineError>> + Send {
        shard.jobs().publish_many(slot, qualified, items)
    }
}

/// Jobs reserved for one consumer: what a consume call answers it, and
/// what a pass has gathered so far. If they are dropped before they are
/// handed over (the client hung up while its call ran, or while a later slot
/// was asked), they are given back rather than left reserved for nobody
/// until their TTR.
#[derive(Debug, Default)]
pub struct Reserved {
    jobs: Vec<(Shard, Delivery)>,
}

impl Reserved {
    /// Adds jobs reserved for the same consumer.
    pub fn append(&mut self, mut other: Reserved) {
        self.jobs.append(&mut other.jobs);
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// The jobs, now the client's.
    pub fn answered(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.jobs)
            .into_iter()
            .map(|(_, d)| d)
            .collect()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.jobs);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Each release goes back to the head of its queue: the last
                // first, so that the oldest is served first again.
                for (shard, d) in jobs.into_iter().rev() {
                    release(&shard, &d).await;
                }
            });
        }
    }
}

/// Gives back a job reserved for a client that went away.
async fn release(shard: &Shard, d: &Delivery) {
    match shard.jobs().release(d).await {
        Ok(_) => tracing::debug!(job_id = d.job.id, "consumer went away; job released"),
        Err(e) => {
            tracing::warn!(job_id = d.job.id, error = %e, "consumer went away; release failed, the job returns after its TTR")
        }
    }
}

/// What a worker asks of a queue: an ack, or jobs.
#[derive(Debug)]
pub enum Work {
    /// Delete job `id`, in whatever state it is.
    Ack(JobId),
    /// Reserve jobs.
    Take(Want),
}

/// What a [`Work`] is answered.
#[derive(Debug)]
pub enum Done {
    /// Whether the job existed there.
    Acked(bool),
    /// The jobs reserved for the consumer.
    Taken(Reserved),
}

/// Acks and consumes, in groups. A worker acks one job and asks for the
/// next, so the two arrive together: the acks and consumes of a queue that
/// ask a slot while a call for it runs share the next call, which makes
/// the acks first and then serves the consumers in arrival order. Under a
/// load that starts a second call, order holds within each call: an ack
/// and a consume from different requests that overlapped may run in
/// either order.
#[derive(Debug)]
pub struct WorkOp;

/// The group commit of acks and consumes.
pub type Workers = Lines<WorkOp>;

impl Op for WorkOp {
    type Item = Work;
    type Out = Done;
    fn size(w: &Work) -> usize {
        match w {
            Work::Ack(_) => 0,
            Work::Take(want) => want.count as usize,
        }
    }
    /// Jobs taken: as many as one request may ask for. Bodies may be up to
    /// 1 MiB each, and a call holds the records it takes in Redis's Lua
    /// memory until it returns, so a call takes no more than one request
    /// could on its own.
    const LIMIT: usize = 100;
    /// A worker brings two operations (its ack and its next consume), so
    /// 16 is the same load as 8 publishes. In alternated bench rounds
    /// (consume + ack, 32 workers) 16 beat both 8 (which made 0.22 calls
    /// per job instead of 0.15, and cost Redis more per job) and no
    /// second call at all.
    const SECOND_CALL_AT: usize = 16;
    async fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Work],
    ) -> Result<Vec<Done>, EngineError> {
        let mut acks = Vec::new();
        let mut wants = Vec::new();
        for w in items {
            match w {
                Work::Ack(id) => acks.push(id.clone()),
                Work::Take(want) => wants.push(*want),
            }
        }
        let served = shard.jobs().serve(slot, qualified, &acks, &wants).await?;
        let mut acked = served.acked.into_iter();
        let mut taken = served.taken.into_iter();
        // `serve` answers each ack and want, in order, or fails.
        items
            .iter()
            .map(|w| match w {
                Work::Ack(_) => acked.next().map(Done::Acked),
                Work::Take(_) => taken.next().map(|jobs| {
                    Done::Taken(Reserved {
                        jobs: jobs.into_iter().map(|d| (shard.clone(), d)).collect(),
                    })
                }),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| mismatch(shard))
    }
}

/// An answer of the wrong kind or count: a defect, reported as a bad reply.
fn mismatch(shard: &Shard) -> EngineError {
    EngineError::Reply {
        shard: shard.name().to_owned(),
        what: "a worker call answered out of step with what it was asked".to_owned(),
    }
}

/// The group commit of publishes.
pub type Publishes = Lines<PublishOp>;

/// (shard, slot, qualified queue).
type Key = (String, u32, String);
type Map<O> = Arc<Mutex<HashMap<Key, Arc<Line<O>>>>>;

/// The operations waiting for a call, per queue in a slot.
#[derive(Debug)]
pub struct Lines<O: Op> {
    lines: Map<O>,
}

impl<O: Op> Default for Lines<O> {
    fn default() -> Self {
        Self {
            lines: Arc::default(),
        }
    }
}

/// One queue's line: what waits, and how many calls are running.
#[derive(Debug)]
struct Line<O: Op> {
    shard: Shard,
    slot: u32,
    qualified: String,
    state: Mutex<LineState<O>>,
}

#[derive(Debug)]
struct LineState<O: Op> {
    waiting: Vec<Waiting<O>>,
    /// Calls running: 0, 1, or 2 (see [`Op::SECOND_CALL_AT`]).
    running: u8,
}

impl<O: Op> Default for LineState<O> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            running: 0,
        }
    }
}

#[derive(Debug)]
struct Waiting<O: Op> {
    item: O::Item,
    answer: oneshot::Sender<Result<O::Out, EngineError>>,
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
        if self.submit(shard, slot, qualified, publication).await? {
            Ok(())
        } else {
            Err(EngineError::Exists {
                shard: shard.name().to_owned(),
            })
        }
    }
}

impl Workers {
    /// Deletes job `id` of `qualified` in `slot` on `shard`, in a call of
    /// its own or with other acks and consumes of the same queue; whether
    /// it existed.
    pub async fn ack(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        id: JobId,
    ) -> Result<bool, EngineError> {
        match self.submit(shard, slot, qualified, Work::Ack(id)).await? {
            Done::Acked(found) => Ok(found),
            Done::Taken(_) => Err(mismatch(shard)),
        }
    }

    /// Reserves jobs of `qualified` in `slot` on `shard` for one consumer,
    /// in a call of its own or with other acks and consumes of the same
    /// queue.
    pub async fn consume(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        want: Want,
    ) -> Result<Reserved, EngineError> {
        match self
            .submit(shard, slot, qualified, Work::Take(want))
            .await?
        {
            Done::Taken(jobs) => Ok(jobs),
            Done::Acked(_) => Err(mismatch(shard)),
        }
    }
}

impl<O: Op> Lines<O> {
    /// Makes the operation `item` on `qualified` in `slot` on `shard`, in a
    /// call of its own or with others that wait for the same queue.
    async fn submit(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        item: O::Item,
    ) -> Result<O::Out, EngineError> {
        let line = self.line(shard, slot, qualified);
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut st = lock(&line.state);
            st.waiting.push(Waiting { item, answer });
            let start =
                st.running == 0 || (st.running == 1 && st.waiting.len() >= O::SECOND_CALL_AT);
            if start {
                st.running += 1;
            }
            start
        };
        if lead {
            tokio::spawn(run(line, self.lines.clone()));
        }
        match answered.await {
            Ok(r) => r,
            // The call's task ended without answering: it panicked.
            Err(_) => Err(EngineError::Reply {
                shard: shard.name().to_owned(),
                what: "the call ended without an answer".to_owned(),
            }),
        }
    }

    fn line(&self, shard: &Shard, slot: u32, qualified: &str) -> Arc<Line<O>> {
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

/// Runs calls for `line` until nothing waits, then leaves the map. Beside
/// another call, it stops as soon as fewer than [`Op::SECOND_CALL_AT`]
/// operations wait, and leaves them to the other.
async fn run<O: Op>(line: Arc<Line<O>>, lines: Map<O>) {
    let _leave = Leave {
        line: line.clone(),
        lines,
    };
    loop {
        let batch = {
            let mut st = lock(&line.state);
            // An operation whose request went away while it waited is
            // dropped unmade: a consume for nobody would reserve jobs,
            // spend their tries and take them from the consumers behind it
            // only to release them again.
            st.waiting.retain(|w| !w.answer.is_closed());
            if st.waiting.is_empty() || (st.running > 1 && st.waiting.len() < O::SECOND_CALL_AT) {
                st.running -= 1;
                break;
            }
            take(&mut st.waiting)
        };
        let (items, answers): (Vec<O::Item>, Vec<_>) =
            batch.into_iter().map(|w| (w.item, w.answer)).unzip();
        let result = O::call(&line.shard, line.slot, &line.qualified, &items).await;
        match result {
            Ok(outs) => {
                // A request that went away drops its answer here.
                for (answer, out) in answers.into_iter().zip(outs) {
                    let _ = answer.send(Ok(out));
                }
            }
            Err(e) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Takes a line's task out of the map when it ends. If it ends by a panic
/// and no other call of the line runs, the line is stopped first: what
/// waits is answered with an error (its senders dropped) instead of
/// waiting for a call that will never run, and the next publication of the
/// queue starts a new line. If the other call runs, it serves what waits.
struct Leave<O: Op> {
    line: Arc<Line<O>>,
    lines: Map<O>,
}

impl<O: Op> Drop for Leave<O> {
    fn drop(&mut self) {
        let line = &self.line;
        if std::thread::panicking() {
            let mut st = lock(&line.state);
            st.running = st.running.saturating_sub(1);
            // The other call, if one runs, serves what waits.
            if st.running == 0 {
                st.waiting.clear();
            }
        }
        let key = (
            line.shard.name().to_owned(),
            line.slot,
            line.qualified.clone(),
        );
        let mut map = lock(&self.lines);
        // Only if nothing came since (a publication that found this line
        // before it left sets `running` again and runs it itself).
        if map.get(&key).is_some_and(|l| Arc::ptr_eq(l, line)) && lock(&line.state).running == 0 {
            map.remove(&key);
        }
    }
}

/// The next batch: operations in arrival order, within the bounds.
fn take<O: Op>(waiting: &mut Vec<Waiting<O>>) -> Vec<Waiting<O>> {
    let mut used = 0;
    let mut n = 0;
    for w in waiting.iter() {
        let size = O::size(&w.item);
        if n > 0 && (n >= MAX_OPERATIONS || used + size > O::LIMIT) {
            break;
        }
        used += size;
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
            st.running = 1;
            st.waiting.push(Waiting {
                item: Publication {
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
        assert_eq!(lock(&line.state).running, 0);
    }

    /// An operation whose calls are held until the test lets them go: it
    /// records each call's size and how many ran at once. Only
    /// `a_second_call_starts_when_the_load_fills_it` uses it.
    #[derive(Debug)]
    struct Held;

    static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
    static CALLS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static MOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    impl Op for Held {
        type Item = u32;
        type Out = u32;
        fn size(_: &u32) -> usize {
            1
        }
        const LIMIT: usize = 1000;
        async fn call(_: &Shard, _: u32, _: &str, items: &[u32]) -> Result<Vec<u32>, EngineError> {
            use std::sync::atomic::Ordering::SeqCst;
            lock(&CALLS).push(items.len());
            let now = IN_FLIGHT.fetch_add(1, SeqCst) + 1;
            MOST.fetch_max(now, SeqCst);
            GATE.acquire().await.expect("gate open").forget();
            IN_FLIGHT.fetch_sub(1, SeqCst);
            Ok(items.to_vec())
        }
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_second_call_starts_when_the_load_fills_it() {
        use std::sync::atomic::Ordering::SeqCst;
        let shard = Shard::connect("s", &ShardOptions::new("redis://127.0.0.1:1/")).expect("shard");
        let lines = Arc::new(Lines::<Held>::default());
        let submit = |n: u32| {
            let (lines, shard) = (lines.clone(), shard.clone());
            tokio::spawn(async move { lines.submit(&shard, 3, "ns/q", n).await })
        };
        let mut answers = vec![submit(0)];
        settle().await;
        assert_eq!(*lock(&CALLS), [1], "a lone operation goes at once");
        // Fewer than Held::SECOND_CALL_AT wait behind the running call: they
        // wait for it, to go together.
        for n in 1..Held::SECOND_CALL_AT as u32 {
            answers.push(submit(n));
        }
        settle().await;
        assert_eq!(*lock(&CALLS), [1], "no second call for a light load");
        // One more fills a second call, which starts beside the first.
        answers.push(submit(Held::SECOND_CALL_AT as u32));
        settle().await;
        assert_eq!(*lock(&CALLS), [1, Held::SECOND_CALL_AT]);
        assert_eq!(IN_FLIGHT.load(SeqCst), 2);
        // More waits for one of the two: never a third call.
        for n in 0..3 * Held::SECOND_CALL_AT as u32 {
            answers.push(submit(100 + n));
        }
        settle().await;
        assert_eq!(lock(&CALLS).len(), 2, "at most two calls at once");
        // The first call ends: the next takes everything that waits.
        GATE.add_permits(1);
        settle().await;
        assert_eq!(
            *lock(&CALLS),
            [1, Held::SECOND_CALL_AT, 3 * Held::SECOND_CALL_AT]
        );
        // A few wait behind the two calls, one of them for a client that
        // hung up.
        for n in 200..203 {
            answers.push(submit(n));
        }
        let gone = submit(203);
        settle().await;
        gone.abort();
        settle().await;
        // One call ends with too few waiting to fill a second: it stops
        // and leaves them to the other.
        GATE.add_permits(1);
        settle().await;
        assert_eq!(
            lock(&CALLS).len(),
            3,
            "no call for fewer than the threshold"
        );
        assert_eq!(IN_FLIGHT.load(SeqCst), 1);
        // The other ends and takes them, without the departed one.
        GATE.add_permits(2);
        settle().await;
        assert_eq!(lock(&CALLS).last(), Some(&3));
        let k = Held::SECOND_CALL_AT;
        for (i, a) in answers.into_iter().enumerate() {
            let got = a.await.expect("task").expect("answered");
            let want = match i {
                i if i <= k => i as u32,
                i if i <= 4 * k => 100 + (i - k - 1) as u32,
                i => 200 + (i - 4 * k - 1) as u32,
            };
            assert_eq!(got, want, "each operation gets its own answer");
        }
        assert_eq!(MOST.load(SeqCst), 2);
        assert_eq!(lines.lines(), 0, "an idle line leaves the map");
        // A later lone operation runs alone again, in one call.
        GATE.add_permits(1);
        let got = submit(7).await.expect("task").expect("answered");
        assert_eq!(got, 7);
        assert_eq!(lock(&CALLS).last(), Some(&1));
    }
}
