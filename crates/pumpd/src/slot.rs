//! The loop of one slot. It runs while its process holds the slot's lease
//! and returns why it ended ([`Ended`]) to the shard's supervisor
//! (`supervisor.rs`), which restarts it or takes the lease again.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sundial_core::{PumpOutcome, Shard};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{options::PumpOptions, permits::CallPermits};

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

/// One pump call of `slot`, once its server has a call permit free.
async fn pump_once(
    calls: &CallPermits,
    shard: &Shard,
    slot: u32,
    opts: &PumpOptions,
    owner: &str,
) -> Result<PumpOutcome, sundial_core::EngineError> {
    let permits = calls.of(shard, slot);
    // Never closed: a permit always comes.
    let _call = permits.acquire().await;
    shard.timers().pump(slot, opts.batch, Some(owner)).await
}

/// Pumps one slot while its owner holds the lease, until `shutdown`: pump,
/// then sleep until the next deadline or until `wake` is notified. Redis
/// errors never end it (it retries after [`PumpOptions::retry_after`]);
/// only a stop or a fenced call does, and it says which.
pub(crate) async fn run(job: SlotPump, shutdown: CancellationToken) -> Ended {
    let SlotPump {
        pool,
        shard,
        slot,
        owner,
        wake,
        opts,
        lag,
        calls,
    } = job;
    let key = slot;
    loop {
        // Register for a wake-up before looking at Redis, so that an
        // announcement made while the pump call runs is not lost.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        let outcome = pump_once(&calls, &shard, slot, &opts, &owner).await;
        let pause = match outcome {
            Ok(o) if o.fenced => {
                lag.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                return Ended::Fenced;
            }
            Ok(o) => {
                record(&pool, &o);
                let late_ms = match (o.processed, o.oldest_due_ms) {
                    (0, _) | (_, None) => 0,
                    (_, Some(oldest)) => o.now_ms.saturating_sub(oldest),
                };
                lag.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, late_ms);
                if o.processed >= u64::from(opts.batch) {
                    // A backlog: go again at once, yielding to other tasks.
                    tokio::task::yield_now().await;
                    continue;
                }
                until_next(&o, opts.idle_check)
            }
            Err(e) => {
                tracing::warn!(pool, shard = shard.name(), slot, error = %e, "pump failed");
                opts.retry_after
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = &mut notified => {}
            () = shutdown.cancelled() => {
                lag.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                return Ended::Stopped;
            }
        }
    }
}

/// How long to sleep: until the next deadline, measured on the shard's
/// clock, and no longer than `idle`.
fn until_next(o: &PumpOutcome, idle: Duration) -> Duration {
    match o.next_due_ms {
        Some(due) => Duration::from_millis(due.saturating_sub(o.now_ms)).min(idle),
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

    #[tokio::test]
    async fn a_slot_pumps_only_with_a_call_permit() {
        use sundial_core::{JobId, NewJob, Schedule, ShardOptions};
        let redis = sundial_tests::RedisServer::start();
        let shard = Shard::connect("t", &ShardOptions::new(redis.url())).expect("connect");
        shard
            .wait_connected(Duration::from_secs(5))
            .await
            .expect("connected");
        shard.load_scripts().await.expect("scripts");
        let slot = 3;
        assert!(
            shard.leases().claim(slot, "me").await.expect("claim"),
            "taken"
        );
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
        let o = |next, now| PumpOutcome {
            next_due_ms: next,
            now_ms: now,
            ..Default::default()
        };
        assert_eq!(
            until_next(&o(Some(1_250), 1_000), idle),
            Duration::from_millis(250)
        );
        assert_eq!(until_next(&o(Some(900), 1_000), idle), Duration::ZERO);
        assert_eq!(until_next(&o(Some(100_000), 1_000), idle), idle);
        assert_eq!(until_next(&o(None, 1_000), idle), idle);
    }
}
