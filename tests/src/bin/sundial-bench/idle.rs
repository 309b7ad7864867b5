//! `idle`: what tenants cost while nothing happens. Each namespace gets a
//! token, a few far-delayed jobs (queue `d`) and a queue used once and
//! emptied (`e`: one job published, consumed, acknowledged). After a
//! settling pause, the Redis commands served (`INFO commandstats`), its CPU,
//! its keys (`DBSIZE`) and the gateway's resident memory are read over
//! `secs` seconds in which no client sends anything.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use futures::StreamExt;

use crate::Ctx;

/// Delayed jobs per namespace (due in a day, so nothing fires meanwhile).
const DELAYED: usize = 3;
/// How long the pumps get to find the new namespaces before the count.
const CATCH_UP: Duration = Duration::from_secs(10);

pub(crate) async fn idle(
    ctx: Arc<Ctx>,
    admin: &str,
    redis: &str,
    namespaces: u64,
    secs: u64,
    concurrency: usize,
) -> anyhow::Result<()> {
    let prefix = format!("idle{}", crate::now_ms());
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..namespaces)
        .map(|i| {
            let (ctx, ns) = (ctx.clone(), format!("{prefix}x{i}"));
            async move { tenant(&ctx, admin, &ns).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let failed: Vec<anyhow::Error> = results.into_iter().filter_map(Result::err).collect();
    if let Some(e) = failed.first() {
        // Reported, not fatal: the idle cost of the others is still worth
        // reading.
        println!(
            "{} of {namespaces} tenants failed to set up; first: {e:#}",
            failed.len()
        );
    }
    tokio::time::sleep(CATCH_UP).await;
    let mut c = redis::Client::open(redis)?.get_connection()?;
    let (commands0, calls0, cpu0) = (commands(&mut c)?, calls(&mut c)?, ctx.cpu.sample());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (commands1, calls1) = (commands(&mut c)?, calls(&mut c)?);
    let top = top_calls(&calls0, &calls1, secs);
    let cpu = ctx.cpu.share(cpu0, secs as f64);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut c)?;
    let rss = ctx.cpu.gateway.and_then(rss_mb);
    let per_sec = |a: u64, b: u64| (b - a) as f64 / secs as f64;
    println!(
        "idle: {namespaces} namespaces: Redis {:.0} commands/s ({:.0} calls/s counting those inside \
         scripts), {keys} keys ({:.1} per namespace); gateway RSS {} MB",
        per_sec(commands0, commands1),
        per_sec(calls0.values().sum(), calls1.values().sum()),
        keys as f64 / namespaces as f64,
        rss.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.0}")),
    );
    println!("  over {secs} s idle: {cpu}");
    println!("  most called: {top}");
    Ok(())
}

/// One idle tenant: a token, far-delayed jobs, a queue used once.
async fn tenant(ctx: &Ctx, admin: &str, ns: &str) -> anyhow::Result<()> {
    let r = ctx
        .http
        .post(format!("{admin}/token/{ns}?description=idle"))
        .send()
        .await?;
    let v: serde_json::Value = r.json().await?;
    let token = v["token"].as_str().context("token")?.to_owned();
    let call = |method: reqwest::Method, path: String| {
        ctx.http
            .request(method, format!("{}{path}", ctx.api))
            .header("X-Token", &token)
    };
    for _ in 0..DELAYED {
        let r = call(reqwest::Method::PUT, format!("/api/{ns}/d?delay=86400"))
            .body(ctx.body.clone())
            .send()
            .await?;
        if r.status() != 201 {
            bail!("publish answered {}", r.status());
        }
    }
    call(reqwest::Method::PUT, format!("/api/{ns}/e"))
        .body(ctx.body.clone())
        .send()
        .await?;
    let r = call(reqwest::Method::GET, format!("/api/{ns}/e?ttr=60"))
        .send()
        .await?;
    let v: serde_json::Value = r.json().await?;
    let id = v["job_id"].as_str().context("consumed job")?;
    call(reqwest::Method::DELETE, format!("/api/{ns}/e/job/{id}"))
        .send()
        .await?;
    Ok(())
}

/// The commands clients have sent so far (`total_commands_processed`, what
/// Redis reports as ops/s).
fn commands(c: &mut redis::Connection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query(c)?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .context("total_commands_processed")
}

/// Every command call so far, those that scripts make included (`INFO
/// commandstats`).
fn calls(c: &mut redis::Connection) -> anyhow::Result<BTreeMap<String, u64>> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c)?;
    Ok(info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), n))
        })
        .collect())
}

/// The five commands called most per second between two samples.
fn top_calls(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, secs: u64) -> String {
    let mut rates: Vec<(u64, &str)> = after
        .iter()
        .map(|(name, n)| (n - before.get(name).copied().unwrap_or(0), name.as_str()))
        .filter(|(d, _)| *d > 0)
        .collect();
    rates.sort_unstable_by(|a, b| b.cmp(a));
    rates
        .iter()
        .take(5)
        .map(|(d, name)| format!("{name} {:.0}/s", *d as f64 / secs as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A process's resident memory in MB (`VmRSS` in `/proc/<pid>/status`).
pub(crate) fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
