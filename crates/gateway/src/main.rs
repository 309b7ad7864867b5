//! `sundial`: the gateway and pump daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sundial_gateway::{Config, telemetry};
use tokio_util::sync::CancellationToken;

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
    let cli = Cli::parse();
    let (Command::Serve { config: file }
    | Command::Pumpd { config: file }
    | Command::CheckConfig { config: file }) = &cli.command;
    // The file's bytes as loaded: the baseline for noticing that it changed.
    let config_bytes = file.as_deref().and_then(|f| std::fs::read(f).ok());
    let config = Config::load(file.as_deref())?;
    if matches!(cli.command, Command::CheckConfig { .. }) {
        println!("{}", toml_summary(&config));
        return Ok(());
    }
    telemetry::init_logs(&config.log);
    for name in &config.ignored_env {
        tracing::warn!(
            variable = name.as_str(),
            "environment variable ignored: it names no config key"
        );
    }
    raise_file_limit(&config);
    let shutdown = CancellationToken::new();
    tokio::spawn(on_signal(shutdown.clone()));
    match cli.command {
        Command::Serve { .. } => {
            let metrics = telemetry::init_metrics()?;
            let api = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.listen))?;
            let admin = tokio::net::TcpListener::bind(config.admin_listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.admin_listen))?;
            sundial_gateway::serve(
                config,
                file.clone(),
                config_bytes,
                api,
                admin,
                metrics,
                shutdown,
            )
            .await
        }
        Command::Pumpd { .. } => {
            let metrics = telemetry::init_metrics()?;
            let admin = tokio::net::TcpListener::bind(config.admin_listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.admin_listen))?;
            sundial_gateway::pumpd(config, file.clone(), config_bytes, admin, metrics, shutdown)
                .await
        }
        Command::CheckConfig { .. } => Ok(()),
    }
}

fn toml_summary(config: &Config) -> String {
    let pools: Vec<String> = config
        .pools
        .iter()
        .map(|(n, p)| format!("{n} ({} shard(s), {} buckets)", p.shards.len(), p.buckets))
        .collect();
    format!(
        "config ok: api {}, admin {}, pools: {}",
        config.listen,
        config.admin_listen,
        pools.join(", ")
    )
}

/// Raises the soft limit on open files to the hard limit (as Go's runtime
/// does): every connection, waiting workers' included, holds one, and the
/// common default of 1,024 would cap the gateway far below
/// `http.max_connections`. Warns when even the hard limit is too low.
fn raise_file_limit(config: &Config) {
    // Connections to Redis, the config watcher, logs: a margin for them.
    const OWN_FILES: u64 = 256;
    let wanted =
        (config.http.max_connections + config.http.admin_max_connections) as u64 + OWN_FILES;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < wanted => tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below http.max_connections plus a margin: \
             raise it (LimitNOFILE in systemd, ulimit -n) or lower http.max_connections"
        ),
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-file limit"),
    }
}

/// Cancels `shutdown` on SIGINT or SIGTERM.
async fn on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down: no new requests, finishing those in flight");
    shutdown.cancel();
}
