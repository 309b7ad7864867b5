//! `schedules`: what schedules cost.
//!
//! - Idle: for each count of `counts`, that many schedules whose next
//!   fire is months away (`0 0 1 1 *`); once the pumps hold and planned
//!   them, Redis's commands per second and CPU over `secs` in which
//!   nothing fires and no client sends anything: an idle schedule should
//!   cost what none costs.
//! - Firing: `firing` schedules firing every second, on the same second,
//!   for `secs`, taken and acknowledged by long-polling consumers: how late
//!   each fire's job was ready after the time it was for (read from Redis
//!   as it happens: `ready_watch`), how late it reached a consumer (its
//!   `scheduled-at`, on this clock; never early), and Redis's CPU per fire.
//!   A fire is written ahead of its time as a delayed job, so its job's
//!   `elapsed_ms` counts from its time, and says nothing of when it was
//!   ready. With `max_jobs`, the namespace is held to that backlog quota while
//!   it fires (set high, so that every fire is admitted): what holding
//!   fires to a quota costs.
//!
//! The schedules are written straight into the admin table (`sd:schedules`)
//! and its version bumped, as that many `PUT`s would leave it: each `PUT`
//! makes every process read every table again, so that 10,000 of them
//! take far longer than what is measured here.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::bail;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::{Ctx, now_ms, ready_watch::Watch};

/// The admin table of schedules, and the tables' version (standalone keys).
const TABLE: &str = "sd:schedules";
const VERSION: &str = "sd:tokens:version";
/// How long the pumps may take to hold and plan the schedules.
const SETTLE: Duration = Duration::from_secs(180);

/// What to run.
pub(crate) struct Run {
    pub(crate) redis: String,
    /// The pool's slot count.
    pub(crate) slots: u32,
    pub(crate) firing: u64,
    pub(crate) secs: u64,
    pub(crate) concurrency: usize,
    pub(crate) max_jobs: Option<u64>,
}

pub(crate) async fn schedules(
    ctx: Arc<Ctx>,
    admin: &str,
    run: &Run,
    counts: &[u64],
) -> anyhow::Result<()> {
    let (slots, firing, secs, concurrency) = (run.slots, run.firing, run.secs, run.concurrency);
    let mut c = redis::Client::open(run.redis.as_str())?.get_connection()?;
    for &n in counts {
        let started = Instant::now();
        let anchor = start(0);
        write(&mut c, &ctx.ns, n, |_| {
            format!(r#""cron":"0 0 1 1 *","anchor_ms":{anchor}"#)
        })?;
        settle(&mut c, slots, n).await?;
        let held_in = started.elapsed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (commands0, cpu0) = (commands(&mut c)?, ctx.cpu.sample());
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let commands1 = commands(&mut c)?;
        println!(
            "schedules idle: {n} schedules (held and planned {:.1} s after they were written): Redis {:.1} commands/s over {secs} s; {}",
            held_in.as_secs_f64(),
            (commands1 - commands0) as f64 / secs as f64,
            ctx.cpu.share(cpu0, secs as f64),
        );
        clear(&mut c, slots).await?;
    }
    if let Some(max_jobs) = run.max_jobs {
        let quota = serde_json::json!({ "max_jobs": max_jobs }).to_string();
        let url = format!("{admin}/namespaces/{}/quota", ctx.ns);
        let r = ctx.http.put(url).body(quota).send().await?;
        if !r.status().is_success() {
            bail!("cannot set the namespace's quota: {}", r.status());
        }
        println!("schedules firing: the namespace is held to max_jobs {max_jobs}");
    }
    if firing > 0 {
        for spread in [false, true] {
            let run = (run.redis.as_str(), slots, firing, spread);
            fire(&ctx, &mut c, run, secs, concurrency).await?;
        }
    }
    Ok(())
}

/// `firing` schedules every second for `secs`: all on the same second, or
/// (`spread`) each on its own millisecond of it (schedule `i` at
/// `i × 1000 / firing` ms past the second).
async fn fire(
    ctx: &Arc<Ctx>,
    c: &mut redis::Connection,
    (url, slots, firing, spread): (&str, u32, u64, bool),
    secs: u64,
    concurrency: usize,
) -> anyhow::Result<()> {
    let offset = |i: u64| if spread { i * 1000 / firing } else { 0 };
    // Far enough ahead for the pumps to hold them all before the first.
    let at = start(5000);
    write(c, &ctx.ns, firing, |i| {
        format!(
            r#""every":1,"anchor_ms":{},"start_ms":{at}"#,
            at + offset(i)
        )
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let (early, received) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let counting = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    let mut consumers = Vec::new();
    for _ in 0..concurrency {
        let (ctx, stop, hist) = (ctx.clone(), stop.clone(), hist.clone());
        let (early, received, counting) = (early.clone(), received.clone(), counting.clone());
        let requests = requests.clone();
        consumers.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new(3).expect("histogram");
            while !stop.load(Ordering::Relaxed) {
                let Some((arrived, jobs)) = crate::lateness::take(&ctx, "q").await else {
                    continue;
                };
                // A take (of up to 10 jobs), then an ack per job.
                if counting.load(Ordering::Relaxed) {
                    requests.fetch_add(1 + jobs.len() as u64, Ordering::Relaxed);
                }
                for j in jobs {
                    let at: u64 = j["attributes"]["scheduled-at"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    if counting.load(Ordering::Relaxed) {
                        received.fetch_add(1, Ordering::Relaxed);
                        if arrived < at {
                            early.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let _ = local.record((arrived - at) * 1000);
                        }
                    }
                    let id = j["job_id"].as_str().unwrap_or_default();
                    let _ = ctx
                        .http
                        .delete(format!("{}/api/{}/q/job/{id}", ctx.api, ctx.ns))
                        .header("X-Token", &ctx.token)
                        .send()
                        .await;
                }
            }
            let _ = hist.lock().await.add(&local);
        }));
    }
    settle(c, slots, firing).await?;
    if now_ms() + 100 > at {
        bail!("the pumps held the schedules too close to their first fire to watch it");
    }
    // Fires on the same second are watched from just before it to 150 ms
    // after; spread ones, all the time.
    let reading = move |now: u64| spread || (now + 5).saturating_sub(at) % 1000 < 155;
    let watch = Watch::start(url, holding(c, slots)?, &format!("{}/q", ctx.ns), reading)?;
    // A few seconds of fires first, then the measured window.
    tokio::time::sleep(Duration::from_millis(at - now_ms() + 3000)).await;
    let cpu = ctx.cpu.sample();
    let from = now_ms();
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    counting.store(false, Ordering::Relaxed);
    let until = now_ms();
    let report = ctx.cpu.report(
        cpu,
        requests.load(Ordering::Relaxed),
        received.load(Ordering::Relaxed),
    );
    // Time for the last fires of the window to be ready.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted = watch.stop()?;
    stop.store(true, Ordering::Relaxed);
    for t in consumers {
        t.await?;
    }
    clear(c, slots).await?;
    // The n-th job made ready is matched with the n-th fire due: fire `i`
    // of second `k` (offsets grow with `i`).
    let mut ready_late = Histogram::<u64>::new(3)?;
    let mut ready_early = 0;
    for (n, ready) in counted.ready_times().into_iter().enumerate() {
        let (k, i) = (n as u64 / firing, n as u64 % firing);
        let due = at + k * 1000 + offset(i);
        if due < from || due > until {
            continue;
        }
        match ready.checked_sub(due) {
            Some(late) => ready_late.record(late * 1000)?,
            None => ready_early += 1,
        }
    }
    let h = hist.lock().await;
    let late = |h: &Histogram<u64>| {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            ms(0.5),
            ms(0.99),
            h.max() as f64 / 1000.0
        )
    };
    println!(
        "schedules firing: {firing} schedules every second ({}) for {secs} s: {} fires received, {} early; ready late by {} ({} early, {} watched in {} reads); received late by {}",
        if spread {
            "spread over the second"
        } else {
            "all on the same second"
        },
        received.load(Ordering::Relaxed),
        early.load(Ordering::Relaxed),
        late(&ready_late),
        ready_early,
        ready_late.len() + ready_early,
        counted.reads,
        late(&h),
    );
    println!("  {report} (a job here is a fire: its publish, consume and ack)");
    Ok(())
}

/// A whole second a few seconds ahead, and `offset` ms (Unix ms): what an
/// interval counts from (its anchor).
fn start(offset: u64) -> u64 {
    (now_ms() / 1000 + 3) * 1000 + offset
}

/// Writes `n` schedules of queue `q` of `ns` into the admin table, each
/// timed by `when(i)` (JSON fields: the rule and `anchor_ms`), and bumps
/// the tables' version.
fn write(
    c: &mut redis::Connection,
    ns: &str,
    n: u64,
    when: impl Fn(u64) -> String,
) -> anyhow::Result<()> {
    let now = now_ms();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(TABLE);
        for i in chunk {
            let row = format!(
                r#"{{"rev":{now},{},"missed":"skip","grace_ms":60000,"job":{{"data":"eA==","ttl":600,"tries":1}},"created_ms":{now},"updated_ms":{now}}}"#,
                when(*i)
            );
            cmd.arg(format!("default/{ns}/q/s{i}")).arg(row);
        }
        let _: () = cmd.query(c)?;
    }
    let _: () = redis::cmd("INCR").arg(VERSION).query(c)?;
    Ok(())
}

/// Removes every schedule, bumps the version, and waits until the slots
/// hold none.
async fn clear(c: &mut redis::Connection, slots: u32) -> anyhow::Result<()> {
    let _: () = redis::cmd("DEL").arg(TABLE).query(c)?;
    let _: () = redis::cmd("INCR").arg(VERSION).query(c)?;
    settle(c, slots, 0).await
}

/// Waits until the slots hold `n` schedules, each on its slot's fire zset
/// (armed when written, planned at its first call), at most [`SETTLE`].
async fn settle(c: &mut redis::Connection, slots: u32, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (mut held, mut armed) = (0u64, 0u64);
        for s in 0..slots {
            held += redis::cmd("HLEN")
                .arg(format!("sd:{{{s}}}:sn"))
                .query::<u64>(c)?;
            armed += redis::cmd("ZCARD")
                .arg(format!("sd:{{{s}}}:f"))
                .query::<u64>(c)?;
        }
        if held == n && armed == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the slots hold {held} schedules ({armed} armed), not {n}, after {SETTLE:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The slots that hold schedules.
fn holding(c: &mut redis::Connection, slots: u32) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for s in 0..slots {
        let n: u64 = redis::cmd("HLEN").arg(format!("sd:{{{s}}}:sn")).query(c)?;
        if n > 0 {
            out.push(s);
        }
    }
    Ok(out)
}

/// The commands clients have sent so far (`total_commands_processed`).
fn commands(c: &mut redis::Connection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query(c)?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no total_commands_processed"))
}
