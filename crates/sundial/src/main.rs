//! `sundial`: the gateway and pump daemon.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sundial::{check_config, process::Source, pumpd, serve, wipe_shard};

// glibc's malloc took about a fifth of the gateway's CPU under load (perf);
// mimalloc is markedly cheaper for its many small, short-lived allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sundial",
    version = sundial_gateway::VERSION,
    about = "Delayed and retried jobs over Redis, with lmstfy's HTTP API",
    after_help = "Operator commands (token … consume) talk to a running gateway: --admin and \
--api (SUNDIAL_ADMIN_URL, SUNDIAL_API_URL) say where, SUNDIAL_ADMIN_USER and \
SUNDIAL_ADMIN_PASSWORD authenticate to the admin API, SUNDIAL_TOKEN to the job API.\n\
Exit codes: 0 done, 1 refused or failed, 2 bad command line, 3 not found (or no job), \
4 not allowed (credentials, token or scope), 5 unreachable or busy: try again later."
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
        /// TOML config file; `SUNDIAL_*` environment variables override it.
        #[arg(long, short, env = "SUNDIAL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check a config file and exit: what `serve` would refuse or warn
    /// about, without reaching Redis.
    CheckConfig {
        /// TOML config file; `SUNDIAL_*` environment variables override it.
        #[arg(long, short, env = "SUNDIAL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print a shell's completion script for `sundial` (e.g. `sundial
    /// completions bash > /etc/bash_completion.d/sundial`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print `sundial`'s manual page (roff: `sundial man | man -l -`), or
    /// write every command's page into a directory.
    Man {
        /// Write sundial.1 and a page per command (sundial-token-create.1,
        /// …) into this directory, as `man` finds them under a man1
        /// directory.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Print the OpenAPI 3.1 document of both listeners, as they serve it
    /// at `/openapi.json` (`sundial openapi > sundial-openapi.json` to
    /// generate a client without a running gateway).
    Openapi,
    /// Remove Sundial's keys from a Redis that left its pool (once drained
    /// and out of every gateway's config); refuses while a gateway lists
    /// it, a pump process runs on it, or it holds a job. Admin tables it
    /// also holds are kept.
    WipeShard {
        /// The shard's Redis as its config's `url` gives it
        /// (`redis://[[user]:password@]host:port[/db]`, `rediss://`,
        /// `redis-sentinel://…`, `redis-cluster://…`).
        #[arg(long, env = "SUNDIAL_WIPE_URL")]
        url: String,
        /// Go ahead (without it, nothing is done).
        #[arg(long)]
        yes: bool,
    },
    #[command(flatten)]
    Operator(Box<sundial_cli::Command>),
}

fn main() -> std::process::ExitCode {
    sundial::process::no_huge_pages();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sundial: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async_main())
}

async fn async_main() -> std::process::ExitCode {
    match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sundial: {}", sentence(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes as one sentence, each cause after a colon (not
/// Rust's debug form); a cause the sentence already holds is said once.
fn sentence(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if out.contains(&said) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&said);
    }
    out
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no
/// failure.
fn print_all(bytes: &[u8]) -> anyhow::Result<()> {
    match std::io::Write::write_all(&mut std::io::stdout(), bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

async fn run() -> anyhow::Result<std::process::ExitCode> {
    let ok = std::process::ExitCode::SUCCESS;
    match Cli::parse().command {
        Command::Serve { config } => serve::run(Source::read(config)?).await.map(|()| ok),
        Command::Pumpd { config } => pumpd::run(Source::read(config)?).await.map(|()| ok),
        Command::CheckConfig { config } => check_config::run(config.as_deref()).map(|()| ok),
        Command::WipeShard { url, yes } => wipe_shard::run(&url, yes).await.map(|()| ok),
        Command::Completions { shell } => {
            let mut cli = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cli, "sundial", &mut out);
            print_all(&out).map(|()| ok)
        }
        Command::Man { dir: None } => {
            let mut out = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut out)?;
            print_all(&out).map(|()| ok)
        }
        Command::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(&dir)?;
            clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), &dir)?;
            Ok(ok)
        }
        Command::Openapi => {
            print_all(&sundial::health::document().0)?;
            Ok(ok)
        }
        Command::Operator(command) => Ok(sundial_cli::run(*command).await),
    }
}
