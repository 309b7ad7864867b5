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
pub mod drain;
pub mod health;
mod http;
pub mod reload;
pub mod server;
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
    let mut topology = Topology::build(pools, previous)?;
    let mut layouts = Vec::new();
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
        layouts.push((pool.name().to_owned(), settle_layouts(pool).await?));
    }
    for (pool, draining) in &layouts {
        topology.set_draining(pool, draining)?;
    }
    // Pinned only once the whole topology is valid.
    for (pool, draining) in &layouts {
        if let Some(p) = topology.pool(pool) {
            for shard in p.shards() {
                shard.set_ring_pins(p.signature(), draining).await?;
            }
        }
    }
    Ok(topology)
}

/// Works out which earlier layouts of a pool still drain (the caller pins
/// them with the current one once the whole topology is valid).
///
/// Every layout any shard has pinned and that differs from the config's is
/// one whose moved buckets may still hold jobs at their old shard, so it
/// drains: reads and pumps also cover it. A pool that holds no jobs drops
/// them all. (A layout leaves the list when `GET /drains` finds it empty.)
async fn settle_layouts(pool: &sundial_router::Pool) -> anyhow::Result<Vec<String>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut holds_jobs = false;
    for shard in pool.shards() {
        let (ring, draining) = shard.ring_pins().await?;
        seen.extend(ring);
        seen.extend(draining);
        holds_jobs |= shard.holds_jobs(pool.buckets()).await?;
    }
    seen.remove(pool.signature());
    // A layout that gave buckets to a shard the config no longer lists
    // cannot be shown empty (that shard is out of reach): the shard must
    // stay, with weight 0, until its buckets have drained.
    let names: Vec<&str> = pool.shard_names().collect();
    for layout in &seen {
        for member in layout.split(',') {
            if let Some((name, weight)) = member.rsplit_once(':')
                && weight != "0"
                && !names.contains(&name)
            {
                anyhow::bail!(
                    "pool {}: shard {name:?} holds buckets of the layout [{layout}] but is not in the config; \
                     keep it in the config (with weight 0) until GET /drains shows that layout empty, then remove it",
                    pool.name()
                );
            }
        }
    }
    let draining: Vec<String> = if holds_jobs {
        seen.into_iter().collect()
    } else {
        Vec::new()
    };
    if !draining.is_empty() {
        tracing::info!(
            pool = pool.name(),
            current = pool.signature(),
            ?draining,
            "earlier shard layouts drain"
        );
    }
    Ok(draining)
}

/// Runs the gateway on the given listeners until `shutdown` is cancelled.
pub async fn serve(
    config: Config,
    config_path: Option<std::path::PathBuf>,
    config_bytes: Option<Vec<u8>>,
    api: TcpListener,
    admin: TcpListener,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    config.check_admin_exposure()?;
    let router = Arc::new(Router::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let topology = router.topology();

    let admin_shard = match &config.admin_redis {
        Some(url) => {
            let mut opts = sundial_core::ShardOptions::new(url.clone());
            opts.command_timeout =
                Duration::from_millis(sundial_router::config::DEFAULT_TIMEOUT_MS);
            let s = sundial_core::Shard::connect("admin", &opts)?;
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

    let health = health::Health::default();
    let state = AppState::new(
        &config,
        router.clone(),
        tokens.clone(),
        health.clone(),
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
    let pump_status = sundial_pumpd::PumpStatus::default();
    let background = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(tokens.run(background.clone()));
    let registry = state.clone();
    tasks.spawn(health::run(
        router.clone(),
        health,
        // Its queue registry is gone too: register queues again.
        move |shard| registry.forget_registered(shard),
        background.clone(),
    ));
    if config.pump.enabled {
        tasks.spawn(sundial_pumpd::run(
            router.clone(),
            config.pump_options(),
            pump_status.clone(),
            background.clone(),
        ));
    }
    tasks.spawn(reloader.clone().watch(
        config.clone(),
        config_bytes,
        config.layout_check(),
        background.clone(),
    ));
    tasks.spawn(drain::run(
        router.clone(),
        reloader.clone(),
        config.layout_check(),
        background.clone(),
    ));

    let api_app = http::layered(api::router(state.clone()), Some(config.log.access));
    let admin_app = http::layered(
        admin::router(state.clone(), reloader.clone()),
        Some(config.log.access),
    );
    tracing::info!(
        api = %api.local_addr()?,
        admin = %admin.local_addr()?,
        pump = config.pump.enabled,
        max_connections = config.http.max_connections,
        "sundial gateway listening"
    );
    state.set_ready(true);

    // Not ready as soon as the drain starts, so that load balancers stop
    // sending new requests while those in flight finish.
    let unready = {
        let (state, shutdown) = (state.clone(), shutdown.clone());
        async move {
            shutdown.cancelled().await;
            state.set_ready(false);
        }
    };
    let servers = async {
        tokio::join!(
            server::serve(
                api,
                server::Listener::Api,
                api_app,
                config.http.api_limits(),
                shutdown.clone()
            ),
            server::serve(
                admin,
                server::Listener::Admin,
                admin_app,
                config.http.admin_limits(),
                shutdown.clone()
            ),
            unready,
        )
    };
    let grace = config.shutdown_grace();
    tokio::select! {
        _ = servers => {}
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
    config_bytes: Option<Vec<u8>>,
    admin: TcpListener,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let router = Arc::new(Router::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let reloader = reload::Reloader::new(config_path, router.clone(), None, false);
    tokio::spawn(reloader.watch(
        config.clone(),
        config_bytes,
        config.layout_check(),
        shutdown.clone(),
    ));
    let status = sundial_pumpd::PumpStatus::default();
    let ready_status = status.clone();
    // A lease loop runs a round every quarter of the TTL: two TTLs without
    // one means it is stuck.
    let stale = config.pump_options().lease_ttl * 2;
    // A small admin listener: /metrics (lease and backlog gauges), /live, /ready.
    let admin_app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let m = metrics.clone();
                async move { m.render() }
            }),
        )
        .route(
            "/live",
            axum::routing::get(|| async {
                axum::Json(serde_json::json!({ "status": "ok", "pid": std::process::id() }))
            }),
        )
        .route(
            "/ready",
            axum::routing::get(move || {
                let status = ready_status.clone();
                async move { pumpd_ready(&status, stale) }
            }),
        );
    tracing::info!(admin = %admin.local_addr()?, "sundial pumpd running");
    tokio::spawn(server::serve(
        admin,
        server::Listener::Admin,
        http::layered(admin_app, None),
        config.http.admin_limits(),
        shutdown.clone(),
    ));
    sundial_pumpd::run(router, config.pump_options(), status, shutdown).await;
    tracing::info!("sundial pumpd stopped");
    Ok(())
}

/// `sundial pumpd`'s `/ready`: 200 while every shard's lease loop runs and
/// at least one shard answers; 503 otherwise. The body has each shard's
/// state either way.
fn pumpd_ready(status: &sundial_pumpd::PumpStatus, stale: Duration) -> axum::response::Response {
    use axum::response::IntoResponse;
    let healthy = status.healthy(stale);
    let shards: serde_json::Map<String, serde_json::Value> = status
        .shards()
        .into_iter()
        .map(|(name, s)| {
            let ago = |t: Option<std::time::Instant>| t.map(|t| t.elapsed().as_millis() as u64);
            let up = s.last_ok.is_some_and(|t| t.elapsed() <= stale);
            let v = serde_json::json!({
                "pool": s.pool,
                "up": up,
                "leases_held": s.leases_held,
                "subscribed": s.subscribed,
                "last_round_ms_ago": ago(s.last_round),
                "last_ok_ms_ago": ago(s.last_ok),
                "error": s.error,
            });
            (name, v)
        })
        .collect();
    let code = if healthy {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({
        "status": if healthy { "ready" } else { "unready" },
        "shards": shards,
    });
    (code, axum::Json(body)).into_response()
}
