//! `move`: how fast the mover moves a backlog to an added shard, what it
//! costs Redis, and how late jobs that fall due meanwhile arrive.
//!
//! Method: `jobs` jobs delayed by an hour go to 64 queues (so that they
//! fill every slot); a stream of jobs delayed 1–3 s runs at `rate`/s on
//! another queue, consumed by long polls that record how late each
//! arrives. After 8 s of that stream (with the waiting jobs below
//! published and their consumers polling), `config_after` replaces
//! the gateway's config and the gateway reloads. The move is timed from the
//! first moment `GET /drains` shows the mover moving to the moment no
//! layout drains; Redis CPU is read over the same span (both shards, via
//! `--redis-cpu`). Lateness is reported apart for the stream's jobs due
//! before the reload and due while the slots moved (published after the
//! reload, they are written where they stay: none is moved), and for
//! `waiting` jobs (3,000) published just before the reload to 64 other queues, due
//! evenly over the minute from 12 s after it: those in moved slots may be
//! in transit when they fall due, which is the lateness a move adds.
//!
//! Length: one measurement, top to bottom, so that its method reads in one
//! place.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::{
    Ctx,
    cpu::{command_times, top_commands},
    fill,
    lateness::poll_due,
    now_ms,
};

/// `n` long-poll consumers of `queues` (see [`poll_due`]), until `stop`;
/// each adds (due ms, lateness µs) of the jobs it got to `into` as it ends.
fn pollers(
    ctx: &Arc<Ctx>,
    n: usize,
    queues: &str,
    stop: &Arc<AtomicBool>,
    into: &Arc<Mutex<Vec<(u64, u64)>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (ctx, stop, into, queues) =
                (ctx.clone(), stop.clone(), into.clone(), queues.to_owned());
            tokio::spawn(async move {
                let mut local = Vec::new();
                let requests = AtomicU64::new(0);
                poll_due(&ctx, &queues, &stop, &requests, |due, arrived| {
                    local.push((due, arrived.saturating_sub(due) * 1000));
                })
                .await;
                into.lock().await.extend(local);
            })
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn rebalance(
    ctx: Arc<Ctx>,
    admin: &str,
    concurrency: usize,
    jobs: u64,
    rate: u64,
    waiting: u64,
    config: &str,
    config_after: &str,
) -> anyhow::Result<()> {
    print!("filling {jobs} jobs delayed by an hour... ");
    let fillers: Vec<_> = (0..64u64)
        .map(|i| {
            let ctx = ctx.clone();
            let share = jobs / 64 + u64::from(i < jobs % 64);
            tokio::spawn(async move { fill(&ctx, &format!("later{i}"), share, "delay=3600").await })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    println!("done");

    // Due jobs: published at `rate`, consumed by long polls. Each records
    // (due ms, lateness µs); the split by window is made at the end.
    let seen: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let mut consumers = pollers(&ctx, concurrency, "due", &stop, &seen);
    let stop_publishing = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (ctx, stop, published) = (ctx.clone(), stop_publishing.clone(), published.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let per_tick = (rate / 100).max(1);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..per_tick {
                    let delay = 1 + n % 3;
                    let due = now_ms() + delay * 1000;
                    if ctx
                        .put(
                            &format!("/api/{}/due?delay={delay}", ctx.ns),
                            due.to_string().into_bytes(),
                        )
                        .await
                        .is_ok()
                    {
                        published.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            }
        })
    };
    // Jobs waiting in every slot when the reload comes, due while the
    // slots move, and their consumers.
    // Due from about 12 s after the reload (8 s of the measurement above).
    let first_due = now_ms() + 20_000;
    for k in 0..waiting {
        let due = first_due + k * 60_000 / waiting;
        ctx.put(
            &format!(
                "/api/{}/soon{}?delay_ms={}",
                ctx.ns,
                k % 64,
                due.saturating_sub(now_ms())
            ),
            due.to_string().into_bytes(),
        )
        .await?;
    }
    // One long poll per queue: a poll of all 64 would be woken by each
    // arrival in any of them and look at all 64 each time (a cost of its
    // own that would show as the mover's).
    let waited: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    for q in 0..64 {
        consumers.extend(pollers(&ctx, 1, &format!("soon{q}"), &stop, &waited));
    }

    // The due stream and the waiting jobs' idle consumers alone, for
    // their share of Redis CPU.
    let base = ctx.cpu.sample();
    let base_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let stream_cpu = match (base.redis, ctx.cpu.sample().redis) {
        (Some(b), Some(a)) => (a - b) / base_at.elapsed().as_secs_f64(),
        _ => 0.0,
    };

    let reloaded_ms = now_ms();
    std::fs::copy(config_after, config).context("replace the gateway's config")?;
    let r = ctx.http.post(format!("{admin}/reload")).send().await?;
    let status = r.status();
    anyhow::ensure!(
        status == 200,
        "reload answered {status}: {}",
        r.text().await?
    );
    let drains = |ctx: Arc<Ctx>| {
        let url = format!("{admin}/drains");
        async move {
            let v: serde_json::Value = ctx.http.get(url).send().await?.json().await?;
            anyhow::Ok(v["pools"][0].clone())
        }
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut started, mut moving_ms, mut cpu) = (None, 0, None);
    let mut commands = Default::default();
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the drain did not end in 10 minutes"
        );
        let p = drains(ctx.clone()).await?;
        if started.is_none() && p["mover"]["slots_moving"].as_u64().unwrap_or(0) > 0 {
            started = Some(Instant::now());
            moving_ms = now_ms();
            cpu = Some(ctx.cpu.sample());
            commands = ctx
                .cpu
                .redis
                .as_deref()
                .map(command_times)
                .unwrap_or_default();
        }
        if p["draining"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended_ms = now_ms();
    let secs = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let moved = drains(ctx.clone()).await?["mover"]["jobs_moved"]
        .as_u64()
        .unwrap_or(0);
    // Redis CPU over the move (both shards), less the share of the due
    // stream and the idle consumers
    // (measured alone before the reload).
    let cost = match (cpu.and_then(|c| c.redis), ctx.cpu.sample().redis) {
        (Some(b), Some(a)) => {
            let used = a - b;
            let net = (used - stream_cpu * secs).max(0.0);
            format!(
                "Redis CPU {used:.2} s over the move ({:.0}% of a core), {:.1} µs per moved job \
                 without the share of the due stream and idle consumers ({:.0}% of a core alone)",
                used * 100.0 / secs.max(0.001),
                net * 1e6 / moved.max(1) as f64,
                stream_cpu * 100.0
            )
        }
        _ => "Redis CPU n/a".to_owned(),
    };
    // The stream stops; its last jobs (due within 3 s) come in, and the
    // waiting jobs' last ones (due up to 72 s after the reload).
    stop_publishing.store(true, Ordering::Relaxed);
    publisher.await?;
    let last_due = first_due + 60_000;
    let wait = last_due.saturating_sub(now_ms()).max(2_000) + 3_000;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await?;
    }
    let seen = seen.lock().await;
    let mut before = Histogram::<u64>::new(3)?;
    let mut during = Histogram::<u64>::new(3)?;
    for (due, late) in seen.iter() {
        if *due < reloaded_ms {
            before.record(*late)?;
        } else if (moving_ms..=ended_ms).contains(due) {
            during.record(*late)?;
        }
    }
    println!(
        "move: {moved} jobs moved in {secs:.1}s = {:.0} jobs/s (first batch to the drain's end; \
         it started {:.1}s after the reload)",
        moved as f64 / secs.max(0.001),
        moving_ms.saturating_sub(reloaded_ms) as f64 / 1000.0
    );
    println!("  {cost}");
    if let Some(urls) = ctx.cpu.redis.as_deref() {
        println!(
            "  Redis time by command over the move: {}",
            top_commands(&commands, &command_times(urls), 6)
        );
    }
    let q = |h: &Histogram<u64>| {
        format!(
            "{} jobs, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            h.len(),
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            h.max() as f64 / 1000.0
        )
    };
    let waited = waited.lock().await;
    let mut moving = Histogram::<u64>::new(3)?;
    for (due, late) in waited.iter() {
        if (moving_ms..=ended_ms).contains(due) {
            moving.record(*late)?;
        }
    }
    println!(
        "  lateness of stream jobs due before the reload: {}",
        q(&before)
    );
    println!(
        "  lateness of stream jobs due while slots moved (written after the reload, not moved): {}",
        q(&during)
    );
    println!(
        "  lateness of jobs waiting before the reload and due while slots moved (some in transit): {}",
        q(&moving)
    );
    println!(
        "  {} stream jobs published, {} received; {waiting} waiting jobs published, {} received",
        published.load(Ordering::Relaxed),
        seen.len(),
        waited.len()
    );
    Ok(())
}
