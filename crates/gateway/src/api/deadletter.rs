//! A queue's dead letter: peek, size, respawn, delete.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use sundial_core::keys;

use super::{
    answers::{DeadLetterPeek, QueueSize, Respawned, RespawnedMsg},
    error::ApiError,
    jobs::queue,
    params,
    queue::counts,
    tenant::Tenant,
};
use crate::openapi::doc;
use crate::state::AppState;

/// Peek the dead letter
///
/// The dead letter's size and the id of its oldest job. Needs scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/deadletter",
    operation_id = "peekDeadLetter",
    tag = "dead letter",
    responses(
        (status = 200, description = "The dead letter.", body = crate::api::answers::DeadLetterPeek<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn peek(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let size = counts(&tenant, queue).await?.dead;
    let qualified = keys::qualified(&tenant.ns, queue);
    // The oldest head among the queue's slots.
    let mut head: Option<(String, u64)> = None;
    for (shard, slot) in tenant.queue_places(queue) {
        if let Some(h) = shard.dead_letter().head(slot, &qualified).await?
            && head.as_ref().is_none_or(|b| (h.1, &h.0) < (b.1, &b.0))
        {
            head = Some(h);
        }
    }
    let head = head.map(|(id, _)| id);
    Ok(Json(DeadLetterPeek {
        namespace: &tenant.ns,
        queue,
        deadletter_size: size,
        deadletter_head: head.unwrap_or_default(),
    })
    .into_response())
}

/// Dead-letter size
///
/// Dead jobs of the queue. Needs the namespace's token (lmstfy needs none) and
/// scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/deadletter/size",
    operation_id = "deadLetterSize",
    tag = "dead letter",
    responses(
        (status = 200, description = "The size.", body = crate::api::answers::QueueSize<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn size(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let size = counts(&tenant, queue).await?.dead;
    Ok(Json(QueueSize {
        namespace: &tenant.ns,
        queue,
        size,
    })
    .into_response())
}

/// Respawn dead jobs
///
/// Moves up to `limit` dead jobs back to ready, each with one try and the new
/// TTL. Needs scope `manage`.
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}/deadletter",
    operation_id = "respawnDeadLetter",
    tag = "dead letter",
    params(doc::RespawnDeadLetterParams),
    responses(
        (status = 200, description = "Respawned.", body = crate::api::answers::Respawned),
        (status = 400, description = "A parameter was refused. A `ttl` over the namespace's quota `max_ttl` (0 included): `{\"error\",\"quota\":\"max_ttl\",\"limit\",\"usage\"}`; a `ttl` left out is lowered to it. Messages: `invalid limit`, `invalid ttl`.", body = inline(doc::ErrorOrQuota)),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn respawn(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let limit = params::limit(&tenant.params)?;
    // A respawned job is held to the namespace's `max_ttl` as a published
    // one is (a TTL left to the default is lowered to it).
    let asked = sundial_core::Schedule {
        delay_ms: 0,
        ttl_ms: params::respawn_ttl_ms(&tenant.params, &state.limits)?,
        tries: 1,
        priority: 0,
        policy: None,
    };
    let quota = super::quota::of(&state, &tenant);
    let ttl_ms = super::quota::schedule(&tenant, &quota, &tenant.params, asked)?.ttl_ms;
    let qualified = keys::qualified(&tenant.ns, queue);
    let mut count = 0;
    for (shard, slot) in tenant.queue_places(queue) {
        if count >= limit {
            break;
        }
        count += shard
            .dead_letter()
            .respawn(slot, &qualified, limit - count, ttl_ms)
            .await?;
    }
    super::queue_metrics::count(
        super::queue_metrics::Event::Respawned,
        &tenant,
        queue,
        count,
    );
    Ok(Json(Respawned {
        msg: RespawnedMsg::Respawned,
        count,
    })
    .into_response())
}

/// Delete dead jobs
///
/// Deletes up to `limit` dead jobs. Needs scope `manage`.
#[utoipa::path(
    delete,
    path = "/api/{ns}/{queue}/deadletter",
    operation_id = "deleteDeadLetter",
    tag = "dead letter",
    params(doc::DeleteDeadLetterParams),
    responses(
        (status = 204, description = "Done."),
        (status = 400, description = "A parameter was refused. Messages: `invalid limit`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn delete(tenant: Tenant) -> Result<impl IntoResponse, ApiError> {
    let queue = queue(&tenant)?;
    let limit = params::limit(&tenant.params)?;
    let qualified = keys::qualified(&tenant.ns, queue);
    let mut count = 0;
    for (shard, slot) in tenant.queue_places(queue) {
        if count >= limit {
            break;
        }
        count += shard
            .dead_letter()
            .delete(slot, &qualified, limit - count)
            .await?;
    }
    super::queue_metrics::count(super::queue_metrics::Event::Deleted, &tenant, queue, count);
    Ok(StatusCode::NO_CONTENT)
}
