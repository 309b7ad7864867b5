//! Bulk publish: one job per element of a JSON array, all or nothing.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    extract::{Request, State},
    http::HeaderValue,
    response::Response,
};
use bytes::Bytes;
use serde_json::value::RawValue;
use sundial_core::{
    JobId, KeyHit, Keys, NewJob,
    job::{MAX_BODY_BYTES, MAX_BULK_JOBS},
    key_lane,
};

use super::{
    answers::{BulkPublished, PublishedMsg},
    body, dedup,
    error::ApiError,
    publish::{Publication, REPLAYED, published, store_within_quota},
    quota,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::openapi::doc;
use crate::state::AppState;

/// Publish many jobs
///
/// Publishes one job per element of a JSON array, all or none, in one atomic
/// step. Same query and headers as a publish. Needs scope `publish`; counts one
/// write against the token's rate limit. The body is bounded by
/// `http.max_bulk_bytes` (8 MiB by default; lmstfy bounds only the elements).
/// With idempotency keys, the elements are stored in one atomic step per
/// lane their keys pick (one step with the default of one lane): a bulk
/// cut by a fault is sent again safely, as its stored elements are then
/// duplicates.
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}/bulk",
    operation_id = "publishJobsBulk",
    tag = "jobs",
    params(doc::PublishQuery, doc::BulkKeyParams),
    request_body(content = doc::BulkBody, description = "A JSON array of 1 to 64 elements (the content type is not checked)."),
    responses(
        (status = 201, description = "Published. With idempotency keys, elements whose key named a job published before are answered with its id and listed in `duplicates` (or `replaced`, with debounce); the header `Idempotent-Replayed: true` when every element was a duplicate.", body = crate::api::answers::BulkPublished<'_>, headers(("Idempotent-Replayed" = String, description = "`true` when every element was a duplicate: nothing was stored."))),
        (status = 400, description = "A parameter, header or the body was refused. Over the namespace's quota `max_delay`, `max_ttl` or `max_tries`: `{\"error\",\"quota\",\"limit\",\"usage\"}` (see the quota conventions). Messages: `invalid policy: <why>` (the retry policy that the publish's fields make over its queue's, e.g. `invalid policy: a backoff needs initial_delay_ms`), `invalid backoff: fixed or exponential`, `invalid multiplier`, `invalid initial_delay_ms`, `invalid max_delay_ms`, `invalid jitter_percent`, `invalid max_retry_ms`, `invalid dedup: empty`, `invalid dedup: longer than 256 bytes`, `invalid dedup: contains a control character`, `invalid dedup: not UTF-8`, `invalid dedup_ttl`, `invalid dedup_mode: until_done or debounce`, `dedup_ttl does not go with debounce`, `dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)`, `dedup must be given once per job`, `give a bulk's keys as Idempotency-Key or as dedup, not both`, `request body should be an array of objects`, `no jobs`, `too many jobs`, `invalid delay`, `invalid ttl`, `invalid priority`, `tries shouldn't be zero`, `ttl is shorter than delay`, `too many attributes, cannot exceed 16`.", body = inline(doc::ErrorOrQuota)),
        (status = 403, response = doc::PublishForbidden),
        (status = 404, description = "`pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "`bulk body too large` (the body over `http.max_bulk_bytes`) or `job too large` (an element over 1 MiB). Over the namespace's quota `max_body`: `{\"error\",\"quota\":\"max_body\",\"limit\",\"usage\"}`.", body = inline(doc::ErrorOrQuota)),
        (status = 429, response = doc::TooManyRequests),
    ),
    extensions(("x-sundial-scopes" = json!(["publish"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn bulk(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let work = publish_bulk(&state, &tenant, req);
    throttle::limited(&state, &tenant, Action::Write, work).await
}

async fn publish_bulk(
    state: &AppState,
    tenant: &Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let (p, body) = Publication::parse(state, tenant, req)?;
    // At most 64 bodies of up to 1 MiB each, and at most `http.max_bulk_bytes`
    // in all.
    let limit = state.bodies.max_bulk;
    let read = body::read(&state.bodies, body, limit, "bulk body too large").await?;
    let raw = &read.bytes;
    let items: Vec<&RawValue> = serde_json::from_slice(raw)
        .map_err(|_| ApiError::bad("request body should be an array of objects"))?;
    if items.is_empty() {
        return Err(ApiError::bad("no jobs"));
    }
    if items.len() > MAX_BULK_JOBS {
        return Err(ApiError::bad("too many jobs"));
    }
    if items.iter().any(|i| i.get().len() > MAX_BODY_BYTES) {
        return Err(ApiError::TooLarge("job too large"));
    }
    let largest = items.iter().map(|i| i.get().len()).max().unwrap_or(0);
    quota::check_body(tenant, &p.quota, largest)?;
    let keys = dedup::bulk(&tenant.params, &headers, items.len())?;
    // Views into the request's buffer: no copy per job.
    let bodies: Vec<Bytes> = items
        .iter()
        .map(|i| raw.slice_ref(i.get().as_bytes()))
        .collect();
    let Some(keys) = keys else {
        let lanes = tenant.pool().lanes();
        let lane = rand::random_range(0..lanes);
        let jobs: Vec<NewJob> = bodies
            .into_iter()
            .map(|body| p.job(Some(lane), lanes, body).1)
            .collect();
        store_within_quota(state, tenant, &p, lane, &jobs, None).await?;
        let ids = jobs.iter().map(|j| j.id.clone()).collect();
        return Ok(answer(state, tenant, &p, ids, None));
    };
    let (ids, hits) = store_keyed(state, tenant, &p, bodies, &keys).await?;
    Ok(answer(state, tenant, &p, ids, Some(&hits)))
}

/// Stores a bulk with keys: its jobs grouped by the lanes of their keys,
/// one call per lane (each all or nothing), in the order of the lanes.
/// Answers every job's id (the stored job's, or the one its key named)
/// and the jobs that keys answered, by their place in the bulk.
async fn store_keyed(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    bodies: Vec<Bytes>,
    keys: &Keys,
) -> Result<(Vec<JobId>, Vec<KeyHit>), ApiError> {
    let lanes = tenant.pool().lanes();
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, key) in keys.keys.iter().enumerate() {
        groups.entry(key_lane(key, lanes)).or_default().push(i);
    }
    let mut ids: Vec<Option<JobId>> = vec![None; bodies.len()];
    let mut hits = Vec::new();
    for (lane, places) in groups {
        let jobs: Vec<NewJob> = places
            .iter()
            .map(|&i| p.job(Some(lane), lanes, bodies[i].clone()).1)
            .collect();
        let group = Keys {
            mode: keys.mode,
            keys: places.iter().map(|&i| keys.keys[i].clone()).collect(),
        };
        for h in store_within_quota(state, tenant, p, lane, &jobs, Some(&group)).await? {
            ids[places[h.place]] = Some(h.id.clone());
            hits.push(KeyHit {
                place: places[h.place],
                ..h
            });
        }
        for (job, &i) in jobs.into_iter().zip(&places) {
            ids[i].get_or_insert(job.id);
        }
    }
    let ids = ids.into_iter().flatten().collect();
    Ok((ids, hits))
}

/// The answer to a bulk: 201 with every job's id, and with keys, which
/// were duplicates and which replaced a pending job; `Idempotent-Replayed`
/// when every element was a duplicate.
fn answer(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    ids: Vec<JobId>,
    hits: Option<&[KeyHit]>,
) -> Response {
    let places = |replaced: bool| -> Option<Vec<usize>> {
        let mut v: Vec<usize> = hits?
            .iter()
            .filter(|h| h.replaced == replaced)
            .map(|h| h.place)
            .collect();
        v.sort_unstable();
        Some(v)
    };
    let (duplicates, replaced) = (places(false), places(true));
    let answered = hits.map_or(0, <[KeyHit]>::len);
    let all_duplicates = duplicates.as_ref().is_some_and(|d| d.len() == ids.len());
    let body = BulkPublished {
        msg: PublishedMsg::Published,
        job_ids: ids.iter().map(JobId::as_str).collect(),
        duplicates,
        replaced,
    };
    let mut response = published(state, tenant, p.queue, ids.len() - answered, body);
    if all_duplicates {
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    response
}
