//! Sundial's gateway: the lmstfy-compatible HTTP API, the admin API, and the
//! `sundial` binary's commands.
//!
//! - [`api`]: the public job API, one file per resource.
//! - [`admin`]: tokens, pools, info, metrics, health, on a second listener.
//! - [`tokens`]: the token table, replicated into every gateway.
//! - [`wakeups`]: long polls woken through Redis pub/sub.
//! - [`config`]: figment configuration.
//!
//! [`serve`] runs a gateway (with its pumps unless `pump.enabled = false`);
//! [`pumpd`] runs the pumps alone. Both stop when their
//! `CancellationToken` is cancelled: listeners stop accepting, requests in
//! flight finish within the grace period, waiting consumers get a 404.
//!
//! Errors: handlers return [`api::error::ApiError`]; startup uses `anyhow`.

pub mod admin;
pub mod api;
pub mod config;
mod http;
pub mod reload;
pub mod state;
pub mod telemetry;
pub mod tokens;
pub mod wakeups;

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use sundial_router::{Router, Topology};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;
use state::AppState;

/// How long startup waits for each shard to answer.
const STARTUP_WAIT: Duration = Duration::from_secs(15);
/// How long a reload waits for new shards to answer.
const RELOAD_WAIT: Duration = Duration::from_secs(10);

/// Builds the topology of `pools` (reusing `previous`'s unchanged
/// connections) and checks every shard: it answers within `wait`, its
/// eviction policy is safe, the bucket count and the ring membership match
/// what it holds; then loads the scripts. Nothing is swapped in here.
async fn prepare(
    pools: &std::collections::BTreeMap<String, sundial_router::PoolConfig>,
    previous: Option<&Topology>,
    wait: Duration,
) -> anyhow::Result<Topology> {
    let topology = Topology::build(pools, previous)?;
    for pool in topology.pools() {
        for shard in pool.shards() {
            shard.wait_connected(wait).await.with_context(|| {
                format!("shard {} did not answer within {wait:?}", shard.name())
            })?;
            let reused = previous.is_some_and(|t| t.shards().any(|s| s.same(shard)));
            let check = shard.check(pool.buckets()).await?;
            if reused {
                continue;
            }
            if !check.aof_enabled {
                tracing::warn!(
                    shard = shard.name(),
                    "AOF is off: a Redis restart loses every job since the last snapshot; \
                     set `appendonly yes` for durability"
                );
            }
            shard.load_scripts().await?;
            tracing::info!(
                pool = pool.name(),
                shard = shard.name(),
                redis = check.redis_version,
                buckets = pool.buckets(),
                "shard ready"
            );
        }
        check_membership(pool).await?;
    }
    Ok(topology)
}

/// Refuses a change of a pool's shards while the pool holds jobs: the ring
/// would send lookups for existing jobs to the wrong shard. Every shard
/// pins the membership it was started with; a shard without a pin (new, or
/// restarted without its data) takes the config's. A pin that disagrees
/// with the config, in a pool that holds jobs, means the membership changed.
async fn check_membership(pool: &sundial_router::Pool) -> anyhow::Result<()> {
    let mut holds_data = false;
    let mut changed_from = None;
    for shard in pool.shards() {
        holds_data |= shard.holds_jobs(pool.buckets()).await?;
        if let Some(pin) = shard.ring_pin().await?
            && pin != pool.signature()
        {
            changed_from = Some(pin);
        }
    }
    if let Some(old) = changed_from
        && holds_data
    {
        anyhow::bail!(
            "pool {}: its shards were [{old}] and the config says [{}]; this version cannot move the \
             buckets of a pool that holds jobs between shards: restore the previous shard list",
            pool.name(),
            pool.signature()
        );
    }
    for shard in pool.shards() {
        shard.set_ring_pin(pool.signature()).await?;
    }
    Ok(())
}

/// Runs the gateway on the given listeners until `shutdown` is cancelled.
pub async fn serve(
    config: Config,
    config_path: Option<std::path::PathBuf>,
    api: TcpListener,
    admin: TcpListener,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let router = Arc::new(Router::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let topology = router.topology();

    let admin_shard = match &config.admin_redis {
        Some(url) => {
            let s = sundial_core::Shard::connect(
                "admin",
                &sundial_core::ShardOptions::new(url.clone()),
            )?;
            s.wait_connected(STARTUP_WAIT)
                .await
                .context("admin redis did not answer")?;
            s
        }
        None => topology
            .pool("default")
            .and_then(|p| p.shards().next().cloned())
            .context("no default pool")?,
    };
    let tokens = tokens::TokenStore::new(admin_shard);
    tokens
        .reload()
        .await
        .context("cannot load the token table")?;

    drop(topology);

    let state = AppState::new(
        router.clone(),
        tokens.clone(),
        config.limits.limits(),
        config.accounts.clone(),
        metrics,
        shutdown.clone(),
    );
    state.sync_wakeups()?;
    let reloader = reload::Reloader::new(
        config_path,
        router.clone(),
        Some(state.clone()),
        config.admin_redis.is_none(),
    );
    let background = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(tokens.run(background.clone()));
    if config.pump.enabled {
        tasks.spawn(sundial_pumpd::run(
            router.clone(),
            config.pump_options(),
            background.clone(),
        ));
    }
    tasks.spawn(reloader.clone().watch(background.clone()));

    let api_app = api::router(state.clone()).layer(axum::middleware::from_fn(http::observe));
    let admin_app = admin::router(state.clone(), reloader.clone())
        .layer(axum::middleware::from_fn(http::observe));
    tracing::info!(
        api = %api.local_addr()?,
        admin = %admin.local_addr()?,
        pump = config.pump.enabled,
        "sundial gateway listening"
    );
    state.set_ready(true);

    let api_server =
        axum::serve(api, api_app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let admin_server =
        axum::serve(admin, admin_app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let servers = async { tokio::try_join!(api_server.into_future(), admin_server.into_future()) };
    let grace = config.shutdown_grace();
    tokio::select! {
        r = servers => { r?; }
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!(?grace, "requests still in flight after the grace period; stopping anyway"),
    }
    // Pumps and the token poller stop only after the listeners, so requests
    // in flight keep their wake-ups and tokens until the end.
    background.cancel();
    while tasks.join_next().await.is_some() {}
    tracing::info!("sundial gateway stopped");
    Ok(())
}

/// Runs the pumps alone until `shutdown` is cancelled.
pub async fn pumpd(
    config: Config,
    config_path: Option<std::path::PathBuf>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let router = Arc::new(Router::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let reloader = reload::Reloader::new(config_path, router.clone(), None, false);
    tokio::spawn(reloader.watch(shutdown.clone()));
    tracing::info!("sundial pumpd running");
    sundial_pumpd::run(router, config.pump_options(), shutdown).await;
    tracing::info!("sundial pumpd stopped");
    Ok(())
}
