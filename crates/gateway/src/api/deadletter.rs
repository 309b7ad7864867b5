//! A queue's dead letter: peek, size, respawn, delete.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::IntoResponse,
};
use serde_json::json;

use super::{
    error::ApiError,
    jobs::queue,
    params::{self, Params},
    queue::counts,
    tenant::Tenant,
};
use crate::state::AppState;

type Query = axum::extract::Query<std::collections::HashMap<String, String>>;

/// `GET /api/{ns}/{queue}/deadletter`
pub(super) async fn peek(
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&path)?;
    let size = counts(&tenant, &queue).await?.dead;
    let mut head = None;
    for (shard, buckets) in tenant.pool.groups(&tenant.ns) {
        if let Some(id) = shard.dead_head(&tenant.ns, &buckets, &queue).await? {
            head = Some(id);
            break;
        }
    }
    Ok(Json(json!({
        "namespace": tenant.ns,
        "queue": queue,
        "deadletter_size": size,
        "deadletter_head": head.unwrap_or_default(),
    })))
}

/// `GET /api/{ns}/{queue}/deadletter/size`
pub(super) async fn size(
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&path)?;
    let size = counts(&tenant, &queue).await?.dead;
    Ok(Json(
        json!({ "namespace": tenant.ns, "queue": queue, "size": size }),
    ))
}

/// `PUT /api/{ns}/{queue}/deadletter?limit=&ttl=`
pub(super) async fn respawn(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
    q: Query,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&path)?;
    let p = Params(q.0);
    let limit = params::limit(&p)?;
    let ttl_ms = params::respawn_ttl_ms(&p, &state.limits)?;
    let mut count = 0;
    for (shard, buckets) in tenant.pool.groups(&tenant.ns) {
        if count >= limit {
            break;
        }
        count += shard
            .respawn(&tenant.ns, &buckets, &queue, limit - count, ttl_ms)
            .await?;
    }
    super::count_jobs(
        super::queue_metrics::Event::Respawned,
        &tenant,
        &queue,
        count,
    );
    Ok(Json(json!({ "msg": "respawned", "count": count })))
}

/// `DELETE /api/{ns}/{queue}/deadletter?limit=`
pub(super) async fn delete(
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
    q: Query,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&path)?;
    let limit = params::limit(&Params(q.0))?;
    let mut count = 0;
    for (shard, buckets) in tenant.pool.groups(&tenant.ns) {
        if count >= limit {
            break;
        }
        count += shard
            .dead_delete(&tenant.ns, &buckets, &queue, limit - count)
            .await?;
    }
    super::count_jobs(super::queue_metrics::Event::Deleted, &tenant, &queue, count);
    Ok(StatusCode::NO_CONTENT)
}
