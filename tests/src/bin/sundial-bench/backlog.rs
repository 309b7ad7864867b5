//! `backlog`: a million jobs due at once, and a probe meanwhile.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::{Ctx, now_ms};

async fn size(ctx: &Ctx, queue: &str) -> anyhow::Result<u64> {
    let r = ctx
        .http
        .get(format!("{}/api/{}/{queue}/size", ctx.api, ctx.ns))
        .header("X-Token", &ctx.token)
        .send()
        .await?;
    let v: serde_json::Value = r.json().await?;
    v["size"].as_u64().context("size")
}

pub(crate) async fn backlog(ctx: Arc<Ctx>, jobs: u64) -> anyhow::Result<()> {
    // Everything is due at one instant, far enough ahead for the publishing
    // to finish first (bulk requests have filled at over 100k jobs/s; this
    // leaves room for a machine at half that).
    let lead_ms = 5_000 + jobs / 20;
    let due_at = now_ms() + lead_ms;
    let item = serde_json::to_string(&String::from_utf8_lossy(
        &ctx.body[..ctx.body.len().saturating_sub(2)],
    ))?;
    let publishers: Vec<_> = (0..8)
        .map(|i| {
            let (ctx, item) = (ctx.clone(), item.clone());
            let share = jobs / 8 + u64::from(i < jobs % 8);
            tokio::spawn(async move {
                let mut left = share;
                while left > 0 {
                    let n = left.min(64);
                    let arr = format!("[{}]", vec![item.as_str(); n as usize].join(","));
                    let delay = due_at.saturating_sub(now_ms());
                    ctx.put(
                        &format!("/api/{}/q/bulk?delay_ms={delay}", ctx.ns),
                        arr.into_bytes(),
                    )
                    .await?;
                    left -= n;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for p in publishers {
        p.await??;
    }
    let published_by = now_ms();
    anyhow::ensure!(
        published_by < due_at,
        "publishing took longer than the lead time"
    );
    // The probe: a publish and a consume on another queue every 50 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (ctx, stop) = (ctx.clone(), stop.clone());
        tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let _ = ctx
                    .put(&format!("/api/{}/probe", ctx.ns), b"p".to_vec())
                    .await;
                let _ = ctx
                    .http
                    .get(format!("{}/api/{}/probe", ctx.api, ctx.ns))
                    .header("X-Token", &ctx.token)
                    .send()
                    .await;
                worst = worst.max(t.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            worst
        })
    };
    // Redis CPU from the due time on: the drain (and the probe, a few
    // requests per second).
    while now_ms() < due_at {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = ctx.cpu.sample();
    let mut all_ready_at = 0;
    let deadline = Instant::now() + Duration::from_secs(120 + jobs / 5_000);
    while Instant::now() < deadline {
        if now_ms() >= due_at && size(&ctx, "q").await? >= jobs {
            all_ready_at = now_ms();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let worst = probe.await?;
    anyhow::ensure!(all_ready_at > 0, "the backlog did not drain in time");
    let secs = (all_ready_at - due_at) as f64 / 1000.0;
    println!(
        "backlog: {jobs} jobs due at once, all ready {secs:.2}s after their due time = {:.0} jobs/s; \
         probe publish+consume worst {:.1} ms during the drain",
        jobs as f64 / secs,
        worst.as_secs_f64() * 1000.0
    );
    println!("  {}", ctx.cpu.report(cpu, 0, jobs));
    Ok(())
}
