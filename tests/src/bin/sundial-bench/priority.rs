//! `priority`: what publish and consume+ack cost with priorities, over a
//! ready backlog of each size given, beside the same without priorities.
//! Each backlog is a queue of its own, twice: `b<size>` filled once with
//! ready jobs at priorities 0 to 4, `p<size>` with jobs without one. Then,
//! in alternating rounds (so that a drift of the machine falls on every
//! queue alike), each queue gets `secs` of single publishes from every
//! connection (on `b<size>` at priorities 5 to 9, one each in turn), and
//! long-polling workers consume and ack as many jobs: on `b<size>` the
//! jobs just published, which outrank the backlog; on `p<size>` the
//! oldest, first in first out. Either way the backlog keeps its size.
//! Each line reports jobs/s and, beside it, the CPU per job of the
//! gateway and of Redis.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{Ctx, fill, wire};

/// The backlog's priorities (its jobs are spread over them), and the
/// measured jobs' (above every backlog job's).
const BACKLOG_LEVELS: u8 = 5;
const TOP_LEVELS: u8 = 5;

pub(crate) async fn priority(
    ctx: Arc<Ctx>,
    concurrency: usize,
    backlogs: &[u64],
    secs: u64,
    rounds: u32,
) -> anyhow::Result<()> {
    for &b in backlogs {
        for plain in [false, true] {
            print!(
                "filling a ready backlog of {b} jobs {}... ",
                if plain {
                    "without priorities"
                } else {
                    "at priorities 0 to 4"
                }
            );
            let fillers: Vec<_> = (0..8u64)
                .map(|i| {
                    let ctx = ctx.clone();
                    let share = b / 8 + u64::from(i < b % 8);
                    let query = if plain {
                        String::new()
                    } else {
                        format!("priority={}", i % u64::from(BACKLOG_LEVELS))
                    };
                    let queue = queue_of(b, plain);
                    tokio::spawn(async move { fill(&ctx, &queue, share, &query).await })
                })
                .collect();
            for f in fillers {
                f.await??;
            }
            println!("done");
        }
    }
    for round in 1..=rounds {
        for &backlog in backlogs {
            for plain in [false, true] {
                let run = Run {
                    backlog,
                    plain,
                    round,
                };
                let n = publish(&ctx, concurrency, &run, Duration::from_secs(secs)).await?;
                consume(&ctx, concurrency, &run, n).await?;
            }
        }
    }
    Ok(())
}

/// The queue of a backlog's size, with priorities or without.
fn queue_of(backlog: u64, plain: bool) -> String {
    format!("{}{backlog}", if plain { "p" } else { "b" })
}

/// One measurement: its queue's backlog, whether it uses priorities, its
/// round.
struct Run {
    backlog: u64,
    plain: bool,
    round: u32,
}

impl Run {
    fn queue(&self) -> String {
        queue_of(self.backlog, self.plain)
    }

    fn label(&self) -> String {
        format!(
            "{}, backlog {}, round {}",
            if self.plain {
                "no priorities"
            } else {
                "priorities"
            },
            self.backlog,
            self.round
        )
    }
}

/// Single publishes to the run's queue (with priorities, at 5 to 9) for
/// `dur`; the jobs published.
async fn publish(
    ctx: &Arc<Ctx>,
    concurrency: usize,
    run: &Run,
    dur: Duration,
) -> anyhow::Result<u64> {
    let queue = run.queue();
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, errors) = (ctx.clone(), done.clone(), errors.clone());
        let requests: Vec<Vec<u8>> = if run.plain {
            let path = format!("/api/{}/{queue}", ctx.ns);
            vec![wire::request("PUT", &path, &ctx.token, &ctx.body)]
        } else {
            (0..TOP_LEVELS)
                .map(|p| {
                    let path = format!("/api/{}/{queue}?priority={}", ctx.ns, BACKLOG_LEVELS + p);
                    wire::request("PUT", &path, &ctx.token, &ctx.body)
                })
                .collect()
        };
        tasks.push(tokio::spawn(async move {
            let mut conn = wire::Conn::connect(&ctx.api).await?;
            let mut sent = 0usize;
            while start.elapsed() < dur {
                sent += 1;
                match conn.call(&requests[sent % requests.len()]).await {
                    Ok((201, _)) => done.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => errors.fetch_add(1, Ordering::Relaxed),
                    Err(_) => {
                        conn = wire::Conn::connect(&ctx.api).await?;
                        errors.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    let errors = errors.load(Ordering::Relaxed);
    println!(
        "publish ({}): {n} jobs in {secs:.1}s = {:.0} jobs/s, {errors} errors",
        run.label(),
        n as f64 / secs
    );
    println!("  {}", ctx.cpu.report(cpu, n + errors, n));
    Ok(n)
}

/// Long-polling workers consume and ack `jobs` jobs of the run's queue.
async fn consume(ctx: &Arc<Ctx>, concurrency: usize, run: &Run, jobs: u64) -> anyhow::Result<()> {
    let queue = run.queue();
    let done = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, requests) = (ctx.clone(), done.clone(), requests.clone());
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let take = wire::request(
                "GET",
                &format!("/api/{}/{queue}?ttr=600&timeout=1", ctx.ns),
                &ctx.token,
                b"",
            );
            let mut conn = wire::Conn::connect(&ctx.api).await?;
            while done.load(Ordering::Relaxed) < jobs {
                requests.fetch_add(1, Ordering::Relaxed);
                let body = match conn.call(&take).await {
                    Ok((200, body)) => body,
                    Ok(_) => continue,
                    Err(_) => {
                        conn = wire::Conn::connect(&ctx.api).await?;
                        continue;
                    }
                };
                let acks: Vec<Vec<u8>> = wire::deliveries(body)
                    .into_iter()
                    .map(|(id, _)| {
                        let path = format!("/api/{}/{queue}/job/{id}", ctx.ns);
                        wire::request("DELETE", &path, &ctx.token, b"")
                    })
                    .collect();
                for ack in &acks {
                    requests.fetch_add(1, Ordering::Relaxed);
                    match conn.call(ack).await {
                        Ok((204, _)) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((status, _)) => anyhow::bail!("an ack answered {status}"),
                        Err(_) => conn = wire::Conn::connect(&ctx.api).await?,
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    println!(
        "consume+ack ({}): {n} jobs in {secs:.1}s = {:.0} jobs/s",
        run.label(),
        n as f64 / secs
    );
    println!(
        "  {}",
        ctx.cpu.report(cpu, requests.load(Ordering::Relaxed), n)
    );
    Ok(())
}
