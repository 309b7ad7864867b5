//! `lateness`: how late delayed jobs reach long-polling consumers.
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

use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::{Ctx, now_ms};

/// One long poll of `queue` (10 jobs and 1 s, TTR 600 s): when its answer
/// arrived (ms, this clock) and the jobs in it; `None` for no job or a
/// failed request.
pub(crate) async fn take(ctx: &Ctx, queue: &str) -> Option<(u64, Vec<serde_json::Value>)> {
    let url = format!(
        "{}/api/{}/{queue}?timeout=1&count=10&ttr=600",
        ctx.api, ctx.ns
    );
    let r = ctx.http.get(url).header("X-Token", &ctx.token).send().await;
    let r = r.ok().filter(|r| r.status() == 200)?;
    let arrived = now_ms();
    match r.json().await {
        Ok(serde_json::Value::Array(items)) => Some((arrived, items)),
        _ => None,
    }
}

/// Long-polls `queue` (or several, `a,b,…`) until `stop` (10 jobs and 1 s
/// per request, TTR 600 s), acknowledges each job, and calls
/// `seen(due, arrived)` for each (its body is its due time, ms on this
/// clock); counts requests in `requests`.
pub(crate) async fn poll_due(
    ctx: &Ctx,
    queue: &str,
    stop: &AtomicBool,
    requests: &AtomicU64,
    mut seen: impl FnMut(u64, u64),
) {
    while !stop.load(Ordering::Relaxed) {
        requests.fetch_add(1, Ordering::Relaxed);
        let Some((arrived, items)) = take(ctx, queue).await else {
            continue;
        };
        for j in items {
            let data = j["data"].as_str().unwrap_or_default();
            seen(base64_decode(data).trim().parse().unwrap_or(0), arrived);
            let id = j["job_id"].as_str().unwrap_or_default();
            let from = j["queue"].as_str().unwrap_or(queue);
            requests.fetch_add(1, Ordering::Relaxed);
            let _ = ctx
                .http
                .delete(format!("{}/api/{}/{from}/job/{id}", ctx.api, ctx.ns))
                .header("X-Token", &ctx.token)
                .send()
                .await;
        }
    }
}

pub(crate) async fn lateness(
    ctx: Arc<Ctx>,
    concurrency: usize,
    rate: u64,
    secs: u64,
    min_delay: u64,
    max_delay: u64,
) -> anyhow::Result<()> {
    let total = rate * secs;
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let early = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    // Consume and ack requests, for the gateway's CPU per request.
    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = ctx.cpu.sample();
    let mut consumers = Vec::new();
    for _ in 0..concurrency {
        let (ctx, hist, early, received, requests, stop) = (
            ctx.clone(),
            hist.clone(),
            early.clone(),
            received.clone(),
            requests.clone(),
            stop.clone(),
        );
        consumers.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new(3).expect("histogram");
            poll_due(&ctx, "q", &stop, &requests, |due, arrived| {
                if arrived < due {
                    early.fetch_add(1, Ordering::Relaxed);
                } else {
                    let _ = local.record((arrived - due) * 1000);
                }
                received.fetch_add(1, Ordering::Relaxed);
            })
            .await;
            let _ = hist.lock().await.add(&local);
        }));
    }
    // Publish at a fixed rate; the body is the due time (ms, this clock).
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = (rate / 100).max(1);
    let spread = max_delay - min_delay + 1;
    while sent < total {
        tick.tick().await;
        let mut batch = Vec::new();
        for i in 0..per_tick.min(total - sent) {
            let delay = min_delay + (sent + i) % spread;
            let ctx = ctx.clone();
            batch.push(tokio::spawn(async move {
                let due = now_ms() + delay * 1000;
                ctx.put(
                    &format!("/api/{}/q?delay={delay}", ctx.ns),
                    due.to_string().into_bytes(),
                )
                .await
            }));
        }
        sent += batch.len() as u64;
        for b in batch {
            b.await??;
        }
    }
    let publish_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(max_delay + 10);
    while received.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await?;
    }
    let h = hist.lock().await;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "lateness: {total} delayed jobs published at {:.0}/s, {} received, {} early; late by p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        total as f64 / publish_secs,
        received.load(Ordering::Relaxed),
        early.load(Ordering::Relaxed),
        ms(0.5),
        ms(0.99),
        h.max() as f64 / 1000.0
    );
    // Every request of the measurement (publishes, consumes, acks), and
    // Redis's time per job received, idle pumps and gauges included.
    let requests = total + requests.load(Ordering::Relaxed);
    println!(
        "  {}",
        ctx.cpu
            .report(cpu, requests, received.load(Ordering::Relaxed))
    );
    Ok(())
}

pub(crate) fn base64_decode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}
