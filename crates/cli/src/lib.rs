//! `sundial`'s operator commands: tokens, limits, quotas, queues, dead letters,
//! pools and drains, plus publish and consume for debugging. Each is a thin
//! client of the admin API (and of the job API where a tenant's token is
//! the right key); none reads Redis. Tables by default, `--json` for
//! scripts; exit codes in [`exit`].
//!
//! - [`client`]: the HTTP client, and how failures become messages and exit codes.
//! - `tokens`, `limits`, `quotas`, `usage`, `queues`, `deadletter`, `pools`, `jobs`, `portable`
//!   (namespaces: their list, move, export and import), `schedules`: one file per noun;
//!   `overview` (`sundial stats`, every namespace's queues); `listing`
//!   (`sundial job list|show`, a queue's jobs in any state).
//! - `table`: plain-text tables and formats.

mod client;
pub mod deadletter;
pub mod jobs;
pub mod limits;
pub mod listing;
pub mod overview;
mod paths;
mod pauses;
pub mod policies;
pub mod pools;
pub mod portable;
pub mod queues;
pub mod quotas;
pub mod schedules;
mod table;
pub mod tokens;
pub mod usage;

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub use client::{Global, exit};

/// The operator commands, as `sundial`'s top-level subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, list, revoke and scope tenant tokens (admin API).
    Token(Group<tokens::TokenCmd>),
    /// Read and set tokens' rate limits (admin API).
    Limit(Group<limits::LimitCmd>),
    /// Read, set and clear a namespace's quota (admin API).
    Quota(Group<quotas::QuotaCmd>),
    /// What namespaces hold and did: jobs, bytes, queues, totals,
    /// refusals (admin API).
    Usage(usage::Usage),
    /// Every namespace's queues at a glance: backlog and rates (admin API).
    Stats(overview::Stats),
    /// List queues with their backlog; stats, peek, destroy.
    Queue(Group<queues::QueueCmd>),
    /// A queue's jobs in any state, listed or looked up by id (admin API).
    Job(Group<listing::JobCmd>),
    /// Browse a queue's dead letter; respawn or delete its jobs (admin API).
    Deadletter(Group<deadletter::DeadCmd>),
    /// A pool's shards: health, slots, pumps and leases (admin API).
    Pool(Group<pools::PoolCmd>),
    /// Moved slots still draining, once or until done (admin API).
    Drain(Group<pools::DrainCmd>),
    /// List namespaces; move one to another pool; export its jobs as
    /// NDJSON, or import them (admin API).
    Namespace(Group<portable::NamespaceCmd>),
    /// A queue's schedules: set, list, show, delete, pause, resume (job
    /// API, with a tenant's token).
    Schedule(Group<schedules::ScheduleCmd>),
    /// Publish one job (job API; for debugging).
    Publish(jobs::Publish),
    /// Consume jobs, and optionally acknowledge them (job API; for debugging).
    Consume(jobs::Consume),
}

/// A noun's subcommand and the options every command takes.
#[derive(Debug, Args)]
pub struct Group<C: Subcommand> {
    #[command(subcommand)]
    cmd: C,
    #[command(flatten)]
    global: Global,
}

/// Runs one command; prints its result on stdout and any failure on
/// stderr, and returns its exit code.
pub async fn run(command: Command) -> ExitCode {
    let outcome = match command {
        Command::Token(g) => with(g.global, |c| tokens::run(c, g.cmd)).await,
        Command::Limit(g) => with(g.global, |c| limits::run(c, g.cmd)).await,
        Command::Quota(g) => with(g.global, |c| quotas::run(c, g.cmd)).await,
        Command::Queue(g) => with(g.global, |c| queues::run(c, g.cmd)).await,
        Command::Job(g) => with(g.global, |c| listing::run(c, g.cmd)).await,
        Command::Deadletter(g) => with(g.global, |c| deadletter::run_dead(c, g.cmd)).await,
        Command::Pool(g) => with(g.global, |c| pools::run(c, g.cmd)).await,
        Command::Drain(g) => with(g.global, |c| pools::run_drain(c, g.cmd)).await,
        Command::Namespace(g) => with(g.global, |c| portable::run(c, g.cmd)).await,
        Command::Schedule(g) => with(g.global, |c| schedules::run(c, g.cmd)).await,
        Command::Stats(s) => {
            let global = s.global.clone();
            with(global, |c| overview::run(c, s)).await
        }
        Command::Usage(u) => {
            let global = u.global.clone();
            with(global, |c| usage::run(c, u)).await
        }
        Command::Publish(p) => {
            let global = p.global.clone();
            with(global, |c| jobs::publish(c, p)).await
        }
        Command::Consume(p) => {
            let global = p.global.clone();
            with(global, |c| jobs::consume(c, p)).await
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("sundial: {f}");
            ExitCode::from(f.code)
        }
    }
}

async fn with<F, Fut>(global: Global, f: F) -> client::Outcome
where
    F: FnOnce(client::Client) -> Fut,
    Fut: std::future::Future<Output = client::Outcome>,
{
    f(client::Client::new(global)?).await
}
