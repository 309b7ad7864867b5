//! A queue's schedules on the job API (Sundial's extension): `PUT`, `GET`
//! and `DELETE /api/{ns}/{queue}/schedules/{name}`, the listing `GET
//! /api/{ns}/{queue}/schedules`, and `POST …/{name}/pause` and
//! `…/resume`. The rows are the schedule table's
//! (`sundial_router::admin::schedules`), under the token's pool; the pumps
//! fire them (docs/OPERATIONS.md, "Schedules"). Writes need scope
//! `manage`, reads `read`.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use sundial_router::{
    admin::schedules::{Put, ScheduleId},
    quota::{Bound, Quota},
    schedule::{ScheduleDef, spec::check_name},
};

use super::{
    answers::schedules::{ScheduleAnswer, ScheduleList, ScheduleSpec},
    error::ApiError,
    jobs::queue,
    quota,
    tenant::Tenant,
};
use crate::{openapi::doc, state::AppState};
use view::{answer, fires, reload};

pub(crate) mod view;

/// The largest body a `PUT` reads: a job's largest body in base64, and
/// room for the rest.
const MAX_SPEC_BYTES: usize = MAX_TEMPLATE_BODY_BYTES / 3 * 4 + 64 * 1024;

type NamePath = Path<(String, String, String)>;

/// The schedule `name` of the tenant's queue, its name checked.
fn schedule_id<'a>(tenant: &'a Tenant, name: &'a str) -> Result<ScheduleId<'a>, ApiError> {
    let queue = queue(tenant)?;
    check_name(name).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(ScheduleId {
        pool: &tenant.token.pool,
        ns: &tenant.ns,
        queue,
        name,
    })
}

/// Create or change a schedule
///
/// Creates the schedule, or revises it (an interval keeps its cadence
/// when only its job changes; a paused schedule stays paused). In force
/// on the pumps within about 0.5 s: its fires start after that. Answers
/// with its next fires. Needs scope `manage`. See docs/API.md,
/// "Schedules".
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}/schedules/{name}",
    operation_id = "putSchedule",
    tag = "schedules",
    request_body(content = ScheduleSpec),
    responses(
        (status = 201, description = "Created.", body = ScheduleAnswer),
        (status = 200, description = "Changed, or already as asked.", body = ScheduleAnswer),
        (status = 400, description = "Not a schedule: a bad name, cron expression, time zone or interval (`invalid every: at least 1 s`), an end before the start, no fire left, a jitter or grace out of range, a bad job (`invalid data: not base64`, `tries shouldn't be zero`, its attributes or policy), or over the namespace's quota `max_ttl` or `max_tries`. Nothing stored.", body = crate::api::answers::ErrorBody<'_>),
        (status = 403, response = doc::ScheduleForbidden),
        (status = 404, response = doc::NotFound),
        (status = 409, description = "The schedule was written by a newer Sundial.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, description = "The job's body is over 64 KiB (`a schedule's job body is over 64 KiB`), or over the namespace's quota `max_body`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn put(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path((_, _, name)): NamePath,
    body: Body,
) -> Result<Response, ApiError> {
    let id = schedule_id(&tenant, &name)?;
    let too_large = "a schedule's definition is over 149 KiB";
    let read = crate::api::body::read(&state.bodies, body, MAX_SPEC_BYTES, too_large).await?;
    let spec: ScheduleSpec = serde_json::from_slice(&read.bytes)
        .map_err(|e| ApiError::bad(format!("invalid schedule: {e}")))?;
    let q = quota::of(&state, &tenant);
    let def = bounded(&state, &tenant, &q, &spec)?;
    admit(&state, &tenant, &q, id)?;
    // Its fires publish into the queue: a new queue counts as a publish's does.
    quota::admit_queue(&state, &tenant, &q, id.queue).await?;
    let put = state
        .admin
        .schedules()
        .put(id, &def, crate::api::queue::unix_ms())
        .await?;
    let (code, def, changed) = match put {
        Put::Created(def) => (StatusCode::CREATED, def, true),
        Put::Changed(def) => (StatusCode::OK, def, true),
        Put::Unchanged(def) => (StatusCode::OK, def, false),
    };
    if changed {
        reload(&state).await;
    }
    tracing::info!(
        pool = id.pool,
        ns = id.ns,
        queue = id.queue,
        name,
        rev = def.rev,
        "schedule set"
    );
    Ok((code, Json(answer(id, &def, None))).into_response())
}

/// Refuses a new schedule when the namespace holds `max_schedules`
/// already (403), by this gateway's copy of the table: two gateways that
/// create at once may each pass the last one.
fn admit(state: &AppState, tenant: &Tenant, q: &Quota, id: ScheduleId<'_>) -> Result<(), ApiError> {
    let Some(max) = q.limit(Bound::MaxSchedules) else {
        return Ok(());
    };
    let schedules = state.admin.schedules();
    if schedules.get(id).is_some() {
        return Ok(());
    }
    let mut held = 0;
    schedules.for_each(|other, _| {
        held += u64::from(other.pool == id.pool && other.ns == id.ns);
    });
    if held < max {
        return Ok(());
    }
    Err(quota::refuse(
        tenant,
        StatusCode::FORBIDDEN,
        Bound::MaxSchedules,
        max,
        held,
        format!(
            "the namespace holds {held} schedules: a new one would go over its quota \
             max_schedules of {max}"
        ),
    ))
}

/// The largest body a schedule's job may have: its row is replicated into
/// every process.
pub(crate) const MAX_TEMPLATE_BODY_BYTES: usize = 64 * 1024;

/// The definition `spec` asks for, its job held to the namespace's quota
/// as a publish's is: a TTL or tries left out take the config's default,
/// lowered to the quota's bound; ones given over it are refused, and so
/// is a body over 64 KiB or the quota's `max_body`.
fn bounded(
    state: &AppState,
    tenant: &Tenant,
    q: &Quota,
    spec: &ScheduleSpec,
) -> Result<ScheduleDef, ApiError> {
    let mut ttl = spec.job.ttl.unwrap_or(state.limits.default_ttl_secs);
    if let Some(max) = q.limit(Bound::MaxTtl)
        && spec.job.ttl.is_none()
        && (ttl == 0 || u64::from(ttl) > max)
    {
        ttl = u32::try_from(max).unwrap_or(u32::MAX);
    }
    let mut tries = spec.job.tries.unwrap_or(state.limits.default_tries);
    if let Some(max) = q.limit(Bound::MaxTries)
        && spec.job.tries.is_none()
    {
        tries = tries.min(u16::try_from(max).unwrap_or(u16::MAX));
    }
    let def = spec.definition(ttl, tries);
    let job = sundial_core::Schedule {
        delay_ms: 0,
        ttl_ms: u64::from(ttl) * 1000,
        tries,
        priority: def.job.priority,
        policy: None,
    };
    quota::check_schedule(tenant, q, &job)?;
    let len = def.job.body().len();
    if len > MAX_TEMPLATE_BODY_BYTES {
        return Err(ApiError::TooLarge("a schedule's job body is over 64 KiB"));
    }
    quota::check_body(tenant, q, len)?;
    Ok(def)
}

/// Get a schedule
///
/// Its definition, its next fires, and what its slot counts: fires
/// published and missed, and its last fire. Needs scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/schedules/{name}",
    operation_id = "getSchedule",
    tag = "schedules",
    responses(
        (status = 200, description = "The schedule.", body = ScheduleAnswer),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path((_, _, name)): NamePath,
) -> Result<Response, ApiError> {
    let id = schedule_id(&tenant, &name)?;
    let def = state
        .admin
        .schedules()
        .get(id)
        .ok_or(ApiError::NotFound("schedule not found"))?;
    let fires = fires(tenant.pool(), id, &def).await?;
    Ok(Json(answer(id, &def, fires)).into_response())
}

/// List a queue's schedules
///
/// Each as `GET` of one answers it, by name. Needs scope `read`.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}/schedules",
    operation_id = "listSchedules",
    tag = "schedules",
    responses(
        (status = 200, description = "The queue's schedules.", body = ScheduleList),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, response = doc::NotFound),
    ),
    extensions(("x-sundial-scopes" = json!(["read"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let queue = queue(&tenant)?;
    let rows = state
        .admin
        .schedules()
        .list(&tenant.token.pool, &tenant.ns, queue);
    let mut schedules = Vec::with_capacity(rows.len());
    for (name, def) in &rows {
        let id = ScheduleId {
            pool: &tenant.token.pool,
            ns: &tenant.ns,
            queue,
            name,
        };
        let fires = fires(tenant.pool(), id, def).await?;
        schedules.push(answer(id, def, fires));
    }
    Ok(Json(ScheduleList { schedules }).into_response())
}

/// Delete a schedule
///
/// It fires no more once the pumps see it gone (within about 0.5 s); jobs
/// it published stay. Needs scope `manage`.
#[utoipa::path(
    delete,
    path = "/api/{ns}/{queue}/schedules/{name}",
    operation_id = "deleteSchedule",
    tag = "schedules",
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path((_, _, name)): NamePath,
) -> Result<Response, ApiError> {
    let id = schedule_id(&tenant, &name)?;
    if !state.admin.schedules().delete(id).await? {
        return Err(ApiError::NotFound("schedule not found"));
    }
    reload(&state).await;
    tracing::info!(
        pool = id.pool,
        ns = id.ns,
        queue = id.queue,
        name,
        "schedule deleted"
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Pauses or resumes the tenant's schedule `name`, and answers it.
async fn set_paused(
    state: &AppState,
    tenant: &Tenant,
    name: &str,
    paused: bool,
) -> Result<Response, ApiError> {
    let id = schedule_id(tenant, name)?;
    let answer = view::set_paused(state, id, tenant.pool(), paused).await?;
    Ok(Json(answer).into_response())
}

/// Pause a schedule
///
/// It fires no more until resumed; its fires meanwhile are skipped, not
/// caught up. Pausing a paused schedule changes nothing. Needs scope
/// `manage`.
#[utoipa::path(
    post,
    path = "/api/{ns}/{queue}/schedules/{name}/pause",
    operation_id = "pauseSchedule",
    tag = "schedules",
    responses(
        (status = 200, description = "The schedule as it is now.", body = ScheduleAnswer),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn pause(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path((_, _, name)): NamePath,
) -> Result<Response, ApiError> {
    set_paused(&state, &tenant, &name, true).await
}

/// Resume a schedule
///
/// It fires again from its next fire after now. Needs scope `manage`.
#[utoipa::path(
    post,
    path = "/api/{ns}/{queue}/schedules/{name}/resume",
    operation_id = "resumeSchedule",
    tag = "schedules",
    responses(
        (status = 200, description = "The schedule as it is now.", body = ScheduleAnswer),
        (status = 400, response = doc::BadRequest),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`schedule not found`, or `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-scopes" = json!(["manage"])), ("x-sundial-extension" = json!(true))),
)]
pub(super) async fn resume(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path((_, _, name)): NamePath,
) -> Result<Response, ApiError> {
    set_paused(&state, &tenant, &name, false).await
}
