//! Read-only admin endpoints: pools, info, version, metrics, health.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use axum::{
    Json,
    extract::{Query, State},
    http::StatusCode,
    response::IntoResponse,
};
use serde_json::json;

use crate::{api::error::ApiError, state::AppState};

/// `GET /pools`: the pool names.
pub(super) async fn pools(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let names: Vec<String> = state
        .router
        .topology()
        .pools()
        .map(|p| p.name().to_owned())
        .collect();
    Json(names)
}

/// `GET /info?pool=`: `{namespace: [queues]}` of a pool (default: `default`).
pub(super) async fn info(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let name = q
        .get("pool")
        .filter(|p| !p.is_empty())
        .map_or("default", String::as_str);
    let topology = state.router.topology();
    let Some(pool) = topology.pool(name) else {
        return Err(ApiError::NotFound("pool not found"));
    };
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for shard in pool.shards() {
        for ns in shard.namespaces().await? {
            let queues = shard.queues(&ns).await?;
            out.entry(ns).or_default().extend(queues);
        }
    }
    for queues in out.values_mut() {
        queues.sort();
        queues.dedup();
    }
    Ok(Json(out))
}

/// `GET /drains`: per pool, its current shard layout and, for each earlier
/// layout whose moved buckets still drain, how many buckets and jobs are left
/// and how many live gateways may still write to it.
pub(super) async fn drains(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    let topology = state.router.topology();
    let mut pools = Vec::new();
    for pool in topology.pools() {
        pools.push(crate::drain::report(pool).await?);
    }
    Ok(Json(json!({ "pools": pools })))
}

/// `GET /version`
pub(super) async fn version() -> impl IntoResponse {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build_commit": option_env!("SUNDIAL_BUILD_COMMIT").unwrap_or("unknown"),
        "build_date": option_env!("SUNDIAL_BUILD_DATE").unwrap_or("unknown"),
    }))
}

/// `GET /metrics`: Prometheus text format.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(),
    )
}

/// `GET /live`: the process answers (with its pid, so a supervisor or a
/// test can tell which process holds the port).
pub(super) async fn live() -> impl IntoResponse {
    Json(json!({ "status": "ok", "pid": std::process::id() }))
}

/// `GET /ready[?strict=true]`: whether this process can serve. 200 once it
/// has started and until it begins to shut down while at least one shard
/// answers: a shard that is down fails only the requests that need it, and
/// taking every gateway out of a load balancer for it would fail them all.
/// With no shard answering it is 503. The body reports each pool's shards
/// (`"status": "degraded"` when one is down); `strict=true` also answers
/// 503 then, for scripts that want every shard.
pub(super) async fn ready(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    let shards = state.health.shards();
    let mut pools: BTreeMap<String, BTreeMap<String, serde_json::Value>> = BTreeMap::new();
    for (name, h) in &shards {
        pools
            .entry(h.pool.clone())
            .or_default()
            .insert(name.clone(), json!(h));
    }
    let all_up = !shards.is_empty() && shards.values().all(|h| h.up);
    // Not one shard answers: this process can serve nothing (it may be the
    // one cut off from Redis); other processes may do better.
    let none_up = !shards.is_empty() && shards.values().all(|h| !h.up);
    let serving = state.is_ready() && !state.shutdown.is_cancelled();
    let strict = q.get("strict").is_some_and(|v| v == "true" || v == "1");
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let (code, status) = match (serving, all_up) {
        (false, _) if state.shutdown.is_cancelled() => (unavailable, "draining"),
        (false, _) => (unavailable, "starting"),
        (true, true) => (StatusCode::OK, "ready"),
        (true, false) if none_up => (unavailable, "unavailable"),
        (true, false) if strict => (unavailable, "degraded"),
        (true, false) => (StatusCode::OK, "degraded"),
    };
    (code, Json(json!({ "status": status, "pools": pools })))
}
