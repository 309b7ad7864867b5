//! `consume`: how fast long-polling workers drain a backlog, and what each
//! job costs the gateway and Redis, for three ways a worker finishes:
//! - `ack`: consume, then an unfenced ack (lmstfy's worker);
//! - `touch`: consume, touch (fenced), then a fenced ack (a long job's
//!   worker, with the requests but not the wait);
//! - `release`: each job (2 tries) is consumed and released with no delay
//!   (fenced, its try spent), then consumed again and acked (fenced): a
//!   worker that fails once.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use crate::{Ctx, fill, wire};

/// How a worker finishes a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Then {
    Ack,
    Touch,
    Release,
}

/// What one consume's worker sent: requests, and jobs acked.
#[derive(Default)]
struct Sent {
    requests: u64,
    acked: u64,
}

/// A request that finishes a job: its bytes, the status it wants, and
/// whether it acks.
type Step = (Vec<u8>, u16, bool);

/// The requests that finish the jobs of one consume answer, as `then` says.
fn plan(ctx: &Ctx, then: Then, body: &[u8]) -> Vec<Step> {
    let step = |id: &str, method: &str, rest: &str, want: u16| {
        let path = format!("/api/{}/q/job/{id}{rest}", ctx.ns);
        (
            wire::request(method, &path, &ctx.token, b""),
            want,
            method == "DELETE",
        )
    };
    let mut steps = Vec::new();
    for (id, delivery) in wire::deliveries(body) {
        match (then, delivery) {
            (Then::Ack, _) => steps.push(step(id, "DELETE", "", 204)),
            (Then::Release, 1) => {
                steps.push(step(id, "POST", "/release?delay=0&delivery=1", 200));
            }
            (Then::Touch, n) => {
                steps.push(step(
                    id,
                    "POST",
                    &format!("/touch?ttr=600&delivery={n}"),
                    200,
                ));
                steps.push(step(id, "DELETE", &format!("?delivery={n}"), 204));
            }
            (Then::Release, n) => steps.push(step(id, "DELETE", &format!("?delivery={n}"), 204)),
        }
    }
    steps
}

/// Sends `steps` on `conn`; an answer other than the one wanted ends the run.
async fn finish(ctx: &Ctx, conn: &mut wire::Conn, steps: &[Step]) -> anyhow::Result<Sent> {
    let mut sent = Sent::default();
    for (request, want, acks) in steps {
        sent.requests += 1;
        match conn.call(request).await {
            Ok((status, _)) if status == *want => sent.acked += u64::from(*acks),
            Ok((status, _)) => anyhow::bail!("a worker's request answered {status}, not {want}"),
            Err(_) => *conn = wire::Conn::connect(&ctx.api).await?,
        }
    }
    Ok(sent)
}

pub(crate) async fn consume(
    ctx: Arc<Ctx>,
    concurrency: usize,
    jobs: u64,
    count: u32,
    timeout: u32,
    then: Then,
) -> anyhow::Result<()> {
    print!("filling {jobs} jobs... ");
    let tries = if then == Then::Release { "tries=2" } else { "" };
    let fillers: Vec<_> = (0..8)
        .map(|i| {
            let ctx = ctx.clone();
            let share = jobs / 8 + u64::from(i < jobs % 8);
            tokio::spawn(async move { fill(&ctx, "q", share, tries).await })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    println!("done");
    let done = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    // When the last ack landed (µs from the start): long-polling consumers
    // then wait out one timeout for nothing, which is not throughput.
    let last_ack = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, requests, last_ack) = (
            ctx.clone(),
            done.clone(),
            requests.clone(),
            last_ack.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let take = wire::request(
                "GET",
                &format!("/api/{}/q?count={count}&ttr=600&timeout={timeout}", ctx.ns),
                &ctx.token,
                b"",
            );
            let mut conn = wire::Conn::connect(&ctx.api).await?;
            loop {
                requests.fetch_add(1, Ordering::Relaxed);
                let body = match conn.call(&take).await {
                    Ok((200, body)) => body,
                    Ok((404, _)) => return anyhow::Ok(()),
                    Ok(_) => continue,
                    Err(_) => {
                        conn = wire::Conn::connect(&ctx.api).await?;
                        continue;
                    }
                };
                let steps = plan(&ctx, then, body);
                let sent = finish(&ctx, &mut conn, &steps).await?;
                requests.fetch_add(sent.requests, Ordering::Relaxed);
                if sent.acked > 0 {
                    done.fetch_add(sent.acked, Ordering::Relaxed);
                    last_ack.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = (last_ack.load(Ordering::Relaxed) as f64 / 1e6).max(1e-3);
    let n = done.load(Ordering::Relaxed);
    let what = match then {
        Then::Ack => "consume+ack",
        Then::Touch => "consume+touch+ack",
        Then::Release => "consume+release, consume+ack",
    };
    println!(
        "{what}: {n} jobs in {secs:.1}s = {:.0} jobs/s (count={count}, timeout={timeout})",
        n as f64 / secs
    );
    let requests = requests.load(Ordering::Relaxed);
    println!("  {}", ctx.cpu.report(cpu, requests, n));
    Ok(())
}
