//! `sundial serve`: the gateway (job API and admin API), with the pumps
//! unless `pump.enabled = false`.
//!
//! Start: the listeners are bound, every shard is checked and the topology
//! prepared, the token table loaded, then the background loops started and
//! the process reported ready. Stop (SIGINT or SIGTERM): `/ready` answers
//! 503 at once, the listeners stop accepting, requests in flight finish
//! within the grace period (waiting consumers get a 404), and only then do
//! the background loops stop, so those requests keep their tokens and
//! wake-ups to the end.

use std::sync::Arc;

use anyhow::Context;
use sundial_core::{Shard, ShardOptions};
use sundial_gateway::{admin, api, http::layered, server, state::AppState};
use sundial_router::{
    LiveTopology,
    admin::{AdminStore, default_shard},
    drain,
    health::{self, Health},
    prepare::{STARTUP_WAIT, prepare},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    Config,
    health::Readiness,
    process::{Background, Source},
    telemetry,
};

/// Runs the gateway until SIGINT or SIGTERM.
pub async fn run(source: Source) -> anyhow::Result<()> {
    let config = &source.config;
    config.check_admin_exposure()?;
    let shutdown = source.start();
    let metrics = telemetry::init_metrics(config.metrics.idle())?;
    let api = bind(config.listen).await?;
    let admin = bind(config.admin_listen).await?;
    let live = Arc::new(LiveTopology::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let store = admin_tables(config, &live).await?;
    let state = AppState::new(
        config.gateway_settings(),
        live.clone(),
        store,
        Health::default(),
        sundial_router::mover::Status::default(),
        shutdown.clone(),
    );
    let reloader = source.reloader(live, Some(state.admin.clone()));
    let background = background(&source, &state, &reloader).start();
    let ready: Readiness = {
        let state = state.clone();
        Arc::new(move |strict| admin::readiness(&state, strict))
    };
    let (probes, metrics) = (
        crate::health::probes(ready),
        crate::health::metrics(metrics),
    );
    let access = Some(config.log.access);
    let document = crate::health::document();
    let apps = (
        layered(api::router(state.clone(), document.clone()), access),
        layered(
            admin::router(state.clone(), reloader, probes, metrics, document),
            access,
        ),
    );
    tracing::info!(
        api = %api.local_addr()?,
        admin = %admin.local_addr()?,
        pump = config.pump.enabled,
        max_connections = config.http.max_connections,
        "sundial gateway listening"
    );
    state.set_ready(true);
    listen(config, (api, admin), apps, &state, &shutdown).await;
    background.stop().await;
    tracing::info!("sundial gateway stopped");
    Ok(())
}

/// Serves both listeners until the shutdown has begun and the requests in
/// flight have finished, or the grace period has passed.
async fn listen(
    config: &Config,
    (api, admin): (TcpListener, TcpListener),
    (api_app, admin_app): (axum::Router, axum::Router),
    state: &AppState,
    shutdown: &CancellationToken,
) {
    let serve =
        |listener, kind, app, limits| server::serve(listener, kind, app, limits, shutdown.clone());
    let servers = async {
        tokio::join!(
            serve(
                api,
                server::Listener::Api,
                api_app,
                config.http.api_limits()
            ),
            serve(
                admin,
                server::Listener::Admin,
                admin_app,
                config.http.admin_limits()
            ),
            unready_on(state, shutdown),
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
}

pub(crate) async fn bind(addr: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// The admin tables, loaded from the admin Redis (a warning says so while
/// an earlier version's plaintext tokens remain). Refuses to start when
/// tokens name a pool the config lacks.
async fn admin_tables(config: &Config, live: &LiveTopology) -> anyhow::Result<Arc<AdminStore>> {
    let store = AdminStore::new(admin_redis(config, live).await?);
    store
        .reload()
        .await
        .context("cannot load the token table")?;
    crate::process::pools_for_tokens(config, &store)?;
    match store.tokens().plaintext_tokens() {
        0 => {}
        n => tracing::warn!(
            tokens = n,
            "tokens stored in plaintext by an earlier version; once every gateway runs \
             this one, rewrite them hashed with `sundial token migrate` (POST /tokens/migrate)"
        ),
    }
    Ok(store)
}

/// Where the admin tables live: `admin_redis`, else the default pool's
/// first shard.
pub(crate) async fn admin_redis(config: &Config, live: &LiveTopology) -> anyhow::Result<Shard> {
    let Some(url) = &config.admin_redis else {
        return default_shard(live).context("no default pool");
    };
    let password = config.admin_redis_password.as_ref();
    let url = sundial_router::config::redis_url(url, password).map_err(anyhow::Error::msg)?;
    let shard = Shard::connect("admin", &ShardOptions::new(url))?;
    shard.wait_connected(STARTUP_WAIT).await.with_context(|| {
        format!(
            "admin_redis at {} did not answer within {} s",
            shard.conn().address(),
            STARTUP_WAIT.as_secs()
        )
    })?;
    shard
        .check_servers()
        .await
        .context("admin_redis refused to serve")?;
    Ok(shard)
}

/// The loops that keep tenants apart: headroom on shards near their
/// `maxmemory`, and quota refusals counted in the admin Redis.
fn tenant_loops(loops: &mut Background, state: &Arc<AppState>, config: &Config) {
    {
        let (live, headroom) = (state.live.clone(), state.headroom.clone());
        let percent = config.headroom.share_above_percent;
        let weight = sundial_router::headroom::weights(state.live.clone(), state.admin.clone());
        loops.add("headroom", move |stop| {
            let held = (headroom.clone(), weight.clone());
            sundial_router::headroom::run(live.clone(), held, percent, stop)
        });
    }
    let admin = state.admin.clone();
    loops.add("quota refusals", move |stop| {
        sundial_gateway::refusals::keep_flushed(admin.clone(), stop)
    });
}

/// The gateway's background loops. Each gets its own handles to what the
/// gateway shares (the live topology, the admin store, the mover's status).
fn background(
    source: &Source,
    state: &Arc<AppState>,
    reloader: &Arc<sundial_router::reload::Reloader>,
) -> Background {
    let config = &source.config;
    let mut loops = Background::default();
    let every = config.layout_check();
    {
        let admin = state.admin.clone();
        let follow = config.admin_redis.is_none().then(|| state.live.clone());
        loops.add("token poller", move |stop| {
            admin.clone().run(follow.clone(), stop)
        });
    }
    {
        let (admin, live) = (state.admin.clone(), state.live.clone());
        loops.add("queue index", move |stop| {
            admin.clone().keep_queue_index(live.clone(), stop)
        });
    }
    tenant_loops(&mut loops, state, config);
    {
        let (live, health) = (state.live.clone(), state.health.clone());
        loops.add("health probes", move |stop| {
            health::run(live.clone(), health.clone(), stop)
        });
    }
    if config.pump.enabled {
        let (live, opts) = (state.live.clone(), config.pump_options());
        let status = sundial_pumpd::PumpStatus::default();
        let tables = sundial_pumpd::Tables {
            admin: state.admin.clone(),
            headroom: state.headroom.clone(),
        };
        loops.add("pumps", move |stop| {
            let tables = Some(tables.clone());
            sundial_pumpd::run(live.clone(), tables, opts.clone(), status.clone(), stop)
        });
    }
    loops.add("reload", source.reload_loop(reloader));
    if config.mover.enabled {
        let (live, admin, status) = (state.live.clone(), state.admin.clone(), state.mover.clone());
        let opts = config.mover_options();
        loops.add("mover", move |stop| {
            let (live, admin, status) = (live.clone(), admin.clone(), status.clone());
            sundial_router::mover::run(live, admin, opts.clone(), status, every, stop)
        });
    }
    {
        let (live, admin, mover) = (state.live.clone(), state.admin.clone(), state.mover.clone());
        let reloader = reloader.clone();
        loops.add("drains", move |stop| {
            let (live, reloader) = (live.clone(), reloader.clone());
            drain::run(live, reloader, admin.clone(), mover.clone(), every, stop)
        });
    }
    loops
}

/// Reports not ready as soon as the shutdown starts, so that load balancers
/// stop sending new requests while those in flight finish.
async fn unready_on(state: &AppState, shutdown: &CancellationToken) {
    shutdown.cancelled().await;
    state.set_ready(false);
}
