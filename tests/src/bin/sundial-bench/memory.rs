//! `memory`: Redis bytes per delayed job.

use std::sync::Arc;

use anyhow::Context;

use crate::{Ctx, fill};

fn used_memory(redis: &str) -> anyhow::Result<u64> {
    let mut c = redis::Client::open(redis)?.get_connection()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut c)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory")
}

pub(crate) async fn memory(ctx: Arc<Ctx>, redis: &str, jobs: u64) -> anyhow::Result<()> {
    // Warm up: the queue's keys exist before the measurement.
    fill(&ctx, "q", 64, "delay=3600").await?;
    let before = used_memory(redis)?;
    let cpu = ctx.cpu.sample();
    let shares: Vec<u64> = (0..8).map(|i| jobs / 8 + u64::from(i < jobs % 8)).collect();
    // `fill` publishes in bulks of 64.
    let requests = shares.iter().map(|s| s.div_ceil(64)).sum();
    let fillers: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let ctx = ctx.clone();
            tokio::spawn(async move { fill(&ctx, "q", share, "delay=3600").await })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    let after = used_memory(redis)?;
    println!(
        "memory: {jobs} delayed jobs with {}-byte bodies: {} bytes -> {} bytes = {:.0} bytes/job",
        ctx.body.len(),
        before,
        after,
        (after - before) as f64 / jobs as f64
    );
    println!("  {}", ctx.cpu.report(cpu, requests, jobs));
    Ok(())
}
