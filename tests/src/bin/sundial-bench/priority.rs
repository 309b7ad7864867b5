//! `priority`: what publish and consume+ack cost with priorities, over a
//! ready backlog of each size given. Each backlog is its own queue, filled
//! once with ready jobs at priorities 0 to 4; then, in alternating rounds
//! (so that a drift of the machine falls on every size alike), each queue
//! gets `secs` of single publishes at priorities 5 to 9 (one each in turn)
//! from every connection, and long-polling workers consume and ack as
//! many jobs: the jobs just published, which outrank the backlog, so the
//! backlog stays whole. Each line reports jobs/s and, beside it, the CPU
//! per job of the gateway and of Redis.
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
        print!("filling a ready backlog of {b} jobs at priorities 0 to 4... ");
        let fillers: Vec<_> = (0..8u64)
            .map(|i| {
                let ctx = ctx.clone();
                let share = b / 8 + u64::from(i < b % 8);
                let query = format!("priority={}", i % u64::from(BACKLOG_LEVELS));
                tokio::spawn(async move { fill(&ctx, &format!("b{b}"), share, &query).await })
            })
            .collect();
        for f in fillers {
            f.await??;
        }
        println!("done");
    }
    for round in 1..=rounds {
        for &b in backlogs {
            let queue = format!("b{b}");
            let n = publish(
                &ctx,
                concurrency,
                &queue,
                Duration::from_secs(secs),
                b,
                round,
            )
            .await?;
            consume(&ctx, concurrency, &queue, n, b, round).await?;
        }
    }
    Ok(())
}

/// Single publishes to `queue` at priorities 5 to 9 for `dur`; the jobs
/// published.
async fn publish(
    ctx: &Arc<Ctx>,
    concurrency: usize,
    queue: &str,
    dur: Duration,
    backlog: u64,
    round: u32,
) -> anyhow::Result<u64> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, errors) = (ctx.clone(), done.clone(), errors.clone());
        let requests: Vec<Vec<u8>> = (0..TOP_LEVELS)
            .map(|p| {
                let path = format!("/api/{}/{queue}?priority={}", ctx.ns, BACKLOG_LEVELS + p);
                wire::request("PUT", &path, &ctx.token, &ctx.body)
            })
            .collect();
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
        "priority publish, backlog {backlog}, round {round}: {n} jobs in {secs:.1}s = {:.0} jobs/s, {errors} errors",
        n as f64 / secs
    );
    println!("  {}", ctx.cpu.report(cpu, n + errors, n));
    Ok(n)
}

/// Long-polling workers consume and ack `jobs` jobs of `queue`.
async fn consume(
    ctx: &Arc<Ctx>,
    concurrency: usize,
    queue: &str,
    jobs: u64,
    backlog: u64,
    round: u32,
) -> anyhow::Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, requests) = (ctx.clone(), done.clone(), requests.clone());
        let queue = queue.to_owned();
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
        "priority consume+ack, backlog {backlog}, round {round}: {n} jobs in {secs:.1}s = {:.0} jobs/s",
        n as f64 / secs
    );
    println!(
        "  {}",
        ctx.cpu.report(cpu, requests.load(Ordering::Relaxed), n)
    );
    Ok(())
}
