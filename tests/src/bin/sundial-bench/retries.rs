//! `retries`: how late failed jobs come back. Jobs (2 tries) are published
//! at `rate`/s to one queue whose retry policy is an exponential backoff
//! of 1 s (no jitter). Long-polling workers fail each first delivery in
//! one of three ways, in turn:
//! - `release delay`: a release naming its delay (`delay_ms`, 1 to 3 s);
//! - `release policy`: a release naming none (the policy's 1 s);
//! - `ttr expiry`: a touch to a 500 ms TTR, then nothing; the pump finds
//!   the TTR run out and delays the job by the policy's 1 s.
//!
//! The second delivery is timed against the earliest instant the job can
//! be due: the release's (or touch's) send time on this clock (Redis's
//! too: they share the machine), plus the delay (plus the TTR). The true
//! due time is later by that request's trip (and, for `ttr expiry`, by how
//! late the pump found the TTR run out), so the lateness shown is an
//! upper bound, and a job counted early was early for certain. A failure
//! the gateway refused is counted apart, not timed.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::bail;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::{Ctx, now_ms};

/// The ways a first delivery fails, as the job's body names them.
const KINDS: [&str; 3] = ["release delay", "release policy", "ttr expiry"];
/// The policy's backoff, and the TTR a `ttr expiry` job is touched to.
const BACKOFF_MS: u64 = 1_000;
const SHORT_TTR_MS: u64 = 500;

/// What the workers share: when each failed job may be due, and how late
/// each kind came back.
struct Seen {
    due: Mutex<HashMap<String, (usize, u64)>>,
    late: Mutex<Vec<Histogram<u64>>>,
    early: AtomicU64,
    received: AtomicU64,
    /// Releases and touches the gateway did not answer 200.
    refused: AtomicU64,
    requests: AtomicU64,
}

impl Seen {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            due: Mutex::default(),
            late: Mutex::new(vec![Histogram::new(3)?; KINDS.len()]),
            early: AtomicU64::new(0),
            received: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        })
    }
}

/// POSTs `path` (under the namespace's queue `q`); true on 200.
async fn post(ctx: &Ctx, path: &str) -> bool {
    let url = format!("{}/api/{}/q/job/{path}", ctx.api, ctx.ns);
    let r = ctx
        .http
        .post(url)
        .header("X-Token", &ctx.token)
        .send()
        .await;
    r.is_ok_and(|r| r.status() == 200)
}

/// Fails a first delivery as its body says, and notes when it may be due.
async fn fail(ctx: &Ctx, seen: &Seen, id: &str, body: &str) {
    let sent = now_ms();
    let (kind, ok, due) = match body.strip_prefix('d') {
        Some(ms) => {
            let ms: u64 = ms.parse().unwrap_or(0);
            let ok = post(ctx, &format!("{id}/release?delay_ms={ms}&delivery=1")).await;
            (0, ok, sent + ms)
        }
        None if body == "p" => {
            let ok = post(ctx, &format!("{id}/release?delivery=1")).await;
            (1, ok, sent + BACKOFF_MS)
        }
        None => {
            let ok = post(ctx, &format!("{id}/touch?ttr_ms={SHORT_TTR_MS}&delivery=1")).await;
            (2, ok, sent + SHORT_TTR_MS + BACKOFF_MS)
        }
    };
    seen.requests.fetch_add(1, Ordering::Relaxed);
    if ok {
        seen.due.lock().await.insert(id.to_owned(), (kind, due));
    } else {
        seen.refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// Long-polls `q` until `stop`: fails first deliveries, times and acks
/// second ones.
async fn work(ctx: &Ctx, seen: &Seen, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        seen.requests.fetch_add(1, Ordering::Relaxed);
        let Some((arrived, items)) = crate::lateness::take(ctx, "q").await else {
            continue;
        };
        for j in items {
            let id = j["job_id"].as_str().unwrap_or_default();
            if j["delivery"].as_u64() == Some(1) {
                let body = crate::lateness::base64_decode(j["data"].as_str().unwrap_or_default());
                fail(ctx, seen, id, &body).await;
                continue;
            }
            if let Some((kind, due)) = seen.due.lock().await.remove(id) {
                if arrived < due {
                    seen.early.fetch_add(1, Ordering::Relaxed);
                } else {
                    let _ = seen.late.lock().await[kind].record((arrived - due) * 1000);
                }
                seen.received.fetch_add(1, Ordering::Relaxed);
            }
            seen.requests.fetch_add(1, Ordering::Relaxed);
            let url = format!("{}/api/{}/q/job/{id}?delivery=2", ctx.api, ctx.ns);
            let _ = ctx
                .http
                .delete(url)
                .header("X-Token", &ctx.token)
                .send()
                .await;
        }
    }
}

pub(crate) async fn retries(
    ctx: Arc<Ctx>,
    admin: &str,
    concurrency: usize,
    rate: u64,
    secs: u64,
) -> anyhow::Result<()> {
    let policy = serde_json::json!({"backoff": "exponential", "initial_delay_ms": BACKOFF_MS,
        "multiplier": 2, "jitter_percent": 0});
    let r = ctx
        .http
        .put(format!("{admin}/namespaces/{}/queues/q/policy", ctx.ns))
        .json(&policy)
        .send()
        .await?;
    if r.status() != 200 {
        bail!("setting the policy answered {}", r.status());
    }
    let total = rate * secs;
    let seen = Arc::new(Seen::new()?);
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = ctx.cpu.sample();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (ctx, seen, stop) = (ctx.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move { work(&ctx, &seen, &stop).await })
        })
        .collect();
    // Publish at a fixed rate, the kinds in turn.
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = (rate / 100).max(1);
    while sent < total {
        tick.tick().await;
        let mut batch = Vec::new();
        for n in sent..sent + per_tick.min(total - sent) {
            let body = match n % 3 {
                0 => format!("d{}", 1_000 + n % 2_001),
                1 => "p".to_owned(),
                _ => "t".to_owned(),
            };
            let ctx = ctx.clone();
            batch.push(tokio::spawn(async move {
                ctx.put(&format!("/api/{}/q?tries=2", ctx.ns), body.into_bytes())
                    .await
            }));
        }
        sent += batch.len() as u64;
        for b in batch {
            b.await??;
        }
    }
    let publish_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(15);
    let settled = || seen.received.load(Ordering::Relaxed) + seen.refused.load(Ordering::Relaxed);
    while settled() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await?;
    }
    let late = seen.late.lock().await;
    let mut all = Histogram::<u64>::new(3)?;
    for h in late.iter() {
        all.add(h)?;
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "retries: {total} jobs published at {:.0}/s, {} came back, {} early, {} failures refused; late by p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        total as f64 / publish_secs,
        seen.received.load(Ordering::Relaxed),
        seen.early.load(Ordering::Relaxed),
        seen.refused.load(Ordering::Relaxed),
        ms(&all, 0.5),
        ms(&all, 0.99),
        all.max() as f64 / 1000.0
    );
    for (kind, h) in KINDS.iter().zip(late.iter()) {
        println!(
            "  {kind}: {} jobs, late by p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            h.len(),
            ms(h, 0.5),
            ms(h, 0.99),
            h.max() as f64 / 1000.0
        );
    }
    let requests = total + seen.requests.load(Ordering::Relaxed);
    let received = seen.received.load(Ordering::Relaxed);
    println!("  {}", ctx.cpu.report(cpu, requests, received));
    Ok(())
}
