//! `sundial-bench`: a load generator for a running Sundial.
//!
//! ```text
//! sundial-bench publish  --secs 10 --concurrency 64            # jobs/s
//! sundial-bench consume  --jobs 200000 --concurrency 64        # consume+ack jobs/s
//! sundial-bench lateness --rate 1000 --secs 20 --min-delay 1 --max-delay 3
//! sundial-bench memory   --redis redis://127.0.0.1:6390 --jobs 100000
//! ```
//! Each run creates its own token (admin API) and a fresh namespace, and
//! stops by itself: loops are bounded in count and time.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(about = "Load generator for Sundial's HTTP API")]
struct Cli {
    /// Public API base URL.
    #[arg(long, default_value = "http://127.0.0.1:7777", global = true)]
    api: String,
    /// Admin API base URL (to create a token).
    #[arg(long, default_value = "http://127.0.0.1:7778", global = true)]
    admin: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64, global = true)]
    concurrency: usize,
    /// Job body size in bytes.
    #[arg(long, default_value_t = 64, global = true)]
    size: usize,
    /// The gateway's process id: `publish` and `consume` then report its
    /// CPU time per request (read from `/proc`).
    #[arg(long, global = true)]
    gateway_pid: Option<u32>,
    /// Redis to sample `INFO cpu` from: `publish` and `consume` then report
    /// Redis CPU time per job.
    #[arg(long, global = true)]
    redis_cpu: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Publish as fast as possible for `secs` seconds.
    Publish {
        #[arg(long, default_value_t = 10)]
        secs: u64,
    },
    /// Publish `jobs` (bulk), then consume and ack them all as fast as possible.
    Consume {
        #[arg(long, default_value_t = 100_000)]
        jobs: u64,
        /// Jobs per consume request.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Publish delayed jobs at `rate`/s for `secs` seconds while long-polling
    /// consumers report how late each arrives.
    Lateness {
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 20)]
        secs: u64,
        #[arg(long, default_value_t = 1)]
        min_delay: u64,
        #[arg(long, default_value_t = 3)]
        max_delay: u64,
    },
    /// Publish `jobs` all due at the same instant, then time how fast the
    /// pumps make them all ready, while a probe publishes and consumes on
    /// another queue.
    Backlog {
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
    },
    /// Redis bytes per delayed job: `INFO memory` before and after publishing `jobs`.
    Memory {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 100_000)]
        jobs: u64,
    },
}

struct Ctx {
    http: reqwest::Client,
    cpu: CpuMeter,
    api: String,
    token: String,
    ns: String,
    body: Vec<u8>,
}

impl Ctx {
    async fn put(&self, path: &str, body: Vec<u8>) -> anyhow::Result<serde_json::Value> {
        let r = self
            .http
            .put(format!("{}{path}", self.api))
            .header("X-Token", &self.token)
            .body(body)
            .send()
            .await?;
        if r.status() != 201 {
            bail!("publish answered {}", r.status());
        }
        Ok(r.json().await?)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(cli.concurrency * 2)
        .build()?;
    let ns = format!("bench{}", now_ms());
    let r = http
        .post(format!("{}/token/{ns}?description=bench", cli.admin))
        .send()
        .await
        .context("create a token")?;
    let v: serde_json::Value = r.json().await?;
    let token = v["token"].as_str().context("token in answer")?.to_owned();
    let ctx = Arc::new(Ctx {
        http,
        cpu: CpuMeter {
            gateway: cli.gateway_pid,
            redis: cli.redis_cpu.clone(),
        },
        api: cli.api.clone(),
        token,
        ns,
        body: vec![b'x'; cli.size],
    });
    match cli.cmd {
        Cmd::Publish { secs } => publish(ctx, cli.concurrency, Duration::from_secs(secs)).await,
        Cmd::Consume { jobs, count } => consume(ctx, cli.concurrency, jobs, count).await,
        Cmd::Lateness {
            rate,
            secs,
            min_delay,
            max_delay,
        } => lateness(ctx, cli.concurrency, rate, secs, min_delay, max_delay).await,
        Cmd::Memory { redis, jobs } => memory(ctx, &redis, jobs).await,
        Cmd::Backlog { jobs } => backlog(ctx, jobs).await,
    }
}

async fn publish(ctx: Arc<Ctx>, concurrency: usize, dur: Duration) -> anyhow::Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, errors, lat) = (ctx.clone(), done.clone(), errors.clone(), lat.clone());
        tasks.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new(3).expect("histogram");
            while start.elapsed() < dur {
                let t = Instant::now();
                match ctx
                    .put(&format!("/api/{}/q", ctx.ns), ctx.body.clone())
                    .await
                {
                    Ok(_) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        let _ = local.record(t.elapsed().as_micros() as u64);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let _ = lat.lock().await.add(&local);
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    let h = lat.lock().await;
    println!(
        "publish: {n} jobs in {secs:.1}s = {:.0} jobs/s, {} errors; latency p50 {:.2} ms, p99 {:.2} ms",
        n as f64 / secs,
        errors.load(Ordering::Relaxed),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0
    );
    let requests = n + errors.load(Ordering::Relaxed);
    println!("  {}", ctx.cpu.report(cpu, requests, n));
    Ok(())
}

async fn fill(ctx: &Ctx, queue: &str, jobs: u64, query: &str) -> anyhow::Result<()> {
    let item = serde_json::to_string(&String::from_utf8_lossy(
        &ctx.body[..ctx.body.len().saturating_sub(2)],
    ))?;
    let mut left = jobs;
    while left > 0 {
        let n = left.min(64);
        let arr = format!("[{}]", vec![item.as_str(); n as usize].join(","));
        ctx.put(
            &format!("/api/{}/{queue}/bulk?{query}", ctx.ns),
            arr.into_bytes(),
        )
        .await?;
        left -= n;
    }
    Ok(())
}

async fn consume(ctx: Arc<Ctx>, concurrency: usize, jobs: u64, count: u32) -> anyhow::Result<()> {
    print!("filling {jobs} jobs... ");
    let fillers: Vec<_> = (0..8)
        .map(|i| {
            let ctx = ctx.clone();
            let share = jobs / 8 + u64::from(i < jobs % 8);
            tokio::spawn(async move { fill(&ctx, "q", share, "").await })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    println!("done");
    let done = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let cpu = ctx.cpu.sample();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ctx, done, requests) = (ctx.clone(), done.clone(), requests.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                requests.fetch_add(1, Ordering::Relaxed);
                let r = ctx
                    .http
                    .get(format!(
                        "{}/api/{}/q?count={count}&ttr=600",
                        ctx.api, ctx.ns
                    ))
                    .header("X-Token", &ctx.token)
                    .send()
                    .await;
                let Ok(r) = r else { continue };
                if r.status() == 404 {
                    return;
                }
                let v: serde_json::Value = match r.json().await {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                let items = match v {
                    serde_json::Value::Array(a) => a,
                    one => vec![one],
                };
                for j in items {
                    let id = j["job_id"].as_str().unwrap_or_default();
                    requests.fetch_add(1, Ordering::Relaxed);
                    let ok = ctx
                        .http
                        .delete(format!("{}/api/{}/q/job/{id}", ctx.api, ctx.ns))
                        .header("X-Token", &ctx.token)
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 204);
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    println!(
        "consume+ack: {n} jobs in {secs:.1}s = {:.0} jobs/s (count={count})",
        n as f64 / secs
    );
    let requests = requests.load(Ordering::Relaxed);
    println!("  {}", ctx.cpu.report(cpu, requests, n));
    Ok(())
}

async fn lateness(
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
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for _ in 0..concurrency {
        let (ctx, hist, early, received, stop) = (
            ctx.clone(),
            hist.clone(),
            early.clone(),
            received.clone(),
            stop.clone(),
        );
        consumers.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new(3).expect("histogram");
            while !stop.load(Ordering::Relaxed) {
                let r = ctx
                    .http
                    .get(format!(
                        "{}/api/{}/q?timeout=1&count=10&ttr=600",
                        ctx.api, ctx.ns
                    ))
                    .header("X-Token", &ctx.token)
                    .send()
                    .await;
                let Ok(r) = r else { continue };
                if r.status() != 200 {
                    continue;
                }
                let arrived = now_ms();
                let Ok(serde_json::Value::Array(items)) = r.json().await else {
                    continue;
                };
                for j in items {
                    let data = j["data"].as_str().unwrap_or_default();
                    let due: u64 = base64_decode(data).trim().parse().unwrap_or(0);
                    if arrived < due {
                        early.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let _ = local.record((arrived - due) * 1000);
                    }
                    received.fetch_add(1, Ordering::Relaxed);
                    let id = j["job_id"].as_str().unwrap_or_default();
                    let _ = ctx
                        .http
                        .delete(format!("{}/api/{}/q/job/{id}", ctx.api, ctx.ns))
                        .header("X-Token", &ctx.token)
                        .send()
                        .await;
                }
            }
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
    Ok(())
}

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

async fn backlog(ctx: Arc<Ctx>, jobs: u64) -> anyhow::Result<()> {
    // Everything is due at one instant, far enough ahead for the publishing
    // to finish first (measured at over 100k jobs/s with bulk requests).
    let lead_ms = 5_000 + jobs / 50;
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
    Ok(())
}

fn base64_decode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn used_memory(redis: &str) -> anyhow::Result<u64> {
    let mut c = redis::Client::open(redis)?.get_connection()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut c)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory")
}

async fn memory(ctx: Arc<Ctx>, redis: &str, jobs: u64) -> anyhow::Result<()> {
    // Warm up: the namespace's per-bucket keys exist before the measurement.
    fill(&ctx, "q", 64, "delay=3600").await?;
    let before = used_memory(redis)?;
    let fillers: Vec<_> = (0..8)
        .map(|i| {
            let ctx = ctx.clone();
            let share = jobs / 8 + u64::from(i < jobs % 8);
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
    Ok(())
}

/// CPU time of the gateway process and of Redis over a measurement.
struct CpuMeter {
    gateway: Option<u32>,
    redis: Option<String>,
}

/// CPU seconds used so far: (gateway, Redis).
type CpuSample = (Option<f64>, Option<f64>);

impl CpuMeter {
    fn sample(&self) -> CpuSample {
        (
            self.gateway.and_then(process_cpu),
            self.redis.as_deref().and_then(redis_cpu),
        )
    }

    /// "gateway CPU … µs/request; Redis CPU … µs/job" since `before`.
    fn report(&self, before: CpuSample, requests: u64, jobs: u64) -> String {
        let after = self.sample();
        let per = |b: Option<f64>, a: Option<f64>, n: u64| match (b, a) {
            (Some(b), Some(a)) if n > 0 => format!("{:.1}", (a - b) * 1e6 / n as f64),
            _ => "n/a".to_owned(),
        };
        format!(
            "gateway CPU {} µs/request ({requests} requests); Redis CPU {} µs/job",
            per(before.0, after.0, requests),
            per(before.1, after.1, jobs),
        )
    }
}

/// User plus system CPU seconds of a process, from `/proc/<pid>/stat`.
fn process_cpu(pid: u32) -> Option<f64> {
    // Linux reports these in clock ticks of USER_HZ, 100 on every mainstream
    // architecture.
    const TICKS_PER_SEC: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SEC)
}

/// `used_cpu_user` plus `used_cpu_sys` of a Redis, in seconds.
fn redis_cpu(url: &str) -> Option<f64> {
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    let info: String = redis::cmd("INFO").arg("cpu").query(&mut c).ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
            .trim()
            .parse()
            .ok()
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}
