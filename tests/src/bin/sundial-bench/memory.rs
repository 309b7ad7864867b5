//! `memory`: Redis bytes per delayed job, with or without an
//! idempotency key each.

use std::sync::Arc;

use anyhow::Context;

use crate::{Ctx, fill, publish::key};

fn used_memory(redis: &str) -> anyhow::Result<u64> {
    let mut c = redis::Client::open(redis)?.get_connection()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut c)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory")
}

/// Publishes `jobs` delayed jobs to `q` in bulks of 64, each with a key
/// of its own (filler `filler`'s).
async fn fill_keyed(ctx: &Ctx, filler: usize, jobs: u64) -> anyhow::Result<()> {
    let item = serde_json::to_string(&String::from_utf8_lossy(
        &ctx.body[..ctx.body.len().saturating_sub(2)],
    ))?;
    let mut sent = 0;
    while sent < jobs {
        let n = (jobs - sent).min(64);
        let keys: Vec<String> = (sent..sent + n)
            .map(|i| format!("dedup={}", key(filler, i)))
            .collect();
        let arr = format!("[{}]", vec![item.as_str(); n as usize].join(","));
        let path = format!("/api/{}/q/bulk?delay=3600&{}", ctx.ns, keys.join("&"));
        ctx.put(&path, arr.into_bytes()).await?;
        sent += n;
    }
    Ok(())
}

pub(crate) async fn memory(
    ctx: Arc<Ctx>,
    redis: &str,
    jobs: u64,
    keys: bool,
) -> anyhow::Result<()> {
    // Warm up: the queue's keys exist before the measurement.
    fill(&ctx, "q", 64, "delay=3600").await?;
    let before = used_memory(redis)?;
    let cpu = ctx.cpu.sample();
    let shares: Vec<u64> = (0..8).map(|i| jobs / 8 + u64::from(i < jobs % 8)).collect();
    // `fill` publishes in bulks of 64.
    let requests = shares.iter().map(|s| s.div_ceil(64)).sum();
    let fillers: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(filler, share)| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                if keys {
                    fill_keyed(&ctx, filler, share).await
                } else {
                    fill(&ctx, "q", share, "delay=3600").await
                }
            })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    let after = used_memory(redis)?;
    println!(
        "memory: {jobs} delayed jobs with {}-byte bodies{}: {} bytes -> {} bytes = {:.0} bytes/job",
        ctx.body.len(),
        if keys { " and a 16-byte key each" } else { "" },
        before,
        after,
        (after - before) as f64 / jobs as f64
    );
    println!("  {}", ctx.cpu.report(cpu, requests, jobs));
    Ok(())
}
