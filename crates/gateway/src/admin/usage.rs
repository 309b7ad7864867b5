//! `GET /usage?pool=` and `GET /namespaces/{ns}/usage?pool=`: what each
//! namespace holds in a pool and what it did, for billing and alerts:
//! jobs and bytes held now (the slots' usage hashes), the queues it uses
//! (its queue index), jobs published, consumed and acked (the slots'
//! running totals), and requests refused by its quota (counted on the
//! admin Redis by every gateway). Each answer reads every slot's counters
//! (O(queues) Redis work): an admin call, not for a tight loop; the
//! Prometheus series (docs/METRICS.md) are the cheap way to watch.

use std::{collections::BTreeSet, sync::Arc};

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_core::{Totals, Usage};
use sundial_router::Pool;

use super::answers::quotas::{BACKLOG, Bounds, NamespaceUsage, UsageReport};
use super::queues::{names, pool};
use crate::openapi::doc;
use crate::{
    api::{error::ApiError, params::Params},
    state::AppState,
};

/// One namespace's line of the report.
async fn line<'a>(
    state: &AppState,
    pool: &Pool,
    ns: &'a str,
    (usage, totals): (Usage, Totals),
) -> Result<NamespaceUsage<'a>, ApiError> {
    let admin = state.admin.redis();
    let queues = admin.admin().indexed_count(pool.name(), ns).await?;
    let refused = admin.admin().refusals(pool.name(), ns).await?;
    let quota = state
        .admin
        .quotas()
        .effective(pool.name(), ns, pool.quota());
    Ok(NamespaceUsage {
        pool: None,
        namespace: ns,
        jobs: usage.jobs,
        bytes: usage.bytes,
        queues,
        published: totals.published,
        consumed: totals.consumed,
        acked: totals.acked,
        refused,
        limits: Bounds::of(&quota, &BACKLOG),
    })
}

/// Every namespace's usage in a pool
///
/// The usage of every namespace that has a token in the pool or holds jobs
/// there, by name (see `GET /namespaces/{ns}/usage`).
#[utoipa::path(
    get,
    path = "/usage",
    operation_id = "getPoolUsage",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The pool's report.", body = crate::admin::answers::quotas::UsageReport<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "404: the pool is not in this gateway's config. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn all(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let pool = pool(&state, &Params::new(&uri))?;
    let report = sundial_router::usage::report(&pool).await?;
    let mut namespaces: BTreeSet<String> = report.keys().cloned().collect();
    namespaces.extend(
        state
            .admin
            .tokens()
            .namespaces(pool.name())
            .unwrap_or_default(),
    );
    let mut out = Vec::with_capacity(namespaces.len());
    for ns in &namespaces {
        let held = report.get(ns).copied().unwrap_or_default();
        out.push(line(&state, &pool, ns, held).await?);
    }
    Ok(Json(UsageReport {
        pool: pool.name(),
        namespaces: out,
    })
    .into_response())
}

/// A namespace's usage
///
/// What the namespace holds in the pool (jobs, bytes, queues) and what it did
/// there (published, consumed, acked, refused by quota), for billing and
/// alerts. Reads every slot's counters (O(queues) Redis work): an admin call;
/// the Prometheus series `sundial_namespace_jobs` and `sundial_namespace_bytes`
/// are the cheap way to watch. A namespace that never held a job there gets
/// zeros.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/usage",
    operation_id = "getNamespaceUsage",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The namespace's usage.", body = crate::admin::answers::quotas::NamespaceUsage<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "404: the pool is not in this gateway's config. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn one(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    names(&ns, None)?;
    let pool = pool(&state, &Params::new(&uri))?;
    let report = sundial_router::usage::report(&pool).await?;
    let held = report.get(&ns).copied().unwrap_or_default();
    let mut answer = line(&state, &pool, &ns, held).await?;
    answer.pool = Some(pool.name());
    Ok(Json(answer).into_response())
}
