//! The loop of one slot. It runs while its process holds the slot's lease
//! and returns why it ended ([`Ended`]) to the shard's supervisor
//! (`supervisor.rs`), which restarts it or takes the lease again.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sundial_core::{FIRE_AHEAD_MS, PumpOutcome, Shard};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    options::PumpOptions,
    permits::CallPermits,
    schedules::{Fenced, SlotSchedules},
};

/// How late (ms) each held slot's last pump call found its oldest due job:
/// written by the slot loops, read by the supervisor for
/// `sundial_pump_lag_seconds`.
pub(crate) type Lags = Arc<std::sync::Mutex<HashMap<u32, u64>>>;

/// One slot to pump, for the process `owner` that holds its lease.
pub(crate) struct SlotPump {
    pub(crate) pool: String,
    pub(crate) shard: Shard,
    pub(crate) slot: u32,
    pub(crate) owner: String,
    pub(crate) wake: Arc<Notify>,
    pub(crate) opts: PumpOptions,
    /// Where this slot reports how late its last pump call found jobs.
    pub(crate) lag: Lags,
    /// The pump calls in flight on the slot's server ([`CallPermits`]).
    pub(crate) calls: Arc<CallPermits>,
    /// The slot's schedules; `None` where this process has no schedule
    /// table (a test's pumps).
    pub(crate) schedules: Option<SlotSchedules>,
    /// Jobs the fire steps wrote ahead since a pump call last made jobs
    /// ready: the next pump call may move that many ([`batches_for`]).
    pub(crate) written_ahead: u64,
}

/// The most batches one pump call moves.
const BATCHES_MOST: u32 = 4;

/// The batches of the pump call that makes ready the `written` jobs fire
/// steps wrote ahead (due within [`FIRE_AHEAD_MS`], most often at one
/// instant): all of them in one call, up to [`BATCHES_MOST`], so that the
/// consumers the first batch wakes do not hold the rest up.
fn batches_for(written: u64, batch: u32) -> u32 {
    let n = written.div_ceil(u64::from(batch.max(1)));
    u32::try_from(n)
        .unwrap_or(BATCHES_MOST)
        .clamp(1, BATCHES_MOST)
}

/// Why a slot's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its owner stopped it (shutdown, topology change, lease released).
    Stopped,
    /// The pump script found the lease held by someone else, or by nobody
    /// (it passed to another process, or Redis lost it): this process must
    /// not pump the slot until it holds the lease again.
    Fenced,
}

/// One pump call of `slot`, once its server has a call permit free; and
/// when it was sent.
async fn pump_once(
    calls: &CallPermits,
    shard: &Shard,
    slot: u32,
    limit: u32,
    owner: &str,
) -> (Instant, Result<PumpOutcome, sundial_core::EngineError>) {
    let permits = calls.of(shard, slot);
    // Never closed: a permit always comes.
    let _call = permits.acquire().await;
    let sent = Instant::now();
    (sent, shard.timers().pump(slot, limit, Some(owner)).await)
}

/// Pumps one slot while its owner holds the lease, until `shutdown`: pump
/// (and fire the slot's due schedules), then sleep until the next
/// deadline or until `wake` is notified. A new book of schedules makes the
/// slot hold its page at once, without a pump call. Redis errors never end
/// it (it retries after [`PumpOptions::retry_after`]); only a stop or a
/// fenced call does, and it says which.
pub(crate) async fn run(mut job: SlotPump, shutdown: CancellationToken) -> Ended {
    let forget = |job: &SlotPump| {
        job.lag
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&job.slot);
    };
    let wake = job.wake.clone();
    let mut wake_at = Instant::now();
    loop {
        // Register for a wake-up before looking at Redis, so that an
        // announcement made while the pump call runs is not lost.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        match keep(&mut job).await {
            Kept::Fenced => {
                forget(&job);
                return Ended::Fenced;
            }
            // New schedules are planned at once.
            Kept::Wrote => wake_at = Instant::now(),
            Kept::Stale => wake_at = wake_at.min(Instant::now() + job.opts.retry_after),
            Kept::Held => {}
        }
        if Instant::now() >= wake_at {
            let pause = match step(&mut job).await {
                Step::Fenced => {
                    forget(&job);
                    return Ended::Fenced;
                }
                Step::Again => {
                    // A backlog: go again at once, yielding to other tasks.
                    tokio::task::yield_now().await;
                    continue;
                }
                Step::Sleep(pause) => pause,
            };
            wake_at = Instant::now() + pause;
        }
        let book = async {
            match job.schedules.as_mut() {
                Some(s) => s.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake_at) => {}
            () = &mut notified => wake_at = Instant::now(),
            () = book => {}
            () = shutdown.cancelled() => {
                forget(&job);
                return Ended::Stopped;
            }
        }
    }
}

/// What making the slot hold its schedules did.
enum Kept {
    /// The lease was lost.
    Fenced,
    /// It wrote to the slot.
    Wrote,
    /// The slot may still differ (a Redis error, or a schedule that waits
    /// for the place it moves from): tried again soon.
    Stale,
    /// Nothing to do, or no schedules.
    Held,
}

/// Makes the slot hold its schedules.
async fn keep(job: &mut SlotPump) -> Kept {
    let Some(s) = job.schedules.as_mut() else {
        return Kept::Held;
    };
    let kept = match s.keep(&job.shard).await {
        Ok(Ok(true)) => Kept::Wrote,
        Ok(Ok(false)) => Kept::Held,
        Ok(Err(Fenced)) => return Kept::Fenced,
        Err(e) => {
            let (pool, slot) = (&job.pool, job.slot);
            tracing::warn!(pool, shard = job.shard.name(), slot, error = %e, "schedules not applied");
            Kept::Stale
        }
    };
    match kept {
        Kept::Held | Kept::Wrote if s.waits() => Kept::Stale,
        kept => kept,
    }
}

/// What a loop does after one step.
enum Step {
    Fenced,
    /// A backlog: step again at once.
    Again,
    Sleep(Duration),
}

/// One pump call of the slot, and a fire call when a schedule is due
/// (backlog or not).
async fn step(job: &mut SlotPump) -> Step {
    let (pool, shard, slot, opts) = (&job.pool, &job.shard, job.slot, &job.opts);
    let limit = opts
        .batch
        .saturating_mul(batches_for(job.written_ahead, opts.batch));
    let (sent, o) = pump_once(&job.calls, shard, slot, limit, &job.owner).await;
    let mut o = match o {
        Ok(o) if o.fenced => return Step::Fenced,
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(pool, shard = shard.name(), slot, error = %e, "pump failed");
            // The shard may come back without what the slot held (a
            // failover, a restart from an older log): read it again then.
            if let Some(s) = job.schedules.as_mut() {
                s.forget();
            }
            return Step::Sleep(opts.retry_after);
        }
    };
    record(pool, &o);
    if o.to_ready > 0 {
        job.written_ahead = 0;
    }
    report_lag(job, &o);
    let backlog = o.processed >= u64::from(limit);
    if plan_deferred(job, &mut o, backlog).await.is_err() {
        return Step::Fenced;
    }
    let (pool, shard, opts) = (&job.pool, &job.shard, &job.opts);
    // Counted from before the call, not from its answer: the shard's clock
    // it answers with was read in between, and a long call would make the
    // slot's next wake-up late by its length.
    let pause = until_next(o.next_due_ms, o.now_ms, opts.idle_check).saturating_sub(sent.elapsed());
    let Some(schedules) = job.schedules.as_mut() else {
        return if backlog {
            Step::Again
        } else {
            Step::Sleep(pause)
        };
    };
    if o.next_fire_ms.is_none() && schedules.expects_fires() {
        // The slot lost its schedules' keys: read it again, and write
        // what it lacks.
        schedules.forget();
    }
    let pause = match fire(schedules, (pool, shard, slot), opts, (&o, sent), pause).await {
        Ok((pause, written)) => {
            job.written_ahead += written;
            pause
        }
        Err(step) => return step,
    };
    if backlog {
        return Step::Again;
    }
    Step::Sleep(pause)
}

/// Reports how late the pump call `o` found the slot's oldest due job.
fn report_lag(job: &SlotPump, o: &PumpOutcome) {
    let late_ms = match (o.processed, o.oldest_due_ms) {
        (0, _) | (_, None) => 0,
        (_, Some(oldest)) => o.now_ms.saturating_sub(oldest),
    };
    job.lag
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(job.slot, late_ms);
}

/// Stores the plans that wait for jobs written ahead, once the first of
/// those is due by the pump call `o` (which made it ready), or, when `o`
/// moved a `backlog` (the rest of those jobs may be next), once it is
/// [`FIRE_AHEAD_MS`] past; `o`'s next fire becomes the slot's next fire
/// after them. Fails when the lease was lost.
async fn plan_deferred(
    job: &mut SlotPump,
    o: &mut PumpOutcome,
    backlog: bool,
) -> Result<(), Fenced> {
    let late_ms = if backlog { FIRE_AHEAD_MS } else { 0 };
    let Some(s) = job
        .schedules
        .as_mut()
        .filter(|s| s.plans_due(o.now_ms, late_ms))
    else {
        return Ok(());
    };
    match s
        .plan_deferred(&job.shard, o.now_ms, &mut o.next_fire_ms)
        .await
    {
        Ok(planned) => planned,
        Err(e) => {
            let (pool, slot) = (&job.pool, job.slot);
            tracing::warn!(pool, shard = job.shard.name(), slot, error = %e, "schedules not planned");
            Ok(())
        }
    }
}

/// Fires the slot's schedules when one is due, as the pump call `o`
/// found; returns the pause `pause` (counted from that call) made no
/// longer than the next fire and the first job written ahead, with the
/// number written ahead; or the step to end with.
async fn fire(
    schedules: &mut SlotSchedules,
    (pool, shard, slot): (&str, &Shard, u32),
    opts: &PumpOptions,
    (o, sent): (&PumpOutcome, Instant),
    pause: Duration,
) -> Result<(Duration, u64), Step> {
    // Fires are called for FIRE_AHEAD_MS before they are due, and written
    // ahead as delayed jobs.
    let call_at = |next_ms: Option<u64>| next_ms.map(|at| at.saturating_sub(FIRE_AHEAD_MS));
    if call_at(o.next_fire_ms).is_none_or(|at| at > o.now_ms) {
        let next = until_next(call_at(o.next_fire_ms), o.now_ms, opts.idle_check)
            .saturating_sub(sent.elapsed());
        return Ok((
            if o.next_fire_ms.is_some() {
                pause.min(next)
            } else {
                pause
            },
            0,
        ));
    }
    // The fire step's time is taken from the pump call's pause, and the
    // next fire counts from the step's last fire call.
    let began = Instant::now();
    let fired = match schedules.fire(shard, opts.batch).await {
        Ok(Ok(fired)) => fired,
        Ok(Err(Fenced)) => return Err(Step::Fenced),
        Err(e) => {
            tracing::warn!(pool, shard = shard.name(), slot, error = %e, "schedules not fired");
            schedules.forget();
            // Soon, whatever the retry pause: a call of the step may have
            // written jobs ahead, due within FIRE_AHEAD_MS, before another
            // failed, and the pump call makes them ready.
            let soon = Duration::from_millis(FIRE_AHEAD_MS / 4);
            return Err(Step::Sleep(opts.retry_after.min(soon)));
        }
    };
    // The pump call's pause ends no later than the first job written
    // ahead is due, for the timer to make it ready.
    let mut pause = pause.saturating_sub(began.elapsed());
    for next_ms in [call_at(fired.next_ms), fired.ready_ms] {
        if next_ms.is_some() {
            let next = until_next(next_ms, fired.now_ms, opts.idle_check);
            pause = pause.min(next.saturating_sub(fired.at.elapsed()));
        }
    }
    Ok((pause, fired.written_ahead))
}

/// How long to sleep: until the next deadline `next_ms`, measured on the
/// shard's clock (`now_ms`), and no longer than `idle`.
fn until_next(next_ms: Option<u64>, now_ms: u64, idle: Duration) -> Duration {
    match next_ms {
        Some(due) => Duration::from_millis(due.saturating_sub(now_ms)).min(idle),
        None => idle,
    }
}

fn record(pool: &str, o: &PumpOutcome) {
    if o.processed == 0 {
        return;
    }
    let pool = pool.to_owned();
    for (qualified, counts) in &o.per_queue {
        let Some((ns, queue)) = sundial_core::keys::parse_qualified(qualified) else {
            continue;
        };
        for (outcome, n) in ["ready", "retried", "dead", "expired"]
            .into_iter()
            .zip(counts)
        {
            if *n > 0 {
                let labels = [
                    ("pool", pool.clone()),
                    ("namespace", ns.to_owned()),
                    ("queue", queue.to_owned()),
                    ("outcome", outcome.to_owned()),
                ];
                let kind = sundial_core::series::Kind::Counter;
                sundial_core::series::Handle::new("sundial_pump_jobs_total", &labels, kind)
                    .increment(*n);
            }
        }
    }
    if let Some(oldest) = o.oldest_due_ms {
        metrics::histogram!("sundial_pump_lateness_seconds", "pool" => pool)
            .record(o.now_ms.saturating_sub(oldest) as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pump_call_takes_what_was_written_ahead_in_up_to_four_batches() {
        assert_eq!(batches_for(0, 500), 1);
        assert_eq!(batches_for(500, 500), 1);
        assert_eq!(batches_for(501, 500), 2);
        assert_eq!(batches_for(1_000, 500), 2);
        assert_eq!(batches_for(u64::MAX, 500), BATCHES_MOST);
        assert_eq!(batches_for(3, 0), 3, "a batch of 0 counts as 1");
    }

    #[tokio::test]
    async fn a_slot_pumps_only_with_a_call_permit() {
        use sundial_core::{JobId, NewJob, Schedule};
        let redis = sundial_tests::RedisServer::start();
        let slot = 3;
        let shard = crate::testing::leased_shard(&redis, slot).await;
        shard.load_scripts().await.expect("scripts");
        let schedule = Schedule {
            delay_ms: 20,
            ttl_ms: 0,
            tries: 1,
            priority: 0,
            policy: None,
        };
        let job = NewJob {
            id: JobId::mint(false),
            attrs: String::new(),
            body: bytes::Bytes::from_static(b"x"),
        };
        shard
            .jobs()
            .publish(slot, "ns/q", &schedule, &[job])
            .await
            .expect("publish");
        // Every permit is taken (other slots' calls, say).
        let calls = crate::permits::CallPermits::new(0);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            SlotPump {
                pool: "p".to_owned(),
                shard: shard.clone(),
                slot,
                owner: "me".to_owned(),
                wake: Arc::new(Notify::new()),
                opts: PumpOptions::default(),
                lag: Lags::default(),
                calls: calls.clone(),
                schedules: None,
                written_ahead: 0,
            },
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ready = shard
            .queues()
            .counts(slot, "ns/q")
            .await
            .expect("counts")
            .ready;
        assert_eq!(ready, 0, "due, but not pumped without a permit");
        calls.of(&shard, slot).add_permits(1);
        let pumped = async {
            while shard
                .queues()
                .counts(slot, "ns/q")
                .await
                .expect("counts")
                .ready
                == 0
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), pumped)
            .await
            .expect("pumped once a permit is free");
        stop.cancel();
        assert_eq!(task.await.expect("slot task"), Ended::Stopped);
    }

    #[test]
    fn sleeps_until_the_next_deadline_but_not_past_idle() {
        let idle = Duration::from_secs(10);
        assert_eq!(
            until_next(Some(1_250), 1_000, idle),
            Duration::from_millis(250)
        );
        assert_eq!(until_next(Some(900), 1_000, idle), Duration::ZERO);
        assert_eq!(until_next(Some(100_000), 1_000, idle), idle);
        assert_eq!(until_next(None, 1_000, idle), idle);
    }
}
