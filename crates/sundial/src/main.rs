//! `sundial`: the gateway and pump daemon.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sundial::{check_config, process::Source, pumpd, serve};

// glibc's malloc took about a fifth of the gateway's CPU under load (perf);
// mimalloc is markedly cheaper for its many small, short-lived allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sundial",
    version,
    about = "Delayed and retried jobs over Redis, with lmstfy's HTTP API"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP gateway (and, unless `pump.enabled = false`, the pumps).
    Serve {
        /// TOML config file; `SUNDIAL_*` environment variables override it.
        #[arg(long, short, env = "SUNDIAL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Run the pumps alone, without the HTTP API.
    Pumpd {
        #[arg(long, short, env = "SUNDIAL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check a config file and exit.
    CheckConfig {
        #[arg(long, short, env = "SUNDIAL_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve { config } => serve::run(Source::read(config)?).await,
        Command::Pumpd { config } => pumpd::run(Source::read(config)?).await,
        Command::CheckConfig { config } => check_config::run(config.as_deref()),
    }
}
