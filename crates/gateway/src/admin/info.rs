//! Read-only admin endpoints: pools, info, drains, version; and the
//! gateway's readiness, which the binary serves at `/ready`.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use axum::{
    Json,
    extract::{Path, Query, State},
    http::StatusCode,
    response::IntoResponse,
};

use super::answers::info::{
    ClusterPrimary, Drains, Info, OrError, PoolNames, PoolStatus, PumpProcess, Pumps, Ready,
    ReadyStatus, ShardKind, ShardStatus, Version,
};
use crate::openapi::doc;
use crate::{api::error::ApiError, state::AppState};

/// Pool names
///
/// The configured pools.
#[utoipa::path(
    get,
    path = "/pools",
    operation_id = "listPools",
    tag = "pools",
    responses(
        (status = 200, description = "The names.", body = crate::admin::answers::info::PoolNames),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn pools(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let names = state
        .live
        .topology()
        .pools()
        .map(|p| p.name().to_owned())
        .collect();
    Json(PoolNames(names))
}

/// Namespaces and queues of a pool
///
/// `{namespace: [queues]}` of the queues whose slots hold jobs in the pool.
/// lmstfy answers 200 with an empty body for an unknown pool.
#[utoipa::path(
    get,
    path = "/info",
    operation_id = "getInfo",
    tag = "meta",
    params(doc::GetInfoParams),
    responses(
        (status = 200, description = "The pool's namespaces and queues.", body = crate::admin::answers::info::Info),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
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
        for qualified in shard.slots().queues(slots).await? {
            if let Some((ns, queue)) = sundial_core::keys::parse_qualified(&qualified) {
                out.entry(ns.to_owned()).or_default().push(queue.to_owned());
            }
        }
    }
    for queues in out.values_mut() {
        queues.sort();
        queues.dedup();
    }
    Ok(Json(Info(out)))
}

/// Drain progress
///
/// Per pool, its current shard layout and the earlier layouts whose moved slots
/// still drain: slots moved, slots still holding jobs, jobs left, gateways that
/// may still write to them.
#[utoipa::path(
    get,
    path = "/drains",
    operation_id = "getDrains",
    tag = "pools",
    responses(
        (status = 200, description = "The drains.", body = crate::admin::answers::info::Drains),
        (status = 400, response = doc::BadRequest),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn drains(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    let topology = state.live.topology();
    let mut pools = Vec::new();
    for pool in topology.pools() {
        pools.push(sundial_router::drain::report(pool, state.mover.of(pool.name())).await?);
    }
    Ok(Json(Drains { pools }))
}

/// A pool at a glance
///
/// The pool's shards (health from this gateway's last probe, slots held, pump
/// processes and their leases, cluster primaries) and its drains. Each shard is
/// read on its own, bounded by its `timeout_ms`: one that is down shows
/// `{"error"}` in place of `pumps` (and of `draining`, which needs every
/// shard); the rest still show. One read per slot and shard per call, hence the
/// auth.
#[utoipa::path(
    get,
    path = "/pools/{pool}",
    operation_id = "getPoolStatus",
    tag = "pools",
    responses(
        (status = 200, description = "The pool.", body = crate::admin::answers::info::PoolStatus<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn pool_status(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let topology = state.live.topology();
    let Some(pool) = topology.pool(&name) else {
        return Err(ApiError::NotFound("pool not found"));
    };
    let health = state.health.shards();
    let weights: HashMap<&str, u32> = pool.layout().members().collect();
    let shards = futures::future::join_all(pool.shards().map(|shard| {
        let held = pool.slots_on(shard);
        let current = (0..pool.slots())
            .filter(|s| pool.current_shard(*s).same(shard))
            .count();
        let health = health.get(shard.name()).cloned();
        // Shards are named `<pool>/<name>`; the layout names them bare.
        let bare = shard
            .name()
            .strip_prefix(pool.name())
            .and_then(|n| n.strip_prefix('/'))
            .unwrap_or(shard.name());
        let weight = weights.get(bare).copied().unwrap_or(0);
        async move {
            let cluster = shard.is_cluster();
            ShardStatus {
                name: shard.name(),
                kind: if cluster {
                    ShardKind::Cluster
                } else {
                    ShardKind::Single
                },
                weight,
                slots: current,
                slots_held: held.len(),
                health,
                pumps: pumps(shard, &held).await,
                cluster_primaries: cluster.then(|| primaries(shard, &held)),
            }
        }
    }))
    .await;
    let draining = match sundial_router::drain::report(pool, state.mover.of(pool.name())).await {
        Ok(r) => OrError::Read(r.draining),
        Err(e) => OrError::failed(e),
    };
    Ok(Json(PoolStatus {
        pool: pool.name(),
        slots: pool.slots(),
        lanes: pool.lanes(),
        layout: pool.layout(),
        shards,
        draining,
        mover: state.mover.of(pool.name()),
    })
    .into_response())
}

/// A shard's pump processes and how many of `slots`' leases each holds.
async fn pumps(shard: &sundial_core::Shard, slots: &[u32]) -> OrError<Pumps> {
    let read = async {
        Ok::<_, sundial_core::EngineError>((
            shard.leases().processes().await?,
            shard.leases().holders(slots).await?,
        ))
    };
    let (processes, holders) = match read.await {
        Ok(v) => v,
        Err(e) => return OrError::failed(e),
    };
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for h in holders.iter().flatten() {
        *counts.entry(h.clone()).or_default() += 1;
    }
    let mut listed: Vec<PumpProcess> = processes
        .iter()
        .map(|p| PumpProcess {
            leases: counts.get(&p.id).copied().unwrap_or(0),
            id: p.id.clone(),
            live: p.live,
            expires_at_ms: Some(p.expires_at_ms),
        })
        .collect();
    // Leases held by a process the membership no longer lists: it stopped,
    // and a live process takes them over at its next round.
    for (id, n) in counts {
        if !processes.iter().any(|p| p.id == id) {
            listed.push(PumpProcess {
                id,
                live: false,
                expires_at_ms: None,
                leases: n,
            });
        }
    }
    OrError::Read(Pumps {
        processes: listed,
        unleased: holders.iter().filter(|h| h.is_none()).count() as u64,
    })
}

/// A cluster shard's primaries, with how many of `slots` (the pool's) each
/// serves.
fn primaries(shard: &sundial_core::Shard, slots: &[u32]) -> Vec<ClusterPrimary> {
    let mut per_node: HashMap<String, u64> = HashMap::new();
    for slot in slots {
        let key = sundial_core::keys::SlotKeys::new(*slot).jobs();
        if let Some(addr) = shard.conn().cluster_node_of(&key) {
            *per_node.entry(addr).or_default() += 1;
        }
    }
    shard
        .conn()
        .cluster_primaries()
        .into_iter()
        .map(|p| ClusterPrimary {
            pool_slots: per_node.get(&p.addr).copied().unwrap_or(0),
            addr: p.addr,
            connected: p.connected,
            hash_slots: p.hash_slots,
        })
        .collect()
}

/// Version
///
/// The gateway's version and build.
#[utoipa::path(
    get,
    path = "/version",
    operation_id = "getVersion",
    tag = "meta",
    responses(
        (status = 200, description = "The version.", body = crate::admin::answers::info::Version),
        (status = 400, response = doc::BadRequest),
    ),
    extensions(("x-sundial-extension" = json!(false))),
)]
pub(super) async fn version() -> impl IntoResponse {
    Json(Version {
        version: env!("CARGO_PKG_VERSION"),
        build_commit: crate::BUILD_COMMIT,
        build_date: option_env!("SUNDIAL_BUILD_DATE").unwrap_or("unknown"),
    })
}

/// Whether this gateway can serve, for `GET /ready[?strict=true]`: 200 once it
/// has started and until it begins to shut down while at least one shard
/// answers: a shard that is down fails only the requests that need it, and
/// taking every gateway out of a load balancer for it would fail them all.
/// With no shard answering it is 503. A cluster shard answers while one of
/// its primaries does (the others are listed in its `primaries_down`). The
/// body reports each pool's shards (`"status": "degraded"` when one, or a
/// primary of one, is down); `strict=true` also answers 503 then, for
/// scripts that want every shard.
pub fn readiness(state: &AppState, strict: bool) -> (StatusCode, serde_json::Value) {
    let shards = state.health.shards();
    let mut pools: BTreeMap<String, BTreeMap<String, _>> = BTreeMap::new();
    for (name, h) in &shards {
        pools
            .entry(h.pool.clone())
            .or_default()
            .insert(name.clone(), h.clone());
    }
    let all_up = !shards.is_empty() && shards.values().all(|h| h.up && h.primaries_down.is_empty());
    // Not one shard answers: this process can serve nothing (it may be the
    // one cut off from Redis); other processes may do better.
    let none_up = !shards.is_empty() && shards.values().all(|h| !h.up);
    let serving = state.is_ready() && !state.shutdown.is_cancelled();
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let (code, status) = match (serving, all_up) {
        (false, _) if state.shutdown.is_cancelled() => (unavailable, ReadyStatus::Draining),
        (false, _) => (unavailable, ReadyStatus::Starting),
        (true, true) => (StatusCode::OK, ReadyStatus::Ready),
        (true, false) if none_up => (unavailable, ReadyStatus::Unavailable),
        (true, false) if strict => (unavailable, ReadyStatus::Degraded),
        (true, false) => (StatusCode::OK, ReadyStatus::Degraded),
    };
    let body = serde_json::to_value(Ready { status, pools }).expect("readiness serialises");
    (code, body)
}
