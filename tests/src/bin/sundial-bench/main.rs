//! `sundial-bench`: a load generator for a running Sundial.
//!
//! ```text
//! sundial-bench publish  --secs 10 --concurrency 64            # jobs/s
//! sundial-bench publish  --secs 10 --keys                      # each with a key
//! sundial-bench consume  --jobs 200000 --concurrency 64        # consume+ack jobs/s
//! sundial-bench consume  --jobs 200000 --then touch           # consume+touch+ack
//! sundial-bench priority --backlogs 1000,1000000 --secs 5      # with priorities
//! sundial-bench lateness --rate 1000 --secs 20 --min-delay 1 --max-delay 3
//! sundial-bench retries  --rate 1000 --secs 10                 # failed jobs' lateness
//! sundial-bench memory   --redis redis://127.0.0.1:6390 --jobs 100000
//! sundial-bench noisy    --secs 10 --concurrency 24
//! sundial-bench schedules --redis redis://127.0.0.1:6390 --counts 0,1000,10000 --firing 1000
//! ```
//! Each run creates its own token (admin API) and a fresh namespace, and
//! stops by itself: loops are bounded in count and time.
//!
//! Length: each measurement is one function, top to bottom, so that its
//! method (what is timed, from where to where) reads in one place.

use std::{sync::Arc, time::Duration};

mod backlog;
mod connections;
mod consume;
mod cpu;
mod idle;
mod lateness;
mod memory;
mod noisy;
mod priority;
mod publish;
mod ready_watch;
mod rebalance;
mod retries;
mod schedules;
mod served;
mod wire;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

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
    /// Redis CPU time per job. Several URLs, separated by commas (a
    /// cluster's masters), are summed.
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
        /// Give each publish an idempotency key of its own (`dedup`).
        #[arg(long)]
        keys: bool,
    },
    /// Publish `jobs` (bulk), then consume and ack them all as fast as possible.
    Consume {
        #[arg(long, default_value_t = 100_000)]
        jobs: u64,
        /// Jobs per consume request.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Long-poll seconds per consume request, as workers ask (0: none).
        #[arg(long, default_value_t = 1)]
        timeout: u32,
        /// How each job is finished: see `consume.rs`.
        #[arg(long, value_enum, default_value = "ack")]
        then: consume::Then,
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
    /// Publish jobs (2 tries) at `rate`/s for `secs` seconds whose first
    /// delivery fails (a release with a delay, a release by the queue's
    /// backoff, a TTR that runs out): how late each comes back.
    Retries {
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 10)]
        secs: u64,
    },
    /// Publish `jobs` all due at the same instant, then time how fast the
    /// pumps make them all ready, while a probe publishes and consumes on
    /// another queue.
    Backlog {
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
    },
    /// Publish (priorities 5 to 9) for `secs`, then consume+ack as many
    /// jobs, over a ready backlog (priorities 0 to 4) of each size in
    /// `backlogs`, in `rounds` alternating rounds.
    Priority {
        #[arg(long, value_delimiter = ',', default_values_t = [1_000u64, 1_000_000])]
        backlogs: Vec<u64>,
        #[arg(long, default_value_t = 5)]
        secs: u64,
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
    /// Fill `jobs` far-delayed jobs, then replace the gateway's config by
    /// `config_after` (a shard added) and reload: jobs/s moved, Redis CPU
    /// per moved job, and the lateness of jobs due at `rate`/s meanwhile.
    Move {
        #[arg(long, default_value_t = 200_000)]
        jobs: u64,
        #[arg(long, default_value_t = 200)]
        rate: u64,
        /// The gateway's config file.
        #[arg(long)]
        config: String,
        /// The config to reload to.
        #[arg(long)]
        config_after: String,
        /// Jobs published just before the reload, due while slots move.
        #[arg(long, default_value_t = 3_000)]
        waiting: u64,
    },
    /// One namespace floods publishes from `concurrency` connections while
    /// another publishes, consumes and acks one job at a time: the second's
    /// latency alone, beside the flood, and beside it held to half.
    Noisy {
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// The queues the flood's connections spread over (one per
        /// connection at most): one queue has at most two script calls at
        /// once; many can fill a shard with calls.
        #[arg(long, default_value_t = 1)]
        queues: usize,
        /// B's own gateway (API), instead of A's: see `noisy.rs`.
        #[arg(long, requires = "quiet_admin")]
        quiet_api: Option<String>,
        /// B's own gateway (admin API).
        #[arg(long, requires = "quiet_api")]
        quiet_admin: Option<String>,
    },
    /// Redis bytes per delayed job: `INFO memory` before and after publishing `jobs`.
    Memory {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 100_000)]
        jobs: u64,
        /// Give each job an idempotency key of its own.
        #[arg(long)]
        keys: bool,
    },
    /// What `namespaces` idle tenants cost: each gets a token, a few
    /// far-delayed jobs and a queue used once and emptied; then, after a
    /// settling pause, Redis commands/s, keys and the gateway's RSS are
    /// read over `secs` while nothing happens.
    Idle {
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 1_000)]
        namespaces: u64,
        #[arg(long, default_value_t = 10)]
        secs: u64,
    },
    /// What schedules cost: idle (`counts` schedules whose next fire is
    /// months away: Redis commands/s and CPU over `secs`), and `firing`
    /// schedules every second for `secs` (lateness at the consumers, Redis
    /// CPU per fire).
    Schedules {
        #[arg(long)]
        redis: String,
        /// The pool's slot count (the bench's default pool: 128).
        #[arg(long, default_value_t = 128)]
        slots: u32,
        #[arg(long, value_delimiter = ',', default_values_t = [0, 1_000, 10_000])]
        counts: Vec<u64>,
        #[arg(long, default_value_t = 1_000)]
        firing: u64,
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Holds the namespace to this `max_jobs` while it fires (each
        /// fire call then admits its fires on the admin Redis).
        #[arg(long)]
        max_jobs: Option<u64>,
    },
    /// What idle keep-alive connections cost the gateway's memory, open
    /// and after they close (needs `--gateway-pid`).
    Connections {
        #[arg(long, default_value_t = 5_000)]
        count: usize,
        #[arg(long, value_enum, default_value = "size")]
        kind: connections::Kind,
    },
}

struct Ctx {
    http: reqwest::Client,
    cpu: cpu::CpuMeter,
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

use sundial_tests::now_ms;

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
        cpu: cpu::CpuMeter {
            gateway: cli.gateway_pid,
            redis: cli.redis_cpu.clone(),
        },
        api: cli.api.clone(),
        token,
        ns,
        body: vec![b'x'; cli.size],
    });
    match cli.cmd {
        Cmd::Publish { secs, keys } => {
            publish::publish(ctx, cli.concurrency, Duration::from_secs(secs), keys).await
        }
        Cmd::Consume {
            jobs,
            count,
            timeout,
            then,
        } => consume::consume(ctx, cli.concurrency, jobs, count, timeout, then).await,
        Cmd::Lateness {
            rate,
            secs,
            min_delay,
            max_delay,
        } => lateness::lateness(ctx, cli.concurrency, rate, secs, min_delay, max_delay).await,
        Cmd::Retries { rate, secs } => {
            retries::retries(ctx, &cli.admin, cli.concurrency, rate, secs).await
        }
        Cmd::Noisy {
            secs,
            queues,
            quiet_api,
            quiet_admin,
        } => {
            let flood = noisy::Flood {
                conns: cli.concurrency,
                queues,
            };
            let quiet = noisy::Quiet {
                api: quiet_api.unwrap_or_else(|| cli.api.clone()),
                admin: quiet_admin.unwrap_or_else(|| cli.admin.clone()),
            };
            noisy::noisy(ctx, &cli.admin, &quiet, flood, secs).await
        }
        Cmd::Memory { redis, jobs, keys } => memory::memory(ctx, &redis, jobs, keys).await,
        Cmd::Backlog { jobs } => backlog::backlog(ctx, jobs).await,
        Cmd::Priority {
            backlogs,
            secs,
            rounds,
        } => priority::priority(ctx, cli.concurrency, &backlogs, secs, rounds).await,
        Cmd::Move {
            jobs,
            rate,
            config,
            config_after,
            waiting,
        } => {
            rebalance::rebalance(
                ctx,
                &cli.admin,
                cli.concurrency,
                jobs,
                rate,
                waiting,
                &config,
                &config_after,
            )
            .await
        }
        Cmd::Idle {
            redis,
            namespaces,
            secs,
        } => idle::idle(ctx, &cli.admin, &redis, namespaces, secs, cli.concurrency).await,
        Cmd::Connections { count, kind } => connections::connections(ctx, count, kind).await,
        Cmd::Schedules {
            redis,
            slots,
            counts,
            firing,
            secs,
            max_jobs,
        } => {
            let run = schedules::Run {
                redis,
                slots,
                firing,
                secs,
                concurrency: cli.concurrency,
                max_jobs,
            };
            schedules::schedules(ctx, &cli.admin, &run, &counts).await
        }
    }
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
