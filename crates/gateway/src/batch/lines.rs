//! The machinery of group commit, generic over the operation: each
//! queue's line of waiting operations, the calls that take them in
//! batches (one at a time, or two under load), and how a line leaves the
//! map when it idles or its task panics.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
};

use sundial_core::{EngineError, Shard, keys};
use tokio::sync::oneshot;

use super::turns::Turns;

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
    /// Whether its calls wait for replicas on a shard with `wait` (on
    /// connections of their own): see `super::turns`.
    const REPLICATED: bool = false;
    /// One call for `items`; per item in order, its answer.
    fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Out>, EngineError>> + Send;
}

/// (shard, slot, qualified queue).
type Key = (String, u32, String);
type Map<O> = Arc<Mutex<HashMap<Key, Arc<Line<O>>>>>;

/// The operations waiting for a call, per queue in a slot.
#[derive(Debug)]
pub struct Lines<O: Op> {
    lines: Map<O>,
    /// The servers' turns, shared with the gateway's other group commits.
    turns: Arc<Turns>,
}

impl<O: Op> Default for Lines<O> {
    fn default() -> Self {
        Self::new(Arc::default())
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
    /// The namespace's weight, as its latest operation saw its quota.
    weight: u64,
    /// Calls running: 0, 1, or 2 (see [`Op::SECOND_CALL_AT`]).
    running: u8,
}

impl<O: Op> Default for LineState<O> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            weight: 1,
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

impl<O: Op> Lines<O> {
    /// Lines whose calls take `turns` (see [`Turns`]).
    pub fn new(turns: Arc<Turns>) -> Self {
        Self {
            lines: Arc::default(),
            turns,
        }
    }

    /// Makes the operation `item` on `qualified` in `slot` on `shard`, in a
    /// call of its own or with others that wait for the same queue; its
    /// namespace's `weight` orders the call among others for the server.
    pub(super) async fn submit(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        weight: u64,
        item: O::Item,
    ) -> Result<O::Out, EngineError> {
        let line = self.line(shard, slot, qualified);
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut st = lock(&line.state);
            st.waiting.push(Waiting { item, answer });
            st.weight = weight;
            let start =
                st.running == 0 || (st.running == 1 && st.waiting.len() >= O::SECOND_CALL_AT);
            if start {
                st.running += 1;
            }
            start
        };
        if lead {
            tokio::spawn(run(line, self.lines.clone(), self.turns.clone()));
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
/// operations wait, and leaves them to the other. Each call waits for its
/// server's turn first, and takes what waits once it has it.
async fn run<O: Op>(line: Arc<Line<O>>, lines: Map<O>, turns: Arc<Turns>) {
    let _leave = Leave {
        line: line.clone(),
        lines,
    };
    let ns = keys::parse_qualified(&line.qualified).map_or("", |(ns, _)| ns);
    let conn = line.shard.conn();
    while let Some(weight) = goes_on(&line, false).map(|(w, _)| w) {
        let taking = turns.take(&line.shard, line.slot, ns, weight, O::REPLICATED);
        let Ok(turn) = tokio::time::timeout(conn.command_timeout(), taking).await else {
            // The server's calls did not end within its timeout (it hangs,
            // or is cut off): what waits is answered as a call would be.
            let Some((_, batch)) = goes_on(&line, true) else {
                break;
            };
            let e = conn.timed_out("no call to the shard ended within its timeout");
            let (_, answers): (Vec<O::Item>, Vec<_>) =
                batch.into_iter().map(|w| (w.item, w.answer)).unzip();
            answer::<O>(answers, Err(e));
            continue;
        };
        // The other call may have taken what waited meanwhile.
        let Some((_, batch)) = goes_on(&line, true) else {
            turn.unused();
            break;
        };
        let (items, answers): (Vec<O::Item>, Vec<_>) =
            batch.into_iter().map(|w| (w.item, w.answer)).unzip();
        let result = O::call(&line.shard, line.slot, &line.qualified, &items).await;
        drop(turn);
        answer::<O>(answers, result);
    }
}

/// Whether the line's call goes on: `None` (and the call counted out) when
/// nothing waits, or, beside another call, fewer than
/// [`Op::SECOND_CALL_AT`]; else the namespace's weight, and the next batch
/// when `take_batch`.
fn goes_on<O: Op>(line: &Line<O>, take_batch: bool) -> Option<(u64, Vec<Waiting<O>>)> {
    let mut st = lock(&line.state);
    // An operation whose request went away while it waited is dropped
    // unmade: a consume for nobody would reserve jobs, spend their tries
    // and take them from the consumers behind it only to release them
    // again.
    st.waiting.retain(|w| !w.answer.is_closed());
    if st.waiting.is_empty() || (st.running > 1 && st.waiting.len() < O::SECOND_CALL_AT) {
        st.running -= 1;
        return None;
    }
    let batch = if take_batch {
        take(&mut st.waiting)
    } else {
        Vec::new()
    };
    Some((st.weight, batch))
}

type Answer<O> = oneshot::Sender<Result<<O as Op>::Out, EngineError>>;

/// Answers each operation of a batch with its outcome of one call.
fn answer<O: Op>(answers: Vec<Answer<O>>, result: Result<Vec<O::Out>, EngineError>) {
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
    use sundial_core::{Publication, ShardOptions};

    use super::*;
    use crate::batch::Publishes;

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
                        priority: 0,
                        policy: None,
                    },
                    jobs: Vec::new(),
                    keys: None,
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

    /// An operation whose calls never end: a hung server.
    #[derive(Debug)]
    struct Hangs;

    impl Op for Hangs {
        type Item = u32;
        type Out = u32;
        fn size(_: &u32) -> usize {
            1
        }
        const LIMIT: usize = 1000;
        async fn call(_: &Shard, _: u32, _: &str, _: &[u32]) -> Result<Vec<u32>, EngineError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_call_that_finds_no_turn_within_the_shards_timeout_is_unavailable() {
        let mut opts = ShardOptions::new("redis://127.0.0.1:1/");
        opts.connections = 1;
        opts.command_timeout = std::time::Duration::from_millis(100);
        let shard = Shard::connect("s", &opts).expect("shard");
        let lines = Arc::new(Lines::<Hangs>::default());
        let (l, sh) = (lines.clone(), shard.clone());
        // Takes the server's one turn and never gives it back.
        let hung = tokio::spawn(async move { l.submit(&sh, 1, "a/q1", 1, 0).await });
        settle().await;
        let other = lines.submit(&shard, 2, "b/q2", 1, 1);
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), other)
            .await
            .expect("answered within the shard's timeout, not held with the hung call");
        assert!(
            matches!(answer, Err(EngineError::Unavailable { .. })),
            "{answer:?}"
        );
        hung.abort();
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
            tokio::spawn(async move { lines.submit(&shard, 3, "ns/q", 1, n).await })
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
