//! `sundial pumpd`: the pumps alone, without the HTTP API; its admin
//! listener serves `/live`, `/ready` and `/metrics` (lease and backlog
//! gauges). It keeps a copy of the admin tables, as a gateway does, for
//! the schedules its pumps fire.

use anyhow::Context as _;

use std::{sync::Arc, time::Duration};

use axum::http::StatusCode;
use sundial_gateway::{http::layered, server};
use sundial_pumpd::PumpStatus;
use sundial_router::{
    LiveTopology,
    admin::AdminStore,
    prepare::{STARTUP_WAIT, prepare},
};

use crate::{
    health::Readiness,
    process::{Background, Source},
    serve::{admin_redis, bind},
    telemetry,
};

/// Runs the pumps until SIGINT or SIGTERM.
pub async fn run(source: Source) -> anyhow::Result<()> {
    let config = &source.config;
    let shutdown = source.start();
    let metrics = telemetry::init_metrics(config.metrics.idle())?;
    let admin = bind(config.admin_listen).await?;
    let live = Arc::new(LiveTopology::new(
        prepare(&config.pools, None, STARTUP_WAIT).await?,
    ));
    let tables = AdminStore::new(admin_redis(config, &live).await?);
    tables
        .reload()
        .await
        .context("cannot load the admin tables (the schedules)")?;
    let mut background = Background::default();
    background.add(
        "reload",
        source.reload_loop(&source.reloader(live.clone(), None)),
    );
    {
        let tables = tables.clone();
        let follow = config.admin_redis.is_none().then(|| live.clone());
        background.add("table poller", move |stop| {
            tables.clone().run(follow.clone(), stop)
        });
    }
    let headroom = headroom_loop(&mut background, &live, &tables, config);
    let background = background.start();
    let status = PumpStatus::default();
    // A lease loop runs a round every quarter of the TTL: two TTLs without
    // one means it is stuck.
    let stale = config.pump_options().lease_ttl * 2;
    let ready: Readiness = {
        let status = status.clone();
        Arc::new(move |_strict| readiness(&status, stale))
    };
    let access = Arc::new(sundial_gateway::access::AdminAccess::new(
        config.accounts.clone(),
        config.admin_hosts.clone(),
    ));
    let app = layered(crate::health::pumpd_router(metrics, ready, access), None);
    tracing::info!(admin = %admin.local_addr()?, "sundial pumpd running");
    tokio::spawn(server::serve(
        admin,
        server::Listener::Admin,
        app,
        config.http.admin_limits(),
        shutdown.clone(),
    ));
    let tables = sundial_pumpd::Tables {
        admin: tables,
        headroom,
    };
    sundial_pumpd::run(live, Some(tables), config.pump_options(), status, shutdown).await;
    background.stop().await;
    tracing::info!("sundial pumpd stopped");
    Ok(())
}

/// Adds the loop that reads the shards' headroom, as a gateway does: fires
/// are held to it as publishes are. Returns what it keeps.
fn headroom_loop(
    background: &mut Background,
    live: &Arc<LiveTopology>,
    tables: &Arc<AdminStore>,
    config: &crate::config::Config,
) -> sundial_router::headroom::Headroom {
    let headroom = sundial_router::headroom::Headroom::default();
    let (live, held) = (live.clone(), headroom.clone());
    let weight = sundial_router::headroom::weights(live.clone(), tables.clone());
    let percent = config.headroom.share_above_percent;
    background.add("headroom", move |stop| {
        let held = (held.clone(), weight.clone());
        sundial_router::headroom::run(live.clone(), held, percent, stop)
    });
    headroom
}

/// 200 while every shard's lease loop runs and at least one shard answers;
/// 503 otherwise. The body has each shard's state either way.
fn readiness(status: &PumpStatus, stale: Duration) -> (StatusCode, serde_json::Value) {
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
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({
        "status": if healthy { "ready" } else { "unready" },
        "shards": shards,
    });
    (code, body)
}
