//! Read-only admin endpoints: pools, info, drains, version; and the
//! gateway's readiness, which the binary serves at `/ready`.

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
        .live
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
    let topology = state.live.topology();
    let Some(pool) = topology.pool(name) else {
        return Err(ApiError::NotFound("pool not found"));
    };
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (shard, slots) in pool.groups() {
        for qualified in shard.slot_queues(slots).await? {
            if let Some((ns, queue)) = sundial_core::keys::parse_qualified(&qualified) {
                out.entry(ns.to_owned()).or_default().push(queue.to_owned());
            }
        }
    }
    for queues in out.values_mut() {
        queues.sort();
        queues.dedup();
    }
    Ok(Json(out))
}

/// `GET /drains`: per pool, its current shard layout and, for each earlier
/// layout whose moved slots still drain, how many slots and jobs are left
/// and how many live gateways may still write to it.
pub(super) async fn drains(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    let topology = state.live.topology();
    let mut pools = Vec::new();
    for pool in topology.pools() {
        pools.push(sundial_router::drain::report(pool).await?);
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

/// Whether this gateway can serve, for `GET /ready[?strict=true]`: 200 once it
/// has started and until it begins to shut down while at least one shard
/// answers: a shard that is down fails only the requests that need it, and
/// taking every gateway out of a load balancer for it would fail them all.
/// With no shard answering it is 503. The body reports each pool's shards
/// (`"status": "degraded"` when one is down); `strict=true` also answers
/// 503 then, for scripts that want every shard.
pub fn readiness(state: &AppState, strict: bool) -> (StatusCode, serde_json::Value) {
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
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let (code, status) = match (serving, all_up) {
        (false, _) if state.shutdown.is_cancelled() => (unavailable, "draining"),
        (false, _) => (unavailable, "starting"),
        (true, true) => (StatusCode::OK, "ready"),
        (true, false) if none_up => (unavailable, "unavailable"),
        (true, false) if strict => (unavailable, "degraded"),
        (true, false) => (StatusCode::OK, "degraded"),
    };
    (code, json!({ "status": status, "pools": pools }))
}
