//! `noisy`: what one namespace's flood does to another's latency.
//!
//! Namespace A floods single publishes from `concurrency` connections;
//! namespace B publishes one job, long-polls it back and acks it, one at a
//! time (a round). Four phases of `secs` each:
//! 1. B alone: its round latency;
//! 2. A alone: its publishes/s, with Redis and gateway CPU per job;
//! 3. both, A with no quota: B's latency against phase 1, A's jobs/s;
//! 4. both, A held by a `publish_rate` quota to half of its phase-2 jobs/s.
//!
//! The targets read off the ratios: B's p99 at most 2× alone in
//! phase 3 and 1.3× in phase 4; comparing phase 2 across builds (with
//! `SUNDIAL_BIN`) shows what the machinery costs A when B is idle.
//!
//! With `--quiet-api` and `--quiet-admin`, B runs on a gateway and a Redis
//! of its own, on the same cores as A's: nothing but the machine is shared,
//! so its ratios are the floor that any sharing inside one gateway can
//! reach in this placement.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::{Ctx, served::Served, wire};

/// Where B's rounds go: A's gateway, or one of its own.
pub(crate) struct Quiet {
    pub(crate) api: String,
    pub(crate) admin: String,
}

/// A second namespace and its token, made through the admin API.
async fn namespace(ctx: &Ctx, admin: &str, name: &str) -> anyhow::Result<(String, String)> {
    let ns = format!("{name}{}", sundial_tests::now_ms());
    let v: serde_json::Value = ctx
        .http
        .post(format!("{admin}/token/{ns}?description=noisy"))
        .send()
        .await?
        .json()
        .await?;
    let token = v["token"].as_str().context("token")?.to_owned();
    Ok((ns, token))
}

/// The shape of A's flood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flood {
    /// Connections, each with one publish at a time.
    pub(crate) conns: usize,
    /// Queues they publish to: connection `i` to queue `q<i mod queues>`.
    pub(crate) queues: usize,
}

/// A's flood until `stop`: returns the publishes answered 201, and all.
async fn flood(
    api: String,
    ns: String,
    token: String,
    stop: Arc<AtomicBool>,
    shape: Flood,
) -> (u64, u64) {
    let (ok, all) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..shape.conns)
        .map(|i| {
            let (api, stop, ok, all) = (api.clone(), stop.clone(), ok.clone(), all.clone());
            let queue = format!("q{}", i % shape.queues.max(1));
            let request = wire::request("PUT", &format!("/api/{ns}/{queue}"), &token, &[b'a'; 64]);
            tokio::spawn(async move {
                let mut conn = wire::Conn::connect(&api).await?;
                while !stop.load(Ordering::Relaxed) {
                    all.fetch_add(1, Ordering::Relaxed);
                    match conn.call(&request).await {
                        Ok((201, _)) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(_) => conn = wire::Conn::connect(&api).await?,
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    (ok.load(Ordering::Relaxed), all.load(Ordering::Relaxed))
}

/// B's rounds for `dur`, on a thread and runtime of their own (so that
/// they never wait behind A's tasks in the load generator): their latency.
async fn rounds(api: &str, ns: &str, token: &str, dur: Duration) -> anyhow::Result<Rounds> {
    let (api, ns, token) = (api.to_owned(), ns.to_owned(), token.to_owned());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("noisy-b".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let out = match rt {
                Ok(rt) => rt.block_on(rounds_here(&api, &ns, &token, dur)),
                Err(e) => Err(e.into()),
            };
            let _ = tx.send(out);
        });
    spawned.context("B's thread")?;
    rx.await?
}

/// B's latency (µs): of whole rounds, and of each of their three calls.
struct Rounds {
    round: Histogram<u64>,
    /// Publish, consume, ack.
    steps: [Histogram<u64>; 3],
}

/// B's rounds for `dur`: publish, long-poll it back, ack; their latency.
async fn rounds_here(api: &str, ns: &str, token: &str, dur: Duration) -> anyhow::Result<Rounds> {
    let h = || Histogram::<u64>::new(3);
    let mut r = Rounds {
        round: h()?,
        steps: [h()?, h()?, h()?],
    };
    let mut conn = wire::Conn::connect(api).await?;
    let publish = wire::request("PUT", &format!("/api/{ns}/q"), token, b"quiet");
    let take = wire::request("GET", &format!("/api/{ns}/q?timeout=1&ttr=30"), token, b"");
    let start = Instant::now();
    while start.elapsed() < dur {
        let t = Instant::now();
        let (status, _) = conn.call(&publish).await?;
        anyhow::ensure!(status == 201, "B's publish answered {status}");
        let t1 = Instant::now();
        let (status, body) = conn.call(&take).await?;
        anyhow::ensure!(status == 200, "B's consume answered {status}");
        let t2 = Instant::now();
        let id = wire::job_ids(body).next().context("a job id")?.to_owned();
        let ack = wire::request("DELETE", &format!("/api/{ns}/q/job/{id}"), token, b"");
        let (status, _) = conn.call(&ack).await?;
        anyhow::ensure!(status == 204, "B's ack answered {status}");
        let t3 = Instant::now();
        r.round.record(micros(t3 - t))?;
        r.steps[0].record(micros(t1 - t))?;
        r.steps[1].record(micros(t2 - t1))?;
        r.steps[2].record(micros(t3 - t2))?;
    }
    Ok(r)
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// Prints B's rounds beside the flood, against B alone.
fn report_b(r: Option<Rounds>, alone: &Rounds) -> anyhow::Result<()> {
    let r = r.context("B's rounds")?;
    let h = &r.round;
    println!(
        "  B: {} rounds, p50 {:.2} ms, p99 {:.2} ms = {:.2}x alone",
        h.len(),
        ms(h, 0.5),
        ms(h, 0.99),
        ms(h, 0.99) / ms(&alone.round, 0.99)
    );
    report_steps(&r);
    Ok(())
}

/// Where B's rounds spend their time: each call's p50 and p99.
fn report_steps(r: &Rounds) {
    let [p, c, a] = &r.steps;
    let s = |h: &Histogram<u64>| format!("p50 {:.2} p99 {:.2}", ms(h, 0.5), ms(h, 0.99));
    println!(
        "     its calls (ms): publish {}; consume {}; ack {}",
        s(p),
        s(c),
        s(a)
    );
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Runs A's flood for `dur`, with B's rounds beside it when `with_b`;
/// prints A's jobs/s and CPU per job, and returns B's latency and A's jobs/s.
async fn phase(
    ctx: &Ctx,
    a: &(String, String),
    (b, quiet): (&(String, String), &Quiet),
    shape: Flood,
    dur: Duration,
    with_b: bool,
) -> anyhow::Result<(Option<Rounds>, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let flooding = tokio::spawn(flood(
        ctx.api.clone(),
        a.0.clone(),
        a.1.clone(),
        stop.clone(),
        shape,
    ));
    let h = if with_b {
        let served = Served::read(&ctx.http, &quiet.admin).await?;
        let r = rounds(&quiet.api, &b.0, &b.1, dur).await?;
        println!(
            "  B's consumes and acks {}",
            Served::read(&ctx.http, &quiet.admin).await?.since(&served)
        );
        Some(r)
    } else {
        tokio::time::sleep(dur).await;
        None
    };
    stop.store(true, Ordering::Relaxed);
    let (ok, all) = flooding.await?;
    let secs = start.elapsed().as_secs_f64();
    let jobs_s = ok as f64 / secs;
    println!(
        "  A: {ok} of {all} publishes taken = {jobs_s:.0} jobs/s; {}",
        ctx.cpu.report(cpu, all, ok)
    );
    Ok((h, jobs_s))
}

pub(crate) async fn noisy(
    ctx: Arc<Ctx>,
    admin: &str,
    quiet: &Quiet,
    shape: Flood,
    secs: u64,
) -> anyhow::Result<()> {
    let dur = Duration::from_secs(secs);
    let a = namespace(&ctx, admin, "noisy").await?;
    let b = namespace(&ctx, &quiet.admin, "quiet").await?;
    if quiet.api != ctx.api {
        println!("noisy: B on a gateway and a Redis of its own (same cores)");
    }
    let served = Served::read(&ctx.http, &quiet.admin).await?;
    let alone = rounds(&quiet.api, &b.0, &b.1, dur).await?;
    let seen = Served::read(&ctx.http, &quiet.admin).await?.since(&served);
    println!(
        "noisy: B alone: {} rounds, p50 {:.2} ms, p99 {:.2} ms",
        alone.round.len(),
        ms(&alone.round, 0.5),
        ms(&alone.round, 0.99)
    );
    report_steps(&alone);
    println!("     {seen}");
    println!(
        "noisy: A alone ({} connections, {} queue(s)):",
        shape.conns, shape.queues
    );
    let (_, capacity) = phase(&ctx, &a, (&b, quiet), shape, dur, false).await?;
    println!("noisy: both, A with no quota:");
    let (h, _) = phase(&ctx, &a, (&b, quiet), shape, dur, true).await?;
    report_b(h, &alone)?;
    let limit = (capacity / 2.0).max(1.0) as u64;
    let quota = format!("{admin}/namespaces/{}/quota", a.0);
    let r = ctx
        .http
        .put(&quota)
        .body(format!("{{\"publish_rate\": {limit}}}"))
        .send()
        .await?;
    anyhow::ensure!(
        r.status() == 200,
        "setting A's quota answered {}",
        r.status()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("noisy: both, A held to publish_rate {limit} (half its jobs/s alone):");
    let (h, _) = phase(&ctx, &a, (&b, quiet), shape, dur, true).await?;
    report_b(h, &alone)?;
    ctx.http.delete(&quota).send().await?;
    Ok(())
}
