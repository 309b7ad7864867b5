//! `publish`: single publishes as fast as the connections go, with or
//! without an idempotency key each.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use crate::{Ctx, wire};

/// A key of 16 bytes, unique to connection `conn` and its `n`th publish.
pub(crate) fn key(conn: usize, n: u64) -> String {
    format!("k{conn:03}-{n:012}")
}

pub(crate) async fn publish(
    ctx: Arc<Ctx>,
    concurrency: usize,
    dur: Duration,
    keys: bool,
) -> anyhow::Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..concurrency {
        let (ctx, done, errors, lat) = (ctx.clone(), done.clone(), errors.clone(), lat.clone());
        tasks.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new(3).expect("histogram");
            let path = format!("/api/{}/q", ctx.ns);
            let plain = wire::request("PUT", &path, &ctx.token, &ctx.body);
            let mut conn = wire::Conn::connect(&ctx.api).await?;
            let mut sent = 0;
            while start.elapsed() < dur {
                sent += 1;
                let keyed;
                let request = if keys {
                    let keyed_path = format!("{path}?dedup={}", key(c, sent));
                    keyed = wire::request("PUT", &keyed_path, &ctx.token, &ctx.body);
                    &keyed
                } else {
                    &plain
                };
                let t = Instant::now();
                match conn.call(request).await {
                    Ok((201, _)) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        let _ = local.record(t.elapsed().as_micros() as u64);
                    }
                    Ok(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        conn = wire::Conn::connect(&ctx.api).await?;
                    }
                }
            }
            let _ = lat.lock().await.add(&local);
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    let h = lat.lock().await;
    println!(
        "publish{}: {n} jobs in {secs:.1}s = {:.0} jobs/s, {} errors; latency p50 {:.2} ms, p99 {:.2} ms",
        if keys { " (a 16-byte key each)" } else { "" },
        n as f64 / secs,
        errors.load(Ordering::Relaxed),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0
    );
    let requests = n + errors.load(Ordering::Relaxed);
    println!("  {}", ctx.cpu.report(cpu, requests, n));
    Ok(())
}
